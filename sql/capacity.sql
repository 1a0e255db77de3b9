-- Capacity: desired_workers (the autoscaler's number) and the capacity
-- rules of health() and sweep's alerts, capacity_short and workers_idle.
\set VERBOSITY terse

-- Masks durations in reasons and messages (the clock moves between calls)
-- and the count of online workers (other tests' workers may be online).
CREATE FUNCTION public.regress_mask(t text) RETURNS text LANGUAGE sql AS $$
    SELECT regexp_replace(regexp_replace(t, '\d\d:\d\d:\d\d', 'HH:MM:SS', 'g'),
                          '\d+ workers? online', 'N workers online', 'g')
$$;
-- Online workers that may serve a queue, counted from the registry.
CREATE FUNCTION public.regress_online(q text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM queue.worker_registry r
     WHERE r.last_seen >= now() - interval '2 min' AND NOT r.draining
       AND (r.queues IS NULL OR q = ANY (r.queues))
$$;

-- case: desired_workers counts claimable plus processing items, not
-- scheduled or held ones; an empty queue needs no worker
SELECT queue.create_queue('c_dw');
SELECT queue.desired_workers('c_dw');
SELECT count(*) FROM queue.enqueue_batch('c_dw', array_fill('{}'::jsonb, ARRAY[7]));
SELECT queue.enqueue('c_dw', '{"later": true}', run_at => now() + interval '1 h') AS later \gset
SELECT queue.enqueue('c_dw', '{"held": true}') AS held \gset
SELECT queue.hold('c_dw', :held);
SELECT count(*) FROM queue.dequeue('c_dw', 'c-bot', batch_size => 3);
SELECT queued, processing, scheduled, on_hold FROM queue.stats('c_dw');
SELECT queue.desired_workers('c_dw') AS one_each,
       queue.desired_workers('c_dw', 2) AS two_each,
       queue.desired_workers('c_dw', items_per_worker => 3) AS three_each,
       queue.desired_workers('c_dw', 100) AS hundred_each;

-- case: never above what max_in_flight lets out
SELECT queue.alter_queue('c_dw', max_in_flight => 4);
SELECT queue.desired_workers('c_dw') AS capped, queue.desired_workers('c_dw', 3) AS capped_three_each;
SELECT queue.alter_queue('c_dw', max_in_flight => 0);
SELECT queue.desired_workers('c_dw') AS uncapped;

-- case: a paused queue needs no worker, in-flight items or not
SELECT queue.pause('c_dw', 'month-end freeze');
SELECT queue.desired_workers('c_dw') AS paused;
SELECT queue.resume('c_dw');
SELECT queue.desired_workers('c_dw') AS resumed;

-- case: items that cannot be claimed need no worker: members waiting
-- behind their group's head, and a limited key's items beyond its cap
SELECT queue.create_queue('c_flow', lease_timeout => '1 h');
SELECT count(queue.enqueue('c_flow', jsonb_build_object('i', i), group_key => 'g1'))
  FROM generate_series(1, 20) i;
SELECT queue.desired_workers('c_flow') AS one_group;
SELECT queue.set_limit('c_flow', 'erp', max_in_flight => 2);
SELECT count(queue.enqueue('c_flow', '{}', limit_key => 'erp')) FROM generate_series(1, 10);
SELECT queue.desired_workers('c_flow') AS group_and_capped_key;
SELECT count(*) AS claimed FROM queue.dequeue('c_flow', 'c-w', 10);
SELECT queue.desired_workers('c_flow') AS while_processing;

-- case: an open breaker needs no worker while it cools down, and one (the
-- probe's) once it is half-open, so a fleet scaled to zero can close it
SELECT queue.create_queue('c_brk', breaker_threshold => 0.5, breaker_min_samples => 2,
                          breaker_cooldown => '5 min');
SELECT count(*) FROM queue.enqueue_batch('c_brk', array_fill('{}'::jsonb, ARRAY[6]));
SELECT queue.fail('c_brk', d.item_id, d.lease_token, 'ERP down', 'ERP_DOWN')
  FROM queue.dequeue('c_brk', 'c-bot', batch_size => 2) d;
SELECT breaker_state, paused FROM queue.queues WHERE queue_name = 'c_brk';
SELECT queue.desired_workers('c_brk') AS breaker_open;
UPDATE queue.queue_config SET breaker_opened_at = now() - interval '6 min' WHERE queue_name = 'c_brk';
SELECT queue.desired_workers('c_brk') AS half_open, queue.desired_workers('c_brk', 5) AS half_open_five_each;
SELECT count(*) AS probes FROM queue.dequeue('c_brk', 'c-bot', batch_size => 3);
SELECT breaker_state FROM queue.queues WHERE queue_name = 'c_brk';
SELECT queue.desired_workers('c_brk') AS probing;
SELECT queue.resume('c_brk');
SELECT queue.desired_workers('c_brk') AS closed;

-- case: errors: NULL or non-positive items_per_worker, malformed or unknown queue
SELECT queue.desired_workers('c_dw', NULL);
SELECT queue.desired_workers('c_dw', 0);
SELECT queue.desired_workers('c_dw', -3);
SELECT queue.desired_workers('C-DW');
SELECT queue.desired_workers(NULL);
SELECT queue.desired_workers('c_missing');

-- case: a reader may call it; a per-queue reader grant closes the other
-- readers out of that queue (42501) and leaves them the open queues
CREATE ROLE regress_c_reader LOGIN IN ROLE queue_reader;
CREATE ROLE regress_c_tenant LOGIN IN ROLE queue_reader;
SELECT queue.grant_queue('c_brk', 'regress_c_tenant', 'reader');
SET ROLE regress_c_reader;
SELECT queue.desired_workers('c_dw') AS reader_open_queue;
SELECT queue.desired_workers('c_brk');
RESET ROLE;
SET ROLE regress_c_tenant;
SELECT queue.desired_workers('c_brk') AS tenant_granted_queue;
RESET ROLE;
SELECT queue.revoke_queue('c_brk', 'regress_c_tenant', 'reader');

-- case: capacity_short: past half the sla while every live worker holding
-- its items is at capacity (registered capacity, or one item without
-- one); the reason sizes the shortfall from the last hour's rate
SELECT queue.create_queue('c_short', sla => '10 min');
SELECT queue.register_worker('c-one', capacity => 1);
SELECT queue.register_worker('c-two', capacity => 2);
SELECT count(*) FROM queue.enqueue_batch('c_short', array_fill('{}'::jsonb, ARRAY[26]));
-- the last hour: 40 items processed, two minutes each
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, worker, enqueued_at, claimed_at, completed_at)
SELECT 'c_short', nextval('queue.item_id_seq'), '{}', 1, 'c-two', now() - interval '30 min',
       now() - interval '20 min', now() - interval '18 min'
  FROM generate_series(1, 40);
SELECT count(*) FROM queue.dequeue('c_short', 'c-one', batch_size => 5);
SELECT count(*) FROM queue.dequeue('c_short', 'c-two', batch_size => 5);
SELECT count(*) FROM queue.dequeue('c_short', 'c-none');
SELECT queued, processing, processed_1h FROM queue.stats('c_short');
-- not yet past half the sla: nothing
SELECT status, reasons FROM queue.health('c_short');
UPDATE queue.item_live SET visible_at = now() - interval '6 min'
 WHERE queue_name = 'c_short' AND lease_token IS NULL;
SELECT status, regress_mask(r) AS reason
  FROM queue.health('c_short') h, unnest(h.reasons) r;
SELECT queue.desired_workers('c_short');
-- no completion in the last hour: the shortfall cannot be sized
UPDATE queue.item_done SET completed_at = now() - interval '2 h', claimed_at = now() - interval '2 h 2 min'
 WHERE queue_name = 'c_short';
SELECT regress_mask(r) AS reason FROM queue.health('c_short') h, unnest(h.reasons) r;
UPDATE queue.item_done SET completed_at = now() - interval '18 min', claimed_at = now() - interval '20 min'
 WHERE queue_name = 'c_short';

-- case: a holder with room to spare (or a worker no longer at capacity):
-- not capacity_short
SELECT queue.register_worker('c-one', capacity => 3);
SELECT regress_mask(r) AS reason FROM queue.health('c_short') h, unnest(h.reasons) r;
-- draining counts as full
SELECT queue.drain_worker('c-one');
SELECT count(*) AS capacity_short FROM queue.health('c_short') h, unnest(h.reasons) r
 WHERE r LIKE 'capacity short:%';
SELECT queue.undrain_worker('c-one');
-- so does a maintenance window: inside it the worker gets nothing new
SELECT queue.add_maintenance('c-one', now() - interval '1 min', now() + interval '1 h') > 0 AS added;
SELECT worker, status, in_flight, capacity FROM queue.workers WHERE worker = 'c-one';
SELECT count(*) AS capacity_short FROM queue.health('c_short') h, unnest(h.reasons) r
 WHERE r LIKE 'capacity short:%';
-- one that starts later or has ended does not
UPDATE queue.maintenance_window SET starts_at = now() + interval '1 h', ends_at = now() + interval '2 h'
 WHERE worker = 'c-one';
SELECT count(*) AS capacity_short FROM queue.health('c_short') h, unnest(h.reasons) r
 WHERE r LIKE 'capacity short:%';
UPDATE queue.maintenance_window SET starts_at = now() - interval '2 h', ends_at = now() - interval '1 h'
 WHERE worker = 'c-one';
SELECT count(*) AS capacity_short FROM queue.health('c_short') h, unnest(h.reasons) r
 WHERE r LIKE 'capacity short:%';
DELETE FROM queue.maintenance_window WHERE worker = 'c-one';
SELECT queue.register_worker('c-one', capacity => 1);

-- case: sweep raises the capacity_short alert with its details and clears it
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'c_short';
SELECT kind, regress_mask(message) AS message,
       details - 'oldest_queued_age' AS details, cleared_at IS NULL AS open
  FROM queue.alerts WHERE queue_name = 'c_short' AND kind = 'capacity_short';

-- case: without an sla there is no capacity_short
SELECT queue.alter_queue('c_short', sla => '0');
SELECT count(*) AS capacity_short FROM queue.health('c_short') h, unnest(h.reasons) r
 WHERE r LIKE 'capacity short:%';
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'c_short';
SELECT kind, cleared_at IS NOT NULL AS cleared
  FROM queue.alerts WHERE queue_name = 'c_short' AND kind = 'capacity_short';
SELECT queue.alter_queue('c_short', sla => '10 min');

-- case: paused or breaker-open: neither capacity rule, the queue is paused
SELECT queue.pause('c_short');
SELECT status, regress_mask(array_to_string(reasons, ' | ')) AS reasons FROM queue.health('c_short');
SELECT queue.resume('c_short');
-- the breaker opens on two failures out of two outcomes
SELECT queue.alter_queue('c_short', breaker_threshold => 0.5, breaker_min_samples => 2);
SELECT queue.fail('c_short', i.item_id, i.lease_token, 'ERP down', 'ERP_DOWN')
  FROM queue.item_live i WHERE i.queue_name = 'c_short' AND i.worker IN ('c-one', 'c-none');
SELECT breaker_state FROM queue.queues WHERE queue_name = 'c_short';
SELECT status, regress_mask(array_to_string(reasons, ' | ')) AS reasons FROM queue.health('c_short');
SELECT queue.desired_workers('c_short') AS breaker_open;
SELECT queue.resume('c_short');

-- case: workers_idle: items claimable for over a minute while no live
-- worker holds one of the queue's items and nobody claimed one
SELECT queue.create_queue('c_idle');
SELECT count(*) FROM queue.enqueue_batch('c_idle', array_fill('{}'::jsonb, ARRAY[5]));
SELECT status, reasons FROM queue.health('c_idle');
UPDATE queue.item_live SET visible_at = now() - interval '3 min' WHERE queue_name = 'c_idle';
SELECT status, regress_mask(r) AS reason FROM queue.health('c_idle') h, unnest(h.reasons) r;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'c_idle';
SELECT kind, regress_mask(message) AS message, details - 'oldest_queued_age' - 'online_workers' AS details,
       (details->>'online_workers')::bigint = regress_online('c_idle') AS online_counted
  FROM queue.alerts WHERE queue_name = 'c_idle' AND cleared_at IS NULL;
-- with every worker offline the reason says so (a dispatcher that is down)
BEGIN;
UPDATE queue.worker_registry SET last_seen = now() - interval '1 day';
SELECT regress_mask(r) AS reason FROM queue.health('c_idle') h, unnest(h.reasons) r;
ROLLBACK;
-- an online worker that does not claim is counted in the reason
SELECT queue.register_worker('c-idle-bot', queues => ARRAY['c_idle']);
SELECT regress_mask(r) AS reason FROM queue.health('c_idle') h, unnest(h.reasons) r;
-- a claim ends it, and sweep clears the alert
SELECT d.item_id AS idle_item, d.lease_token AS idle_tok
  FROM queue.dequeue('c_idle', 'c-idle-bot') d \gset
SELECT status, reasons FROM queue.health('c_idle');
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'c_idle';
SELECT kind, cleared_at IS NOT NULL AS cleared FROM queue.alerts WHERE queue_name = 'c_idle';
-- a worker busy on one long item for a while: still not idle
UPDATE queue.item_live SET claimed_at = now() - interval '10 min'
 WHERE queue_name = 'c_idle' AND item_id = :idle_item;
SELECT status, reasons FROM queue.health('c_idle');
-- once its completion is two minutes old the queue is idle again
SELECT queue.complete('c_idle', :idle_item, :idle_tok);
UPDATE queue.item_done SET completed_at = now() - interval '2 min', claimed_at = now() - interval '10 min'
 WHERE queue_name = 'c_idle';
SELECT count(*) AS workers_idle FROM queue.health('c_idle') h, unnest(h.reasons) r
 WHERE r LIKE 'workers idle:%';
-- paused: not idle, paused
SELECT queue.pause('c_idle');
SELECT status, array_length(reasons, 1) AS reasons FROM queue.health('c_idle');
SELECT queue.resume('c_idle');

SELECT queue.drop_queue(q, force => true)
  FROM unnest(ARRAY['c_dw', 'c_brk', 'c_short', 'c_idle', 'c_flow']) AS q;
DROP ROLE regress_c_reader;
DROP ROLE regress_c_tenant;
DROP FUNCTION public.regress_mask(text);
DROP FUNCTION public.regress_online(text);
