-- cancel() of a processing item: a cancel request.  The item is marked
-- (when, by whom, why); extend_lease returns NULL and checkpoint false for
-- it; fail, release, lease expiry (met by dequeue or sweep) and offline
-- recovery end it as a dead letter with reason cancelled, never retried
-- and never a failed outcome; a complete that arrives first wins, and the
-- events show both.  Lease expiry is simulated by moving the lease's end
-- into the past.
\set VERBOSITY terse

CREATE ROLE regress_c_admin LOGIN IN ROLE queue_admin;
SELECT queue.create_queue('c_run', max_attempts => 5, breaker_threshold => 0.5,
                          breaker_min_samples => 2);

-- One processing item per case, claimed by bot-1; :n_<case> its id and
-- :t_<case> its token.
SELECT count(queue.enqueue('c_run', jsonb_build_object('case', c), priority => p::int)) AS enqueued
  FROM unnest(ARRAY['fail', 'permanent', 'release', 'expire_dequeue', 'expire_sweep', 'complete', 'batch', 'offline'])
       WITH ORDINALITY AS u(c, p);
SELECT queue.enqueue('c_run', '{"case": "later"}', run_at => now() + interval '1 day') AS n_queued \gset
SELECT max(item_id) FILTER (WHERE payload->>'case' = 'fail') AS n_fail, max(lease_token) FILTER (WHERE payload->>'case' = 'fail') AS t_fail,
       max(item_id) FILTER (WHERE payload->>'case' = 'permanent') AS n_permanent, max(lease_token) FILTER (WHERE payload->>'case' = 'permanent') AS t_permanent,
       max(item_id) FILTER (WHERE payload->>'case' = 'release') AS n_release, max(lease_token) FILTER (WHERE payload->>'case' = 'release') AS t_release,
       max(item_id) FILTER (WHERE payload->>'case' = 'expire_dequeue') AS n_expire_dequeue, max(lease_token) FILTER (WHERE payload->>'case' = 'expire_dequeue') AS t_expire_dequeue,
       max(item_id) FILTER (WHERE payload->>'case' = 'expire_sweep') AS n_expire_sweep, max(lease_token) FILTER (WHERE payload->>'case' = 'expire_sweep') AS t_expire_sweep,
       max(item_id) FILTER (WHERE payload->>'case' = 'complete') AS n_complete, max(lease_token) FILTER (WHERE payload->>'case' = 'complete') AS t_complete,
       max(item_id) FILTER (WHERE payload->>'case' = 'batch') AS n_batch, max(lease_token) FILTER (WHERE payload->>'case' = 'batch') AS t_batch,
       max(item_id) FILTER (WHERE payload->>'case' = 'offline') AS n_offline, max(lease_token) FILTER (WHERE payload->>'case' = 'offline') AS t_offline
  FROM queue.dequeue('c_run', 'bot-1', batch_size => 8) \gset

-- case: cancel of a processing item marks it and returns true; it stays
-- processing; items, item() and the events say who, when and why
SET ROLE regress_c_admin;
SELECT queue.cancel('c_run', :n_fail, 'customer withdrew the order') AS cancelled;
RESET ROLE;
SELECT state, worker, cancel_requested_at IS NOT NULL AS marked,
       cancel_requested_at <= now() AS at_or_before_now, cancel_requested_by, cancel_reason
  FROM queue.items WHERE queue_name = 'c_run' AND item_id = :n_fail;
SELECT state, cancel_requested_at IS NOT NULL AS marked, cancel_requested_by, cancel_reason
  FROM queue.item('c_run', :n_fail);
SELECT kind, worker, attempt, details->>'reason' AS reason, details->>'by' AS by
  FROM queue.events WHERE queue_name = 'c_run' AND item_id = :n_fail ORDER BY event_id;

-- case: a second cancel of it returns false and changes nothing
SELECT queue.cancel('c_run', :n_fail, 'again') AS cancelled;
SELECT cancel_reason FROM queue.items WHERE item_id = :n_fail;

-- case: from then extend_lease returns NULL and checkpoint false for it
SELECT queue.extend_lease('c_run', :n_fail, :t_fail) AS extended;
SELECT queue.checkpoint('c_run', :n_fail, :t_fail, '{"step": 2}') AS checkpointed;
SELECT progress FROM queue.items WHERE item_id = :n_fail;
-- (the item holds the token negated; that value opens nothing either)
SELECT queue.extend_lease('c_run', :n_fail, -:t_fail) AS extended,
       queue.checkpoint('c_run', :n_fail, -:t_fail, '{"step": 2}') AS checkpointed,
       queue.release('c_run', :n_fail, -:t_fail) AS released,
       queue.fail('c_run', :n_fail, -:t_fail, 'x') AS failed,
       queue.complete('c_run', :n_fail, -:t_fail) AS completed;
-- others' leases are untouched
SELECT queue.extend_lease('c_run', :n_complete, :t_complete) IS NOT NULL AS extended_other;

-- case: heartbeat does not renew the lease of a cancel-requested item
SELECT queue.cancel('c_run', :n_expire_sweep, 'stop');
SELECT lease_expires_at AS before_hb FROM queue.items WHERE item_id = :n_expire_sweep \gset
SELECT pg_sleep(0.01);
SELECT queue.heartbeat('bot-1') AS renewed;
SELECT lease_expires_at = :'before_hb' AS unchanged FROM queue.items WHERE item_id = :n_expire_sweep;

-- case: fail (transient, with attempts left) of a cancel-requested item ends it as
-- a dead letter with reason cancelled, never retried; the bot's error is kept in errors
SELECT queue.fail('c_run', :n_fail, :t_fail, 'stopped: cancel requested', 'STOPPED') AS outcome;
SELECT count(*) AS live FROM queue.items WHERE item_id = :n_fail;
SELECT reason, attempts, last_error, worker, cancel_requested_by, cancel_reason,
       cancel_requested_at IS NOT NULL AS marked,
       jsonb_path_query_array(errors, '$[*].error') AS errors,
       jsonb_path_query_array(errors, '$[*].error_code') AS codes
  FROM queue.dead_letters WHERE item_id = :n_fail;
SELECT state, reason, last_error, cancel_requested_by, cancel_reason
  FROM queue.item('c_run', :n_fail);
SELECT kind, details->>'reason' AS reason, details->>'error' AS error, details->>'by' AS by,
       details ? 'requested_at' AS has_requested_at
  FROM queue.events WHERE queue_name = 'c_run' AND item_id = :n_fail ORDER BY event_id;
-- the old token does nothing now
SELECT queue.fail('c_run', :n_fail, :t_fail, 'again') AS outcome,
       queue.complete('c_run', :n_fail, :t_fail) AS completed;

-- case: a permanent fail of it is cancelled too
SELECT queue.cancel('c_run', :n_permanent, NULL);
SELECT queue.fail('c_run', :n_permanent, :t_permanent, 'bad input', 'BAD', permanent => true) AS outcome;
SELECT reason, last_error, cancel_reason FROM queue.dead_letters WHERE item_id = :n_permanent;

-- case: release of it ends it as a dead letter (cancelled); release returns true
SELECT queue.cancel('c_run', :n_release, 'duplicate order');
SELECT queue.release('c_run', :n_release, :t_release) AS released;
SELECT reason, last_error, attempts FROM queue.dead_letters WHERE item_id = :n_release;
SELECT queue.release('c_run', :n_release, :t_release) AS released_again;

-- case: its lease expires: the next dequeue dead-letters it instead of
-- handing it out
SELECT queue.cancel('c_run', :n_expire_dequeue, 'expire me');
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'c_run' AND item_id = :n_expire_dequeue;
SELECT state FROM queue.items WHERE item_id = :n_expire_dequeue;
SELECT queue.hold('c_run', :n_expire_dequeue) AS held;
SELECT payload->>'case' AS claimed FROM queue.dequeue('c_run', 'bot-2');
SELECT reason, last_error, cancel_reason FROM queue.dead_letters WHERE item_id = :n_expire_dequeue;

-- case: ... or the next sweep that meets it
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'c_run' AND item_id = :n_expire_sweep;
SELECT dead_lettered FROM queue.sweep() WHERE queue_name = 'c_run';
SELECT reason, cancel_reason FROM queue.dead_letters WHERE item_id = :n_expire_sweep;

-- case: a complete that arrives first wins (the work happened); the events
-- show the request and the completion, also under audit 'failures'
SELECT queue.cancel('c_run', :n_complete, 'too late');
SELECT queue.complete('c_run', :n_complete, :t_complete, '{"posted": true}') AS completed;
SELECT state, result FROM queue.item('c_run', :n_complete);
SELECT kind, details->>'reason' AS reason, details->>'by' AS by,
       details->>'cancel_requested' AS cancel_requested
  FROM queue.events WHERE queue_name = 'c_run' AND item_id = :n_complete ORDER BY event_id;
-- cancel of the completed item: false
SELECT queue.cancel('c_run', :n_complete, 'now') AS cancelled;

-- case: the same through complete_batch
SELECT queue.cancel('c_run', :n_batch, 'too late as well');
SELECT queue.complete_batch('c_run', ARRAY[:n_batch], ARRAY[:t_batch]) AS completed;
SELECT kind, details->>'cancel_requested' AS cancel_requested
  FROM queue.events WHERE queue_name = 'c_run' AND item_id = :n_batch ORDER BY event_id;

-- case: offline recovery of a cancel-requested item buries it (cancelled);
-- sweep counts it in dead_lettered, not recovered
SELECT queue.cancel('c_run', :n_offline, 'bot died');
UPDATE queue.worker_registry SET last_seen = now() - interval '1 day' WHERE worker = 'bot-1';
SELECT recovered, dead_lettered FROM queue.sweep() WHERE queue_name = 'c_run';
SELECT reason, cancel_reason FROM queue.dead_letters WHERE item_id = :n_offline;

-- case: cancelled items are no failed outcomes: the breaker (threshold 0.5
-- over 2 samples) stayed closed and failed_1h counts nothing
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'c_run';
SELECT failed_1h FROM queue.stats('c_run');

-- case: cancel of a queued (here: scheduled) item still buries it at once, recording who and why
SET ROLE regress_c_admin;
SELECT queue.cancel('c_run', :n_queued, 'not needed') AS cancelled;
RESET ROLE;
SELECT state, reason, last_error, cancel_requested_by, cancel_reason,
       cancel_requested_at IS NOT NULL AS marked
  FROM queue.item('c_run', :n_queued);

-- case: a replayed cancelled item starts unmarked
SELECT queue.replay('c_run', :n_release) AS n_replayed \gset
SELECT state, cancel_requested_at, cancel_reason FROM queue.items WHERE item_id = :n_replayed;

-- case: a cancel reason over 64 kB is refused
SELECT queue.cancel('c_run', :n_replayed, repeat('x', 70000));

-- every item accounted for: live, processed or dead
SELECT (SELECT count(*) FROM queue.items WHERE queue_name = 'c_run') AS live,
       (SELECT count(*) FROM queue.history WHERE queue_name = 'c_run') AS processed,
       (SELECT string_agg(reason, ',' ORDER BY item_id) FROM queue.dead_letters WHERE queue_name = 'c_run') AS dead;


-- case: under audit 'all' too, the completion that overtook a cancel
-- request says so, through complete and complete_batch alike
SELECT queue.create_queue('c_run_all', audit => 'all');
SELECT count(queue.enqueue('c_run_all', jsonb_build_object('n', n))) FROM generate_series(1, 2) n;
SELECT min(item_id) AS a_one, min(lease_token) AS a_one_t, max(item_id) AS a_batch, max(lease_token) AS a_batch_t
  FROM queue.dequeue('c_run_all', 'bot-1', 2) \gset
SELECT queue.cancel('c_run_all', :a_one, 'late') AS requested, queue.cancel('c_run_all', :a_batch, 'late') AS requested;
SELECT queue.complete('c_run_all', :a_one, :a_one_t) AS completed;
SELECT queue.complete_batch('c_run_all', ARRAY[:a_batch], ARRAY[:a_batch_t]) AS completed;
SELECT item_id = :a_batch AS by_batch, kind, details->>'cancel_requested' AS cancel_requested
  FROM queue.events WHERE queue_name = 'c_run_all' AND kind = 'completed' ORDER BY item_id;
SELECT queue.drop_queue('c_run_all', force => true);

SELECT queue.drop_queue('c_run', force => true);
DROP ROLE regress_c_admin;
