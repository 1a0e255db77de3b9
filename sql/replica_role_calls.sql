-- Calls made by roles whose sessions run with session_replication_role =
-- replica (set for them by a superuser, as for a replication or restore
-- tool's role) keep every promise of ordered groups and per-key caps: the
-- extension's own bookkeeping is not switched off with the user triggers
-- that replica mode is for.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE ROLE regress_rr_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_rr_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_rr_worker LOGIN IN ROLE queue_worker;
ALTER ROLE regress_rr_admin SET session_replication_role = replica;
ALTER ROLE regress_rr_producer SET session_replication_role = replica;
ALTER ROLE regress_rr_worker SET session_replication_role = replica;

\c - regress_rr_admin
SHOW session_replication_role;
SELECT queue.create_queue('rr_flow');
SELECT queue.set_limit('rr_flow', 'erp', max_in_flight => 1);

\c - regress_rr_producer
SHOW session_replication_role;
SELECT queue.enqueue('rr_flow', '{"n": 1}', group_key => 'order-1') AS g1 \gset
SELECT queue.enqueue('rr_flow', '{"n": 2}', group_key => 'order-1') AS g2 \gset
SELECT queue.enqueue('rr_flow', '{"n": 3}', limit_key => 'erp') AS k1 \gset
SELECT queue.enqueue('rr_flow', '{"n": 4}', limit_key => 'erp') AS k2 \gset
SELECT queue.enqueue('rr_flow', '{"n": 5}', group_key => 'order-2') AS h1 \gset
SELECT queue.enqueue('rr_flow', '{"n": 6}', group_key => 'order-2') AS h2 \gset

-- case: an admin in replica mode holds the head of order-2: the group waits
\c - regress_rr_admin
SELECT queue.hold('rr_flow', :h1, 'check the address');

-- case: one item per group, one lease for the capped key, nothing of the
-- group whose head is on hold
\c - regress_rr_worker
SHOW session_replication_role;
CREATE TEMP TABLE claimed AS
    SELECT item_id, lease_token, payload FROM queue.dequeue('rr_flow', 'rrc_bot', 10);
SELECT payload FROM claimed ORDER BY item_id;
SELECT count(*) AS second_claim FROM queue.dequeue('rr_flow', 'rrc_bot', 10);

-- case: completing the group's head and the key's lease lets the next
-- item of each go
SELECT queue.complete_batch('rr_flow', array_agg(item_id ORDER BY item_id),
                            array_agg(lease_token ORDER BY item_id)) AS completed
  FROM claimed;
SELECT payload FROM queue.dequeue('rr_flow', 'rrc_bot', 10) ORDER BY item_id;

-- case: the held head, released by the admin, is the next of its group
\c - regress_rr_admin
SELECT queue.unhold('rr_flow', :h1);
\c - regress_rr_worker
SELECT payload FROM queue.dequeue('rr_flow', 'rrc_bot', 10) ORDER BY item_id;
SELECT state, count(*) FROM queue.items WHERE queue_name = 'rr_flow' GROUP BY 1 ORDER BY 1;

-- case: the session stays in replica mode after a call, also after one
-- that failed
SHOW session_replication_role;
SELECT queue.complete('rr_flow', NULL, 1);
SHOW session_replication_role;

\c - regress_rr_admin
SELECT queue.drop_queue('rr_flow', force => true);
\c - postgres
SET client_min_messages = warning;
DROP ROLE regress_rr_admin;
DROP ROLE regress_rr_producer;
DROP ROLE regress_rr_worker;
