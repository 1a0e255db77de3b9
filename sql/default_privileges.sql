-- The extension keeps its tables unwritable and its functions uncallable
-- by other roles also in a database whose installing superuser has default
-- privileges for new objects (ALTER DEFAULT PRIVILEGES ... TO reporting),
-- and so do the partitions of the history that the sweep makes later.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE DATABASE regress_queue_dp TEMPLATE template0;
CREATE ROLE regress_dp_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_dp_reporting LOGIN IN ROLE queue_reader;
CREATE ROLE regress_dp_tenant LOGIN IN ROLE queue_reader;
\c regress_queue_dp
SET client_min_messages = warning;
ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO regress_dp_reporting;
ALTER DEFAULT PRIVILEGES GRANT ALL ON SEQUENCES TO regress_dp_reporting;
ALTER DEFAULT PRIVILEGES GRANT ALL ON FUNCTIONS TO regress_dp_reporting;
ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC;
CREATE EXTENSION queue;

\c - regress_dp_admin
SET client_min_messages = warning;
SELECT queue.create_queue('tenant_a');
SELECT queue.grant_queue('tenant_a', 'regress_dp_tenant', 'reader');
SELECT queue.enqueue('tenant_a', '{"secret": 1}') IS NOT NULL AS enqueued;
SELECT count(*) AS tables_made FROM queue.maintain_history() WHERE created > 0;

-- case: the reporting role reads only what queue_reader may, through the
-- views, and no other tenant's rows
\c - regress_dp_reporting
\set VERBOSITY sqlstate
SELECT count(*) AS items_of_tenant_a FROM queue.items WHERE queue_name = 'tenant_a';
SELECT count(*) FROM queue.item_live;
SELECT count(*) FROM queue.queue_config;
SELECT count(*) FROM queue.events_default;
\set VERBOSITY terse
DO $$
DECLARE
    r record;
    v_parts int := 0;
    v_readable int := 0;
BEGIN
    FOR r IN SELECT c.relname FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'queue'::regnamespace AND c.relispartition
              ORDER BY 1 LOOP
        v_parts := v_parts + 1;
        BEGIN
            EXECUTE format('SELECT count(*) FROM queue.%I', r.relname);
            v_readable := v_readable + 1;
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
    END LOOP;
    RAISE NOTICE 'partitions: %, readable: %', v_parts, v_readable;
END
$$;
\set VERBOSITY sqlstate

-- case: it writes no table and takes no id
DELETE FROM queue.item_live;
UPDATE queue.queue_config SET paused = true;
SELECT nextval('queue.item_id_seq');

-- case: it calls no admin, producer or worker function
SELECT queue.purge('tenant_a');
SELECT queue.drop_queue('tenant_a', force => true);
SELECT queue.enqueue('tenant_a', '{}');
SELECT queue.grant_queue('tenant_a', 'regress_dp_reporting', 'reader');
\set VERBOSITY terse

\c - regress_dp_admin
SELECT count(*) AS items_of_tenant_a FROM queue.items WHERE queue_name = 'tenant_a';

\c contrib_regression postgres
SET client_min_messages = warning;
DROP DATABASE regress_queue_dp;
DROP ROLE regress_dp_admin;
DROP ROLE regress_dp_reporting;
DROP ROLE regress_dp_tenant;
