-- Argument shapes: a list argument is a one-dimensional array of
-- values; any other shape is 22023 naming the argument, and the rejected
-- call changes nothing.
\set VERBOSITY terse

SELECT queue.create_queue('as_q');

-- case: register_worker's labels and queues are lists: a two-dimensional
-- array is 22023 naming the argument, and registers nothing
SELECT queue.register_worker('as-w', labels => ARRAY[['gpu', 'eu']]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.register_worker('as-w', queues => ARRAY[['as_q']]);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS registered FROM queue.worker_registry WHERE worker = 'as-w';
-- the same lists, one-dimensional, are taken
SELECT queue.register_worker('as-w', queues => ARRAY['as_q'], labels => ARRAY['gpu', 'eu']);
SELECT queues, labels FROM queue.worker_registry WHERE worker = 'as-w';

-- case: complete_batch pairs an item_id with its lease_token: a NULL in
-- either list is 22004 naming the element, as complete() refuses a NULL
-- item_id or lease_token, and no pair of the batch is completed
SELECT count(*) AS enqueued FROM queue.enqueue_batch('as_q', array_fill('{}'::jsonb, ARRAY[2]));
SELECT array_agg(item_id ORDER BY item_id) AS ids, array_agg(lease_token ORDER BY item_id) AS toks
  FROM queue.dequeue('as_q', 'as-bot', batch_size => 2) \gset
SELECT queue.complete_batch('as_q', ARRAY[(:'ids'::bigint[])[1], NULL], :'toks'::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.complete_batch('as_q', :'ids'::bigint[], ARRAY[(:'toks'::bigint[])[1], NULL]);
\echo :LAST_ERROR_SQLSTATE
SELECT state, count(*) FROM queue.items WHERE queue_name = 'as_q' GROUP BY state;
SELECT count(*) AS history FROM queue.history WHERE queue_name = 'as_q';
-- the same pairs without the NULLs complete both
SELECT queue.complete_batch('as_q', :'ids'::bigint[], :'toks'::bigint[]);

SELECT queue.drop_queue('as_q', force => true);
