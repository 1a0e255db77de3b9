-- capacity_short asks for more workers only where more workers could take
-- items: while a queue's own max_in_flight is reached, dequeue hands a new
-- worker nothing, so the backlog is the cap's doing (desired_workers says
-- as much) and neither health() nor sweep's alerts ask for workers.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

CREATE ROLE regress_qc_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_qc_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_qc_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_qc_reader LOGIN IN ROLE queue_reader;

-- Masks the durations in reasons (the clock moves between calls).
CREATE FUNCTION public.regress_qc_mask(t text) RETURNS text LANGUAGE sql AS $$
    SELECT regexp_replace(t, '\d\d:\d\d:\d\d', 'HH:MM:SS', 'g')
$$;

SET ROLE regress_qc_admin;
SELECT queue.create_queue('qc_capped', sla => '10 min', max_in_flight => 2);
SET ROLE regress_qc_producer;
SELECT count(*) FROM queue.enqueue_batch('qc_capped', array_fill('{}'::jsonb, ARRAY[32]));
SET ROLE regress_qc_bot;
SELECT queue.register_worker('qc-one', capacity => 1);
SELECT queue.register_worker('qc-two', capacity => 1);
SELECT count(*) AS claimed FROM queue.dequeue('qc_capped', 'qc-one');
SELECT count(*) AS claimed FROM queue.dequeue('qc_capped', 'qc-two');
-- the cap is reached: a third worker gets nothing
SELECT count(*) AS third_worker_gets FROM queue.dequeue('qc_capped', 'qc-three');
RESET ROLE;
-- the last hour: 40 items processed, two minutes each; the queued items
-- have waited six minutes, past half the sla
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, worker, enqueued_at, claimed_at, completed_at)
SELECT 'qc_capped', nextval('queue.item_id_seq'), '{}', 1, 'qc-one', now() - interval '30 min',
       now() - interval '20 min', now() - interval '18 min'
  FROM generate_series(1, 40);
UPDATE queue.item_live SET visible_at = now() - interval '6 min'
 WHERE queue_name = 'qc_capped' AND lease_token IS NULL;

-- case: every holder is at its capacity, but so is the queue: more
-- workers would get nothing, so no capacity_short, only the sla warning
SET ROLE regress_qc_reader;
SELECT queued, processing, processed_1h FROM queue.stats('qc_capped');
SELECT queue.desired_workers('qc_capped') AS desired;
SELECT status, regress_qc_mask(r) AS reason FROM queue.health('qc_capped') h, unnest(h.reasons) r;
SET ROLE regress_qc_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'qc_capped';
SELECT kind FROM queue.alerts WHERE queue_name = 'qc_capped' AND cleared_at IS NULL ORDER BY kind;

-- case: with room under the cap the workers are the shortage again:
-- capacity_short, sized from the last hour's rate
SELECT queue.alter_queue('qc_capped', max_in_flight => 10);
SET ROLE regress_qc_reader;
SELECT queue.desired_workers('qc_capped') AS desired;
SELECT status, regress_qc_mask(r) AS reason FROM queue.health('qc_capped') h, unnest(h.reasons) r;
SET ROLE regress_qc_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'qc_capped';
SELECT kind, details - 'oldest_queued_age' AS details FROM queue.alerts
 WHERE queue_name = 'qc_capped' AND cleared_at IS NULL ORDER BY kind;

-- case: the cap lowered back to what is in flight: sweep clears the alert
SELECT queue.alter_queue('qc_capped', max_in_flight => 2);
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'qc_capped';
SELECT kind, cleared_at IS NOT NULL AS cleared FROM queue.alerts
 WHERE queue_name = 'qc_capped' AND kind = 'capacity_short';

RESET ROLE;
SELECT queue.drop_queue('qc_capped', force => true);
DELETE FROM queue.worker_registry WHERE worker LIKE 'qc-%';
DROP FUNCTION public.regress_qc_mask(text);
DROP ROLE regress_qc_admin, regress_qc_producer, regress_qc_bot, regress_qc_reader;
