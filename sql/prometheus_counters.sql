-- Prometheus counters never fall back: what retention removes (processed
-- history, failed attempts, reviewed dead letters) stays counted in the
-- queue_*_total counters, whether or not snapshot_metrics ran since those
-- rows were written, and metrics_history's processed and failed still
-- count every completion and failure of their interval.
\set VERBOSITY terse

SELECT queue.create_queue('pc_q', max_attempts => 1, retention => '1 hour');

CREATE FUNCTION pg_temp.totals() RETURNS SETOF text LANGUAGE sql AS $$
    SELECT l FROM regexp_split_to_table(queue.prometheus(), E'\n') AS l
     WHERE l ~ '^queue_[a-z_]+_total\{queue="pc_q"' ORDER BY l
$$;
-- n items: the first `done` completed, the rest failed (dead letters, rejected)
CREATE FUNCTION pg_temp.work(n int, done int) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM queue.enqueue_batch('pc_q', array_fill('{}'::jsonb, ARRAY[n]));
    SELECT count(*) FROM (
        SELECT CASE WHEN ordinality <= done THEN queue.complete('pc_q', item_id, lease_token)::text
                    ELSE queue.fail('pc_q', item_id, lease_token, 'boom') END
          FROM queue.dequeue('pc_q', 'pc-w', batch_size => n) WITH ORDINALITY) x;
    SELECT count(queue.review('pc_q', item_id, 'rejected')) FROM queue.dead_letters
     WHERE queue_name = 'pc_q' AND review_status = 'new';
$$;
-- every row of the queue's history, failures and dead letters two hours older
CREATE FUNCTION pg_temp.age_rows() RETURNS void LANGUAGE sql AS $$
    UPDATE queue.item_done SET completed_at = completed_at - interval '2 hours',
                               claimed_at = claimed_at - interval '2 hours',
                               enqueued_at = enqueued_at - interval '2 hours'
     WHERE queue_name = 'pc_q';
    UPDATE queue.failure_log SET at = at - interval '2 hours' WHERE queue_name = 'pc_q';
    UPDATE queue.dead_letters SET dead_at = dead_at - interval '2 hours',
                                  reviewed_at = reviewed_at - interval '2 hours'
     WHERE queue_name = 'pc_q';
$$;
CREATE FUNCTION pg_temp.left_rows(OUT history bigint, OUT failures bigint, OUT dead_letters bigint)
LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM queue.item_done WHERE queue_name = 'pc_q'),
           (SELECT count(*) FROM queue.failure_log WHERE queue_name = 'pc_q'),
           (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'pc_q')
$$;

-- case: before any snapshot, the counters count the rows
SELECT pg_temp.work(3, 2);
SELECT * FROM pg_temp.totals();

-- case: retention removes them before any snapshot: the counters stay
SELECT pg_temp.age_rows();
SELECT purged > 0 AS purged FROM queue.sweep('pc_q');
SELECT * FROM pg_temp.left_rows();
SELECT * FROM pg_temp.totals();

-- case: the first snapshot keeps them; its row has NULL processed and failed
SELECT queue.snapshot_metrics() > 0 AS wrote;
SELECT * FROM pg_temp.totals();

-- case: rows written after a snapshot and removed by retention before the
-- next one stay counted, and the next snapshot's row counts them
UPDATE queue.metrics_totals SET counted_until = counted_until - interval '3 hours'
 WHERE queue_name = 'pc_q';
UPDATE queue.metrics_history SET taken_at = taken_at - interval '3 hours'
 WHERE queue_name = 'pc_q';
SELECT pg_temp.work(4, 3);
SELECT * FROM pg_temp.totals();
SELECT pg_temp.age_rows();
SELECT purged > 0 AS purged FROM queue.sweep('pc_q');
SELECT * FROM pg_temp.left_rows();
SELECT * FROM pg_temp.totals();
SELECT queue.snapshot_metrics() > 0 AS wrote;
SELECT * FROM pg_temp.totals();
SELECT processed, failed FROM queue.metrics_history WHERE queue_name = 'pc_q' ORDER BY taken_at;

-- case: without retention in between, each snapshot counts its interval
SELECT pg_temp.work(2, 1);
SELECT queue.snapshot_metrics() > 0 AS wrote;
SELECT * FROM pg_temp.totals();
SELECT processed, failed FROM queue.metrics_history WHERE queue_name = 'pc_q' ORDER BY taken_at;

SELECT queue.drop_queue('pc_q', force => true);
