-- The retrying event says when the retry comes: details.retry_in_seconds
-- is the wait from the failure to the item's new run_at, also for a
-- retry_in or a backoff in calendar units (a year is 365 or 366 days,
-- never 360; a month 28 to 31 days).
\set VERBOSITY terse

SELECT queue.create_queue('q_res', backoff_base => '1 year', backoff_factor => 1,
                          backoff_max => '10 years', backoff_jitter => 0);

-- case: fail's retry_in of a calendar year: the event says the year's seconds
SELECT queue.enqueue('q_res', '{"n": 1}') AS a \gset
SELECT lease_token AS t FROM queue.dequeue('q_res', 'w1') \gset
SELECT queue.fail('q_res', :a, :t, 'back next year', retry_in => '1 year');
SELECT e.details ->> 'retry_in_seconds' = to_char(extract(epoch FROM i.run_at - e.at), 'FM999999999990.000')
       AS says_the_wait,
       i.run_at = e.at + interval '1 year' AS a_year_later
  FROM queue.events e JOIN queue.items i USING (queue_name, item_id)
 WHERE e.queue_name = 'q_res' AND e.item_id = :a AND e.kind = 'retrying';

-- case: a backoff of a calendar year: the event says the year's seconds
SELECT queue.enqueue('q_res', '{"n": 2}') AS b \gset
SELECT lease_token AS t FROM queue.dequeue('q_res', 'w1') \gset
SELECT queue.fail('q_res', :b, :t, 'backing off a year');
SELECT e.details ->> 'retry_in_seconds' = to_char(extract(epoch FROM i.run_at - e.at), 'FM999999999990.000')
       AS says_the_wait,
       i.run_at = e.at + interval '1 year' AS a_year_later
  FROM queue.events e JOIN queue.items i USING (queue_name, item_id)
 WHERE e.queue_name = 'q_res' AND e.item_id = :b AND e.kind = 'retrying';

-- case: a wait in seconds is said to the millisecond, as before
SELECT queue.enqueue('q_res', '{"n": 3}') AS c \gset
SELECT lease_token AS t FROM queue.dequeue('q_res', 'w1') \gset
SELECT queue.fail('q_res', :c, :t, 'soon', retry_in => '2.5 s');
SELECT e.details ->> 'retry_in_seconds' AS retry_in_seconds
  FROM queue.events e
 WHERE e.queue_name = 'q_res' AND e.item_id = :c AND e.kind = 'retrying';

SELECT queue.drop_queue('q_res', force => true);
