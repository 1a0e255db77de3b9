-- Observability as a 3 AM operator reads it, driven through the bot loop
-- as the group roles: alerts, health, stats, events and prometheus at
-- their edges.
\set VERBOSITY terse

CREATE ROLE regress_oc_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_oc_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_oc_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_oc_reader LOGIN IN ROLE queue_reader;

-- case: worker_offline is raised while an offline worker held one of the
-- queue's items, also for a queue swept before the worker went offline
-- (a worker aged by hand past the previous check)
SET ROLE regress_oc_admin;
SELECT queue.create_queue('oc_off');
SELECT count(*) FROM queue.sweep('oc_off');
SET ROLE regress_oc_producer;
SELECT count(*) FROM queue.enqueue('oc_off', '{}');
SET ROLE regress_oc_bot;
SELECT count(*) FROM queue.dequeue('oc_off', 'oc-bot-gone');
RESET ROLE;
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'oc-bot-gone';
SET ROLE regress_oc_admin;
SELECT queue_name, recovered FROM queue.sweep('oc_off');
SELECT kind, message, details FROM queue.alerts
 WHERE queue_name = 'oc_off' AND cleared_at IS NULL ORDER BY kind;
SELECT * FROM queue.health('oc_off');
-- back online: the alert clears
SET ROLE regress_oc_bot;
SELECT queue.heartbeat('oc-bot-gone') >= 0 AS alive;
SET ROLE regress_oc_admin;
SELECT count(*) FROM queue.sweep('oc_off');
SELECT count(*) AS open_offline_alerts FROM queue.alerts
 WHERE queue_name = 'oc_off' AND kind = 'worker_offline' AND cleared_at IS NULL;
RESET ROLE;

-- case: the SLA reason and alert say a sub-minute age with its fraction
-- (1.5 s against a 2 s sla), not cut to whole seconds (00:00:01)
SET ROLE regress_oc_admin;
SELECT queue.create_queue('oc_sla', sla => '2 s');
SET ROLE regress_oc_producer;
SELECT count(*) FROM queue.enqueue('oc_sla', '{}');
RESET ROLE;
BEGIN;
UPDATE queue.item_live SET visible_at = now() - interval '1.5 s', enqueued_at = now() - interval '1.5 s'
 WHERE queue_name = 'oc_sla';
SET LOCAL ROLE regress_oc_admin;
SELECT * FROM queue.health('oc_sla');
SELECT count(*) FROM queue.sweep('oc_sla');
SELECT kind, message FROM queue.alerts WHERE queue_name = 'oc_sla' AND cleared_at IS NULL;
COMMIT;
BEGIN;
UPDATE queue.item_live SET visible_at = now() - interval '1.9 s', enqueued_at = now() - interval '1.9 s'
 WHERE queue_name = 'oc_sla';
SET LOCAL ROLE regress_oc_admin;
SELECT * FROM queue.health('oc_sla');
SELECT count(*) FROM queue.sweep('oc_sla');
SELECT kind, message FROM queue.alerts WHERE queue_name = 'oc_sla' AND cleared_at IS NULL;
COMMIT;

-- case: on an installation without per-queue grants, a reader sees the
-- whole fleet in the workers view: a worker registered for every queue
-- (queues NULL) that never claimed is idle, and one gone for days with
-- nothing in the last 24 h is offline; queues stays NULL (every queue)
SET ROLE regress_oc_bot;
SELECT queue.register_worker('oc-bot-never');
SELECT queue.register_worker('oc-bot-long-gone');
RESET ROLE;
UPDATE queue.worker_registry SET last_seen = now() - interval '3 days' WHERE worker = 'oc-bot-long-gone';
SET ROLE regress_oc_reader;
SELECT worker, status, in_flight, completed_24h, failed_24h, mean_run_time, success_rate, queues
  FROM queue.workers WHERE worker IN ('oc-bot-never', 'oc-bot-long-gone') ORDER BY worker;
RESET ROLE;

RESET ROLE;
SELECT queue.drop_queue(q, force => true) IS NOT NULL AS dropped
  FROM unnest(ARRAY['oc_off', 'oc_sla']) AS q;
DELETE FROM queue.worker_registry WHERE worker LIKE 'oc-%';
DROP ROLE regress_oc_admin, regress_oc_bot, regress_oc_producer, regress_oc_reader;
