-- register_worker(restart => true) ends the leases still held under the
-- name only in queues the caller may work, as heartbeat renews only those:
-- worker names are global, so another tenant's bot may claim under a name
-- a role registered first, and that role's restart must not end (and, on
-- the last attempt, dead-letter) an item of a queue closed to it.
\set VERBOSITY terse
SET client_min_messages = warning;

CREATE ROLE regress_rt_a LOGIN IN ROLE queue_worker;
CREATE ROLE regress_rt_b LOGIN IN ROLE queue_worker;
SELECT queue.create_queue('rt_open', max_attempts => 1);
SELECT queue.create_queue('rt_closed', max_attempts => 1);
SELECT queue.grant_queue('rt_closed', 'regress_rt_b', 'worker');
SELECT queue.enqueue('rt_open', '{"q": "open"}') AS open_id \gset
SELECT queue.enqueue('rt_closed', '{"q": "closed"}') AS closed_id \gset

-- tenant A registers the name; both tenants' bots claim under it
SET SESSION AUTHORIZATION regress_rt_a;
SELECT queue.register_worker('rt-bot-1');
SELECT count(*) AS a_claimed FROM queue.dequeue('rt_open', 'rt-bot-1');
SELECT * FROM queue.dequeue('rt_closed', 'rt-bot-1');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_rt_b;
SELECT item_id = :closed_id AS b_claimed, lease_token AS b_token
  FROM queue.dequeue('rt_closed', 'rt-bot-1') \gset
SELECT :'b_claimed' AS b_claimed;
RESET SESSION AUTHORIZATION;

-- case: tenant A's restart ends its own lease in the queue it works, and
-- leaves tenant B's lease in the queue closed to it
SET SESSION AUTHORIZATION regress_rt_a;
SELECT queue.register_worker('rt-bot-1', restart => true);
RESET SESSION AUTHORIZATION;
SELECT 'rt_closed' AS queue_name, state, attempt, reason FROM queue.item('rt_closed', :closed_id);
SELECT 'rt_open' AS queue_name, state, attempt, reason FROM queue.item('rt_open', :open_id);

-- case: tenant B's bot still holds its lease and completes the item
SET SESSION AUTHORIZATION regress_rt_b;
SELECT queue.complete('rt_closed', :closed_id, :b_token) AS completed;
RESET SESSION AUTHORIZATION;

-- case: an admin's restart ends the leases under the name in every queue
SELECT queue.enqueue('rt_closed', '{"q": "closed 2"}') AS closed2_id \gset
SET SESSION AUTHORIZATION regress_rt_b;
SELECT count(*) AS b_claimed FROM queue.dequeue('rt_closed', 'rt-bot-1');
RESET SESSION AUTHORIZATION;
SELECT queue.register_worker('rt-bot-1', restart => true);
SELECT state, attempt, reason FROM queue.item('rt_closed', :closed2_id);

SELECT queue.drop_queue('rt_open', force => true);
SELECT queue.drop_queue('rt_closed', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'rt-bot-1';
DROP ROLE regress_rt_a, regress_rt_b;
