-- Failures and retries: transient failures with backoff, retry_in, attempts spent,
-- permanent failures, the events recorded per failure.
\set VERBOSITY terse

SELECT queue.create_queue('q_retry', max_attempts => 3, backoff_jitter => 0);

-- case: a transient failure retries after backoff_base (5 s) on the first attempt
SELECT queue.enqueue('q_retry', '{"r": 1}') AS r1 \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry', 'w1') \gset
BEGIN;
SELECT queue.fail('q_retry', :r1, :t, 'ERP timed out', error_code => 'ERP_TIMEOUT');
SELECT state, attempt, last_error,
       lease_expires_at IS NULL AS no_lease, run_at = now() + interval '5 s' AS backoff_5s
  FROM queue.items WHERE queue_name = 'q_retry' AND item_id = :r1;
COMMIT;
SELECT count(*) AS claimable FROM queue.dequeue('q_retry', 'w1');

-- case: the failed lease token is no longer current
SELECT queue.fail('q_retry', :r1, :t, 'again') IS NULL AS stale;
SELECT queue.complete('q_retry', :r1, :t);

-- case: retry_in is used exactly; '0 s' makes the item claimable at once
SELECT queue.enqueue('q_retry', '{"r": 2}') AS r2 \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry', 'w1') \gset
SELECT queue.fail('q_retry', :r2, :t, 'first', retry_in => '0 s');
SELECT state FROM queue.items WHERE queue_name = 'q_retry' AND item_id = :r2;

-- case: the second attempt backs off base * factor = 15 s
SELECT item_id = :r2 AS same_item, attempt, lease_token AS t FROM queue.dequeue('q_retry', 'w1') \gset
SELECT :'same_item' AS same_item, :attempt AS attempt;
BEGIN;
SELECT queue.fail('q_retry', :r2, :t, 'second');
SELECT state, attempt, last_error, run_at = now() + interval '15 s' AS backoff_15s
  FROM queue.items WHERE queue_name = 'q_retry' AND item_id = :r2;
COMMIT;

-- case: retry_in overrides the backoff exactly
SELECT queue.enqueue('q_retry', '{"r": 3}') AS r3 \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry', 'w1') \gset
BEGIN;
SELECT queue.fail('q_retry', :r3, :t, 'later please', retry_in => '90 s');
SELECT state, run_at = now() + interval '90 s' AS retry_90s
  FROM queue.items WHERE queue_name = 'q_retry' AND item_id = :r3;
COMMIT;

-- case: retry_in is used exactly also in calendar units: a month is a
-- calendar month, a day a calendar day in the session's time zone
SELECT queue.enqueue('q_retry', '{"r": 31}') AS r31 \gset
SELECT queue.enqueue('q_retry', '{"r": 32}') AS r32 \gset
SELECT array_agg(item_id ORDER BY item_id) AS mids, array_agg(lease_token ORDER BY item_id) AS mtoks
  FROM queue.dequeue('q_retry', 'w1', 2) \gset
BEGIN;
SET LOCAL timezone = 'America/New_York';
SELECT queue.fail('q_retry', (:'mids'::bigint[])[1], (:'mtoks'::bigint[])[1], 'next month',
                  retry_in => '1 mon');
SELECT queue.fail('q_retry', (:'mids'::bigint[])[2], (:'mtoks'::bigint[])[2], 'see you',
                  retry_in => '1 mon 3 days 2 h');
SELECT item_id = :r31 AS first, run_at = now() + CASE WHEN item_id = :r31 THEN interval '1 mon'
                                                      ELSE interval '1 mon 3 days 2 h' END AS exact
  FROM queue.items WHERE queue_name = 'q_retry' AND item_id IN (:r31, :r32) ORDER BY item_id;
COMMIT;
SELECT queue.cancel('q_retry', :r31), queue.cancel('q_retry', :r32);

-- case: the last attempt's transient failure makes a dead letter (max_attempts)
SELECT queue.enqueue('q_retry', '{"r": 4}', correlation_id => 'c-4') AS r4 \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry', 'w1') \gset
SELECT queue.fail('q_retry', :r4, :t, 'e1', error_code => 'E1', retry_in => '0 s');
SELECT attempt, lease_token AS t FROM queue.dequeue('q_retry', 'w2') \gset
SELECT queue.fail('q_retry', :r4, :t, 'e2', error_code => 'E2', retry_in => '0 s');
SELECT attempt, lease_token AS t FROM queue.dequeue('q_retry', 'w3') \gset
SELECT :attempt AS last_attempt;
SELECT queue.fail('q_retry', :r4, :t, 'e3', error_code => 'E3', retry_in => '0 s');
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_retry' AND item_id = :r4;
SELECT reason, attempts, last_error, error_code, correlation_id, payload, review_status
  FROM queue.dead_letters WHERE queue_name = 'q_retry' AND item_id = :r4;
SELECT e->>'attempt' AS attempt, e->>'worker' AS worker, e->>'error' AS error,
       e->>'error_code' AS error_code, (e->>'at')::timestamptz <= now() AS at_past
  FROM queue.dead_letters d, jsonb_array_elements(d.errors) AS e
 WHERE d.queue_name = 'q_retry' AND d.item_id = :r4
 ORDER BY (e->>'attempt')::int;
SELECT state FROM queue.item('q_retry', :r4);

-- case: a permanent failure makes a dead letter at once
SELECT queue.enqueue('q_retry', '{"r": 5}') AS r5 \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry', 'w1') \gset
SELECT queue.fail('q_retry', :r5, :t, 'bad invoice', error_code => 'BAD_INPUT', permanent => true);
SELECT reason, attempts, last_error, error_code, jsonb_array_length(errors) AS errors
  FROM queue.dead_letters WHERE queue_name = 'q_retry' AND item_id = :r5;

-- case: an item's own max_attempts overrides the queue's
SELECT queue.enqueue('q_retry', '{"r": 6}', max_attempts => 1) AS r6 \gset
SELECT lease_token AS t, max_attempts FROM queue.dequeue('q_retry', 'w1') \gset
SELECT :max_attempts AS max_attempts, queue.fail('q_retry', :r6, :t, 'only once');
SELECT reason, attempts FROM queue.dead_letters WHERE queue_name = 'q_retry' AND item_id = :r6;

-- case: each failure records failed, then retrying or dead_lettered
SELECT kind FROM queue.events
 WHERE queue_name = 'q_retry' AND item_id = :r4 AND kind IN ('failed', 'retrying', 'dead_lettered')
 ORDER BY event_id;
SELECT kind FROM queue.events
 WHERE queue_name = 'q_retry' AND item_id = :r5 AND kind IN ('failed', 'retrying', 'dead_lettered')
 ORDER BY event_id;

-- case: progress survives a retry
SELECT queue.enqueue('q_retry', '{"r": 7}') AS r7 \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry', 'w1') \gset
SELECT queue.checkpoint('q_retry', :r7, :t, '{"done": ["a", "b"]}');
SELECT queue.fail('q_retry', :r7, :t, 'half way', retry_in => '0 s');
SELECT item_id = :r7 AS same_item, attempt, progress FROM queue.dequeue('q_retry', 'w2');

-- case: backoff is capped at backoff_max
SELECT queue.create_queue('q_retry_cap', backoff_base => '10 s', backoff_factor => 100,
       backoff_max => '1 min', backoff_jitter => 0, max_attempts => 5);
SELECT queue.enqueue('q_retry_cap', '{}') AS c1 \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry_cap', 'w1') \gset
SELECT queue.fail('q_retry_cap', :c1, :t, 'one', retry_in => '0 s');
SELECT lease_token AS t FROM queue.dequeue('q_retry_cap', 'w1') \gset
BEGIN;
SELECT queue.fail('q_retry_cap', :c1, :t, 'two');
SELECT run_at = now() + interval '1 min' AS capped_1min
  FROM queue.items WHERE queue_name = 'q_retry_cap' AND item_id = :c1;
COMMIT;

-- case: jitter spreads the backoff within +-backoff_jitter; retry_in gets no jitter
SELECT queue.create_queue('q_jitter', backoff_base => '100 s', backoff_jitter => 0.5);
SELECT count(*) FROM queue.enqueue_batch('q_jitter', array_fill('{}'::jsonb, ARRAY[20]));
SELECT array_agg(item_id) AS jids, array_agg(lease_token) AS jtoks
  FROM queue.dequeue('q_jitter', 'w1', batch_size => 20) \gset
BEGIN;
SELECT count(*) FILTER (WHERE queue.fail('q_jitter', id, tok, 'spread') = 'retrying') AS retrying
  FROM unnest(:'jids'::bigint[], :'jtoks'::bigint[]) AS u(id, tok);
SELECT bool_and(run_at BETWEEN now() + interval '50 s' AND now() + interval '150 s') AS within_bounds,
       count(DISTINCT run_at) > 1 AS spread
  FROM queue.items WHERE queue_name = 'q_jitter';
COMMIT;
SELECT queue.enqueue('q_jitter', '{"exact": true}', priority => 0) AS j \gset
SELECT lease_token AS t FROM queue.dequeue('q_jitter', 'w1') \gset
BEGIN;
SELECT queue.fail('q_jitter', :j, :t, 'exact', retry_in => '100 s');
SELECT run_at = now() + interval '100 s' AS exact
  FROM queue.items WHERE queue_name = 'q_jitter' AND item_id = :j;
COMMIT;

-- case: the default settings back off 5 s +-10 % on the first failure
SELECT queue.create_queue('q_retry_default');
SELECT queue.enqueue('q_retry_default', '{}') AS rd \gset
SELECT lease_token AS t FROM queue.dequeue('q_retry_default', 'w1') \gset
BEGIN;
SELECT queue.fail('q_retry_default', :rd, :t, 'default backoff');
SELECT run_at BETWEEN now() + interval '4.5 s' AND now() + interval '5.5 s' AS backoff_5s_jittered
  FROM queue.items WHERE queue_name = 'q_retry_default' AND item_id = :rd;
COMMIT;
SELECT queue.drop_queue('q_retry_default', force => true);

SELECT queue.drop_queue('q_jitter', force => true);
SELECT queue.drop_queue('q_retry_cap', force => true);
SELECT queue.drop_queue('q_retry', force => true);
