-- The SLA rule of health() and sweep's sla alerts judges the oldest queued
-- item, also one waiting in line behind its group's head (processing,
-- scheduled or on hold): items, stats and desired_workers call it queued,
-- and an ordered group is where waits run past an sla.  It waits from
-- when it became due, as the unroutable rule counts it.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

CREATE ROLE regress_sg_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_sg_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_sg_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_sg_reader LOGIN IN ROLE queue_reader;

SET ROLE regress_sg_admin;
SELECT queue.create_queue('sg_q', sla => '10 min', lease_timeout => '1 h');
SET ROLE regress_sg_producer;
SELECT count(queue.enqueue('sg_q', jsonb_build_object('i', i), group_key => 'invoice-42'))
  FROM generate_series(1, 4) i;
-- a member due only later is scheduled, not waiting
SELECT queue.enqueue('sg_q', '{"i": 5}', group_key => 'invoice-42',
                     run_at => now() + interval '1 h') > 0 AS enqueued;
SET ROLE regress_sg_bot;
SELECT payload FROM queue.dequeue('sg_q', 'sg-bot');
RESET ROLE;
-- the group's members have waited 6 minutes behind the processing head
-- (the head's claim is as old: it is no stalled lease)
UPDATE queue.item_live SET enqueued_at = now() - interval '6 min', run_at = now() - interval '6 min'
 WHERE queue_name = 'sg_q' AND run_at <= now();
UPDATE queue.item_live SET claimed_at = now() - interval '6 min'
 WHERE queue_name = 'sg_q' AND worker IS NOT NULL;

-- case: three members queued for 6 minutes, past half the 10 min sla: warning
SET ROLE regress_sg_reader;
SELECT queued, scheduled, processing, oldest_queued_age IS NULL AS nothing_claimable FROM queue.stats('sg_q');
SELECT state, count(*) FROM queue.items WHERE queue_name = 'sg_q' GROUP BY state ORDER BY state;
SELECT * FROM queue.health('sg_q');
SET ROLE regress_sg_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'sg_q';
SELECT kind, message, details - 'oldest_queued_age' AS details FROM queue.alerts
 WHERE queue_name = 'sg_q' AND cleared_at IS NULL ORDER BY kind;

-- case: past 85 %: critical, which replaces the warning
RESET ROLE;
UPDATE queue.item_live SET enqueued_at = now() - interval '9 min', run_at = now() - interval '9 min'
 WHERE queue_name = 'sg_q' AND run_at <= now() AND worker IS NULL;
SET ROLE regress_sg_reader;
SELECT * FROM queue.health('sg_q');
SET ROLE regress_sg_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'sg_q';
SELECT kind, cleared_at IS NULL AS open FROM queue.alerts WHERE queue_name = 'sg_q' ORDER BY alert_id;

-- case: a member whose run_at was backdated waits from its enqueue, not
-- from that run_at (a fresh member behind the head is no breach)
RESET ROLE;
UPDATE queue.item_live SET enqueued_at = now() - interval '1 min', run_at = now() - interval '2 h'
 WHERE queue_name = 'sg_q' AND run_at <= now() AND worker IS NULL;
SET ROLE regress_sg_reader;
SELECT * FROM queue.health('sg_q');
SET ROLE regress_sg_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'sg_q';
SELECT count(*) AS open_sla_alerts FROM queue.alerts
 WHERE queue_name = 'sg_q' AND kind LIKE 'sla%' AND cleared_at IS NULL;

RESET ROLE;
SELECT queue.drop_queue('sg_q', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'sg-bot';
DROP ROLE regress_sg_admin, regress_sg_producer, regress_sg_bot, regress_sg_reader;
