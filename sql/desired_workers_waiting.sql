-- desired_workers counts claimable plus processing items: a group's
-- members that wait behind a processing head are neither, and must not
-- take the head's worker away.  Each call runs as a login role of its
-- group role and commits on its own.
\set VERBOSITY terse

CREATE ROLE regress_dww_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_dww_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_dww_producer LOGIN IN ROLE queue_producer;

SET ROLE regress_dww_admin;
SELECT queue.create_queue('dww', lease_timeout => '1 h');
RESET ROLE;

-- case: a group whose head is processing and whose other members are due
-- later (their own run_at) needs the head's worker: one
SET ROLE regress_dww_producer;
SELECT queue.enqueue('dww', '{"n": 1}', group_key => 'later') AS later_head \gset
SELECT count(queue.enqueue('dww', jsonb_build_object('n', n), group_key => 'later',
                           run_at => now() + interval '1 h')) AS due_later
  FROM generate_series(2, 3) n;
RESET ROLE;
SET ROLE regress_dww_bot;
SELECT item_id = :later_head AS head_claimed FROM queue.dequeue('dww', 'dww-bot');
RESET ROLE;
SET ROLE regress_dww_admin;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('dww');
SELECT queue.desired_workers('dww') AS head_processing_rest_later;
RESET ROLE;

-- case: a member put on hold while it waits is neither claimable nor
-- processing either: still the head's worker only
SET ROLE regress_dww_producer;
SELECT queue.enqueue('dww', '{"n": 4}', group_key => 'held') AS held_head \gset
SELECT queue.enqueue('dww', '{"n": 5}', group_key => 'held') AS held_member \gset
RESET ROLE;
SET ROLE regress_dww_bot;
SELECT item_id = :held_head AS head_claimed FROM queue.dequeue('dww', 'dww-bot');
RESET ROLE;
SET ROLE regress_dww_admin;
SELECT queue.hold('dww', :held_member);
SELECT queued, scheduled, processing, on_hold FROM queue.stats('dww');
SELECT queue.desired_workers('dww') AS two_heads_processing;
RESET ROLE;

-- case: a member due now, waiting behind its head, is still not
-- claimable: adding one changes nothing, a new group's head adds one
SET ROLE regress_dww_producer;
SELECT queue.enqueue('dww', '{"n": 6}', group_key => 'held') IS NOT NULL AS member_due_now;
RESET ROLE;
SET ROLE regress_dww_admin;
SELECT queue.desired_workers('dww') AS still_two;
RESET ROLE;
SET ROLE regress_dww_producer;
SELECT queue.enqueue('dww', '{"n": 7}', group_key => 'other') IS NOT NULL AS new_group;
RESET ROLE;
SET ROLE regress_dww_admin;
SELECT queue.desired_workers('dww') AS three;
SELECT queue.drop_queue('dww', force => true);
RESET ROLE;

DROP ROLE regress_dww_admin;
DROP ROLE regress_dww_bot;
DROP ROLE regress_dww_producer;
