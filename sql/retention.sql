-- Retention keeps up: the scheduled sweep (CALL queue.run_sweep()) removes
-- everything past retention, batch after batch with a commit between, not
-- one batch of queue._sweep_batch() rows per kind and minute.  Time passes
-- by writing old timestamps as superuser, not by sleeping.
\set VERBOSITY terse

SELECT queue.create_queue('rt_busy', retention => '1 h', dedup_window => '10 min');

-- case: more than two batches of each kind past retention, and a few rows
-- still inside it
SELECT queue._sweep_batch() AS batch;
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at,
                             completed_at, dedup_key)
SELECT 'rt_busy', g, '{}', 1, now() - interval '3 h', now() - interval '3 h',
       now() - interval '2 h' + CASE WHEN g <= 5 THEN interval '2 h' ELSE interval '0' END, 'k' || g
  FROM generate_series(1, 25005) g;
INSERT INTO queue.dedup_done (queue_name, dedup_key, item_id, completed_at)
SELECT queue_name, dedup_key, item_id, completed_at FROM queue.item_done WHERE queue_name = 'rt_busy';
INSERT INTO queue.events (queue_name, item_id, kind, at)
SELECT queue_name, item_id, 'completed', completed_at FROM queue.item_done WHERE queue_name = 'rt_busy';
INSERT INTO queue.failure_log (queue_name, item_id, kind, at)
SELECT queue_name, item_id, 'transient', completed_at FROM queue.item_done WHERE queue_name = 'rt_busy';

CALL queue.run_sweep();
SELECT (SELECT count(*) FROM queue.item_done WHERE queue_name = 'rt_busy') AS history,
       (SELECT count(*) FROM queue.dedup_done WHERE queue_name = 'rt_busy') AS dedup_keys,
       (SELECT count(*) FROM queue.events WHERE queue_name = 'rt_busy') AS events,
       (SELECT count(*) FROM queue.failure_log WHERE queue_name = 'rt_busy') AS failures;

-- case: sweep() reports what retention removed in purged; apply_retention()
-- removes one batch of each kind and returns how many, 0 when nothing is due
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, completed_at)
SELECT 'rt_busy', 100000 + g, '{}', 1, now() - interval '3 h', now() - interval '2 h'
  FROM generate_series(1, 12) g;
SELECT purged FROM queue.sweep('rt_busy');
SELECT queue.apply_retention('rt_busy') AS removed;

SELECT queue.drop_queue('rt_busy', force => true);
