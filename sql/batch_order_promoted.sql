-- A batch comes back in claim order also when a dequeue of a queue with
-- limited keys dead-letters a group's head it meets (expired) and hands
-- out the group's next member in the same call: the member takes its
-- place in the batch by its own priority and claimable time, before the
-- limited key's item of a lower priority.
\set VERBOSITY terse

CREATE ROLE regress_bop_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_bop_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_bop_worker LOGIN IN ROLE queue_worker;

SET ROLE regress_bop_admin;
SELECT queue.create_queue('bop');
SELECT queue.set_limit('bop', 'k', max_in_flight => 10);
RESET ROLE;
SET ROLE regress_bop_producer;
SELECT queue.enqueue('bop', '{"n": "h"}', priority => 0, group_key => 'g',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('bop', '{"n": "m"}', priority => 0, group_key => 'g') > 0 AS enqueued;
SELECT queue.enqueue('bop', '{"n": "k1"}', priority => 1, limit_key => 'k') > 0 AS enqueued;
SELECT queue.enqueue('bop', '{"n": "r5"}', priority => 5) > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_bop_worker;
SELECT payload->>'n' AS n, priority FROM queue.dequeue('bop', 'bop-w', batch_size => 2);
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'bop';

-- case: the same in a queue without limited keys: the member comes
-- before the plain item of a lower priority that the call claimed first
SET ROLE regress_bop_admin;
SELECT queue.create_queue('bop_plain');
RESET ROLE;
SET ROLE regress_bop_producer;
SELECT queue.enqueue('bop_plain', '{"n": "h"}', priority => 0, group_key => 'g',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('bop_plain', '{"n": "m"}', priority => 0, group_key => 'g') > 0 AS enqueued;
SELECT queue.enqueue('bop_plain', '{"n": "r5"}', priority => 5) > 0 AS enqueued;
SELECT queue.enqueue('bop_plain', '{"n": "r6"}', priority => 6) > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_bop_worker;
SELECT payload->>'n' AS n, priority FROM queue.dequeue('bop_plain', 'bop-w', batch_size => 2);
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'bop_plain';

SELECT count(*) AS dropped FROM (SELECT queue.drop_queue(q, force => true)
                                   FROM unnest(ARRAY['bop', 'bop_plain']) q) d;
DELETE FROM queue.worker_registry WHERE worker IN ('bop-w');
DROP ROLE regress_bop_admin;
DROP ROLE regress_bop_producer;
DROP ROLE regress_bop_worker;
