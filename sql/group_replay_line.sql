-- Ordered groups and replay: a group's head is its lowest-id live item,
-- and a replay is a new item.  Only the replay of the dead head that
-- blocks its group (group_on_dead = 'block') becomes the head; the
-- replay of any other dead letter of the group (a member cancelled or
-- expired while it waited, a head whose group already moved on) joins
-- the back of the line, behind the members enqueued before it.
\set VERBOSITY terse

CREATE ROLE regress_grl_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_grl_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_grl_worker LOGIN IN ROLE queue_worker;

SET ROLE regress_grl_admin;
SELECT queue.create_queue('grl', group_on_dead => 'block', max_attempts => 1);
RESET ROLE;

-- case: a member cancelled while it waited, replayed while the head runs
SET ROLE regress_grl_producer;
SELECT queue.enqueue('grl', '{"n": 1}', group_key => 'a') AS a1 \gset
SELECT queue.enqueue('grl', '{"n": 2}', group_key => 'a') AS a2 \gset
SELECT queue.enqueue('grl', '{"n": 3}', group_key => 'a') AS a3 \gset
RESET ROLE;
SET ROLE regress_grl_admin;
SELECT queue.cancel('grl', :a2, 'not needed');
SELECT queue.replay('grl', :a2) > :a3 AS replay_is_newest;
RESET ROLE;
SET ROLE regress_grl_worker;
SELECT item_id, lease_token FROM queue.dequeue('grl', 'grl-w') \gset
SELECT :item_id = :a1 AS head_first;
SELECT queue.complete('grl', :item_id, :lease_token);
-- the next in line is the member enqueued before the replay
SELECT payload->>'n' AS n FROM queue.dequeue('grl', 'grl-w', batch_size => 10);
RESET ROLE;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'grl' AND group_key = 'a' ORDER BY item_id;

-- case: the dead head that blocks its group: its replay is the head
SET ROLE regress_grl_producer;
SELECT queue.enqueue('grl', '{"n": 1}', group_key => 'b') AS b1 \gset
SELECT queue.enqueue('grl', '{"n": 2}', group_key => 'b') AS b2 \gset
RESET ROLE;
SET ROLE regress_grl_worker;
SELECT item_id, lease_token FROM queue.dequeue('grl', 'grl-w') \gset
SELECT :item_id = :b1 AS head_first;
SELECT queue.fail('grl', :item_id, :lease_token, 'boom');
SELECT count(*) AS while_blocked FROM queue.dequeue('grl', 'grl-w', batch_size => 10);
RESET ROLE;
SET ROLE regress_grl_admin;
SELECT queue.replay('grl', :b1) AS b1r \gset
RESET ROLE;
SET ROLE regress_grl_worker;
SELECT item_id = :b1r AS replay_is_head FROM queue.dequeue('grl', 'grl-w', batch_size => 10);
RESET ROLE;

-- case: a dead head whose group moved on (rejected), replayed later:
-- the group is not waiting for it, so it joins the back
SET ROLE regress_grl_producer;
SELECT queue.enqueue('grl', '{"n": 1}', group_key => 'c') AS c1 \gset
SELECT queue.enqueue('grl', '{"n": 2}', group_key => 'c') AS c2 \gset
SELECT queue.enqueue('grl', '{"n": 3}', group_key => 'c') AS c3 \gset
RESET ROLE;
SET ROLE regress_grl_worker;
SELECT item_id, lease_token FROM queue.dequeue('grl', 'grl-w') \gset
SELECT :item_id = :c1 AS head_first;
SELECT queue.fail('grl', :item_id, :lease_token, 'boom');
RESET ROLE;
SET ROLE regress_grl_admin;
SELECT queue.review('grl', :c1, 'rejected');
RESET ROLE;
SET ROLE regress_grl_worker;
SELECT item_id, lease_token FROM queue.dequeue('grl', 'grl-w') \gset
SELECT :item_id = :c2 AS group_moved_on;
RESET ROLE;
SET ROLE regress_grl_admin;
SELECT queue.replay('grl', :c1) AS c1r \gset
RESET ROLE;
SET ROLE regress_grl_worker;
SELECT queue.complete('grl', :item_id, :lease_token);
SELECT item_id = :c3 AS c3_before_replay FROM queue.dequeue('grl', 'grl-w', batch_size => 10);
RESET ROLE;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'grl' AND group_key = 'c' ORDER BY item_id;

SELECT count(*) AS dropped FROM (SELECT queue.drop_queue(q, force => true)
                                   FROM unnest(ARRAY['grl']) q) d;
DELETE FROM queue.worker_registry WHERE worker IN ('grl-w');
DROP ROLE regress_grl_admin;
DROP ROLE regress_grl_producer;
DROP ROLE regress_grl_worker;
