-- Errors: every rejected call fails with its SQLSTATE and changes nothing.
\set VERBOSITY terse

SELECT count(*) AS queues_at_start FROM queue.queues \gset
SELECT queue.create_queue('q_err', max_attempts => 2);
SELECT queue.enqueue('q_err', '{"e": 1}') AS e1 \gset
SELECT queue.enqueue('q_err', '{"e": 2}') AS e2 \gset
SELECT item_id = :e1 AS got_e1, lease_token AS t1 FROM queue.dequeue('q_err', 'w1') \gset
SELECT :'got_e1' AS got_e1;

-- case: malformed queue names are 22023 (create_queue)
SELECT queue.create_queue('');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue(repeat('a', 48));
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('Invoices');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('my queue');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('my"queue');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('it''s');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('x; DROP TABLE y');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('1queue');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('_queue');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('my-queue');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('café');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) - :queues_at_start AS queues_added FROM queue.queues;

-- case: malformed queue names are 22023 everywhere, even where the queue would not exist
SELECT queue.enqueue('Invoices', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('x; DROP TABLE y', ARRAY['{}'::jsonb]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue('', 'w1');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.complete(repeat('a', 48), 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.complete_batch('my queue', ARRAY[1]::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.fail('Q', 1, 1, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.release('q"', 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.extend_lease('q err', 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.checkpoint('q;', 1, 1, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.hold('Q_ERR', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.unhold('Q_ERR', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.cancel('Q_ERR', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM queue.item('Q_ERR', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.replay('Q_ERR', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.replay_all('Q_ERR');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.review('Q_ERR', 1, 'resolved');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.alter_queue('Q_ERR', max_attempts => 3);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.drop_queue('Q_ERR');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.purge('Q_ERR');
\echo :LAST_ERROR_SQLSTATE

-- case: well-formed but unknown queues are 42704
SELECT queue.enqueue('q_missing', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_missing', ARRAY['{}'::jsonb]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue('q_missing', 'w1');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.complete('q_missing', 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.complete_batch('q_missing', ARRAY[1]::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.fail('q_missing', 1, 1, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.release('q_missing', 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.extend_lease('q_missing', 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.checkpoint('q_missing', 1, 1, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.hold('q_missing', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.unhold('q_missing', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.cancel('q_missing', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM queue.item('q_missing', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.replay('q_missing', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.replay_all('q_missing');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.review('q_missing', 1, 'resolved');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.purge('q_missing');
\echo :LAST_ERROR_SQLSTATE

-- case: NULL queue name, payload, worker or error are 22004
SELECT queue.create_queue(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue(NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue('q_err', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_err', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_err', ARRAY['{}'::jsonb, NULL]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue(NULL, 'w1');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue('q_err', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.complete(NULL, :e1, :t1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.fail('q_err', :e1, :t1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.checkpoint('q_err', :e1, :t1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.drop_queue(NULL);
\echo :LAST_ERROR_SQLSTATE

-- case: invalid values for enqueue are 22023
SELECT queue.enqueue('q_err', '{}', priority => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue('q_err', '{}', priority => 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_err', ARRAY['{}'::jsonb], priority => 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue('q_err', '{}', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_err', ARRAY['{}'::jsonb], max_attempts => -3);
\echo :LAST_ERROR_SQLSTATE
-- (the message shows the timestamp, so only the SQLSTATE is printed)
\set VERBOSITY sqlstate
SELECT queue.enqueue('q_err', '{}', expires_at => now() - interval '1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_err', ARRAY['{}'::jsonb], expires_at => now() - interval '1 day');
\echo :LAST_ERROR_SQLSTATE
-- an expires_at already past when the call runs, inside a transaction
-- that began before it
BEGIN;
SELECT pg_sleep(0.3);
SELECT queue.enqueue('q_err', '{}', expires_at => clock_timestamp() - interval '0.1 s') > 0 AS enqueued;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT pg_sleep(0.3);
SELECT count(*) AS enqueued
  FROM queue.enqueue_batch('q_err', ARRAY['{}'::jsonb], expires_at => clock_timestamp() - interval '0.1 s');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
\set VERBOSITY terse
SELECT queue.enqueue_batch('q_err', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['a', 'b', 'c']);
\echo :LAST_ERROR_SQLSTATE

-- case: complete_batch needs as many tokens as ids (22023)
SELECT queue.complete_batch('q_err', ARRAY[:e1, :e2]::bigint[], ARRAY[:t1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT state FROM queue.items WHERE queue_name = 'q_err' AND item_id = :e1;

-- case: payloads over queue.max_payload_bytes are 54000
SET queue.max_payload_bytes = 100;
SELECT queue.enqueue('q_err', jsonb_build_object('s', repeat('x', 200)));
\echo :LAST_ERROR_SQLSTATE
RESET queue.max_payload_bytes;

-- case: invalid values for dequeue, fail, extend_lease are 22023
SELECT queue.dequeue('q_err', 'w1', batch_size => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue('q_err', 'w1', batch_size => 10001);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue('q_err', 'w1', batch_size => -5);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue('q_err', 'w1', lease_timeout => '-1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.dequeue('q_err', 'w1', lease_timeout => '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.fail('q_err', :e1, :t1, 'x', retry_in => '-5 s');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.extend_lease('q_err', :e1, :t1, '-1 min');
\echo :LAST_ERROR_SQLSTATE

-- case: invalid queue settings are 22023; NULL where a value is required is 22004
SELECT queue.create_queue('q_bad', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', backoff_factor => 0.5);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', backoff_factor => 'Infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', backoff_factor => 'NaN');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', backoff_jitter => -0.1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', backoff_jitter => 1.5);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', lease_timeout => '-5 min');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', lease_timeout => '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', backoff_base => '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', audit => 'some');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', lease_timeout => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', max_attempts => NULL);
\echo :LAST_ERROR_SQLSTATE
-- each message names the setting that is null
SELECT queue.create_queue('q_bad', audit => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', breaker_cooldown => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_bad', notify => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS queues FROM queue.queues WHERE queue_name = 'q_bad';

-- case: 42710 for a duplicate queue, 55006 for dropping a queue with live items
SELECT queue.create_queue('q_err');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.drop_queue('q_err');
\echo :LAST_ERROR_SQLSTATE

-- case: 55000 for replaying a dead letter twice
SELECT queue.fail('q_err', :e1, :t1, 'fatal', permanent => true);
SELECT queue.replay('q_err', :e1) IS NOT NULL AS replayed;
\set VERBOSITY sqlstate
SELECT queue.replay('q_err', :e1);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse

-- case: nothing above changed anything
SELECT count(*) - :queues_at_start AS queues_added FROM queue.queues;
-- case: queue, flow-control, worker and schedule arguments: explicit NULLs are
-- 22004, empty keys and labels 22023, oversized ones 54000
SELECT queue.set_limit('q_err', 'k', rate => 1, per => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.set_limit('q_err', repeat('k', 70000), max_in_flight => 1);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_err_g', group_on_dead => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_err_g', if_not_exists => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_err', if_not_exists => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.register_worker('w-err', labels => ARRAY[NULL::text]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.register_worker('w-err', labels => ARRAY['']);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.register_worker('w-err', labels => ARRAY[repeat('l', 70000)]);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.register_worker('w-err', restart => NULL);
\echo :LAST_ERROR_SQLSTATE
-- a queue register_worker lists that does not exist is 42704, as anywhere
SELECT queue.register_worker('w-err', queues => ARRAY['q_err', 'q_err_unknown']);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.drop_queue('q_err', force => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue('q_err', '{}', requires => ARRAY['']);
\echo :LAST_ERROR_SQLSTATE
-- an empty dedup_key is no key to share: 22023, as for the flow keys
SELECT queue.enqueue('q_err', '{}', dedup_key => '');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('q_err', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['k_err', '']);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.schedule('q_err', 's_err', '* * * * *', '{}', group_key => '');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.schedule('q_err', 's_err', '* * * * *', '{}', limit_key => '');
\echo :LAST_ERROR_SQLSTATE
SELECT (SELECT count(*) FROM queue.worker_registry WHERE worker = 'w-err') AS workers,
       (SELECT count(*) FROM queue.queues WHERE queue_name = 'q_err_g') AS queues,
       (SELECT count(*) FROM queue.limits WHERE queue_name = 'q_err') AS limits;

SELECT state, count(*) FROM queue.items WHERE queue_name = 'q_err' GROUP BY state ORDER BY state;
SELECT reason, review_status, count(*) FROM queue.dead_letters WHERE queue_name = 'q_err' GROUP BY 1, 2;
SELECT count(*) AS history FROM queue.history WHERE queue_name = 'q_err';

SELECT queue.drop_queue('q_err', force => true);
