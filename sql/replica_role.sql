-- Settings written with session_replication_role = replica (a logical
-- replication apply worker, pg_restore --disable-triggers) still reach
-- every backend's cache of queue settings and worker gates.
\set VERBOSITY terse

SELECT queue.create_queue('q_rr');
SELECT count(*) AS enqueued FROM queue.enqueue_batch('q_rr', array_fill('{}'::jsonb, ARRAY[5]));
SELECT count(*) AS claimed FROM queue.dequeue('q_rr', 'rr_bot');

-- case: a pause applied as a replica stops the next dequeue
SET session_replication_role = replica;
SELECT queue.pause('q_rr', 'applied from the publisher');
RESET session_replication_role;
SELECT count(*) AS claimed_while_paused FROM queue.dequeue('q_rr', 'rr_bot');

-- case: a resume applied as a replica lets it claim again
SET session_replication_role = replica;
SELECT queue.resume('q_rr');
RESET session_replication_role;
SELECT count(*) AS claimed_after_resume FROM queue.dequeue('q_rr', 'rr_bot');

-- case: draining a worker as a replica reaches the worker cache
SET session_replication_role = replica;
SELECT queue.drain_worker('rr_bot');
RESET session_replication_role;
SELECT count(*) AS claimed_while_draining FROM queue.dequeue('q_rr', 'rr_bot');

-- case: every trigger that keeps the caches fresh fires in replica mode too
SELECT count(*) FILTER (WHERE tgenabled <> 'A') AS not_always
  FROM pg_trigger WHERE tgfoid = 'queue._invalidate_cache'::regproc;

SELECT queue.drop_queue('q_rr', force => true);
