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

SELECT queue.drop_queue('as_q', force => true);
