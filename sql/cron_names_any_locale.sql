-- Cron expressions read month and weekday names and the @-forms in any
-- case, as pg_cron does, whatever the database's locale: in a Turkish
-- database lower('I') is a dotless 'ı', so 'FRI' and '@DAILY' must not be
-- folded by the database's rules.  The schedules are made by an admin in a
-- database with an ICU tr-TR default collation; pg_cron runs elsewhere
-- (cron.database_name), so schedule() only says where its job goes.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE DATABASE regress_queue_tr TEMPLATE template0 ENCODING 'UTF8'
    LOCALE_PROVIDER icu ICU_LOCALE 'tr-TR' LOCALE 'C';
CREATE ROLE regress_tr_admin LOGIN IN ROLE queue_admin;
\c regress_queue_tr
SET client_min_messages = warning;
CREATE EXTENSION queue;
\c - regress_tr_admin
SET client_min_messages = warning;
\set VERBOSITY terse

-- case: the database folds case the Turkish way
SELECT lower('FRI') AS turkish_lower;

SELECT queue.create_queue('reports');

-- case: upper-case weekday and month names and @-forms are accepted, and
-- mean what their lower-case spellings mean
SELECT queue.schedule('reports', 'weekdays', '0 9 * * MON-FRI', '{}');
SELECT queue.schedule('reports', 'weekdays-lower', '0 9 * * mon-fri', '{}');
SELECT queue.schedule('reports', 'fridays', '0 9 * JAN-DEC FRI', '{}');
SELECT queue.schedule('reports', 'daily', '@DAILY', '{}');
SELECT queue.schedule('reports', 'midnight', '@Midnight', '{}');
SELECT name, cron FROM queue.schedules ORDER BY name COLLATE "C";
SELECT a.name, b.name AS same_ticks_as
  FROM queue.schedules a JOIN queue.schedules b
    ON a.next_tick = b.next_tick AND a.name COLLATE "C" < b.name COLLATE "C"
 WHERE a.name IN ('weekdays', 'daily') AND b.name IN ('weekdays-lower', 'midnight')
 ORDER BY a.name COLLATE "C";

-- case: a name that is not a weekday is still refused (22023)
\set VERBOSITY sqlstate
SELECT queue.schedule('reports', 'bad', '0 9 * * FRX', '{}');

\c contrib_regression postgres
SET client_min_messages = warning;
DROP DATABASE regress_queue_tr;
DROP ROLE regress_tr_admin;
