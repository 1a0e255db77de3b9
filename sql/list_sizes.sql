-- List sizes: a list of texts stored with an item or a worker (enqueue's
-- and enqueue_batch's requires, register_worker's labels and queues) is
-- bounded as a whole by the 64 kB of a text, counted as the bytes of its
-- texts: a list of one 64 kB label is at the bound and kept, one byte
-- more is 54000 naming the argument and its size, and nothing is stored.
\set VERBOSITY terse

SELECT queue.create_queue('ls_q');

-- case: requires of one label of exactly 64 kB is kept, in enqueue and
-- enqueue_batch; one byte more is 54000 saying how many bytes it has
SELECT queue.enqueue('ls_q', '{}', requires => ARRAY[repeat('r', 65536)]) > 0 AS enqueued;
SELECT count(*) AS enqueued FROM queue.enqueue_batch('ls_q', ARRAY['{}']::jsonb[], requires => ARRAY[repeat('r', 65536)]);
SELECT queue.enqueue('ls_q', '{}', requires => ARRAY[repeat('r', 65537)]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('ls_q', ARRAY['{}']::jsonb[], requires => ARRAY[repeat('r', 65537)]);
\echo :LAST_ERROR_SQLSTATE
-- as a whole: two labels of 40,000 bytes are 80,000
SELECT queue.enqueue('ls_q', '{}', requires => ARRAY[repeat('a', 40000), repeat('b', 40000)]);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS live, max(octet_length(requires[1])) AS label_bytes
  FROM queue.items WHERE queue_name = 'ls_q';

-- case: register_worker's labels likewise
SELECT queue.register_worker('ls-w1', labels => ARRAY[repeat('l', 65536)]);
SELECT octet_length(labels[1]) AS label_bytes FROM queue.worker_registry WHERE worker = 'ls-w1';
SELECT queue.register_worker('ls-w2', labels => ARRAY[repeat('l', 65537)]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.register_worker('ls-w2', labels => ARRAY[repeat('a', 40000), repeat('b', 40000)]);
\echo :LAST_ERROR_SQLSTATE

-- case: and its queues: 16,384 names of 4 bytes (65,536 bytes) are kept,
-- 16,385 of them (65,540 bytes) are 54000
SELECT queue.register_worker('ls-w3', queues => array_fill('ls_q'::text, ARRAY[16384]));
SELECT cardinality(queues) AS queues FROM queue.worker_registry WHERE worker = 'ls-w3';
SELECT queue.register_worker('ls-w2', queues => array_fill('ls_q'::text, ARRAY[16385]));
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS refused_registered FROM queue.worker_registry WHERE worker = 'ls-w2';

SELECT queue.drop_queue('ls_q', force => true);
