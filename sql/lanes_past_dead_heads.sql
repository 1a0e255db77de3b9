-- Limited keys whose first items are expired (never handed out) do not
-- take the places of a key that has a claimable item: a single dequeue
-- returns the claimable item of the highest priority, whatever the
-- expired items of other keys, as a batch does.
\set VERBOSITY terse

CREATE ROLE regress_lpdh_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_lpdh_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_lpdh_worker LOGIN IN ROLE queue_worker;

SET ROLE regress_lpdh_admin;
SELECT queue.create_queue('lpdh');
SELECT count(queue.set_limit('lpdh', k, max_in_flight => 5)) FROM unnest(ARRAY['a', 'b', 'c']) k;
RESET ROLE;
SET ROLE regress_lpdh_producer;
SELECT queue.enqueue('lpdh', '{"n": "a"}', priority => 0, limit_key => 'a',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('lpdh', '{"n": "b"}', priority => 0, limit_key => 'b',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('lpdh', '{"n": "c"}', priority => 2, limit_key => 'c') > 0 AS enqueued;
SELECT queue.enqueue('lpdh', '{"n": "p"}', priority => 3) > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_lpdh_worker;
SELECT payload->>'n' AS n, priority FROM queue.dequeue('lpdh', 'lpdh-w');
SELECT payload->>'n' AS n, priority FROM queue.dequeue('lpdh', 'lpdh-w');
RESET ROLE;

SELECT queue.drop_queue('lpdh', force => true);
DROP ROLE regress_lpdh_admin, regress_lpdh_producer, regress_lpdh_worker;
