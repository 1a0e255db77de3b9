-- Backoff in calendar units: a transient failure makes the item claimable
-- again at now() + least(backoff_max, backoff_base * backoff_factor^(attempt-1)),
-- evaluated as PostgreSQL evaluates it on intervals: a month of backoff is a
-- calendar month, a year a calendar year, as for fail's retry_in.
\set VERBOSITY terse

-- case: backoff_base '1 year' retries a calendar year later
SELECT queue.create_queue('q_bc_year', backoff_base => '1 year', backoff_factor => 1,
                          backoff_max => '10 years', backoff_jitter => 0);
SELECT queue.enqueue('q_bc_year', '{}') AS y \gset
SELECT lease_token AS t FROM queue.dequeue('q_bc_year', 'w1') \gset
BEGIN;
SELECT queue.fail('q_bc_year', :y, :t, 'see you next year');
SELECT state, run_at = now() + interval '1 year' AS a_year_later
  FROM queue.items WHERE queue_name = 'q_bc_year' AND item_id = :y;
COMMIT;

-- case: the second attempt backs off backoff_base * backoff_factor months
SELECT queue.create_queue('q_bc_month', backoff_base => '1 mon', backoff_factor => 2,
                          backoff_max => '10 years', backoff_jitter => 0);
SELECT queue.enqueue('q_bc_month', '{}') AS m \gset
SELECT lease_token AS t FROM queue.dequeue('q_bc_month', 'w1') \gset
SELECT queue.fail('q_bc_month', :m, :t, 'first', retry_in => '0 s');
SELECT attempt, lease_token AS t FROM queue.dequeue('q_bc_month', 'w1') \gset
SELECT :attempt AS attempt;
BEGIN;
SELECT queue.fail('q_bc_month', :m, :t, 'second');
SELECT state, run_at = now() + interval '2 mons' AS two_months_later
  FROM queue.items WHERE queue_name = 'q_bc_month' AND item_id = :m;
COMMIT;

-- case: a backoff past backoff_max waits exactly backoff_max
SELECT queue.create_queue('q_bc_cap', backoff_base => '1 mon', backoff_factor => 24,
                          backoff_max => '1 year', backoff_jitter => 0);
SELECT queue.enqueue('q_bc_cap', '{}') AS c \gset
SELECT lease_token AS t FROM queue.dequeue('q_bc_cap', 'w1') \gset
SELECT queue.fail('q_bc_cap', :c, :t, 'first', retry_in => '0 s');
SELECT lease_token AS t FROM queue.dequeue('q_bc_cap', 'w1') \gset
BEGIN;
SELECT queue.fail('q_bc_cap', :c, :t, 'second: 24 months, capped');
SELECT state, run_at = now() + interval '1 year' AS capped_at_a_year
  FROM queue.items WHERE queue_name = 'q_bc_cap' AND item_id = :c;
COMMIT;

SELECT queue.drop_queue('q_bc_year', force => true);
SELECT queue.drop_queue('q_bc_month', force => true);
SELECT queue.drop_queue('q_bc_cap', force => true);
