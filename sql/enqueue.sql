-- Producing: enqueue and enqueue_batch.
\set VERBOSITY terse

SELECT queue.create_queue('q_enq', max_attempts => 4, item_ttl => '2 h');

-- case: enqueue returns a new id; the item is queued with the defaults
SELECT queue.enqueue('q_enq', '{"invoice": 1}') AS id1 \gset
SELECT queue_name, item_id = :id1 AS same_id, state, priority, max_attempts,
       run_at <= now() AS run_now, enqueued_at <= now() AS enqueued_past,
       lease_expires_at, worker, dedup_key, correlation_id, last_error, payload
  FROM queue.items WHERE item_id = :id1;

-- case: every argument by name
SELECT queue.enqueue('q_enq', payload => '{"invoice": 2}', priority => 7,
       run_at => now() - interval '1 min', dedup_key => 'inv-2',
       expires_at => now() + interval '1 day', max_attempts => 9,
       correlation_id => 'order-42') AS id2 \gset
SELECT item_id = :id2 AS same_id, state, priority, max_attempts, dedup_key, correlation_id, payload
  FROM queue.items WHERE item_id = :id2;

-- case: ids are distinct and roughly increasing
SELECT queue.enqueue('q_enq', '{"invoice": 3}') AS id3 \gset
SELECT :id3 > :id2 AND :id2 > :id1 AS increasing;

-- case: priority 0 and 1000 are the limits
SELECT queue.enqueue('q_enq', '{}', priority => 0) AS p0 \gset
SELECT queue.enqueue('q_enq', '{}', priority => 1000) AS p1000 \gset
SELECT priority FROM queue.items WHERE item_id IN (:p0, :p1000) ORDER BY priority;

-- case: run_at in the future makes the item scheduled, not queued
SELECT queue.enqueue('q_enq', '{"later": true}', run_at => now() + interval '1 h') AS later \gset
SELECT state, run_at - now() BETWEEN '59 min' AND '1 h' AS in_1h
  FROM queue.items WHERE item_id = :later;

-- case: any JSON value is a payload
SELECT queue.enqueue('q_enq', '"a string"') AS js \gset
SELECT queue.enqueue('q_enq', '[1, 2, 3]') AS ja \gset
SELECT queue.enqueue('q_enq', 'null') AS jn \gset
SELECT payload FROM queue.items WHERE item_id IN (:js, :ja, :jn) ORDER BY item_id;

SELECT count(*) AS items FROM queue.items WHERE queue_name = 'q_enq';

-- case: enqueue_batch returns one id per payload, in input order
SELECT array_agg(id ORDER BY ord) AS batch_ids
  FROM queue.enqueue_batch('q_enq', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[])
       WITH ORDINALITY AS t(id, ord) \gset
SELECT i.payload, i.state, i.priority, i.max_attempts
  FROM unnest(:'batch_ids'::bigint[]) WITH ORDINALITY AS b(id, ord)
  JOIN queue.items i ON i.queue_name = 'q_enq' AND i.item_id = b.id
 ORDER BY b.ord;
SELECT count(DISTINCT id) AS distinct_ids FROM unnest(:'batch_ids'::bigint[]) AS id;

-- case: enqueue_batch applies priority, run_at, max_attempts and expires_at to every item
SELECT array_agg(id) AS batch2 FROM queue.enqueue_batch('q_enq', ARRAY['{"c": 1}', '{"c": 2}']::jsonb[],
       priority => 5, run_at => now() + interval '10 min', max_attempts => 2,
       expires_at => now() + interval '1 day') AS id \gset
SELECT state, priority, max_attempts, count(*)
  FROM queue.items WHERE item_id = ANY (:'batch2'::bigint[])
 GROUP BY 1, 2, 3;

-- case: enqueue_batch with dedup_keys stores a key per item (NULL = no key)
SELECT array_agg(id ORDER BY ord) AS batch3
  FROM queue.enqueue_batch('q_enq', ARRAY['{"d": 1}', '{"d": 2}']::jsonb[],
       dedup_keys => ARRAY['d-1', NULL]) WITH ORDINALITY AS t(id, ord) \gset
SELECT i.payload, i.dedup_key
  FROM unnest(:'batch3'::bigint[]) WITH ORDINALITY AS b(id, ord)
  JOIN queue.items i ON i.queue_name = 'q_enq' AND i.item_id = b.id
 ORDER BY b.ord;

-- case: an empty batch inserts nothing
SELECT count(*) FROM queue.enqueue_batch('q_enq', ARRAY[]::jsonb[]);

-- case: a thousand items in one call
SELECT count(*), count(DISTINCT id)
  FROM queue.enqueue_batch('q_enq', (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 1000) g)) AS id;
SELECT count(*) AS items FROM queue.items WHERE queue_name = 'q_enq';

-- case: payload size limit (queue.max_payload_bytes, stored jsonb size)
SET queue.max_payload_bytes = 100;
SELECT pg_column_size(jsonb_build_object('s', repeat('x', 83))) AS at_limit_size;
SELECT queue.enqueue('q_enq', jsonb_build_object('s', repeat('x', 83))) IS NOT NULL AS at_limit_ok;
SELECT pg_column_size(jsonb_build_object('s', repeat('x', 135))) AS over_limit_size;
SELECT queue.enqueue('q_enq', jsonb_build_object('s', repeat('x', 135)));
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_enq', ARRAY['{"ok": 1}'::jsonb, jsonb_build_object('s', repeat('x', 135))]);
\echo :LAST_ERROR_SQLSTATE
RESET queue.max_payload_bytes;
-- the default reads as the contract gives it, a number of bytes
SHOW queue.max_payload_bytes;
SELECT current_setting('queue.max_payload_bytes')::int AS default_bytes;
SELECT queue.enqueue('q_enq', jsonb_build_object('s', repeat('x', 135))) IS NOT NULL AS default_limit_ok;
SELECT count(*) AS items FROM queue.items WHERE queue_name = 'q_enq';

-- case: queue.max_payload_bytes is superuser-settable only
CREATE ROLE regress_queue_plain;
SET ROLE regress_queue_plain;
SET queue.max_payload_bytes = 10;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_queue_plain;

-- case: a run_at of 'infinity' never comes: enqueue, enqueue_batch and
-- release refuse it (22023), so no item waits forever looking scheduled
-- (hold parks an item); a run_at of '-infinity' is a time in the past:
-- claimable at once, as any backdated run_at
SELECT queue.create_queue('q_enq_inf');
SELECT queue.enqueue('q_enq_inf', '{}', run_at => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_enq_inf', ARRAY['{}'::jsonb], run_at => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue('q_enq_inf', '{"past": true}', run_at => '-infinity') AS inf_id \gset
SELECT state FROM queue.items WHERE queue_name = 'q_enq_inf' AND item_id = :inf_id;
SELECT item_id = :inf_id AS claimed, lease_token AS inf_tok FROM queue.dequeue('q_enq_inf', 'w1') \gset
SELECT :'claimed' AS claimed;
SELECT queue.release('q_enq_inf', :inf_id, :inf_tok, run_at => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT state FROM queue.items WHERE queue_name = 'q_enq_inf' AND item_id = :inf_id;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('q_enq_inf');
SELECT queue.drop_queue('q_enq_inf', force => true);

SELECT queue.drop_queue('q_enq', force => true);
