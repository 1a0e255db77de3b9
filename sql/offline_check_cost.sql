-- sweep's worker_offline check reads only the workers that could have
-- gone offline since the queue's previous check (their last sign of life
-- fell in between) and the workers its alert named then, not every worker
-- ever seen.
\set VERBOSITY terse

SELECT queue.create_queue('oc_q', max_attempts => 9);
SELECT count(*) FROM queue.enqueue_batch('oc_q', array_fill('{}'::jsonb, ARRAY[3]));

-- 2,000 workers gone for hours, which never touched the queue
INSERT INTO queue.worker_registry (worker, last_seen, registered_at)
SELECT 'oc-gone-' || g, now() - interval '20 h', now() - interval '2 days'
  FROM generate_series(1, 2000) g;

-- Rows (sequential scans) and index entries of the worker registry the
-- calls of this transaction read, so far.
CREATE FUNCTION pg_temp.registry_rows_read() RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint
      FROM pg_class c
     WHERE c.oid = 'queue.worker_registry'::regclass
        OR c.oid IN (SELECT i.indexrelid FROM pg_index i
                      WHERE i.indrelid = 'queue.worker_registry'::regclass)
$$;

-- the queue's first check reads them all once
SELECT queue._sweep_alerts('oc_q');

-- case: the next check reads a bounded number of registry rows
BEGIN;
SELECT pg_temp.registry_rows_read() AS before \gset
SELECT queue._sweep_alerts('oc_q');
SELECT pg_temp.registry_rows_read() - :before AS rows_read \gset
SELECT :rows_read < 100 AS rows_read_bounded;
SELECT CASE WHEN :rows_read >= 100 THEN :rows_read END AS rows_read_if_unbounded;
COMMIT;

-- case: a worker that goes offline after a check, holding an item, is
-- named by the next check; back online, the check after clears the alert
SET queue.worker_offline_after = '1 s';
SELECT count(*) FROM queue.dequeue('oc_q', 'oc-bot');
SELECT queue._sweep_alerts('oc_q');
SELECT count(*) AS offline_alerts FROM queue.alerts
 WHERE queue_name = 'oc_q' AND kind = 'worker_offline' AND cleared_at IS NULL;
SELECT pg_sleep(1.5);
SELECT queue._sweep_alerts('oc_q');
SELECT message, details FROM queue.alerts
 WHERE queue_name = 'oc_q' AND kind = 'worker_offline' AND cleared_at IS NULL;
SELECT queue.heartbeat('oc-bot') >= 0 AS alive;
SELECT queue._sweep_alerts('oc_q');
SELECT count(*) AS offline_alerts FROM queue.alerts
 WHERE queue_name = 'oc_q' AND kind = 'worker_offline' AND cleared_at IS NULL;
RESET queue.worker_offline_after;

SELECT queue.drop_queue('oc_q', force => true) IS NOT NULL AS dropped;
DELETE FROM queue.worker_registry WHERE worker LIKE 'oc-%';
