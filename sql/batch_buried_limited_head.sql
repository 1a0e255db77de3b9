-- A dequeue that dead-letters an expired group head of a limited key
-- hands out the group's next member in the same call, as it does when
-- the head has no limit_key: the group moves on at once, and a call
-- with room in its batch never comes back empty while that member is
-- claimable.
\set VERBOSITY terse

CREATE ROLE regress_bblh_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_bblh_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_bblh_worker LOGIN IN ROLE queue_worker;

SET ROLE regress_bblh_admin;
SELECT queue.create_queue('bblh');
SELECT queue.set_limit('bblh', 'k', max_in_flight => 5);
RESET ROLE;
SET ROLE regress_bblh_producer;
SELECT queue.enqueue('bblh', '{"n": "h"}', group_key => 'g', limit_key => 'k',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('bblh', '{"n": "m"}', group_key => 'g') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_bblh_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('bblh', 'bblh-w', batch_size => 2);
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'bblh';

-- case: the same with a single-item call
SET ROLE regress_bblh_producer;
SELECT queue.enqueue('bblh', '{"n": "h2"}', group_key => 'g2', limit_key => 'k',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('bblh', '{"n": "m2"}', group_key => 'g2') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_bblh_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('bblh', 'bblh-w');
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'bblh' ORDER BY item_id;

SELECT queue.drop_queue('bblh', force => true);
DROP ROLE regress_bblh_admin, regress_bblh_producer, regress_bblh_worker;
