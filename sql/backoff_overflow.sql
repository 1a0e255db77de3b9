-- Backoff at the edges of floating point: the delay after a transient
-- failure is least(backoff_max, backoff_base * backoff_factor^(attempt-1)),
-- also when backoff_factor^(attempt-1) is too large for a float8 (a large
-- factor, or many attempts).
\set VERBOSITY terse

-- case: backoff_base 0 retries at once on every attempt, however large
-- backoff_factor^(attempt-1) grows (0 times anything is 0, not backoff_max)
SELECT queue.create_queue('q_bo_zero', backoff_base => '0', backoff_factor => 1e300,
                          backoff_jitter => 0, max_attempts => 5);
SELECT queue.enqueue('q_bo_zero', '{}') AS z \gset
SELECT lease_token AS t FROM queue.dequeue('q_bo_zero', 'w1') \gset
SELECT queue.fail('q_bo_zero', :z, :t, 'first');
SELECT attempt, lease_token AS t FROM queue.dequeue('q_bo_zero', 'w1') \gset
SELECT :attempt AS attempt;
SELECT queue.fail('q_bo_zero', :z, :t, 'second');
SELECT attempt, lease_token AS t FROM queue.dequeue('q_bo_zero', 'w1') \gset
SELECT :attempt AS attempt;
BEGIN;
SELECT queue.fail('q_bo_zero', :z, :t, 'third: 1e300^2 overflows');
SELECT state, run_at = now() AS at_once
  FROM queue.items WHERE queue_name = 'q_bo_zero' AND item_id = :z;
COMMIT;
SELECT attempt FROM queue.dequeue('q_bo_zero', 'w1');

-- case: a positive backoff_base whose product overflows is capped at backoff_max
SELECT queue.create_queue('q_bo_cap', backoff_base => '1 s', backoff_factor => 1e300,
                          backoff_max => '2 min', backoff_jitter => 0, max_attempts => 5);
SELECT queue.enqueue('q_bo_cap', '{}') AS c \gset
SELECT lease_token AS t FROM queue.dequeue('q_bo_cap', 'w1') \gset
SELECT queue.fail('q_bo_cap', :c, :t, 'first', retry_in => '0 s');
SELECT lease_token AS t FROM queue.dequeue('q_bo_cap', 'w1') \gset
SELECT queue.fail('q_bo_cap', :c, :t, 'second', retry_in => '0 s');
SELECT attempt, lease_token AS t FROM queue.dequeue('q_bo_cap', 'w1') \gset
SELECT :attempt AS attempt;
BEGIN;
SELECT queue.fail('q_bo_cap', :c, :t, 'third: capped');
SELECT state, run_at = now() + interval '2 min' AS capped
  FROM queue.items WHERE queue_name = 'q_bo_cap' AND item_id = :c;
COMMIT;

SELECT queue.drop_queue('q_bo_zero', force => true);
SELECT queue.drop_queue('q_bo_cap', force => true);
