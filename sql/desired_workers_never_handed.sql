-- desired_workers counts the items a worker could be handed now (plus
-- those processing): not those dequeue never hands out and buries when it
-- meets them, an item past its expires_at or a lost lease whose attempts
-- are spent, so an autoscaler reads before a sweep what it reads after.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

CREATE ROLE regress_dn_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_dn_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_dn_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_dn_reader LOGIN IN ROLE queue_reader;

SET ROLE regress_dn_admin;
SELECT queue.create_queue('dn_q', max_attempts => 3, lease_timeout => '1 h');
SELECT queue.set_limit('dn_q', 'erp', max_in_flight => 1);
SET ROLE regress_dn_producer;
-- claimed first (priority 0): a lost lease on its last attempt, a lost
-- lease with attempts left, a lease held, a lease held past its expiry
SELECT queue.enqueue('dn_q', '{"k": "spent"}', priority => 0, max_attempts => 1) AS spent \gset
SELECT queue.enqueue('dn_q', '{"k": "lost"}', priority => 0) AS lost \gset
SELECT queue.enqueue('dn_q', '{"k": "held"}', priority => 0) AS held \gset
SELECT queue.enqueue('dn_q', '{"k": "held, expired"}', priority => 0,
                     expires_at => now() + interval '1 h') AS held_expired \gset
-- left queued: one claimable, one that expires, and a limited key with
-- room for one item, one of its two items expiring
SELECT queue.enqueue('dn_q', '{"k": "queued"}') AS queued \gset
SELECT queue.enqueue('dn_q', '{"k": "expired"}', expires_at => now() + interval '1 h') AS expired \gset
SELECT queue.enqueue('dn_q', '{"k": "erp"}', limit_key => 'erp') AS erp \gset
SELECT queue.enqueue('dn_q', '{"k": "erp, expired"}', limit_key => 'erp',
                     expires_at => now() + interval '1 h') AS erp_expired \gset
SET ROLE regress_dn_bot;
SELECT payload->>'k' AS claimed FROM queue.dequeue('dn_q', 'dn-bot', batch_size => 4) ORDER BY item_id;
RESET ROLE;
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'dn_q' AND item_id IN (:spent, :lost);
UPDATE queue.item_live SET expires_at = now() - interval '1 s'
 WHERE queue_name = 'dn_q' AND item_id IN (:held_expired, :expired, :erp_expired);

-- case: a worker could be handed the lost lease with attempts left, the
-- queued item and one erp item; two leases are processing: 5 workers
SET ROLE regress_dn_reader;
SELECT queue.desired_workers('dn_q') AS desired, queue.desired_workers('dn_q', 2) AS desired_two_each;

-- case: sweep buries the expired item and the spent lost lease, and
-- desired_workers says the same as before
SET ROLE regress_dn_admin;
SELECT queue_name, dead_lettered, expired FROM queue.sweep() WHERE queue_name = 'dn_q';
SELECT payload->>'k' AS dead, reason FROM queue.dead_letters WHERE queue_name = 'dn_q' ORDER BY item_id;
SET ROLE regress_dn_reader;
SELECT queue.desired_workers('dn_q') AS desired_after_sweep;

RESET ROLE;
SELECT queue.drop_queue('dn_q', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'dn-bot';
DROP ROLE regress_dn_admin, regress_dn_producer, regress_dn_bot, regress_dn_reader;
