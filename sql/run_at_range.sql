-- A run_at far in the future: an item scheduled for any time a timestamp
-- can hold up to the last day of PostgreSQL's range is scheduled, counts
-- as scheduled everywhere and needs no worker; a run_at on that last day
-- (the instant a group member waiting behind its head is parked at, and
-- after it) is refused with 22023 like 'infinity', and changes nothing.
\set VERBOSITY terse
SET TIME ZONE 'UTC';

SELECT queue.create_queue('q_far', sla => '1 s');

-- case: scheduled for the year 9999 and for the day before the last: scheduled
SELECT queue.enqueue('q_far', '{"n": 1}', run_at => '9999-12-31 00:00:00+00') > 0 AS enqueued;
SELECT queue.enqueue('q_far', '{"n": 2}', run_at => '294276-12-30 23:59:59+00') > 0 AS enqueued;
SELECT queued, scheduled, processing, on_hold, oldest_queued_age FROM queue.stats('q_far');
SELECT queue.desired_workers('q_far') AS desired;

-- case: a run_at on the last day of the range is refused, at its first
-- instant and later, by enqueue, enqueue_batch and release
SELECT queue.enqueue('q_far', '{"n": 3}', run_at => '294276-12-31 00:00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue('q_far', '{"n": 4}', run_at => '294276-12-31 12:00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_far', ARRAY['{"n": 5}', '{"n": 6}']::jsonb[],
                           run_at => '294276-12-31 00:00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue('q_far', '{"n": 7}') AS n7 \gset
SELECT item_id = :n7 AS claimed, lease_token AS token FROM queue.dequeue('q_far', 'far_bot') \gset
SELECT :'claimed' AS claimed;
SELECT queue.release('q_far', :n7, :token, '294276-12-31 00:00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT state FROM queue.items WHERE queue_name = 'q_far' AND item_id = :n7;
SELECT queue.complete('q_far', :n7, :token) AS completed;

-- nothing of the refused calls was stored: two scheduled items, nothing
-- queued, no worker needed, and health says ok
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_far';
SELECT queued, scheduled, processing, on_hold, oldest_queued_age FROM queue.stats('q_far');
SELECT queue.desired_workers('q_far') AS desired;
SELECT status, reasons FROM queue.health('q_far');

SELECT queue.drop_queue('q_far', force => true);
