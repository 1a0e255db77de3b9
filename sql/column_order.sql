-- The relations of the contract list their columns in the contract's order
-- (what SELECT * shows): each starts with the columns the SPEC names, in
-- that order, and may carry more after them.
\set VERBOSITY terse

-- case: every listed relation starts with the contract's columns
WITH spec(rel, cols) AS (VALUES
  ('items', 'queue_name, item_id, state, priority, attempt, max_attempts, run_at, enqueued_at, lease_expires_at, worker, dedup_key, correlation_id, last_error, payload, progress'),
  ('history', 'queue_name, item_id, payload, result, attempts, worker, enqueued_at, claimed_at, completed_at, dedup_key, correlation_id'),
  ('dead_letters', 'item_id, queue_name, payload, progress, attempts, reason, last_error, error_code, errors, dead_at, review_status, replayed_as, dedup_key, correlation_id, enqueued_at'),
  ('workers', 'worker, status, last_seen, in_flight'),
  ('metrics_history', 'queue_name, taken_at, queued, scheduled, processing, on_hold, dead, oldest_queued_age, processed_1h, failed_1h, wait_p50, wait_p95, run_p50, run_p95, paused, processed, failed'),
  ('alerts', 'alert_id, queue_name, kind, message, details, raised_at, cleared_at'),
  ('events', 'event_id, queue_name, item_id, at, kind, worker, attempt, details'),
  ('limits', 'queue_name, limit_key, max_in_flight, rate, per, in_flight, claims_in_window')
), got AS (
  SELECT s.rel, s.cols,
         (SELECT string_agg(a.attname, ', ' ORDER BY a.attnum)
            FROM pg_attribute a
           WHERE a.attrelid = ('queue.' || s.rel)::regclass AND a.attnum > 0 AND NOT a.attisdropped
             AND a.attnum <= array_length(string_to_array(s.cols, ', '), 1)) AS lead_cols
    FROM spec s
)
SELECT rel, CASE WHEN lead_cols = cols THEN 'as listed' ELSE lead_cols END AS leading_columns
  FROM got ORDER BY rel;

-- case: the rows the tables hold read in that order too
SELECT queue.create_queue('q_cols', audit => 'all');
SELECT queue.enqueue('q_cols', '{"n": 1}') AS id \gset
SELECT lease_token AS t FROM queue.dequeue('q_cols', 'w1') \gset
SELECT queue.fail('q_cols', :id, :t, 'broken', 'E1', permanent => true);
SELECT (SELECT array_agg(k) FROM (SELECT json_object_keys(row_to_json(d)) AS k LIMIT 2) x) AS first_two
  FROM queue.dead_letters d WHERE queue_name = 'q_cols';
SELECT (SELECT array_agg(k) FROM (SELECT json_object_keys(row_to_json(e)) AS k LIMIT 2) x) AS first_two
  FROM queue.events e WHERE queue_name = 'q_cols' AND kind = 'enqueued';
SELECT (SELECT array_agg(k) FROM (SELECT json_object_keys(row_to_json(a)) AS k LIMIT 2) x) AS first_two
  FROM queue.alerts a WHERE queue_name = 'q_cols' AND kind = 'dead_letters';

SELECT queue.drop_queue('q_cols', force => true);
