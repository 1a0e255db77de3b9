-- Operator decisions on items are never lost or silently undone, and each
-- call returns what the contract says.  Each call runs as a login role of
-- its group role and commits on its own.
\set VERBOSITY terse

CREATE ROLE regress_od_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_od_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_od_producer LOGIN IN ROLE queue_producer;

-- case: purge ends a cancel-requested item whose lease ran out as the
-- cancelled dead letter its cancel promised, and a lost lease on its last
-- attempt as a lease_expired dead letter (as sweep would), instead of
-- deleting them; it returns and records only the items it deleted
SET ROLE regress_od_admin;
SELECT queue.create_queue('od_purge', max_attempts => 1);
RESET ROLE;
SET ROLE regress_od_producer;
SELECT count(*) FROM queue.enqueue_batch('od_purge', array_fill('{}'::jsonb, ARRAY[3]));
RESET ROLE;
SET ROLE regress_od_bot;
SELECT min(item_id) AS od_cancelled, max(item_id) AS od_spent
  FROM queue.dequeue('od_purge', 'od-bot', batch_size => 2, lease_timeout => '200 ms') \gset
RESET ROLE;
SET ROLE regress_od_admin;
SELECT queue.cancel('od_purge', :od_cancelled, 'not wanted') AS cancel_requested;
RESET ROLE;
SELECT pg_sleep(0.3);
SET ROLE regress_od_admin;
SELECT queue.purge('od_purge') AS purged;
SELECT state, reason, cancel_reason FROM queue.item('od_purge', :od_cancelled);
SELECT state, reason FROM queue.item('od_purge', :od_spent);
SELECT details - 'by' AS details, details ->> 'by' = session_user AS by_me
  FROM queue.events WHERE queue_name = 'od_purge' AND kind = 'purged';
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'od_purge';
SELECT queue.drop_queue('od_purge', force => true);
RESET ROLE;

-- case: schedule() of an unknown queue is 42704 with the hint every other
-- call gives (create the queue), and stores nothing
SET ROLE regress_od_admin;
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.schedule('od_nowhere', 'nightly', '0 2 * * *', '{}');
\set VERBOSITY terse
SELECT count(*) AS schedules FROM queue.schedules WHERE queue_name = 'od_nowhere';
RESET ROLE;

DROP ROLE regress_od_admin;
DROP ROLE regress_od_bot;
DROP ROLE regress_od_producer;
