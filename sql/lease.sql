-- Leases and fencing: expiry without a sweeper, late completion, lease tokens,
-- extend_lease, checkpoint, release, lost leases on the last attempt, no session state.
\set VERBOSITY terse

SELECT queue.create_queue('q_lease', lease_timeout => '2 s', max_attempts => 5);
SELECT queue.create_queue('q_spent', lease_timeout => '2 s', max_attempts => 1);
SELECT queue.create_queue('q_spent_sweep', lease_timeout => '2 s', max_attempts => 1);

SELECT queue.enqueue('q_lease', '{"k": "late"}', priority => 0) AS late \gset
SELECT queue.enqueue('q_lease', '{"k": "lost"}', priority => 1) AS lost \gset
SELECT queue.enqueue('q_lease', '{"k": "kept"}', priority => 2) AS kept \gset
SELECT queue.enqueue('q_spent', '{"k": "spent"}') AS spent \gset
SELECT queue.enqueue('q_spent_sweep', '{"k": "spent2"}') AS spent2 \gset

-- case: each claim gets its own lease token
SELECT item_id = :late AS got_late, lease_token AS t_late FROM queue.dequeue('q_lease', 'w1') \gset
SELECT item_id = :lost AS got_lost, lease_token AS t_lost FROM queue.dequeue('q_lease', 'w1') \gset
SELECT item_id = :kept AS got_kept, lease_token AS t_kept FROM queue.dequeue('q_lease', 'w1') \gset
SELECT :'got_late' AS got_late, :'got_lost' AS got_lost, :'got_kept' AS got_kept,
       count(DISTINCT t) AS distinct_tokens
  FROM unnest(ARRAY[:t_late, :t_lost, :t_kept]::bigint[]) AS t;
SELECT count(*) AS claimed FROM queue.dequeue('q_spent', 'w1');
SELECT count(*) AS claimed FROM queue.dequeue('q_spent_sweep', 'w1');

-- case: extend_lease sets the expiry to now() + extend_by and returns it
BEGIN;
SELECT queue.extend_lease('q_lease', :kept, :t_kept, '1 h') = statement_timestamp() + interval '1 h' AS extended_1h;
SELECT lease_expires_at BETWEEN now() + interval '1 h' AND statement_timestamp() + interval '1 h' AS stored FROM queue.items
 WHERE queue_name = 'q_lease' AND item_id = :kept;
COMMIT;

-- case: extend_lease with a wrong token returns NULL and changes nothing
SELECT queue.extend_lease('q_lease', :kept, :t_kept + 1, '2 h') IS NULL AS lost;
SELECT lease_expires_at - now() <= interval '1 h' AS unchanged FROM queue.items
 WHERE queue_name = 'q_lease' AND item_id = :kept;

-- case: until a lease expires no other dequeue returns the item
SELECT count(*) FROM queue.dequeue('q_lease', 'w2', batch_size => 10);

SELECT pg_sleep(2.1);

-- case: a late complete of an item nobody took over still succeeds
SELECT queue.complete('q_lease', :late, :t_late);
SELECT state FROM queue.item('q_lease', :late);

-- case: an expired lease is claimable again at once, without a sweep and without
-- backoff; the lost lease counted as an attempt; the extended lease is still held
SELECT count(*) AS n, bool_and(item_id = :lost) AS only_lost, max(attempt) AS attempt,
       max(lease_token) AS t_lost2
  FROM queue.dequeue('q_lease', 'w2', batch_size => 10) \gset
SELECT :n AS claimed, :'only_lost' AS only_lost, :attempt AS attempt, :t_lost2 <> :t_lost AS new_token;
SELECT state, worker, attempt FROM queue.items WHERE queue_name = 'q_lease' AND item_id = :lost;

-- case: fencing: the old token can neither complete, fail, extend, checkpoint nor release
SELECT queue.complete('q_lease', :lost, :t_lost);
SELECT queue.fail('q_lease', :lost, :t_lost, 'stale worker') IS NULL AS fail_is_null;
SELECT queue.extend_lease('q_lease', :lost, :t_lost) IS NULL AS extend_is_null;
SELECT queue.checkpoint('q_lease', :lost, :t_lost, '{"stale": true}');
SELECT queue.release('q_lease', :lost, :t_lost);
SELECT state, worker, attempt, last_error IS DISTINCT FROM 'stale worker' AS error_untouched,
       coalesce(progress ? 'stale', false) AS stale_progress
  FROM queue.items WHERE queue_name = 'q_lease' AND item_id = :lost;

-- case: the current token works
SELECT queue.complete('q_lease', :lost, :t_lost2, '{"by": "w2"}');
SELECT worker, attempts, result FROM queue.history WHERE queue_name = 'q_lease' AND item_id = :lost;

-- case: a lost lease on the last attempt is dead-lettered by the next dequeue,
-- never handed out
SELECT count(*) FROM queue.dequeue('q_spent', 'w2');
SELECT item_id = :spent AS same_item, reason, attempts, payload
  FROM queue.dead_letters WHERE queue_name = 'q_spent';
SELECT state FROM queue.item('q_spent', :spent);
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_spent';

-- case: ... or by sweep, which counts it in dead_lettered
SELECT dead_lettered, expired FROM queue.sweep() WHERE queue_name = 'q_spent_sweep';
SELECT item_id = :spent2 AS same_item, reason, attempts
  FROM queue.dead_letters WHERE queue_name = 'q_spent_sweep';
SELECT count(*) FROM queue.dequeue('q_spent_sweep', 'w2');

-- case: checkpoint merges into progress; later keys win
SELECT queue.checkpoint('q_lease', :kept, :t_kept, '{"step": 1, "page": 1}');
SELECT queue.checkpoint('q_lease', :kept, :t_kept, '{"page": 2}');
SELECT progress FROM queue.items WHERE queue_name = 'q_lease' AND item_id = :kept;

-- case: extend_lease without extend_by uses the queue's lease_timeout
BEGIN;
SELECT queue.extend_lease('q_lease', :kept, :t_kept) = statement_timestamp() + interval '2 s' AS extended_2s;
ROLLBACK;

-- case: release gives the item back without counting an attempt and keeps its progress
SELECT queue.release('q_lease', :kept, :t_kept);
SELECT state, lease_expires_at IS NULL AS no_lease FROM queue.items
 WHERE queue_name = 'q_lease' AND item_id = :kept;
SELECT queue.release('q_lease', :kept, :t_kept);
SELECT queue.complete('q_lease', :kept, :t_kept);
SELECT item_id = :kept AS same_item, attempt, progress, lease_token AS t_kept2
  FROM queue.dequeue('q_lease', 'w3') \gset
SELECT :'same_item' AS same_item, :attempt AS attempt, :'progress' AS progress;

-- case: release with run_at in the future schedules the item
SELECT queue.release('q_lease', :kept, :t_kept2, now() + interval '10 min');
SELECT state, run_at - now() BETWEEN '9 min' AND '10 min' AS in_10min
  FROM queue.items WHERE queue_name = 'q_lease' AND item_id = :kept;
SELECT count(*) FROM queue.dequeue('q_lease', 'w3');

-- case: unknown item ids are not errors
SELECT queue.complete('q_lease', -1, 1), queue.fail('q_lease', -1, 1, 'x') IS NULL AS fail_null,
       queue.extend_lease('q_lease', -1, 1) IS NULL AS extend_null,
       queue.checkpoint('q_lease', -1, 1, '{}'), queue.release('q_lease', -1, 1);

-- case: no session state: a lease taken in one session is completed from another,
-- and a claim leaves no advisory locks or temporary tables behind
SELECT queue.enqueue('q_lease', '{"k": "session"}') AS sess \gset
SELECT item_id = :sess AS got_sess, lease_token AS t_sess
  FROM queue.dequeue('q_lease', 'w4', lease_timeout => '1 h') \gset
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';
SELECT count(*) AS temp_tables FROM pg_class WHERE relpersistence = 't';
\c
\set VERBOSITY terse
SELECT :'got_sess' AS got_sess, queue.complete('q_lease', :sess, :t_sess);

-- case: the released event names the lease it ended, as the claimed event
-- does: its worker and its attempt (the one given back)
SELECT queue.create_queue('q_release_event', audit => 'all');
SELECT queue.enqueue('q_release_event', '{"k": "released"}') AS rel \gset
SELECT lease_token AS t_rel FROM queue.dequeue('q_release_event', 'w9') \gset
SELECT queue.release('q_release_event', :rel, :t_rel) AS released;
SELECT kind, worker, attempt FROM queue.events
 WHERE queue_name = 'q_release_event' AND kind IN ('claimed', 'released') ORDER BY event_id;
SELECT attempt FROM queue.dequeue('q_release_event', 'w9');
SELECT queue.drop_queue('q_release_event', force => true);

SELECT queue.drop_queue('q_spent_sweep', force => true);
SELECT queue.drop_queue('q_spent', force => true);
SELECT queue.drop_queue('q_lease', force => true);
