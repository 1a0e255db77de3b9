-- The worker registry stays bounded: worker names are at most 255 bytes
-- (54000 beyond, like every size bound), and sweep forgets workers that
-- have been offline for longer than the longest retention of any queue and
-- hold nothing.
\set VERBOSITY terse

SELECT queue.create_queue('wr_q', retention => '1 day');
SELECT count(*) FROM queue.enqueue_batch('wr_q', array_fill('{}'::jsonb, ARRAY[3]));

-- case: a name of 255 bytes is a worker; 256 bytes is 54000 everywhere
SELECT count(*) FROM queue.dequeue('wr_q', repeat('w', 255));
SELECT count(*) FROM queue.dequeue('wr_q', repeat('w', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT queue.register_worker(repeat('r', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT queue.heartbeat(repeat('h', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS long_names FROM queue.worker_registry WHERE length(worker) > 255;

-- case: sweep forgets a worker offline for longer than the longest
-- retention (7 days of the default queue here) that holds nothing; it keeps
-- one offline for less
SELECT queue.create_queue('wr_default');
SELECT queue.register_worker('wr-gone');
SELECT queue.register_worker('wr-recent');
UPDATE queue.worker_registry SET last_seen = now() - interval '8 days' WHERE worker = 'wr-gone';
UPDATE queue.worker_registry SET last_seen = now() - interval '6 days' WHERE worker = 'wr-recent';
SELECT count(*) > 0 FROM queue.sweep();
SELECT worker FROM queue.worker_registry WHERE worker LIKE 'wr-%' ORDER BY worker;

SELECT queue.drop_queue('wr_q', force => true);
SELECT queue.drop_queue('wr_default');
DELETE FROM queue.worker_registry WHERE worker LIKE 'wr-%' OR worker = repeat('w', 255);
