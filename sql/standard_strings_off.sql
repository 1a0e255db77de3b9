-- Roles whose sessions run with standard_conforming_strings = off (older
-- applications set it for their role or database) get the same results:
-- the statements the extension runs in the caller's session must not hold
-- a backslash literal whose meaning that setting changes.  pg_cron runs in
-- another database (cron.database_name), so schedule() here only says
-- where its job goes.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE DATABASE regress_queue_scs TEMPLATE template0;
CREATE ROLE regress_scs_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_scs_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_scs_worker LOGIN IN ROLE queue_worker;
ALTER ROLE regress_scs_admin SET standard_conforming_strings = off;
ALTER ROLE regress_scs_producer SET standard_conforming_strings = off;
ALTER ROLE regress_scs_worker SET standard_conforming_strings = off;
\c regress_queue_scs
SET client_min_messages = warning;
CREATE EXTENSION queue;

\c - regress_scs_admin
SET client_min_messages = warning;
\set VERBOSITY terse
SHOW standard_conforming_strings;
SELECT queue.create_queue('jobs');
SELECT queue.create_queue('erp', breaker_threshold => 0.5, breaker_min_samples => 2);

-- case: cron expressions are read as with the setting on
SELECT queue.schedule('jobs', 'nightly', '0 2 * * *', '{}');
SELECT queue.schedule('jobs', 'office-hours', '*/15 9-17 * * mon-fri', '{}');
SELECT name, cron, next_tick > now() AS next_tick_ahead
  FROM queue.schedules ORDER BY name COLLATE "C";

-- case: the partitions of the history are kept without a failure
SELECT * FROM queue.maintain_history();
SELECT * FROM queue.maintain_history();

-- case: the breaker's pause reason quotes the dominant error as it was given
\c - regress_scs_producer
SELECT count(*) AS enqueued FROM queue.enqueue_batch('erp', array_fill('{}'::jsonb, ARRAY[2]));
\c - regress_scs_worker
SHOW standard_conforming_strings;
CREATE TEMP TABLE claimed AS SELECT item_id, lease_token FROM queue.dequeue('erp', 'scs_bot', 2);
SELECT queue.fail('erp', item_id, lease_token, 'timeout: the ERP system is busy') AS outcome
  FROM claimed ORDER BY item_id;
SELECT paused, pause_reason FROM queue.queues WHERE queue_name = 'erp';

\c contrib_regression postgres
SET client_min_messages = warning;
DROP DATABASE regress_queue_scs;
DROP ROLE regress_scs_admin;
DROP ROLE regress_scs_producer;
DROP ROLE regress_scs_worker;
