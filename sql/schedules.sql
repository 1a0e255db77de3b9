-- Recurring items: schedule, unschedule, run_schedules, the schedules
-- view, and the cron expressions they read.  The minute job is pg_cron's
-- (see test/t/054_schedules.pl for real ticks); here ticks are made due by
-- moving a schedule's next_tick back, then run_schedules() is called.
\set VERBOSITY terse

SELECT queue.create_queue('s_month');
SELECT queue.create_queue('s_other');

-- case: pg_cron absent from this database (cron.database_name names it): 55000 with a hint
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.schedule('s_month', 'month-end', '0 23 $ * *', '{"run": "month-end"}');
\set VERBOSITY terse
\set SHOW_CONTEXT errors
SELECT count(*) AS schedules FROM queue.schedules;

-- case: with pg_cron, the first schedule creates the one job queue_schedules;
-- more schedules and a re-run of the same call leave one job
CREATE EXTENSION pg_cron;
SELECT queue.schedule('s_month', 'month-end', '0 23 $ * *', '{"run": "month-end"}', priority => 0);
SELECT queue.schedule('s_month', 'month-end', '0 23 $ * *', '{"run": "month-end"}', priority => 0);
SELECT queue.schedule('s_month', 'hourly', '@hourly', '{"poll": "mailbox", "folder": "inbox"}');
SELECT queue.schedule('s_other', 'hourly', '@hourly', '{"poll": "other"}');
SELECT jobname, schedule, command, database = current_database() AS here, active
  FROM cron.job ORDER BY jobname;

-- case: the schedules view: settings, no tick yet, the next tick from the expression
SELECT queue_name, name, cron, payload, priority, group_key, limit_key, last_tick,
       last_item_id, last_error,
       next_tick = queue._cron_tick(cron, now(), true) AS next_from_cron,
       next_tick > now() AS next_in_future
  FROM queue.schedules ORDER BY queue_name, name;
SELECT count(*) AS month_end_next_is_last_day
  FROM queue.schedules
 WHERE name = 'month-end'
   AND extract(month FROM (next_tick AT TIME ZONE 'GMT') + interval '1 day')
       <> extract(month FROM next_tick AT TIME ZONE 'GMT')
   AND to_char(next_tick AT TIME ZONE 'GMT', 'HH24:MI') = '23:00';

-- case: nothing is due: run_schedules enqueues nothing
SELECT queue.run_schedules() AS enqueued;

-- case: a due tick enqueues one item, keyed by the tick's scheduled time
-- in UTC, and records tick and item in the schedule
UPDATE queue.schedule_config SET next_tick = queue._cron_tick(cron, now(), false)
 WHERE queue_name = 's_month' AND name = 'month-end';
SELECT queue.run_schedules() AS enqueued;
SELECT i.payload, i.priority,
       i.dedup_key = 'schedule:month-end:'
                     || to_char(s.last_tick AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"') AS key_names_tick,
       i.dedup_key ~ '^schedule:month-end:\d{4}-\d\d-\d\dT23:00Z$' AS key_format,
       s.last_item_id = i.item_id AS view_names_item,
       s.last_run_at IS NOT NULL AS ran, s.next_tick > now() AS next_in_future
  FROM queue.items i JOIN queue.schedules s ON s.queue_name = i.queue_name
 WHERE i.queue_name = 's_month' AND s.name = 'month-end';

-- case: the same tick run again (pg_cron firing twice) enqueues nothing,
-- even after its item completed on a queue without dedup_window
SELECT item_id AS m_item, lease_token AS m_tok FROM queue.dequeue('s_month', 'bot') \gset
SELECT queue.complete('s_month', :m_item, :m_tok);
SELECT queue.run_schedules() AS enqueued;
SELECT (SELECT count(*) FROM queue.items WHERE queue_name = 's_month') AS live,
       (SELECT count(*) FROM queue.history WHERE queue_name = 's_month') AS history;

-- case: a tick whose item is still live finds it by its dedup_key: one
-- item (run_schedules counts the ticks it handled)
UPDATE queue.schedule_config SET next_tick = queue._cron_tick(cron, now(), false)
 WHERE queue_name = 's_other';
SELECT queue.run_schedules() AS enqueued;
SELECT last_item_id AS o_item FROM queue.schedules WHERE queue_name = 's_other' \gset
UPDATE queue.schedule_config SET next_tick = queue._cron_tick(cron, now(), false)
 WHERE queue_name = 's_other';
SELECT queue.run_schedules() AS enqueued;
SELECT count(*) AS live, min(item_id) = :o_item AS same_item
  FROM queue.items WHERE queue_name = 's_other';

-- case: ticks missed while no job ran are made up once: only the newest
UPDATE queue.schedule_config SET next_tick = now() - interval '5 hours'
 WHERE queue_name = 's_month' AND name = 'hourly';
SELECT queue.run_schedules() AS enqueued;
SELECT count(*) AS items,
       min(i.dedup_key) = 'schedule:hourly:' || to_char(date_trunc('hour', now() AT TIME ZONE 'UTC'),
                                                         'YYYY-MM-DD"T"HH24:MI"Z"') AS newest_tick
  FROM queue.items i WHERE i.queue_name = 's_month' AND i.payload ? 'poll';
SELECT queue.run_schedules() AS enqueued;

-- case: a schedule that cannot enqueue records why and does not stop the
-- others; it enqueues once it can
SELECT set_config('queue.max_payload_bytes', pg_column_size('{"poll": "other"}'::jsonb)::text, false) IS NOT NULL AS lowered;
UPDATE queue.schedule_config SET next_tick = queue._cron_tick(cron, now(), false)
 WHERE name = 'hourly';
SET client_min_messages = error;
SELECT queue.run_schedules() AS enqueued;
RESET client_min_messages;
SELECT queue_name, name, last_error, next_tick <= now() AS still_due
  FROM queue.schedules WHERE name = 'hourly' ORDER BY queue_name;
RESET queue.max_payload_bytes;
SELECT queue.run_schedules() AS enqueued;
SELECT queue_name, last_error, next_tick > now() AS next_in_future
  FROM queue.schedules WHERE name = 'hourly' ORDER BY queue_name;

-- case: schedule() replaces a schedule of the same name; a new expression
-- starts from now, the last tick and item stay
SELECT queue.schedule('s_month', 'month-end', '30 22 $ * *', '{"run": "month-end", "v": 2}', priority => 1);
SELECT cron, payload, priority, last_tick IS NOT NULL AS kept_tick, last_item_id = :m_item AS kept_item,
       to_char(next_tick AT TIME ZONE 'GMT', 'HH24:MI') AS next_at, created_at < updated_at AS updated
  FROM queue.schedules WHERE name = 'month-end';

-- case: group_key and limit_key are kept with the schedule and given to
-- the items its ticks enqueue
SELECT queue.schedule('s_other', 'keyed', '0 6 * * mon-fri', '{"keyed": true}', group_key => 'ledger', limit_key => 'erp');
SELECT name, group_key, limit_key FROM queue.schedules WHERE name = 'keyed';
UPDATE queue.schedule_config SET next_tick = queue._cron_tick(cron, now(), false)
 WHERE queue_name = 's_other' AND name = 'keyed';
SELECT queue.run_schedules() AS enqueued;
SELECT i.group_key, i.limit_key, i.dedup_key LIKE 'schedule:keyed:%' AS keyed_by_tick
  FROM queue.items i JOIN queue.schedules s ON s.last_item_id = i.item_id
 WHERE s.name = 'keyed';
SELECT queue.unschedule('s_other', 'keyed');

-- case: the audit trail names who scheduled or removed what, and the
-- expression (schedule_removed: the one the schedule had)
SELECT kind, details->>'name' AS name, details->>'cron' AS cron, details->>'replaced' AS replaced,
       details->>'by' = session_user AS by_me
  FROM queue.events WHERE kind LIKE 'schedule%' ORDER BY event_id;

-- case: bad arguments change nothing: 22023, 22004, 42704, 54000
SELECT queue.schedule('s_month', 'x', '* * * *', '{}');
SELECT queue.schedule('s_month', 'x', '30 seconds', '{}');
SELECT queue.schedule('s_month', 'x', '60 * * * *', '{}');
SELECT queue.schedule('s_month', 'x', '* 24 * * *', '{}');
SELECT queue.schedule('s_month', 'x', '* * 0 * *', '{}');
SELECT queue.schedule('s_month', 'x', '* * * 13 *', '{}');
SELECT queue.schedule('s_month', 'x', '* * * * 8', '{}');
SELECT queue.schedule('s_month', 'x', '* * * * fri-mon', '{}');
SELECT queue.schedule('s_month', 'x', '*/0 * * * *', '{}');
SELECT queue.schedule('s_month', 'x', '*-5 * * * *', '{}');
SELECT queue.schedule('s_month', 'x', '@reboot', '{}');
SELECT queue.schedule('s_month', 'x', '0 0 30 2 *', '{}');
SELECT queue.schedule('s_month', 'x', NULL, '{}');
SELECT queue.schedule('s_month', NULL, '* * * * *', '{}');
SELECT queue.schedule('s_month', 'Bad Name', '* * * * *', '{}');
SELECT queue.schedule('s_month', 'has:colon', '* * * * *', '{}');
SELECT queue.schedule('s_month', 'x', '* * * * *', NULL);
SELECT queue.schedule('s_month', 'x', '* * * * *', '{}', priority => 1001);
SELECT queue.schedule('s_month', 'x', '* * * * *', '{}', priority => NULL);
SELECT queue.schedule('s_month', 'x', '* * * * *', jsonb_build_object('big', repeat('x', 2000000)));
SELECT queue.schedule('no_such_queue', 'x', '* * * * *', '{}');
SELECT queue.schedule('Bad-Queue', 'x', '* * * * *', '{}');
SELECT queue.unschedule('no_such_queue', 'x');
SELECT queue.unschedule('s_month', NULL);
SELECT count(*) AS schedules FROM queue.schedules;

-- case: cron expressions: next and newest tick around fixed times (GMT)
SET TimeZone = 'UTC';
SELECT c.cron, c.at,
       queue._cron_tick(c.cron, c.at, true) AS next_tick,
       queue._cron_tick(c.cron, c.at, false) AS newest_tick
  FROM (VALUES
    ('*/15 * * * *', timestamptz '2026-03-10 10:07:30'),
    ('*/15 * * * *', timestamptz '2026-03-10 10:15:00'),
    ('5/20 * * * *', timestamptz '2026-03-10 10:50:00'),
    ('0 9-17/4 * * *', timestamptz '2026-03-10 18:00:00'),
    ('0 23 $ * *', timestamptz '2026-02-10 00:00:00'),
    ('0 23 $ * *', timestamptz '2028-02-28 23:30:00'),
    ('0 0 29 2 *', timestamptz '2026-03-01 00:00:00'),
    ('0 9 13 * fri', timestamptz '2026-01-01 00:00:00'),
    ('0 9 */2 * fri', timestamptz '2026-01-01 00:00:00'),
    ('0 8 * * 7', timestamptz '2026-01-01 00:00:00'),
    ('0 8 * * sun', timestamptz '2026-01-01 00:00:00'),
    ('30 4 1,15 jan,jul *', timestamptz '2026-01-15 04:30:00'),
    ('@yearly', timestamptz '2026-06-01 00:00:00'),
    ('@monthly', timestamptz '2026-06-01 00:00:00'),
    ('@weekly', timestamptz '2026-06-01 00:00:00'),
    ('@daily', timestamptz '2026-06-01 00:00:00'),
    ('@hourly', timestamptz '2026-06-01 00:00:01'),
    ('0 0 30 2 *', timestamptz '2026-06-01 00:00:00')) AS c(cron, at)
 ORDER BY 1, 2;
RESET TimeZone;

-- case: cron expressions across a change of daylight saving time in
-- pg_cron's time zone: on the day clocks go back an hour, a schedule
-- whose minute or hour field is a wildcard ticks through both passes of
-- the repeated hour (no hour without items); a fixed time ticks once
SET TimeZone = 'UTC';
SET cron.timezone = 'America/New_York';
-- 2026-11-01: 02:00 EDT (06:00 UTC) becomes 01:00 EST
SELECT string_agg(to_char(t, 'HH24:MI'), ' ' ORDER BY t) AS every_15_min
  FROM (WITH RECURSIVE r(t) AS (
            SELECT queue._cron_tick('*/15 * * * *', timestamptz '2026-11-01 04:40', true)
            UNION ALL
            SELECT queue._cron_tick('*/15 * * * *', r.t, true) FROM r
             WHERE r.t < timestamptz '2026-11-01 06:40')
        SELECT t FROM r) x;
SELECT string_agg(to_char(t, 'HH24:MI'), ' ' ORDER BY t) AS hourly
  FROM (WITH RECURSIVE r(t) AS (
            SELECT queue._cron_tick('@hourly', timestamptz '2026-11-01 03:30', true)
            UNION ALL
            SELECT queue._cron_tick('@hourly', r.t, true) FROM r
             WHERE r.t < timestamptz '2026-11-01 07:30')
        SELECT t FROM r) x;
SELECT queue._cron_tick('*/15 * * * *', timestamptz '2026-11-01 05:20', false) AS newest_in_first_pass,
       queue._cron_tick('*/15 * * * *', timestamptz '2026-11-01 06:20', false) AS newest_in_second_pass;
SELECT queue._cron_tick('30 1 * * *', timestamptz '2026-10-31 12:00', true) AS daily_0130,
       queue._cron_tick('30 1 * * *', timestamptz '2026-11-01 05:31', true) AS daily_0130_after_first_pass;
-- an ordinary day in that zone, and the day clocks go forward
SELECT queue._cron_tick('0 9 * * *', timestamptz '2026-07-01 00:00', true) AS daily_0900_summer,
       queue._cron_tick('0 9 * * *', timestamptz '2026-12-01 00:00', true) AS daily_0900_winter,
       queue._cron_tick('*/30 * * * *', timestamptz '2026-03-08 06:50', true) AS after_spring_forward;
RESET cron.timezone;
RESET TimeZone;

-- case: roles: scheduling is an admin action; a producer grant is not
-- enough; readers see the schedules of the queues they may read
CREATE ROLE regress_s_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_s_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_s_reader LOGIN IN ROLE queue_reader;
SELECT queue.grant_queue('s_other', 'regress_s_producer', 'producer');
SELECT queue.grant_queue('s_other', 'regress_s_admin', 'reader');
SET ROLE regress_s_producer;
SELECT queue.schedule('s_other', 'p', '* * * * *', '{}');
SELECT queue.unschedule('s_other', 'hourly');
SELECT queue.run_schedules();
SELECT queue_name, name FROM queue.schedules ORDER BY 1, 2;
SELECT * FROM queue.schedule_config;
SET ROLE regress_s_reader;
SELECT queue.schedule('s_other', 'p', '* * * * *', '{}');
SELECT queue_name, name FROM queue.schedules ORDER BY 1, 2;
SET ROLE regress_s_admin;
SELECT queue.schedule('s_other', 'by-admin', '0 1 * * *', '{}');
SELECT queue.unschedule('s_other', 'by-admin');
SELECT queue.run_schedules() AS enqueued;
RESET ROLE;
SELECT queue.revoke_queue('s_other', 'regress_s_producer', 'producer');
SELECT queue.revoke_queue('s_other', 'regress_s_admin', 'reader');
DROP ROLE regress_s_admin, regress_s_producer, regress_s_reader;

-- case: unschedule: true once, then false
SELECT queue.unschedule('s_month', 'hourly') AS first, queue.unschedule('s_month', 'hourly') AS again;

-- case: drop_queue removes the queue's schedules
SELECT queue.drop_queue('s_month', force => true);
SELECT queue_name, name FROM queue.schedules ORDER BY 1, 2;
SELECT queue.drop_queue('s_other', force => true);
SELECT count(*) AS schedules FROM queue.schedule_config;

DROP EXTENSION pg_cron;
