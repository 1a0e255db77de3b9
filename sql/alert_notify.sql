-- Alerts never make their caller fail: NOTIFY queue_alerts carries the
-- alert's id, queue and kind (listeners read the row), and what alerts and
-- pause reasons quote from error texts and worker lists is bounded.
\set VERBOSITY terse

-- case: failures with a 10 kB error text (a stack trace, as RPA bots send)
-- still trip the breaker; every fail() returns and is recorded
SELECT queue.create_queue('an_trace', breaker_threshold => 0.5, breaker_min_samples => 3,
                          max_attempts => 9);
SELECT count(*) FROM queue.enqueue_batch('an_trace', array_fill('{}'::jsonb, ARRAY[3]));
SELECT queue.fail('an_trace', item_id, lease_token,
                  'TimeoutError: ERP did not answer' || repeat(E'\n    at Bot.step (bot.js:42:7)', 350))
  FROM queue.dequeue('an_trace', 'w1', batch_size => 3);
SELECT count(*) AS failures_recorded FROM queue.failure_log WHERE queue_name = 'an_trace';
SELECT paused, breaker_state, length(pause_reason) <= 300 AS reason_bounded,
       pause_reason LIKE 'circuit breaker: 100% of 3 outcomes failed in 10 min, mostly TimeoutError: ERP did not answer at Bot.step%' AS reason_quotes_the_start
  FROM queue.queues WHERE queue_name = 'an_trace';
SELECT kind, length(message) <= 300 AS message_bounded,
       octet_length(details::text) < 1000 AS details_bounded
  FROM queue.alerts WHERE queue_name = 'an_trace' ORDER BY kind;
-- the item keeps the whole error text
SELECT min(length(last_error)) AS last_error_length FROM queue.items WHERE queue_name = 'an_trace';
-- later failures while the condition holds are recorded too
SELECT queue.resume('an_trace');
SELECT count(*) FROM queue.enqueue_batch('an_trace', array_fill('{}'::jsonb, ARRAY[3]));
UPDATE queue.item_live SET visible_at = now() WHERE queue_name = 'an_trace';
SELECT count(queue.fail('an_trace', item_id, lease_token, repeat('x', 10000)))
  FROM queue.dequeue('an_trace', 'w1', batch_size => 6);
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'an_trace';

-- case: a sweep whose worker_offline alert concerns 300 offline workers
-- (a scale-down) raises it and goes on; the message names a few of them
SELECT queue.create_queue('an_fleet', max_attempts => 9);
SELECT count(*) FROM queue.enqueue_batch('an_fleet', array_fill('{}'::jsonb, ARRAY[300]));
SELECT count(queue.fail('an_fleet', d.item_id, d.lease_token, 'scaled down'))
  FROM generate_series(1, 300) g
 CROSS JOIN LATERAL queue.dequeue('an_fleet', 'rpa-bot-of-the-night-shift-number-' || lpad(g::text, 4, '0')) d;
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h'
 WHERE worker LIKE 'rpa-bot-of-the-night-shift-%';
SELECT queue_name FROM queue.sweep() WHERE queue_name = 'an_fleet';
SELECT kind, length(message) <= 1000 AS message_bounded,
       message LIKE 'queue an_fleet: offline workers rpa-bot-of-the-night-shift-number-0001, %and 290 more held its items' AS names_ten,
       jsonb_array_length(details -> 'workers') <= 100 AS details_bounded,
       details -> 'offline' AS offline
  FROM queue.alerts WHERE queue_name = 'an_fleet' AND kind = 'worker_offline';

-- case: the excerpt alerts and pause reasons quote: whitespace folded, at
-- most 200 characters
SELECT length(queue._excerpt(repeat('y', 100000))) <= 200 AS excerpt_bounded,
       queue._excerpt(E'a\n\tb   c') AS excerpt_folds_whitespace,
       queue._excerpt(NULL) IS NULL AS excerpt_of_null;

SELECT queue.drop_queue('an_trace', force => true);
SELECT queue.drop_queue('an_fleet', force => true);
DELETE FROM queue.worker_registry WHERE worker LIKE 'rpa-bot-of-the-night-shift-%';
