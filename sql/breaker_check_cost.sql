-- The breaker's check after a failure reads a bounded number of rows,
-- whatever the number of outcomes in its window: it sums running counts,
-- not the history and the failure log of the whole window.
\set VERBOSITY terse

SELECT queue.create_queue('bc_busy', breaker_threshold => 0.5, breaker_min_samples => 10,
                          breaker_window => '10 min', max_attempts => 9, backoff_base => '0 s');

-- 50,000 successes in the window, by the API, 1,000 a transaction
\set ECHO none
\o /dev/null
SELECT format($s$SELECT queue.enqueue_batch('bc_busy', array_fill('{}'::jsonb, ARRAY[1000]))$s$),
       format($s$SELECT queue.complete_batch('bc_busy', array_agg(item_id), array_agg(lease_token))
                   FROM queue.dequeue('bc_busy', 'w1', batch_size => 1000)$s$)
  FROM generate_series(1, 50) \gexec
\o
\set ECHO all
SELECT count(*) AS in_window FROM queue.item_done WHERE queue_name = 'bc_busy';
SELECT count(*) FROM queue.enqueue_batch('bc_busy', array_fill('{}'::jsonb, ARRAY[3]));
CREATE TEMP TABLE bc_held AS SELECT item_id, lease_token FROM queue.dequeue('bc_busy', 'w1', batch_size => 3);

-- Rows (sequential scans) and index entries the extension's tables gave
-- the calls of this transaction, so far.
CREATE FUNCTION pg_temp.rows_read() RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint
      FROM pg_class c
     WHERE c.relnamespace = 'queue'::regnamespace AND c.relkind IN ('r', 'i')
$$;

-- case: a failure's breaker check reads a bounded number of rows with
-- 50,000 successes in the window
BEGIN;
SELECT pg_temp.rows_read() AS before \gset
SELECT queue.fail('bc_busy', item_id, lease_token, 'ERP down', 'ERP_DOWN')
  FROM bc_held ORDER BY item_id LIMIT 1;
SELECT pg_temp.rows_read() - :before AS rows_read \gset
SELECT :rows_read < 500 AS rows_read_bounded;
SELECT CASE WHEN :rows_read >= 500 THEN :rows_read END AS rows_read_if_unbounded;
COMMIT;

-- case: the check still judges the whole window: 50,000 successes and 2
-- more failures stay far below the threshold
SELECT queue.fail('bc_busy', item_id, lease_token, 'ERP down', 'ERP_DOWN')
  FROM bc_held ORDER BY item_id OFFSET 1;
SELECT breaker_state FROM queue.queues WHERE queue_name = 'bc_busy';
SELECT failed, outcomes FROM queue._breaker_outcomes('bc_busy', now() - interval '10 min', 0);
SELECT status, reasons FROM queue.health('bc_busy');

SELECT queue.drop_queue('bc_busy', force => true) IS NOT NULL AS dropped;
