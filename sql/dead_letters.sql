-- Dead letters: the view, cancel, expiry, replay, replay_all, review.
\set VERBOSITY terse

SELECT queue.create_queue('q_dlq', max_attempts => 2);

-- case: a permanent failure shows every documented dead letter column
SELECT queue.enqueue('q_dlq', '{"v": 1}', dedup_key => 'dk-1', correlation_id => 'corr-1') AS d1 \gset
SELECT lease_token AS t FROM queue.dequeue('q_dlq', 'bot-7') \gset
SELECT queue.checkpoint('q_dlq', :d1, :t, '{"step": 2}');
SELECT queue.fail('q_dlq', :d1, :t, 'vendor unknown', error_code => 'NO_VENDOR', permanent => true);
SELECT item_id = :d1 AS same_item, queue_name, payload, progress, attempts, reason, last_error,
       error_code, jsonb_array_length(errors) AS n_errors, dead_at <= now() AS dead_past,
       review_status, replayed_as, dedup_key, correlation_id, enqueued_at <= dead_at AS enqueued_before
  FROM queue.dead_letters WHERE queue_name = 'q_dlq' AND item_id = :d1;
SELECT e->>'attempt' AS attempt, e->>'worker' AS worker, e->>'error' AS error, e->>'error_code' AS error_code
  FROM queue.dead_letters d, jsonb_array_elements(d.errors) e
 WHERE d.queue_name = 'q_dlq' AND d.item_id = :d1;

-- case: replay makes a new live item with attempts reset, the same dedup_key,
-- correlation_id and progress; the dead letter becomes resolved
SELECT queue.replay('q_dlq', :d1) AS r1 \gset
SELECT :r1 <> :d1 AS new_id;
SELECT state, payload, dedup_key, correlation_id, progress
  FROM queue.items WHERE queue_name = 'q_dlq' AND item_id = :r1;
SELECT review_status, replayed_as = :r1 AS replayed_as_new
  FROM queue.dead_letters WHERE queue_name = 'q_dlq' AND item_id = :d1;
SELECT item_id = :r1 AS got_replay, attempt, max_attempts, progress
  FROM queue.dequeue('q_dlq', 'bot-8');
SELECT state FROM queue.item('q_dlq', :d1);

-- case: replaying it again is an error (55000) and creates nothing
-- (the message names item ids, so only the SQLSTATE is printed)
SELECT count(*) AS items_before FROM queue.items WHERE queue_name = 'q_dlq';
\set VERBOSITY sqlstate
SELECT queue.replay('q_dlq', :d1);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
\set VERBOSITY sqlstate
SELECT queue.replay('q_dlq', :d1);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT count(*) AS items_after FROM queue.items WHERE queue_name = 'q_dlq';

-- case: replay with a corrected payload
SELECT queue.enqueue('q_dlq', '{"amount": "12,50"}') AS d2 \gset
SELECT lease_token AS t FROM queue.dequeue('q_dlq', 'bot-7') \gset
SELECT queue.fail('q_dlq', :d2, :t, 'bad amount', permanent => true);
SELECT queue.replay('q_dlq', :d2, payload => '{"amount": 12.50}') AS r2 \gset
SELECT payload FROM queue.items WHERE queue_name = 'q_dlq' AND item_id = :r2;
SELECT payload AS original_payload FROM queue.dead_letters WHERE queue_name = 'q_dlq' AND item_id = :d2;

-- case: replay whose dedup_key is held by a live item returns that item's id
SELECT queue.enqueue('q_dlq', '{"v": 3}', dedup_key => 'dk-3') AS d3 \gset
SELECT queue.cancel('q_dlq', :d3);
SELECT queue.enqueue('q_dlq', '{"v": "3 again"}', dedup_key => 'dk-3') AS d3_live \gset
SELECT queue.replay('q_dlq', :d3) = :d3_live AS returns_live_item;
SELECT replayed_as = :d3_live AS recorded, review_status
  FROM queue.dead_letters WHERE queue_name = 'q_dlq' AND item_id = :d3;
SELECT count(*) AS live_with_key FROM queue.items WHERE queue_name = 'q_dlq' AND dedup_key = 'dk-3';

-- case: replay of an unknown item returns NULL
SELECT queue.replay('q_dlq', -1) IS NULL AS unknown_null;

-- case: cancel makes a dead letter with reason cancelled (queued or on hold);
-- a processing item is only marked (see cancel_running), and its complete wins
SELECT queue.enqueue('q_dlq', '{"c": 1}') AS c1 \gset
SELECT queue.enqueue('q_dlq', '{"c": 2}') AS c2 \gset
SELECT queue.hold('q_dlq', :c2);
SELECT queue.cancel('q_dlq', :c1, 'not needed');
SELECT queue.cancel('q_dlq', :c2);
SELECT item_id = :c1 AS is_c1, reason
  FROM queue.dead_letters WHERE queue_name = 'q_dlq' AND item_id IN (:c1, :c2) ORDER BY item_id;
SELECT queue.cancel('q_dlq', :c1) AS cancel_dead_again;
SELECT queue.cancel('q_dlq', -1) AS cancel_unknown;
SELECT queue.enqueue('q_dlq', '{"c": 3}', priority => 0) AS c3 \gset
SELECT lease_token AS t FROM queue.dequeue('q_dlq', 'bot-7') \gset
SELECT queue.cancel('q_dlq', :c3) AS cancel_processing;
SELECT state FROM queue.items WHERE queue_name = 'q_dlq' AND item_id = :c3;
SELECT queue.complete('q_dlq', :c3, :t);

-- case: review sets the review status; false for an unknown item
SELECT queue.review('q_dlq', :c1, 'in_review', 'looking');
SELECT queue.review('q_dlq', :c2, 'rejected');
SELECT item_id = :c1 AS is_c1, review_status
  FROM queue.dead_letters WHERE queue_name = 'q_dlq' AND item_id IN (:c1, :c2) ORDER BY item_id;
SELECT queue.review('q_dlq', -1, 'resolved');

-- case: an invalid review status is 22023 and changes nothing
SELECT queue.review('q_dlq', :c1, 'done');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.review('q_dlq', :c1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT review_status FROM queue.dead_letters WHERE queue_name = 'q_dlq' AND item_id = :c1;

-- case: replay_all redrives dead letters still new or in_review, optionally by error_code
SELECT queue.create_queue('q_redrive', max_attempts => 1);
SELECT count(*) FROM queue.enqueue_batch('q_redrive', ARRAY['{"e": "A1"}', '{"e": "A2"}', '{"e": "B1"}', '{"e": "C1"}']::jsonb[]);
SELECT count(queue.fail('q_redrive', item_id, lease_token, 'boom', error_code => left(payload->>'e', 1)))
  FROM queue.dequeue('q_redrive', 'bot-1', batch_size => 4);
SELECT error_code, count(*) FROM queue.dead_letters WHERE queue_name = 'q_redrive' GROUP BY 1 ORDER BY 1;
SELECT queue.review('q_redrive', item_id, 'rejected')
  FROM queue.dead_letters WHERE queue_name = 'q_redrive' AND error_code = 'C';
SELECT queue.replay_all('q_redrive', error_code => 'A');
SELECT payload->>'e' AS e, state FROM queue.items WHERE queue_name = 'q_redrive' ORDER BY 1;
SELECT queue.replay_all('q_redrive', since => now() + interval '1 h');
SELECT queue.replay_all('q_redrive', since => now() - interval '1 h');
SELECT queue.replay_all('q_redrive');
SELECT payload->>'e' AS e, review_status, replayed_as IS NOT NULL AS replayed
  FROM queue.dead_letters WHERE queue_name = 'q_redrive' ORDER BY 1;
SELECT payload->>'e' AS e FROM queue.items WHERE queue_name = 'q_redrive' ORDER BY 1;

-- case: an item past expires_at is never handed out; dequeue dead-letters it (expired)
SELECT queue.create_queue('q_ttl', item_ttl => '1 s');
SELECT queue.enqueue('q_ttl', '{"t": "ttl"}') AS x1 \gset
SELECT queue.enqueue('q_ttl', '{"t": "explicit"}', expires_at => now() + interval '1 s') AS x2 \gset
SELECT queue.enqueue('q_ttl', '{"t": "long"}', expires_at => now() + interval '1 h', priority => 5) AS x4 \gset
SELECT pg_sleep(1.1);
SELECT item_id = :x4 AS only_long FROM queue.dequeue('q_ttl', 'bot-1', batch_size => 10);
SELECT payload->>'t' AS t, reason FROM queue.dead_letters WHERE queue_name = 'q_ttl' ORDER BY item_id;
SELECT state FROM queue.item('q_ttl', :x1);

-- case: sweep counts expiries in expired
SELECT queue.create_queue('q_ttl_sweep');
SELECT queue.enqueue('q_ttl_sweep', '{"t": "sweep"}', expires_at => now() + interval '0.2 s') AS y1 \gset
SELECT pg_sleep(0.3);
SELECT expired, dead_lettered FROM queue.sweep() WHERE queue_name = 'q_ttl_sweep';
SELECT reason FROM queue.dead_letters WHERE queue_name = 'q_ttl_sweep' AND item_id = :y1;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_ttl_sweep';

-- case: cancel, replay and expiry are recorded in events
SELECT count(*) AS cancelled FROM queue.events
 WHERE queue_name = 'q_dlq' AND item_id IN (:c1, :c2) AND kind = 'cancelled';
SELECT count(*) AS replayed FROM queue.events
 WHERE queue_name = 'q_dlq' AND item_id IN (:d1, :r1) AND kind = 'replayed';
SELECT count(*) AS expired FROM queue.events WHERE queue_name = 'q_ttl' AND kind = 'expired';

SELECT queue.drop_queue('q_ttl_sweep', force => true);
SELECT queue.drop_queue('q_ttl', force => true);
SELECT queue.drop_queue('q_redrive', force => true);
SELECT queue.drop_queue('q_dlq', force => true);
