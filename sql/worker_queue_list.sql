-- register_worker refuses a NULL in its queues list with 22004 naming the
-- element of queues (the call has no queue_name argument), with a hint,
-- and registers nothing.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.create_queue('q_wql');
SELECT queue.register_worker('wql-1', queues => ARRAY['q_wql', NULL]);
SELECT queue.register_worker('wql-1', queues => ARRAY[NULL]::text[]);
SELECT count(*) AS registered FROM queue.workers WHERE worker = 'wql-1';
-- a well-formed list is kept
SELECT queue.register_worker('wql-1', queues => ARRAY['q_wql']);
SELECT worker, queues FROM queue.workers WHERE worker = 'wql-1';
SELECT queue.drop_queue('q_wql');
DELETE FROM queue.worker_registry WHERE worker = 'wql-1';
