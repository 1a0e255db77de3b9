-- Retention keeps up: the scheduled sweep (CALL queue.run_sweep()) removes
-- everything past retention, batch after batch with a commit between, not
-- one batch of queue._sweep_batch() rows per kind and minute.  Time passes
-- by writing old timestamps as superuser, not by sleeping.
\set VERBOSITY terse
-- Rows in a range partition of the history go with their partition, up to
-- one partition width after their queue's window (history_partitions
-- tests that).  From the DEFAULT partitions only and with partitions of a
-- minute, rows of two hours ago are in the DEFAULT partition, whose rows
-- retention deletes by the row.
DO $$
DECLARE
    v text;
BEGIN
    FOR v IN SELECT p.partition_name FROM queue._history_tables() t,
                    queue._history_partitions(t.table_name) p LOOP
        EXECUTE format('DROP TABLE queue.%I', v);
    END LOOP;
END
$$;
SET queue.history_partition_width = '1min';

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

-- case: with a breaker, a retention shorter than its window keeps the
-- history as long as the breaker needs it, greatest(retention,
-- breaker_window): successes of the last minutes still count against
-- failures in the breaker, and in processed_1h
SELECT queue.create_queue('rt_short', retention => '1 min', breaker_threshold => 0.5,
                          breaker_min_samples => 4, max_attempts => 9);
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at,
                             completed_at)
SELECT 'rt_short', 200000 + g, '{}', 1, now() - interval '6 min', now() - interval '6 min',
       now() - interval '5 min'
  FROM generate_series(1, 10) g;
-- (and their running count for the breaker, as complete() keeps it)
INSERT INTO queue.breaker_bucket (queue_name, bucket_start, stripe, succeeded)
VALUES ('rt_short', date_bin('10 s', now() - interval '5 min', 'epoch'), 0, 10);
CALL queue.run_sweep();
SELECT count(*) AS history_kept FROM queue.item_done WHERE queue_name = 'rt_short';
SELECT processed_1h FROM queue.stats('rt_short');
-- one success now and three failures: 3 of 14 outcomes failed (3 of 4
-- would trip the breaker)
SELECT count(*) FROM queue.enqueue_batch('rt_short', array_fill('{}'::jsonb, ARRAY[4]));
SELECT queue.complete('rt_short', item_id, lease_token) FROM queue.dequeue('rt_short', 'w1');
SELECT count(queue.fail('rt_short', item_id, lease_token, 'boom'))
  FROM queue.dequeue('rt_short', 'w1', batch_size => 3);
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'rt_short';
-- past the breaker window it goes
UPDATE queue.item_done SET completed_at = now() - interval '61 min' WHERE queue_name = 'rt_short';
CALL queue.run_sweep();
SELECT count(*) AS history_kept FROM queue.item_done WHERE queue_name = 'rt_short';

-- case: without a breaker, processed history and failed attempts go once
-- they are older than the queue's retention, however short
SELECT queue.create_queue('rt_tiny', retention => '1 s', max_attempts => 1);
SELECT count(*) FROM queue.enqueue_batch('rt_tiny', array_fill('{}'::jsonb, ARRAY[2]));
SELECT queue.complete('rt_tiny', item_id, lease_token) FROM queue.dequeue('rt_tiny', 'w1');
SELECT queue.fail('rt_tiny', item_id, lease_token, 'boom', permanent => true)
  FROM queue.dequeue('rt_tiny', 'w1');
UPDATE queue.item_done SET completed_at = completed_at - interval '10 s' WHERE queue_name = 'rt_tiny';
UPDATE queue.failure_log SET at = at - interval '10 s' WHERE queue_name = 'rt_tiny';
SELECT purged > 0 AS purged FROM queue.sweep('rt_tiny');
SELECT (SELECT count(*) FROM queue.history WHERE queue_name = 'rt_tiny') AS history,
       (SELECT count(*) FROM queue.failure_log WHERE queue_name = 'rt_tiny') AS failures;
SELECT queue.drop_queue('rt_tiny', force => true);

-- case: purged counts the rows retention removed, not the dedup keys
-- forgotten past the dedup_window (a completion kept in the history)
SELECT queue.create_queue('rt_dedup', dedup_window => '1 min');
SELECT queue.enqueue('rt_dedup', '{}', dedup_key => 'once') AS dk \gset
SELECT queue.complete('rt_dedup', item_id, lease_token) FROM queue.dequeue('rt_dedup', 'rt_bot');
UPDATE queue.item_done SET completed_at = completed_at - interval '2 min' WHERE queue_name = 'rt_dedup';
UPDATE queue.dedup_done SET completed_at = completed_at - interval '2 min' WHERE queue_name = 'rt_dedup';
SELECT purged FROM queue.sweep('rt_dedup');
SELECT count(*) AS history FROM queue.history WHERE queue_name = 'rt_dedup';
SELECT queue.enqueue('rt_dedup', '{}', dedup_key => 'once') <> :dk AS key_forgotten;
SELECT queue.drop_queue('rt_dedup', force => true);

SELECT queue.drop_queue('rt_busy', force => true);
SELECT queue.drop_queue('rt_short', force => true);
