-- Bounded work per call: batch sizes are capped, and a large batch
-- stays linear and cancellable whatever its keys meet.
\set VERBOSITY terse

SELECT queue.create_queue('q_bl');

-- case: enqueue_batch accepts at most 100,000 payloads (22023 beyond)
\set VERBOSITY default
SELECT count(*) FROM queue.enqueue_batch('q_bl', array_fill('{}'::jsonb, ARRAY[100001]));
\set VERBOSITY terse
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_bl';

-- case: complete_batch accepts at most 100,000 pairs (22023 beyond)
\set VERBOSITY default
SELECT queue.complete_batch('q_bl', array_fill(1::bigint, ARRAY[100001]), array_fill(1::bigint, ARRAY[100001]));
\set VERBOSITY terse

-- case: complete_batch takes one-dimensional arrays, as enqueue_batch does
-- (a two-dimensional one is a caller's mistake, not a list of pairs)
SELECT queue.enqueue('q_bl', '{"two_d": 1}') AS td1 \gset
SELECT queue.enqueue('q_bl', '{"two_d": 2}') AS td2 \gset
SELECT queue.complete_batch('q_bl', ARRAY[[:td1, :td2]]::bigint[], ARRAY[[1, 2]]::bigint[]);
SELECT queue.complete_batch('q_bl', ARRAY[:td1, :td2]::bigint[], ARRAY[[1], [2]]::bigint[]);
SELECT queue.purge('q_bl');

-- case: a batch whose key a live item holds returns the holder's id at that
-- position, new ids elsewhere, and a key repeated in the batch the first id
SELECT queue.enqueue('q_bl', '{"held": true}', dedup_key => 'k3') AS holder \gset
SELECT array_agg(id ORDER BY ord) AS ids
  FROM queue.enqueue_batch('q_bl', ARRAY['{"n":1}', '{"n":2}', '{"n":3}', '{"n":4}', '{"n":5}']::jsonb[],
                           dedup_keys => ARRAY['k1', 'k2', 'k3', NULL, 'k1']) WITH ORDINALITY AS b(id, ord) \gset
SELECT (:'ids'::bigint[])[3] = :holder AS held_key_gets_holder,
       (:'ids'::bigint[])[5] = (:'ids'::bigint[])[1] AS repeat_gets_first,
       (:'ids'::bigint[])[1] < (:'ids'::bigint[])[2] AND (:'ids'::bigint[])[2] < (:'ids'::bigint[])[4] AS new_in_order,
       (SELECT count(*) FROM queue.items WHERE queue_name = 'q_bl') AS live;
SELECT payload, dedup_key FROM queue.items WHERE queue_name = 'q_bl' AND payload <> '{}' ORDER BY item_id;

-- case: a batch of 100,000 keyed items, one of whose keys a live item
-- holds, takes about as long as one without (it once spent seconds
-- matching ids pairwise, in a loop that ignored cancels), and honours a
-- statement_timeout set to twice that
BEGIN;
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) AS items FROM queue.enqueue_batch('q_bl', array_fill('{}'::jsonb, ARRAY[100000]),
                                   dedup_keys => ARRAY(SELECT 'free' || g FROM generate_series(1, 100000) g));
SELECT clock_timestamp() - :'t0'::timestamptz AS plain \gset
ROLLBACK;
BEGIN;
SELECT set_config('statement_timeout',
                  (extract(epoch FROM 2 * :'plain'::interval + interval '2 s') * 1000)::int::text,
                  true) IS NOT NULL AS timeout_set;
SELECT clock_timestamp() AS t1 \gset
DO $$
BEGIN
    PERFORM count(*) FROM queue.enqueue_batch('q_bl', array_fill('{}'::jsonb, ARRAY[100000]),
                                              dedup_keys => ARRAY(SELECT 'big' || g FROM generate_series(1, 99999) g) || 'k3'::text);
EXCEPTION WHEN query_canceled THEN
    NULL;
END
$$;
SELECT clock_timestamp() - :'t1'::timestamptz < 2 * :'plain'::interval + interval '5 s' AS prompt;
ROLLBACK;

-- case: complete_batch of items held by several workers is a sign of life
-- of each of them
SELECT count(*) AS enqueued FROM queue.enqueue_batch('q_bl', array_fill('{}'::jsonb, ARRAY[6]));
SELECT array_agg(item_id) AS ids, array_agg(lease_token) AS toks FROM (
    SELECT * FROM queue.dequeue('q_bl', 'bl_w1', batch_size => 3)
    UNION ALL SELECT * FROM queue.dequeue('q_bl', 'bl_w2', batch_size => 2)
    UNION ALL SELECT * FROM queue.dequeue('q_bl', 'bl_w3', batch_size => 1)) d \gset
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker LIKE 'bl_w%';
SELECT queue.complete_batch('q_bl', :'ids'::bigint[], :'toks'::bigint[]);
SELECT worker, last_seen > now() - interval '1 min' AS seen FROM queue.worker_registry
 WHERE worker LIKE 'bl_w%' ORDER BY worker;

SELECT queue.drop_queue('q_bl', force => true);
