-- desired_workers counts claimable plus processing items.  Group members
-- waiting behind their head need no worker of their own, but only those
-- that stats counts as queued are taken off: a member whose own run_at is
-- ahead (scheduled) or that is on hold was never counted, so the items
-- that are processing still each need their worker.
\set VERBOSITY terse

CREATE ROLE regress_dwg_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_dwg_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_dwg_worker LOGIN IN ROLE queue_worker;
CREATE ROLE regress_dwg_reader LOGIN IN ROLE queue_reader;

SET ROLE regress_dwg_admin;
SELECT queue.create_queue('dwg');
RESET ROLE;

-- group a: its head, and a member scheduled an hour ahead
-- group b: its head, and a member put on hold
SET ROLE regress_dwg_producer;
SELECT queue.enqueue('dwg', '{"n": "a1"}', group_key => 'a') > 0 AS enqueued;
SELECT queue.enqueue('dwg', '{"n": "a2"}', group_key => 'a',
                     run_at => now() + interval '1 hour') > 0 AS enqueued;
SELECT queue.enqueue('dwg', '{"n": "b1"}', group_key => 'b') > 0 AS enqueued;
SELECT queue.enqueue('dwg', '{"n": "b2"}', group_key => 'b') AS b2 \gset
RESET ROLE;
SET ROLE regress_dwg_admin;
SELECT queue.hold('dwg', :b2);
RESET ROLE;

SET ROLE regress_dwg_reader;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('dwg');
-- two heads claimable: two workers
SELECT queue.desired_workers('dwg') AS two_heads_queued;
RESET ROLE;

SET ROLE regress_dwg_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('dwg', 'dwg-w', batch_size => 10) ORDER BY 1;
RESET ROLE;

SET ROLE regress_dwg_reader;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('dwg');
-- two heads processing: still two workers
SELECT queue.desired_workers('dwg') AS two_heads_processing;
RESET ROLE;

-- a member waiting, due now, behind a processing head: still two
SET ROLE regress_dwg_producer;
SELECT queue.enqueue('dwg', '{"n": "a3"}', group_key => 'a') > 0 AS enqueued;
RESET ROLE;
SET ROLE regress_dwg_reader;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('dwg');
SELECT queue.desired_workers('dwg') AS with_a_queued_member;
RESET ROLE;

SELECT count(*) AS dropped FROM (SELECT queue.drop_queue(q, force => true)
                                   FROM unnest(ARRAY['dwg']) q) d;
DELETE FROM queue.worker_registry WHERE worker IN ('dwg-w');
DROP ROLE regress_dwg_admin;
DROP ROLE regress_dwg_producer;
DROP ROLE regress_dwg_worker;
DROP ROLE regress_dwg_reader;
