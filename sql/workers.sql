-- Workers: registration, restart, ownership, heartbeats and signs of life.
\set VERBOSITY terse

CREATE ROLE regress_wk_a LOGIN IN ROLE queue_worker;
CREATE ROLE regress_wk_b LOGIN IN ROLE queue_worker;
CREATE ROLE regress_wk_admin LOGIN IN ROLE queue_admin;
SELECT queue.create_queue('w_q', lease_timeout => '5 min', max_attempts => 3);
SELECT queue.create_queue('w_closed', lease_timeout => '5 min');
SELECT queue.grant_queue('w_closed', 'regress_wk_a', 'worker');
SELECT count(*) FROM queue.enqueue_batch('w_q', array_fill('{}'::jsonb, ARRAY[10]));
SELECT count(*) FROM queue.enqueue_batch('w_closed', array_fill('{}'::jsonb, ARRAY[2]));

-- case: register_worker stores labels for capability routing
SELECT queue.register_worker('w-labels', labels => ARRAY['ocr', 'sap']);
SELECT worker, labels FROM queue.worker_registry WHERE worker = 'w-labels';

-- case: restart ends every lease still held under the name as a lost lease:
-- attempt counted, error 'worker restarted', items claimable at once
CREATE TEMP TABLE w_old AS SELECT item_id, lease_token FROM queue.dequeue('w_q', 'w-restart', batch_size => 2);
SELECT queue.register_worker('w-restart', restart => true);
SELECT state, attempt, worker, last_error FROM queue.items
 WHERE queue_name = 'w_q' AND item_id IN (SELECT item_id FROM w_old) ORDER BY item_id;
SELECT e->>'error' AS error, e->>'error_code' AS code, e->>'worker' AS worker, e->>'attempt' AS attempt
  FROM queue.item_live i, jsonb_array_elements(i.errors) e
 WHERE i.queue_name = 'w_q' AND i.item_id IN (SELECT item_id FROM w_old) ORDER BY i.item_id;
SELECT kind, error_code, count(*) FROM queue.failure_log WHERE queue_name = 'w_q' GROUP BY 1, 2;
SELECT failed_1h FROM queue.stats('w_q');
-- the old tokens no longer work
SELECT queue.complete('w_q', item_id, lease_token) AS old_complete FROM w_old ORDER BY item_id;
-- the next claim gets them back at once, attempt 2
SELECT d.attempt FROM queue.dequeue('w_q', 'w-restart', batch_size => 10) d
 WHERE d.item_id IN (SELECT item_id FROM w_old) ORDER BY d.item_id;
SELECT count(*) AS released FROM (
    SELECT queue.release('w_q', i.item_id, i.lease_token) FROM queue.item_live i
     WHERE i.queue_name = 'w_q' AND i.worker = 'w-restart' AND i.item_id NOT IN (SELECT item_id FROM w_old)) x;

-- case: restart on the last attempt makes a dead letter
SELECT queue.create_queue('w_last', max_attempts => 1);
SELECT queue.enqueue('w_last', '{}') > 0 AS enqueued;
SELECT count(*) FROM queue.dequeue('w_last', 'w-last');
SELECT queue.register_worker('w-last', restart => true);
SELECT reason, last_error, error_code FROM queue.dead_letters WHERE queue_name = 'w_last';

-- case: a queue_worker may register only a new name or one it registered
SET ROLE regress_wk_a;
SELECT queue.register_worker('w-own-a', capacity => 2);
SELECT queue.register_worker('w-own-a', capacity => 3);
RESET ROLE;
SET ROLE regress_wk_b;
SELECT queue.register_worker('w-own-a', capacity => 50);
SELECT queue.register_worker('w-own-a', restart => true);
RESET ROLE;
SET ROLE regress_wk_admin;
SELECT queue.register_worker('w-own-a', capacity => 4);
RESET ROLE;
SELECT worker, capacity, registered_by FROM queue.worker_registry WHERE worker = 'w-own-a';
-- a worker registered by its first dequeue belongs to the dequeuing role
SET ROLE regress_wk_b;
SELECT count(*) FROM queue.dequeue('w_q', 'w-own-b');
RESET ROLE;
SELECT worker, registered_by FROM queue.worker_registry WHERE worker = 'w-own-b';
SET ROLE regress_wk_a;
SELECT queue.register_worker('w-own-b', restart => true);
RESET ROLE;

-- case: heartbeat renews only leases in queues the caller may work
SET ROLE regress_wk_a;
CREATE TEMP TABLE w_shared AS SELECT item_id, lease_token FROM queue.dequeue('w_closed', 'w-shared');
RESET ROLE;
UPDATE queue.item_live SET lease_expires_at = now() + interval '1 min'
 WHERE queue_name = 'w_closed' AND worker = 'w-shared';
SET ROLE regress_wk_b;
SELECT queue.heartbeat('w-shared') AS renewed_by_b;
RESET ROLE;
SELECT lease_expires_at < now() + interval '2 min' AS not_renewed FROM queue.item_live
 WHERE queue_name = 'w_closed' AND worker = 'w-shared';
SET ROLE regress_wk_a;
SELECT queue.heartbeat('w-shared') AS renewed_by_a;
RESET ROLE;

-- case: signs of life: every per-item call of a worker refreshes last_seen
CREATE TEMP TABLE w_life AS SELECT item_id, lease_token FROM queue.dequeue('w_q', 'w-life', batch_size => 5);
CREATE FUNCTION pg_temp.age_worker(w text) RETURNS void LANGUAGE sql AS $$
    UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = w
$$;
CREATE FUNCTION pg_temp.fresh(w text) RETURNS boolean LANGUAGE sql AS $$
    SELECT last_seen > now() - interval '1 min' FROM queue.worker_registry WHERE worker = w
$$;
SELECT pg_temp.age_worker('w-life');
SELECT queue.extend_lease('w_q', item_id, lease_token) IS NOT NULL AS extended FROM w_life ORDER BY item_id LIMIT 1;
SELECT pg_temp.fresh('w-life') AS after_extend_lease;
SELECT pg_temp.age_worker('w-life');
SELECT queue.checkpoint('w_q', item_id, lease_token, '{"step": 1}') FROM w_life ORDER BY item_id LIMIT 1;
SELECT pg_temp.fresh('w-life') AS after_checkpoint;
SELECT pg_temp.age_worker('w-life');
SELECT queue.release('w_q', item_id, lease_token) FROM w_life ORDER BY item_id LIMIT 1;
SELECT pg_temp.fresh('w-life') AS after_release;
SELECT pg_temp.age_worker('w-life');
SELECT queue.fail('w_q', item_id, lease_token, 'boom') FROM w_life ORDER BY item_id OFFSET 1 LIMIT 1;
SELECT pg_temp.fresh('w-life') AS after_fail;
SELECT pg_temp.age_worker('w-life');
SELECT queue.complete('w_q', item_id, lease_token) FROM w_life ORDER BY item_id OFFSET 2 LIMIT 1;
SELECT pg_temp.fresh('w-life') AS after_complete;
-- a worker that keeps extending is never offline: sweep leaves its item alone
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'w-life';
SELECT queue.extend_lease('w_q', item_id, lease_token) IS NOT NULL AS extended FROM w_life ORDER BY item_id OFFSET 3 LIMIT 1;
SELECT recovered FROM queue.sweep() WHERE queue_name = 'w_q';
SELECT queue.complete('w_q', item_id, lease_token) AS completes FROM w_life ORDER BY item_id OFFSET 3 LIMIT 1;

-- case: heartbeat never keeps alive a lease whose claim reply was lost: a
-- worker claims on the connection it heartbeats on, the connection drops
-- before the reply arrives, and the bot heartbeats from a new connection
SELECT queue.register_worker('w-lost');
CREATE TABLE public.w_lost_claim AS SELECT item_id, lease_token FROM queue.dequeue('w_q', 'w-lost');
SELECT queue.heartbeat('w-lost') AS renewed_on_claim_connection;
\c
SELECT queue.heartbeat('w-lost') AS renewed_after_reconnect;
SELECT queue.heartbeat('w-lost') AS renewed_later;
-- the bot still knows the item: extending it makes it tracked again
SELECT queue.extend_lease('w_q', item_id, lease_token) IS NOT NULL AS extended FROM public.w_lost_claim;
SELECT queue.heartbeat('w-lost') AS renewed_after_extend;

-- case: a bot that opens a connection per call (psql scripts) keeps its
-- leases alive with heartbeat once it has registered (a worker registered
-- by its first dequeue is bound to that connection, test/t/040_worker_crash.pl)
SELECT queue.register_worker('w-cli');
\c
CREATE TABLE public.w_cli_claim AS SELECT item_id, lease_token FROM queue.dequeue('w_q', 'w-cli');
\c
SELECT queue.heartbeat('w-cli') AS renewed_1;
\c
SELECT queue.heartbeat('w-cli') AS renewed_2;
\c
SELECT queue.heartbeat('w-cli') AS renewed_3;
\set VERBOSITY terse

-- case: a heartbeat is no news for the caches: after one, the next dequeue
-- of this session reads neither the settings nor the worker row again
CREATE FUNCTION pg_temp.scans() RETURNS bigint LANGUAGE sql AS $$
    SELECT sum(idx_scan + seq_scan)::bigint FROM pg_stat_xact_user_tables
     WHERE schemaname = 'queue' AND relname IN ('queue_config', 'worker_registry')
$$;
BEGIN;
SELECT count(*) FROM queue.dequeue('w_q', 'w-cache');
SELECT count(*) FROM queue.dequeue('w_q', 'w-cache');
SELECT queue.heartbeat('w-cache') >= 0 AS beat;
SELECT queue.register_worker('w-cache', info => '{"v": 2}');
SELECT pg_temp.scans() AS before \gset
SELECT count(*) FROM queue.dequeue('w_q', 'w-cache');
SELECT pg_temp.scans() - :before AS settings_and_worker_reads;
COMMIT;

-- case: a worker first named by drain_worker or add_maintenance is seen
-- by its first dequeue (never seen before is not "seen long ago"), so the
-- sweep does not take its new lease away as an offline worker's
SELECT queue.create_queue('w_named', lease_timeout => '1 hour');
SELECT count(*) FROM queue.enqueue_batch('w_named', array_fill('{}'::jsonb, ARRAY[2]));
SELECT queue.drain_worker('w-named-d');
SELECT queue.undrain_worker('w-named-d');
SELECT queue.add_maintenance('w-named-m', now() + interval '1 h', now() + interval '2 h') > 0 AS added;
CREATE TABLE public.w_named_claim AS
SELECT w.worker, d.item_id, d.lease_token
  FROM (VALUES ('w-named-d'), ('w-named-m')) w(worker), LATERAL queue.dequeue('w_named', w.worker) d;
SELECT worker, status, last_seen > now() - interval '1 min' AS seen_now
  FROM queue.workers WHERE worker LIKE 'w-named-%' ORDER BY worker;
SELECT recovered FROM queue.sweep() WHERE queue_name = 'w_named';
SELECT worker, queue.complete('w_named', item_id, lease_token) AS completed
  FROM public.w_named_claim ORDER BY worker;

-- case: with queue.worker_offline_after below dequeue's usual refresh
-- interval, a worker that only dequeues stays active and keeps its leases
SET queue.worker_offline_after = 2;
SELECT queue.create_queue('w_short', lease_timeout => '1 hour');
SELECT count(*) FROM queue.enqueue_batch('w_short', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM queue.dequeue('w_short', 'w-dq-only');
SELECT pg_sleep(1.2);
SELECT count(*) FROM queue.dequeue('w_short', 'w-dq-only');
SELECT pg_sleep(1.2);
SELECT count(*) FROM queue.dequeue('w_short', 'w-dq-only');
SELECT status FROM queue.workers WHERE worker = 'w-dq-only';
SELECT recovered FROM queue.sweep() WHERE queue_name = 'w_short';
RESET queue.worker_offline_after;

-- case: draining workers get nothing new, also when drained before they
-- were ever seen: the sweep's forgetting of long-gone workers keeps a
-- draining worker, and one with a maintenance window now or ahead
SELECT queue.create_queue('w_pre', lease_timeout => '1 hour');
SELECT count(*) FROM queue.enqueue_batch('w_pre', array_fill('{}'::jsonb, ARRAY[2]));
SELECT queue.drain_worker('w-pre-d');
SELECT queue.add_maintenance('w-pre-m', now() - interval '1 min', now() + interval '1 h') > 0 AS added;
SELECT count(*) > 0 AS swept FROM queue.sweep();
SELECT worker, draining FROM queue.worker_registry WHERE worker LIKE 'w-pre-%' ORDER BY worker;
SELECT w.worker, count(d.item_id) AS claimed
  FROM (VALUES ('w-pre-d'), ('w-pre-m')) w(worker)
  LEFT JOIN LATERAL queue.dequeue('w_pre', w.worker) d ON true
 GROUP BY w.worker ORDER BY w.worker;
DELETE FROM queue.maintenance_window WHERE worker LIKE 'w-pre-%';
DELETE FROM queue.worker_registry WHERE worker LIKE 'w-pre-%';

-- case: claim order holds across offline recovery and restarts.  An item
-- whose lease ran out became claimable at the lease's end: ending that
-- lease afterwards (its worker offline, or restarted) leaves it ahead of
-- the items that became claimable after it; a lease ended before its end
-- makes the item claimable at that moment, behind those already waiting.
SELECT queue.create_queue('w_order', lease_timeout => '1 hour');
SELECT queue.enqueue('w_order', '{"n": "expired-offline"}') AS o1 \gset
SELECT queue.enqueue('w_order', '{"n": "expired-restarted"}') AS o2 \gset
SELECT queue.enqueue('w_order', '{"n": "current-offline"}') AS o3 \gset
SELECT count(*) FROM queue.dequeue('w_order', 'w-ord-gone', 2);
SELECT count(*) FROM queue.dequeue('w_order', 'w-ord-ghost', 1);
-- the first two leases ran out a minute ago; w-ord-gone and w-ord-ghost
-- have not been seen for a day
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 min',
                           visible_at = now() - interval '1 min'
 WHERE queue_name = 'w_order' AND item_id IN (:o1, :o2);
UPDATE queue.item_live SET worker = 'w-ord-restart' WHERE queue_name = 'w_order' AND item_id = :o2;
SELECT queue.register_worker('w-ord-restart');
UPDATE queue.worker_registry SET last_seen = now() - interval '1 day'
 WHERE worker IN ('w-ord-gone', 'w-ord-ghost');
-- an item that became claimable after those leases ran out
SELECT queue.enqueue('w_order', '{"n": "later"}') AS o4 \gset
SELECT queue.register_worker('w-ord-restart', restart => true);
SELECT recovered FROM queue.sweep() WHERE queue_name = 'w_order';
SELECT payload->>'n' AS item, state, last_error FROM queue.items
 WHERE queue_name = 'w_order' ORDER BY item_id;
SELECT d.payload->>'n' AS claimed_in_order, d.attempt FROM queue.dequeue('w_order', 'w-ord-next', 4) d;

DROP TABLE public.w_lost_claim, public.w_cli_claim, public.w_named_claim;
SELECT queue.drop_queue(q, force => true) FROM unnest('{w_q,w_closed,w_last,w_named,w_short,w_pre,w_order}'::text[]) q;
DROP OWNED BY regress_wk_a, regress_wk_b, regress_wk_admin;
DROP ROLE regress_wk_a, regress_wk_b, regress_wk_admin;
