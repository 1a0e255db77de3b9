-- enable_cron() and disable_cron() called in a database that pg_cron does
-- not run in (cron.database_name names another one, where CREATE EXTENSION
-- pg_cron is the only place it can be created): 55000 naming the database
-- pg_cron runs in, with a hint that gives the exact pg_cron calls to run
-- there, with the schedules asked for, and the scheduled sweep as the
-- procedure run_sweep() (not sweep(), one transaction for every queue).
CREATE DATABASE queue_cron_other;
\c queue_cron_other
SET client_min_messages = warning;
CREATE EXTENSION queue;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- case: enable_cron with the default schedules
SELECT queue.enable_cron();

-- case: enable_cron with schedules of its own: the hint carries them
SELECT queue.enable_cron('*/5 * * * *', '0 * * * *');

-- case: disable_cron: the hint removes the jobs the enable hint made
SELECT queue.disable_cron();

-- case: NULL schedules are still 22004 first
\set VERBOSITY terse
SELECT queue.enable_cron(sweep_schedule => NULL);

\c contrib_regression
DROP DATABASE queue_cron_other;
