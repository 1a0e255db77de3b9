-- Flow control for the granted roles: ordered groups and limited keys work
-- for producers, workers and admins that are not superusers, commit
-- included (the group and key bookkeeping runs when the transaction
-- commits, after the API function has returned).
\set VERBOSITY terse

CREATE ROLE regress_fr_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_fr_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_fr_worker LOGIN IN ROLE queue_worker;

SELECT queue.create_queue('fr_q', max_attempts => 3);
SELECT queue.create_queue('fr_block', group_on_dead => 'block', max_attempts => 1);
SELECT queue.set_limit('fr_q', 'erp', max_in_flight => 5);

-- case: a producer enqueues grouped and limited items, one by one and in a batch
SET ROLE regress_fr_producer;
SELECT queue.enqueue('fr_q', '{"n": 1}', group_key => 'g1') > 0 AS grouped;
SELECT queue.enqueue('fr_q', '{"n": 2}', group_key => 'g1') > 0 AS grouped;
SELECT queue.enqueue('fr_q', '{"n": 3}', limit_key => 'erp') > 0 AS limited;
SELECT count(*) FROM queue.enqueue_batch('fr_q', ARRAY['{"n": 4}', '{"n": 5}']::jsonb[],
                                         group_keys => ARRAY['g2', 'g2']);
SELECT count(*) FROM queue.enqueue_batch('fr_q', ARRAY['{"n": 6}', '{"n": 7}']::jsonb[],
                                         limit_keys => ARRAY['erp', 'erp']);
RESET ROLE;
SELECT payload->>'n' AS n, group_key, limit_key FROM queue.item_live
 WHERE queue_name = 'fr_q' ORDER BY item_id;

-- case: a worker completes a group's head, fails and releases items of a
-- limited key; the group moves on, the released item comes back
SET ROLE regress_fr_worker;
CREATE TEMP TABLE fr_held AS
SELECT payload->>'n' AS n, item_id, lease_token FROM queue.dequeue('fr_q', 'fr-w', batch_size => 10);
SELECT n FROM fr_held ORDER BY n;
SELECT queue.complete('fr_q', item_id, lease_token) AS completed FROM fr_held WHERE n = '1';
SELECT queue.fail('fr_q', item_id, lease_token, 'ERP down', 'ERP_DOWN') AS failed FROM fr_held WHERE n = '3';
SELECT queue.release('fr_q', item_id, lease_token) AS released FROM fr_held WHERE n = '6';
SELECT payload->>'n' AS n FROM queue.dequeue('fr_q', 'fr-w', batch_size => 10) ORDER BY 1;
DROP TABLE fr_held;
RESET ROLE;
SELECT payload->>'n' AS n, state FROM queue.items WHERE queue_name = 'fr_q' ORDER BY item_id;

-- case: an admin enqueues into a group, cancels a grouped item, resolves
-- and replays a group's dead head, purges and drops the queue
SET ROLE regress_fr_admin;
SELECT queue.enqueue('fr_block', '{"n": 1}', group_key => 'b') > 0 AS grouped;
SELECT queue.enqueue('fr_block', '{"n": 2}', group_key => 'b') > 0 AS grouped;
SELECT queue.enqueue('fr_block', '{"n": 3}', group_key => 'b') > 0 AS grouped;
SELECT queue.fail('fr_block', item_id, lease_token, 'bad', permanent => true) AS dead
  FROM queue.dequeue('fr_block', 'fr-a');
SELECT count(*) AS blocked FROM queue.dequeue('fr_block', 'fr-a');
SELECT queue.replay('fr_block', item_id) > 0 AS replayed
  FROM queue.dead_letters WHERE queue_name = 'fr_block';
SELECT queue.fail('fr_block', item_id, lease_token, 'bad again', permanent => true) AS dead
  FROM queue.dequeue('fr_block', 'fr-a');
SELECT queue.review('fr_block', item_id, 'resolved') AS resolved
  FROM queue.dead_letters WHERE queue_name = 'fr_block' AND review_status = 'new';
SELECT payload->>'n' AS after_resolve FROM queue.dequeue('fr_block', 'fr-a');
SELECT queue.cancel('fr_block', item_id) AS cancelled
  FROM queue.items WHERE queue_name = 'fr_block' AND state = 'queued';
SELECT queue.purge('fr_q') AS purged;
SELECT queue.drop_queue('fr_q', force => true);
SELECT queue.drop_queue('fr_block', force => true);
RESET ROLE;

DROP ROLE regress_fr_admin, regress_fr_producer, regress_fr_worker;
