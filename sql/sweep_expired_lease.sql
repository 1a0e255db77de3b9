-- sweep counts an item once: an item whose lease ran out and whose
-- expires_at has passed becomes a dead letter (expired), and is not also
-- reported as recovered (recovered items are claimable again).  Its lost
-- lease still counts once as a failed attempt.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

SELECT queue.create_queue('se_q', lease_timeout => '1 min');
SELECT queue.enqueue('se_q', '{"k": "expiring"}', expires_at => now() + interval '1 h') AS x \gset
SELECT queue.enqueue('se_q', '{"k": "lost only"}') AS l \gset
SELECT count(*) AS claimed FROM queue.dequeue('se_q', 'w1', batch_size => 2);
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'se_q';
UPDATE queue.item_live SET expires_at = now() - interval '1 s'
 WHERE queue_name = 'se_q' AND item_id = :x;

-- case: one recovered (claimable again), one expired, nothing else
SELECT recovered, dead_lettered, expired, aged, purged FROM queue.sweep() WHERE queue_name = 'se_q';
SELECT payload->>'k' AS k, state FROM queue.items WHERE queue_name = 'se_q' ORDER BY item_id;
SELECT payload->>'k' AS k, reason, attempts FROM queue.dead_letters WHERE queue_name = 'se_q';
-- both lost leases are failed attempts, once each
SELECT failed_1h FROM queue.stats('se_q');
-- the expiring item's trail is that of a dequeue meeting it: failed, then
-- expired (it was never claimable again: no recovered event)
SELECT e.kind FROM queue.events e WHERE e.queue_name = 'se_q' AND e.item_id = :x ORDER BY e.event_id;
SELECT jsonb_array_length(errors) AS errors, errors -> 0 ->> 'error_code' AS code
  FROM queue.dead_letters WHERE queue_name = 'se_q' AND item_id = :x;

-- case: idempotent
SELECT recovered, dead_lettered, expired, aged, purged FROM queue.sweep() WHERE queue_name = 'se_q';
SELECT failed_1h FROM queue.stats('se_q');

SELECT queue.drop_queue('se_q', force => true);

-- case: the same for a lease that offline recovery ends: an item of an
-- offline worker that is past its expires_at is expired, not recovered
-- (its ended lease is one failed attempt)
SELECT queue.create_queue('se_off', lease_timeout => '1 h');
SELECT queue.enqueue('se_off', '{"k": "expiring"}', expires_at => now() + interval '1 h') AS ox \gset
SELECT queue.enqueue('se_off', '{"k": "recovered"}') AS ol \gset
SELECT count(*) AS claimed FROM queue.dequeue('se_off', 'se-w-off', batch_size => 2);
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'se-w-off';
UPDATE queue.item_live SET expires_at = now() - interval '1 s'
 WHERE queue_name = 'se_off' AND item_id = :ox;
SELECT recovered, dead_lettered, expired, aged, purged FROM queue.sweep() WHERE queue_name = 'se_off';
SELECT payload->>'k' AS k, state FROM queue.items WHERE queue_name = 'se_off' ORDER BY item_id;
SELECT payload->>'k' AS k, reason, attempts FROM queue.dead_letters WHERE queue_name = 'se_off';
SELECT failed_1h FROM queue.stats('se_off');
SELECT queue.drop_queue('se_off', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'se-w-off';
