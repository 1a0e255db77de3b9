-- Queues: create_queue, alter_queue, drop_queue, the queues view, purge.
\set VERBOSITY terse

-- case: create_queue with defaults shows the documented settings
SELECT queue.create_queue('q_defaults');
SELECT queue_name, lease_timeout = '5 min' AS lease_5min, max_attempts,
       backoff_base = '5 s' AS base_5s, backoff_factor, backoff_max = '1 h' AS max_1h,
       backoff_jitter, item_ttl, dedup_window, priority_aging, max_in_flight,
       retention = '7 days' AS retention_7d, sla, notify, audit, breaker_threshold,
       breaker_window = '10 min' AS window_10min, breaker_min_samples,
       breaker_cooldown = '5 min' AS cooldown_5min, paused, pause_reason
  FROM queue.queues WHERE queue_name = 'q_defaults';

-- case: create_queue with every setting given by name
SELECT queue.create_queue('q_custom', lease_timeout => '30 s', max_attempts => 3,
       backoff_base => '2 s', backoff_factor => 2, backoff_max => '1 min',
       backoff_jitter => 0, item_ttl => '1 day', dedup_window => '1 h',
       priority_aging => '10 min', max_in_flight => 7, retention => '1 day',
       sla => '15 min', notify => false, audit => 'all', breaker_threshold => 0.5,
       breaker_window => '5 min', breaker_min_samples => 10, breaker_cooldown => '1 min');
SELECT queue_name, lease_timeout = '30 s' AS lease_30s, max_attempts,
       backoff_base = '2 s' AS base_2s, backoff_factor, backoff_max = '1 min' AS max_1min,
       backoff_jitter, item_ttl = '1 day' AS ttl_1d, dedup_window = '1 h' AS dedup_1h,
       priority_aging = '10 min' AS aging_10min, max_in_flight, retention = '1 day' AS retention_1d,
       sla = '15 min' AS sla_15min, notify, audit, breaker_threshold,
       breaker_window = '5 min' AS window_5min, breaker_min_samples,
       breaker_cooldown = '1 min' AS cooldown_1min, paused
  FROM queue.queues WHERE queue_name = 'q_custom';

-- case: a 47-character name is the longest allowed
SELECT queue.create_queue(repeat('a', 47));
SELECT count(*) FROM queue.queues WHERE queue_name = repeat('a', 47);
SELECT queue.drop_queue(repeat('a', 47));

-- case: create_queue of an existing queue fails with 42710 and changes nothing
SELECT queue.create_queue('q_custom', max_attempts => 9);
\echo :LAST_ERROR_SQLSTATE
SELECT max_attempts FROM queue.queues WHERE queue_name = 'q_custom';

-- case: if_not_exists makes it a no-op that keeps the existing settings
SELECT queue.create_queue('q_custom', max_attempts => 9, if_not_exists => true);
SELECT max_attempts FROM queue.queues WHERE queue_name = 'q_custom';
SELECT count(*) FROM queue.queues WHERE queue_name = 'q_custom';

-- case: alter_queue changes the named settings; NULL leaves the others unchanged
SELECT queue.alter_queue('q_custom', max_attempts => 4, lease_timeout => '45 s');
SELECT max_attempts, lease_timeout = '45 s' AS lease_45s, backoff_base = '2 s' AS base_kept,
       backoff_factor, dedup_window = '1 h' AS dedup_kept, audit, notify
  FROM queue.queues WHERE queue_name = 'q_custom';
SELECT queue.alter_queue('q_custom', max_attempts => NULL);
SELECT max_attempts FROM queue.queues WHERE queue_name = 'q_custom';

-- case: alter_queue of an unknown queue is 42704
SELECT queue.alter_queue('q_nowhere', max_attempts => 2);
\echo :LAST_ERROR_SQLSTATE

-- case: alter_queue rejects invalid values and changes nothing
SELECT queue.alter_queue('q_custom', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.alter_queue('q_custom', backoff_factor => 0.5);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.alter_queue('q_custom', backoff_jitter => 2);
\echo :LAST_ERROR_SQLSTATE
SELECT queue.alter_queue('q_custom', lease_timeout => '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT max_attempts, backoff_factor, backoff_jitter, lease_timeout = '45 s' AS lease_45s
  FROM queue.queues WHERE queue_name = 'q_custom';

-- case: a new queue's max_attempts and lease_timeout apply to its items
SELECT queue.enqueue('q_custom', '{"n": 1}') AS id1 \gset
SELECT item_id = :id1 AS same_item, max_attempts, lease_expires_at - now() BETWEEN '44 s' AND '46 s' AS lease_45s,
       lease_token AS tok1
  FROM queue.dequeue('q_custom', 'w1') \gset
SELECT :'same_item' AS same_item, :max_attempts AS max_attempts, :'lease_45s' AS lease_45s;

-- case: drop_queue refuses while items are live (55006) and changes nothing
SELECT queue.drop_queue('q_custom');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS queues FROM queue.queues WHERE queue_name = 'q_custom';
SELECT count(*) AS items FROM queue.items WHERE queue_name = 'q_custom';

-- case: drop_queue with force removes the queue, its items and history,
-- leaving one queue_dropped event
SELECT queue.enqueue('q_custom', '{"n": 2}') AS id2 \gset
SELECT queue.enqueue('q_custom', '{"n": 3}') AS id3 \gset
SELECT queue.complete('q_custom', :id1, :tok1);
SELECT queue.cancel('q_custom', :id3);
SELECT (SELECT count(*) FROM queue.items WHERE queue_name = 'q_custom') AS items,
       (SELECT count(*) FROM queue.history WHERE queue_name = 'q_custom') AS history;
SELECT (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'q_custom') AS dead,
       (SELECT count(*) > 0 FROM queue.events WHERE queue_name = 'q_custom') AS has_events;
SELECT queue.drop_queue('q_custom', force => true);
SELECT count(*) AS queues FROM queue.queues WHERE queue_name = 'q_custom';
SELECT count(*) AS items FROM queue.items WHERE queue_name = 'q_custom';
SELECT count(*) AS history FROM queue.history WHERE queue_name = 'q_custom';
SELECT count(*) AS dead FROM queue.dead_letters WHERE queue_name = 'q_custom';
SELECT kind FROM queue.events WHERE queue_name = 'q_custom';
SELECT queue.enqueue('q_custom', '{}');
\echo :LAST_ERROR_SQLSTATE

-- case: drop_queue of an empty queue needs no force; dead letters and history
-- do not count as live items
SELECT queue.create_queue('q_empty');
SELECT queue.enqueue('q_empty', '{"a": 1}') AS e1 \gset
SELECT queue.enqueue('q_empty', '{"a": 2}') AS e2 \gset
SELECT lease_token AS t1 FROM queue.dequeue('q_empty', 'w1') \gset
SELECT queue.complete('q_empty', :e1, :t1);
SELECT queue.cancel('q_empty', :e2);
SELECT queue.drop_queue('q_empty');
SELECT count(*) FROM queue.queues WHERE queue_name = 'q_empty';

-- case: drop_queue of an unknown queue is 42704
SELECT queue.drop_queue('q_empty');
\echo :LAST_ERROR_SQLSTATE

-- case: purge removes queued, scheduled and on-hold items, keeps processing ones,
-- returns the count and records it in events
SELECT queue.create_queue('q_purge');
SELECT queue.enqueue('q_purge', '{"k": "queued"}') AS p_queued \gset
SELECT queue.enqueue('q_purge', '{"k": "processing"}', priority => 0) AS p_proc \gset
SELECT queue.enqueue('q_purge', '{"k": "scheduled"}', run_at => now() + interval '1 h') AS p_sched \gset
SELECT queue.enqueue('q_purge', '{"k": "held"}') AS p_held \gset
SELECT queue.hold('q_purge', :p_held);
SELECT item_id = :p_proc AS got_processing FROM queue.dequeue('q_purge', 'w1');
SELECT state, count(*) FROM queue.items WHERE queue_name = 'q_purge' GROUP BY state ORDER BY state;
SELECT queue.purge('q_purge');
SELECT item_id = :p_proc AS kept, state FROM queue.items WHERE queue_name = 'q_purge';
SELECT count(*) AS purged_events FROM queue.events WHERE queue_name = 'q_purge' AND kind = 'purged';
SELECT queue.purge('q_purge');

-- case: purge of an unknown queue is 42704, of a bad name 22023
SELECT queue.purge('q_nowhere');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.purge('Q-Purge');
\echo :LAST_ERROR_SQLSTATE

SELECT queue.drop_queue('q_purge', force => true);
SELECT queue.drop_queue('q_defaults');
SELECT count(*) AS queues_left FROM queue.queues
 WHERE queue_name IN ('q_defaults', 'q_custom', 'q_empty', 'q_purge');
