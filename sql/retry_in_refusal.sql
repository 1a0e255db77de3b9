-- fail() refuses a negative retry_in with 22023 naming the argument and
-- the value it refuses, with a hint, as every other interval argument
-- does, and the refused call changes nothing: the lease stays current.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.create_queue('q_rir');
SELECT queue.enqueue('q_rir', '{}') AS i \gset
SELECT lease_token AS t FROM queue.dequeue('q_rir', 'rir-1') \gset
SELECT queue.fail('q_rir', :i, :t, 'boom', retry_in => '-5 s');
SELECT queue.fail('q_rir', :i, :t, 'boom', retry_in => '1 mon -31 days');
SELECT state, attempt, last_error FROM queue.items WHERE queue_name = 'q_rir';
SELECT queue.complete('q_rir', :i, :t);
SELECT queue.drop_queue('q_rir', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'rir-1';
