-- Caps stay exact, and no stricter than the cap: reviving an expired lease
-- nobody took over (extend_lease, heartbeat) is refused only where the
-- queue's max_in_flight is full.  With a cap of 2 and one other lease
-- held, the revival fits, whichever share of the cap (stripe) the other
-- lease was charged to.
\set VERBOSITY terse

CREATE ROLE regress_rc_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_rc_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_rc_bot LOGIN IN ROLE queue_worker;

SET ROLE regress_rc_admin;
SELECT queue.create_queue('rc_capped', max_in_flight => 2);
SET ROLE regress_rc_producer;
SELECT count(*) FROM queue.enqueue_batch('rc_capped', array_fill('{}'::jsonb, ARRAY[3]));
SET ROLE regress_rc_bot;
-- a lease that runs out at once, then two leases filling the cap
CREATE TEMP TABLE rc_lost AS
  SELECT item_id, lease_token FROM queue.dequeue('rc_capped', 'rc-one', lease_timeout => '1 microsecond');
SELECT count(*) AS claimed FROM queue.dequeue('rc_capped', 'rc-two', 2);
RESET ROLE;
-- keep the lease charged to the lost lease's share, complete the other
SELECT queue.complete('rc_capped', i.item_id, i.lease_token)
  FROM queue.item_live i
 WHERE i.queue_name = 'rc_capped' AND i.worker = 'rc-two'
   AND i.cap_stripe IS DISTINCT FROM (SELECT l.cap_stripe FROM queue.item_live l
                                        JOIN rc_lost USING (item_id)
                                       WHERE l.queue_name = 'rc_capped');
SET ROLE regress_rc_bot;
SELECT count(*) AS leases_held FROM queue.items
 WHERE queue_name = 'rc_capped' AND state = 'processing';
-- one lease of two held: the holder of the expired lease gets it back
SELECT queue.extend_lease('rc_capped', item_id, lease_token) IS NOT NULL AS revived
  FROM rc_lost;
SELECT count(*) AS leases_held FROM queue.items
 WHERE queue_name = 'rc_capped' AND state = 'processing';
-- now the cap is full: a claim gets nothing
SELECT count(*) AS claimed FROM queue.dequeue('rc_capped', 'rc-three');
RESET ROLE;

SELECT queue.drop_queue('rc_capped', force => true);
DROP TABLE rc_lost;
DROP ROLE regress_rc_admin, regress_rc_producer, regress_rc_bot;
