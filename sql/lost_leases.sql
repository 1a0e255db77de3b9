-- Lost leases as outcomes: an expired lease counts once as a failed
-- outcome as soon as sweep or a dequeue meets it; the item stays claimable.
\set VERBOSITY terse

-- case: four expired leases, sweep: failed_1h counts them, the breaker
-- (min_samples 4) trips, the items stay claimable with one error entry each
SELECT queue.create_queue('l_lost', breaker_threshold => 0.5, breaker_min_samples => 4,
                          max_attempts => 5);
SELECT count(*) FROM queue.enqueue_batch('l_lost', array_fill('{}'::jsonb, ARRAY[4]));
CREATE TEMP TABLE l_held AS
SELECT item_id, lease_token FROM queue.dequeue('l_lost', 'w-gone', batch_size => 4, lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'l_lost';
SELECT failed_1h, queued, processing FROM queue.stats('l_lost');
SELECT paused, paused_by, breaker_state FROM queue.queues WHERE queue_name = 'l_lost';
SELECT status FROM queue.health('l_lost');
SELECT it.state, it.attempt, it.last_error, jsonb_array_length(i.errors) AS entries
  FROM queue.items it JOIN queue.item_live i USING (queue_name, item_id)
 WHERE it.queue_name = 'l_lost' ORDER BY it.item_id;
SELECT kind, count(*) FROM queue.events WHERE queue_name = 'l_lost' AND item_id IS NOT NULL GROUP BY 1 ORDER BY 1;

-- case: meeting it again counts nothing more: a second sweep, then the
-- re-claims by dequeue
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'l_lost';
SELECT failed_1h FROM queue.stats('l_lost');
-- a late complete by the holder still succeeds while nobody re-claimed it
SELECT queue.complete('l_lost', item_id, lease_token) AS late_complete
  FROM l_held ORDER BY item_id LIMIT 1;
SELECT queue.resume('l_lost');
SELECT attempt FROM queue.dequeue('l_lost', 'w-new', batch_size => 4) ORDER BY item_id;
SELECT failed_1h FROM queue.stats('l_lost');
SELECT count(*) AS entries FROM queue.item_live i, jsonb_array_elements(i.errors)
 WHERE i.queue_name = 'l_lost';
SELECT count(*) AS failure_rows FROM queue.failure_log WHERE queue_name = 'l_lost';

-- case: a lease met first by dequeue counts once too, and not again by sweep
SELECT queue.create_queue('l_deq', max_attempts => 5);
SELECT queue.enqueue('l_deq', '{}') > 0 AS enqueued;
SELECT count(*) FROM queue.dequeue('l_deq', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT attempt FROM queue.dequeue('l_deq', 'w-new', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'l_deq';
SELECT attempt FROM queue.dequeue('l_deq', 'w-new');
SELECT failed_1h FROM queue.stats('l_deq');
SELECT e->>'attempt' AS attempt, e->>'error_code' AS code FROM queue.item_live i, jsonb_array_elements(i.errors) e
 WHERE i.queue_name = 'l_deq';

-- case: a spent lease counted by sweep becomes a dead letter without a second count
SELECT queue.create_queue('l_spent', max_attempts => 1);
SELECT queue.enqueue('l_spent', '{}') > 0 AS enqueued;
SELECT count(*) FROM queue.dequeue('l_spent', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT dead_lettered FROM queue.sweep() WHERE queue_name = 'l_spent';
SELECT failed_1h FROM queue.stats('l_spent');
SELECT reason, jsonb_array_length(errors) AS entries FROM queue.dead_letters WHERE queue_name = 'l_spent';

-- case: a lease ended by offline recovery counts for the breaker and
-- health the way it counts in failed_1h
SELECT queue.create_queue('l_off', breaker_threshold => 0.5, breaker_min_samples => 2);
SELECT count(*) FROM queue.enqueue_batch('l_off', array_fill('{}'::jsonb, ARRAY[2]));
SELECT count(*) FROM queue.dequeue('l_off', 'w-off', batch_size => 2);
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'w-off';
SELECT recovered FROM queue.sweep() WHERE queue_name = 'l_off';
SELECT failed_1h FROM queue.stats('l_off');
SELECT breaker_state FROM queue.queues WHERE queue_name = 'l_off';

-- case: sweep reports the expired leases it meets as recovered, each with a
-- recovered event naming the holder, and the re-claim adds neither
SELECT queue.create_queue('l_rec', max_attempts => 5);
SELECT queue.enqueue('l_rec', '{}') > 0 AS enqueued;
SELECT count(*) FROM queue.dequeue('l_rec', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered, dead_lettered FROM queue.sweep() WHERE queue_name = 'l_rec';
SELECT recovered FROM queue.sweep() WHERE queue_name = 'l_rec';
SELECT attempt FROM queue.dequeue('l_rec', 'w-new');
SELECT kind, worker, attempt FROM queue.events
 WHERE queue_name = 'l_rec' AND item_id IS NOT NULL ORDER BY event_id;

-- case: a late fail by the holder of a lease sweep already counted as lost
-- is accepted (nobody re-claimed the item) but is the same failed attempt:
-- failed_1h and the failure log count it once
SELECT queue.create_queue('l_late', max_attempts => 5);
SELECT queue.enqueue('l_late', '{}') > 0 AS enqueued;
CREATE TEMP TABLE l_late_held AS
SELECT item_id, lease_token FROM queue.dequeue('l_late', 'w-slow', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered FROM queue.sweep() WHERE queue_name = 'l_late';
SELECT queue.fail('l_late', item_id, lease_token, 'ERP said no', 'ERP_NO') AS late_fail FROM l_late_held;
SELECT failed_1h FROM queue.stats('l_late');
SELECT count(*) AS failure_rows FROM queue.failure_log WHERE queue_name = 'l_late';
SELECT state, attempt, last_error FROM queue.items WHERE queue_name = 'l_late';

-- case: hold of an item whose lease ran out and nobody re-claimed settles
-- the lost lease first, as sweep or dequeue would: the attempt counts once,
-- and on the last attempt the item becomes a dead letter (lease_expired)
-- and there is nothing to hold
SELECT queue.create_queue('l_hold', max_attempts => 1);
SELECT queue.create_queue('l_hold3', max_attempts => 3);
SELECT queue.enqueue('l_hold', '{}') AS l_hold_id \gset
SELECT queue.enqueue('l_hold3', '{}') AS l_hold3_id \gset
SELECT count(*) FROM queue.dequeue('l_hold', 'w-gone', lease_timeout => '10 ms');
SELECT count(*) FROM queue.dequeue('l_hold3', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT queue.hold('l_hold', :l_hold_id) AS held_spent;
SELECT reason, attempts, error_code FROM queue.dead_letters WHERE queue_name = 'l_hold';
SELECT queue.unhold('l_hold', :l_hold_id) AS unheld_spent;
SELECT count(*) AS handed_out_again FROM queue.dequeue('l_hold', 'w-next');
SELECT queue.hold('l_hold3', :l_hold3_id) AS held_with_attempts_left;
SELECT failed_1h FROM queue.stats('l_hold3');
SELECT on_hold, attempt, error_code, jsonb_array_length(errors) AS errors
  FROM queue.item_live WHERE queue_name = 'l_hold3';
SELECT queue.unhold('l_hold3', :l_hold3_id) AS unheld;
SELECT attempt FROM queue.dequeue('l_hold3', 'w-next');
SELECT failed_1h FROM queue.stats('l_hold3');

-- case: a lost lease sweep counted already is not counted again when its
-- holder then goes offline or restarts: offline recovery and restart end
-- the old lease (its token stops working) without a second failed attempt
SELECT queue.create_queue('l_twice', max_attempts => 5);
SELECT count(*) FROM queue.enqueue_batch('l_twice', array_fill('{}'::jsonb, ARRAY[2]));
CREATE TEMP TABLE l_twice_held AS
SELECT item_id, lease_token FROM queue.dequeue('l_twice', 'w-twice', batch_size => 2,
                                               lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered FROM queue.sweep() WHERE queue_name = 'l_twice';
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'w-twice';
SELECT recovered, dead_lettered FROM queue.sweep() WHERE queue_name = 'l_twice';
SELECT failed_1h FROM queue.stats('l_twice');
SELECT attempt, count(*) AS failure_rows FROM queue.failure_log
 WHERE queue_name = 'l_twice' GROUP BY attempt;
SELECT count(*) AS recovered_events FROM queue.events
 WHERE queue_name = 'l_twice' AND kind = 'recovered';
SELECT bool_and(queue.complete('l_twice', item_id, lease_token) IS NOT TRUE) AS old_tokens_dead
  FROM l_twice_held;
SELECT l.attempt, jsonb_array_length(l.errors) AS errors, i.state
  FROM queue.item_live l JOIN queue.items i USING (queue_name, item_id)
 WHERE l.queue_name = 'l_twice' ORDER BY l.item_id;
-- a restart after the lost lease was counted does not count it again
SELECT count(*) FROM queue.dequeue('l_twice', 'w-twice2', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered FROM queue.sweep() WHERE queue_name = 'l_twice';
SELECT queue.register_worker('w-twice2', restart => true);
SELECT failed_1h FROM queue.stats('l_twice');
SELECT count(*) FILTER (WHERE kind = 'recovered') AS recovered_events,
       count(*) FILTER (WHERE kind = 'failed') AS failed_events
  FROM queue.events WHERE queue_name = 'l_twice';

-- case: a late release by the holder of a lease sweep already counted as
-- lost is accepted (nobody re-claimed the item) but gives no attempt back:
-- that attempt was counted as failed, so the next claim is the next
-- attempt and max_attempts still bounds the claims
SELECT queue.create_queue('l_rel', max_attempts => 2);
SELECT queue.enqueue('l_rel', '{}') AS l_rel_id \gset
CREATE TEMP TABLE l_rel_held AS
SELECT item_id, lease_token FROM queue.dequeue('l_rel', 'w-slow', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered FROM queue.sweep('l_rel');
SELECT queue.release('l_rel', item_id, lease_token) AS late_release FROM l_rel_held;
SELECT state, attempt FROM queue.items WHERE queue_name = 'l_rel';
SELECT attempt, max_attempts FROM queue.dequeue('l_rel', 'w-next');
SELECT queue.fail('l_rel', item_id, lease_token, 'no luck') AS last_fail
  FROM queue.item_live WHERE queue_name = 'l_rel';
SELECT reason, attempts, jsonb_path_query_array(errors, '$[*].attempt') AS error_attempts
  FROM queue.dead_letters WHERE item_id = :l_rel_id;
SELECT failed_1h FROM queue.stats('l_rel');
-- a release before anything met the expired lease is a plain release
SELECT queue.enqueue('l_rel', '{}') AS l_rel_b \gset
CREATE TEMP TABLE l_rel_b_held AS
SELECT item_id, lease_token FROM queue.dequeue('l_rel', 'w-slow', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT queue.release('l_rel', item_id, lease_token) AS early_release FROM l_rel_b_held;
SELECT attempt FROM queue.dequeue('l_rel', 'w-next');
SELECT queue.drop_queue('l_rel', force => true);

-- case: a lease already counted as lost is not counted again when offline
-- recovery or a restart ends it later: one failed attempt, one errors
-- entry, one recovered; the old token stops working all the same
SELECT queue.create_queue('l_twice2', max_attempts => 5);
SELECT queue.enqueue('l_twice2', '{"n": 1}') AS l_twice2_1 \gset
SELECT queue.enqueue('l_twice2', '{"n": 2}') AS l_twice2_2 \gset
CREATE TEMP TABLE l_twice2_held AS
SELECT item_id, lease_token FROM queue.dequeue('l_twice2', 'w-twice-off', lease_timeout => '10 ms');
INSERT INTO l_twice2_held
SELECT item_id, lease_token FROM queue.dequeue('l_twice2', 'w-twice-rst', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered FROM queue.sweep('l_twice2');
SELECT failed_1h FROM queue.stats('l_twice2');
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'w-twice-off';
SELECT recovered, dead_lettered FROM queue.sweep('l_twice2');
SELECT queue.register_worker('w-twice-rst', restart => true);
SELECT failed_1h FROM queue.stats('l_twice2');
SELECT i.item_id = :l_twice2_1 AS first, i.state, i.attempt, i.worker,
       jsonb_array_length(l.errors) AS errors
  FROM queue.items i JOIN queue.item_live l USING (queue_name, item_id)
 WHERE i.queue_name = 'l_twice2' ORDER BY i.item_id;
SELECT count(*) AS failure_rows FROM queue.failure_log WHERE queue_name = 'l_twice2';
SELECT queue.complete('l_twice2', item_id, lease_token) AS old_token_completes FROM l_twice2_held;
SELECT attempt FROM queue.dequeue('l_twice2', 'w-next', batch_size => 2);
SELECT queue.drop_queue('l_twice2', force => true);

-- case: lost leases counted outside sweep and dequeue judge the breaker at
-- once, like any other failure: a restart that ends leases, and a hold or
-- cancel that counts an expired one, trip it as soon as the failed share
-- passes the threshold (the next dequeue gets nothing)
SELECT queue.create_queue('l_brk_rst', breaker_threshold => 0.5, breaker_min_samples => 2);
SELECT count(*) FROM queue.enqueue_batch('l_brk_rst', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM queue.dequeue('l_brk_rst', 'w-brk-rst', batch_size => 2);
SELECT queue.register_worker('w-brk-rst', restart => true);
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'l_brk_rst';
SELECT count(*) AS handed_out FROM queue.dequeue('l_brk_rst', 'w-other');
SELECT queue.create_queue('l_brk_op', breaker_threshold => 0.5, breaker_min_samples => 2);
SELECT count(*) FROM queue.enqueue_batch('l_brk_op', array_fill('{}'::jsonb, ARRAY[3]));
CREATE TEMP TABLE l_brk_op_held AS
SELECT item_id FROM queue.dequeue('l_brk_op', 'w-gone', batch_size => 2, lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT queue.hold('l_brk_op', min(item_id)) AS held FROM l_brk_op_held;
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'l_brk_op';
SELECT queue.cancel('l_brk_op', max(item_id)) AS cancelled FROM l_brk_op_held;
SELECT failed_1h FROM queue.stats('l_brk_op');
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'l_brk_op';
SELECT count(*) AS handed_out FROM queue.dequeue('l_brk_op', 'w-other');
SELECT queue.drop_queue('l_brk_rst', force => true), queue.drop_queue('l_brk_op', force => true);

-- case: purge of items whose lease ran out and nobody re-claimed counts
-- each lost lease once before removing them (as sweep would have), not
-- again for one sweep counted already
SELECT queue.create_queue('l_purge', max_attempts => 5);
SELECT count(*) FROM queue.enqueue_batch('l_purge', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM queue.dequeue('l_purge', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered FROM queue.sweep('l_purge');
SELECT count(*) FROM queue.dequeue('l_purge', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT failed_1h FROM queue.stats('l_purge');
SELECT queue.purge('l_purge') AS purged;
SELECT failed_1h FROM queue.stats('l_purge');
SELECT queue.drop_queue('l_purge', force => true);

-- case: cancel of an item whose lease ran out and nobody re-claimed
-- settles it first, as sweep or dequeue would: the lost lease counts once
-- as a failed attempt (failed_1h, the dead letter's errors), then the item
-- is cancelled; on the last attempt it is a dead letter of its own
-- (lease_expired) and there is nothing to cancel
SELECT queue.create_queue('l_cancel', max_attempts => 1);
SELECT queue.create_queue('l_cancel3', max_attempts => 3);
SELECT queue.enqueue('l_cancel', '{}') AS l_cancel_id \gset
SELECT queue.enqueue('l_cancel3', '{}') AS l_cancel3_id \gset
SELECT count(*) FROM queue.dequeue('l_cancel', 'w-gone', lease_timeout => '10 ms');
SELECT count(*) FROM queue.dequeue('l_cancel3', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT queue.cancel('l_cancel', :l_cancel_id) AS cancelled_spent;
SELECT reason, attempts, error_code FROM queue.dead_letters WHERE queue_name = 'l_cancel';
SELECT failed_1h FROM queue.stats('l_cancel');
SELECT queue.cancel('l_cancel3', :l_cancel3_id) AS cancelled;
SELECT reason, attempts, error_code, jsonb_array_length(errors) AS errors
  FROM queue.dead_letters WHERE queue_name = 'l_cancel3';
SELECT failed_1h FROM queue.stats('l_cancel3');
SELECT kind FROM queue.events WHERE queue_name = 'l_cancel3' ORDER BY event_id;
-- a lease sweep counted already is not counted a second time by cancel
SELECT queue.enqueue('l_cancel3', '{}') AS l_cancel3_b \gset
SELECT count(*) FROM queue.dequeue('l_cancel3', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.05);
SELECT recovered FROM queue.sweep('l_cancel3');
SELECT queue.cancel('l_cancel3', :l_cancel3_b) AS cancelled_after_sweep;
SELECT failed_1h FROM queue.stats('l_cancel3');
SELECT jsonb_array_length(errors) AS errors FROM queue.dead_letters WHERE item_id = :l_cancel3_b;
SELECT queue.drop_queue('l_cancel', force => true), queue.drop_queue('l_cancel3', force => true);

-- case: an item whose lease ran out and that is past its expires_at is
-- dead-lettered (expired) by the dequeue that meets it, and its lost lease
-- counts once as a failed attempt there too, as when sweep meets it
-- (failed_1h, a failed event, an entry in the dead letter's errors)
SELECT queue.create_queue('l_exp_deq', max_attempts => 5);
SELECT queue.create_queue('l_exp_swp', max_attempts => 5);
SELECT queue.enqueue('l_exp_deq', '{}', expires_at => now() + interval '300 ms') AS l_exp_deq_id \gset
SELECT queue.enqueue('l_exp_swp', '{}', expires_at => now() + interval '300 ms') AS l_exp_swp_id \gset
SELECT count(*) FROM queue.dequeue('l_exp_deq', 'w-gone', lease_timeout => '10 ms');
SELECT count(*) FROM queue.dequeue('l_exp_swp', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.4);
SELECT count(*) AS handed_out FROM queue.dequeue('l_exp_deq', 'w-new');
SELECT recovered, expired FROM queue.sweep('l_exp_swp');
SELECT d.queue_name, d.reason, d.attempts, d.last_error, jsonb_array_length(d.errors) AS errors,
       d.errors -> 0 ->> 'error_code' AS code, s.failed_1h
  FROM queue.dead_letters d JOIN queue.stats() s USING (queue_name)
 WHERE d.item_id IN (:l_exp_deq_id, :l_exp_swp_id) ORDER BY d.queue_name;
SELECT queue_name, kind, attempt, worker FROM queue.events
 WHERE queue_name IN ('l_exp_deq', 'l_exp_swp') AND kind IN ('failed', 'expired')
 ORDER BY queue_name, event_id;
SELECT queue.drop_queue('l_exp_deq', force => true), queue.drop_queue('l_exp_swp', force => true);

-- case: a lost lease on the last attempt of an item that is also past its
-- expires_at ends the same way whoever meets it: a lease_expired dead
-- letter with its failure counted once, from a dequeue as from sweep
SELECT queue.create_queue('l_spx_deq', max_attempts => 1);
SELECT queue.create_queue('l_spx_swp', max_attempts => 1);
SELECT queue.enqueue('l_spx_deq', '{}', expires_at => now() + interval '300 ms') AS l_spx_deq_id \gset
SELECT queue.enqueue('l_spx_swp', '{}', expires_at => now() + interval '300 ms') AS l_spx_swp_id \gset
SELECT count(*) FROM queue.dequeue('l_spx_deq', 'w-gone', lease_timeout => '10 ms');
SELECT count(*) FROM queue.dequeue('l_spx_swp', 'w-gone', lease_timeout => '10 ms');
SELECT pg_sleep(0.4);
SELECT count(*) AS handed_out FROM queue.dequeue('l_spx_deq', 'w-new');
SELECT dead_lettered, expired FROM queue.sweep('l_spx_swp');
SELECT d.queue_name, d.reason, d.attempts, d.last_error, jsonb_array_length(d.errors) AS errors,
       s.failed_1h
  FROM queue.dead_letters d JOIN queue.stats() s USING (queue_name)
 WHERE d.item_id IN (:l_spx_deq_id, :l_spx_swp_id) ORDER BY d.queue_name;
SELECT queue.drop_queue('l_spx_deq', force => true), queue.drop_queue('l_spx_swp', force => true);

SELECT queue.drop_queue(q, force => true) FROM unnest('{l_lost,l_deq,l_spent,l_off,l_rec,l_late,l_hold,l_hold3,l_twice}'::text[]) q;
