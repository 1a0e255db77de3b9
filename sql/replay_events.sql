-- The events of a replay: under audit = 'all' the item a replay creates is
-- enqueued like any other (an 'enqueued' event of the new item, after the
-- dead letter's 'replayed'); 'failures' and 'none' leave it out, and a
-- replay whose dedup_key a live item holds enqueues nothing.
\set VERBOSITY terse

CREATE ROLE regress_re_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_re_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_re_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_re_reader LOGIN IN ROLE queue_reader;

-- one dead letter per queue (a permanent failure), its id in :dead_<queue>
SET ROLE regress_re_admin;
SELECT queue.create_queue('re_all', audit => 'all');
SELECT queue.create_queue('re_failures', audit => 'failures');
SELECT queue.create_queue('re_none', audit => 'none');
SET ROLE regress_re_producer;
SELECT queue.enqueue('re_all', '{"n": 1}', dedup_key => 'k1') AS dead_re_all \gset
SELECT queue.enqueue('re_failures', '{"n": 1}') AS dead_re_failures \gset
SELECT queue.enqueue('re_none', '{"n": 1}') AS dead_re_none \gset
SET ROLE regress_re_bot;
SELECT q, queue.fail(q, d.item_id, d.lease_token, 'bad input', permanent => true)
  FROM unnest(ARRAY['re_all', 're_failures', 're_none']) AS q
 CROSS JOIN LATERAL queue.dequeue(q, 're-bot') d
 ORDER BY q;

-- case: each queue's replay, and the events of the dead letter and of the
-- item it became, as a reader reads them
SET ROLE regress_re_admin;
SELECT queue.replay('re_all', :dead_re_all) AS new_re_all \gset
SELECT queue.replay('re_failures', :dead_re_failures) AS new_re_failures \gset
SELECT queue.replay('re_none', :dead_re_none) AS new_re_none \gset
SET ROLE regress_re_reader;
SELECT e.queue_name,
       CASE e.item_id WHEN d.dead THEN 'dead letter' WHEN d.new THEN 'replay' END AS item,
       e.kind, e.worker, e.attempt,
       e.details - 'replayed_as' - 'replay_of' - 'by' AS details,
       (e.details ->> 'replayed_as')::bigint = d.new AS names_new,
       (e.details ->> 'replay_of')::bigint = d.dead AS names_dead
  FROM queue.events e
  JOIN (VALUES ('re_all', :dead_re_all, :new_re_all),
               ('re_failures', :dead_re_failures, :new_re_failures),
               ('re_none', :dead_re_none, :new_re_none)) AS d(q, dead, new)
    ON e.queue_name = d.q AND e.item_id IN (d.dead, d.new)
 WHERE e.kind IN ('replayed', 'enqueued')
 ORDER BY e.queue_name, e.event_id;
RESET ROLE;

-- case: a replay whose dedup_key a live item holds returns that item and
-- enqueues nothing: no 'enqueued' event beyond the live item's own
SET ROLE regress_re_bot;
SELECT queue.fail('re_all', item_id, lease_token, 'bad again', permanent => true)
  FROM queue.dequeue('re_all', 're-bot');
SET ROLE regress_re_producer;
SELECT queue.enqueue('re_all', '{"n": 2}', dedup_key => 'k1') AS holder \gset
SET ROLE regress_re_admin;
SELECT queue.replay('re_all', :new_re_all) = :holder AS returns_holder;
SET ROLE regress_re_reader;
SELECT count(*) FILTER (WHERE item_id = :holder) AS holder_enqueued,
       count(*) FILTER (WHERE details ->> 'replay_of' = :'new_re_all') AS second_replay_enqueued
  FROM queue.events WHERE queue_name = 're_all' AND kind = 'enqueued';
RESET ROLE;

SET ROLE regress_re_admin;
SELECT queue.drop_queue(q, force => true) FROM unnest(ARRAY['re_all', 're_failures', 're_none']) AS q;
RESET ROLE;
DROP ROLE regress_re_admin, regress_re_producer, regress_re_bot, regress_re_reader;
