-- A batch comes back in claim order (effective priority, claimable time,
-- id) across limited keys and the rest of the queue, also when items
-- that must not be handed out (past expires_at, or a lost lease on its
-- last attempt) sort first: they are not claimable, so they take no
-- place in the batch from a claimable item that sorts before the ones
-- handed out instead.
\set VERBOSITY terse

CREATE ROLE regress_bob_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_bob_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_bob_worker LOGIN IN ROLE queue_worker;

-- case: an expired plain item sorts first; a limited key holds the next two
SET ROLE regress_bob_admin;
SELECT queue.create_queue('bob_rest');
SELECT queue.set_limit('bob_rest', 'k', max_in_flight => 10);
RESET ROLE;
SET ROLE regress_bob_producer;
SELECT queue.enqueue('bob_rest', '{"n": "x"}', priority => 0,
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('bob_rest', '{"n": "k1"}', priority => 1, limit_key => 'k') > 0 AS enqueued;
SELECT queue.enqueue('bob_rest', '{"n": "k2"}', priority => 2, limit_key => 'k') > 0 AS enqueued;
SELECT queue.enqueue('bob_rest', '{"n": "r5"}', priority => 5) > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_bob_worker;
SELECT payload->>'n' AS n, priority FROM queue.dequeue('bob_rest', 'bob-w', batch_size => 2);
RESET ROLE;

-- case: an expired item of the limited key sorts first; plain items next
SET ROLE regress_bob_admin;
SELECT queue.create_queue('bob_lane');
SELECT queue.set_limit('bob_lane', 'k', max_in_flight => 10);
RESET ROLE;
SET ROLE regress_bob_producer;
SELECT queue.enqueue('bob_lane', '{"n": "kx"}', priority => 0, limit_key => 'k',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('bob_lane', '{"n": "r1"}', priority => 1) > 0 AS enqueued;
SELECT queue.enqueue('bob_lane', '{"n": "r2"}', priority => 2) > 0 AS enqueued;
SELECT queue.enqueue('bob_lane', '{"n": "k5"}', priority => 5, limit_key => 'k') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_bob_worker;
SELECT payload->>'n' AS n, priority FROM queue.dequeue('bob_lane', 'bob-w', batch_size => 2);
RESET ROLE;

-- case: a lost lease on its last attempt sorts first
SET ROLE regress_bob_admin;
SELECT queue.create_queue('bob_spent');
SELECT queue.set_limit('bob_spent', 'k', max_in_flight => 10);
RESET ROLE;
SET ROLE regress_bob_producer;
SELECT queue.enqueue('bob_spent', '{"n": "s"}', priority => 0, max_attempts => 1) > 0 AS enqueued;
RESET ROLE;
SET ROLE regress_bob_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('bob_spent', 'bob-gone', lease_timeout => '10 ms');
RESET ROLE;
SET ROLE regress_bob_producer;
SELECT queue.enqueue('bob_spent', '{"n": "k1"}', priority => 1, limit_key => 'k') > 0 AS enqueued;
SELECT queue.enqueue('bob_spent', '{"n": "k2"}', priority => 2, limit_key => 'k') > 0 AS enqueued;
SELECT queue.enqueue('bob_spent', '{"n": "r5"}', priority => 5) > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.05);
SET ROLE regress_bob_worker;
SELECT payload->>'n' AS n, priority FROM queue.dequeue('bob_spent', 'bob-w', batch_size => 2);
RESET ROLE;

-- case: an expired group head alone in its limited key: the dequeue
-- that meets it makes it a dead letter and hands out the next member
SET ROLE regress_bob_admin;
SELECT queue.create_queue('bob_group');
SELECT queue.set_limit('bob_group', 'k', max_in_flight => 5);
RESET ROLE;
SET ROLE regress_bob_producer;
SELECT queue.enqueue('bob_group', '{"n": "h"}', group_key => 'g', limit_key => 'k',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('bob_group', '{"n": "m"}', group_key => 'g', limit_key => 'k') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_bob_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('bob_group', 'bob-w', batch_size => 10);
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'bob_group';

-- what is left: the plain item behind them, claimable, and the items
-- that must not be handed out are dead letters by sweep at the latest
SET ROLE regress_bob_admin;
SELECT count(*) FROM queue.sweep() WHERE queue_name LIKE 'bob\_%';
SELECT queue_name, payload->>'n' AS n, reason FROM queue.dead_letters
 WHERE queue_name LIKE 'bob\_%' ORDER BY queue_name, item_id;
SELECT queue_name, payload->>'n' AS n, state FROM queue.items
 WHERE queue_name LIKE 'bob\_%' ORDER BY queue_name, item_id;
RESET ROLE;

SELECT count(*) AS dropped FROM (SELECT queue.drop_queue(q, force => true)
                                   FROM unnest(ARRAY['bob_rest', 'bob_lane', 'bob_spent', 'bob_group']) q) d;
DELETE FROM queue.worker_registry WHERE worker IN ('bob-w', 'bob-gone');
DROP ROLE regress_bob_admin;
DROP ROLE regress_bob_producer;
DROP ROLE regress_bob_worker;
