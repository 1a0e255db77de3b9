-- A stalled lease stays a stalled lease when nothing completed in the
-- last hour: health() and the stalled_lease alert judge it against the
-- queue's p95 run time from its newest completions, so a bot stuck on an
-- item (its lease kept alive) is not forgotten once the stall itself has
-- emptied the last hour of completions.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

CREATE ROLE regress_sq_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_sq_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_sq_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_sq_reader LOGIN IN ROLE queue_reader;

SET ROLE regress_sq_admin;
SELECT queue.create_queue('sq_stuck', lease_timeout => '3 h');
SELECT queue.create_queue('sq_never', lease_timeout => '3 h');
SET ROLE regress_sq_producer;
SELECT count(*) FROM queue.enqueue_batch('sq_stuck', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM queue.enqueue_batch('sq_never', array_fill('{}'::jsonb, ARRAY[1]));
SET ROLE regress_sq_bot;
SELECT queue.complete('sq_stuck', d.item_id, d.lease_token) AS completed
  FROM queue.dequeue('sq_stuck', 'sq-bot', batch_size => 2) d;
SELECT d.item_id AS stuck_item, d.lease_token AS stuck_token
  FROM queue.dequeue('sq_stuck', 'sq-bot') d \gset
SELECT count(*) AS claimed FROM queue.dequeue('sq_never', 'sq-bot');
RESET ROLE;

-- the two completions ran 2 s and 4 s, two hours ago; the bot has been on
-- its third item for 90 minutes, its lease current (kept alive)
UPDATE queue.item_done SET completed_at = now() - interval '2 h',
       claimed_at = now() - interval '2 h' - CASE WHEN item_id % 2 = 0 THEN interval '2 s' ELSE interval '4 s' END,
       enqueued_at = now() - interval '3 h'
 WHERE queue_name = 'sq_stuck';
UPDATE queue.item_live SET claimed_at = now() - interval '90 min'
 WHERE queue_name IN ('sq_stuck', 'sq_never') AND worker = 'sq-bot';

-- case: nothing completed in the last hour (stats has no run_p95), yet the
-- 90-minute lease is held past 3x the p95 run time of the newest completions
SET ROLE regress_sq_reader;
SELECT processed_1h, run_p95 FROM queue.stats('sq_stuck');
SELECT * FROM queue.health('sq_stuck');

-- case: sweep raises the stalled_lease alert for it
SET ROLE regress_sq_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'sq_stuck';
SELECT kind, message, details FROM queue.alerts
 WHERE queue_name = 'sq_stuck' AND cleared_at IS NULL ORDER BY kind;

-- case: a queue that never completed anything has no p95 run time to judge
-- a lease by: no stalled-lease reason or alert
SET ROLE regress_sq_reader;
SELECT * FROM queue.health('sq_never');
SET ROLE regress_sq_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'sq_never';
SELECT count(*) AS open_alerts FROM queue.alerts WHERE queue_name = 'sq_never' AND cleared_at IS NULL;

-- case: once the stuck item completes, the lease is no longer held: sweep
-- clears the alert
SET ROLE regress_sq_bot;
SELECT queue.complete('sq_stuck', :stuck_item, :stuck_token) AS completed;
SET ROLE regress_sq_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'sq_stuck';
SELECT kind, cleared_at IS NOT NULL AS cleared FROM queue.alerts
 WHERE queue_name = 'sq_stuck' AND kind = 'stalled_lease';
SET ROLE regress_sq_reader;
SELECT * FROM queue.health('sq_stuck');

RESET ROLE;
SELECT queue.drop_queue(q, force => true) IS NOT NULL AS dropped
  FROM unnest(ARRAY['sq_stuck', 'sq_never']) AS q;
DELETE FROM queue.worker_registry WHERE worker = 'sq-bot';
DROP ROLE regress_sq_admin, regress_sq_producer, regress_sq_bot, regress_sq_reader;
