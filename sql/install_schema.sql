-- Installing into a schema "queue" that already exists: the extension's
-- SECURITY DEFINER functions run as a superuser and name their tables and
-- functions by that schema, so whoever owns it, or may create in it, could
-- rename it and put look-alike tables behind those names (with triggers
-- that then run as the superuser), or add overloads of the API functions
-- that callers' calls resolve to.  CREATE EXTENSION refuses such a schema
-- and changes nothing.
\set VERBOSITY terse
SET client_min_messages = warning;

CREATE ROLE regress_is_owner LOGIN IN ROLE queue_admin;
DROP EXTENSION queue;
-- DROP EXTENSION leaves the empty schema behind, as PostgreSQL does

-- case: a schema owned by a role that is not a superuser is refused
ALTER SCHEMA queue OWNER TO regress_is_owner;
CREATE EXTENSION queue;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'queue';

-- case: a schema where a role that is not a superuser may create is refused
ALTER SCHEMA queue OWNER TO CURRENT_USER;
GRANT CREATE ON SCHEMA queue TO regress_is_owner;
CREATE EXTENSION queue;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'queue';

-- case: a look-alike function such a role created there earlier is refused
SET ROLE regress_is_owner;
CREATE FUNCTION queue.hold(queue_name text, item_id int) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
RESET ROLE;
REVOKE CREATE ON SCHEMA queue FROM regress_is_owner;
CREATE EXTENSION queue;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'queue';
DROP FUNCTION queue.hold(text, int);

-- case: the superuser's own empty schema, and a new one, are fine
CREATE EXTENSION queue;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'queue';
DROP EXTENSION queue;
DROP SCHEMA queue;
CREATE EXTENSION queue;
SELECT r.rolsuper AS schema_owner_is_superuser
  FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname = 'queue';

DROP ROLE regress_is_owner;
