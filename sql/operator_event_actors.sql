-- The audit trail names who did each operator action: every event an
-- admin's call records (hold, unhold, cancel, replay, replay_all, review,
-- purge, pause, resume, drop_queue) carries details.by, the session's
-- login role, as pause, resume and review already did.
\set VERBOSITY terse

CREATE ROLE regress_oea_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_oea_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_oea_bot LOGIN IN ROLE queue_worker;

SET SESSION AUTHORIZATION regress_oea_admin;
SELECT queue.create_queue('oea', audit => 'all', max_attempts => 1);
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION regress_oea_producer;
SELECT count(*) FROM queue.enqueue_batch('oea', array_fill('{}'::jsonb, ARRAY[6]));
RESET SESSION AUTHORIZATION;

-- two dead letters, made by the bot
SET SESSION AUTHORIZATION regress_oea_bot;
SELECT queue.fail('oea', item_id, lease_token, 'broken', permanent => true)
  FROM queue.dequeue('oea', 'oea_w1', 2);
RESET SESSION AUTHORIZATION;

-- the operator's actions, each committed on its own
SET SESSION AUTHORIZATION regress_oea_admin;
SELECT queue.hold('oea', (SELECT max(item_id) FROM queue.items WHERE queue_name = 'oea')) AS held;
SELECT queue.unhold('oea', (SELECT max(item_id) FROM queue.items WHERE queue_name = 'oea')) AS unheld;
SELECT queue.hold('oea', (SELECT max(item_id) FROM queue.items WHERE queue_name = 'oea'), 'wait') AS held;
SELECT queue.cancel('oea', (SELECT min(item_id) FROM queue.items WHERE queue_name = 'oea'), 'no') AS cancelled;
SELECT queue.replay('oea', (SELECT min(item_id) FROM queue.dead_letters WHERE queue_name = 'oea')) IS NOT NULL AS replayed;
SELECT queue.review('oea', (SELECT max(item_id) FROM queue.dead_letters WHERE queue_name = 'oea' AND reason = 'cancelled'), 'in_review') AS reviewed;
SELECT queue.replay_all('oea') AS replayed_all;
SELECT queue.pause('oea', 'maintenance');
SELECT queue.resume('oea');
SELECT queue.purge('oea') AS purged;

-- every operator event says who
SELECT kind, details->>'by' AS by
  FROM queue.events
 WHERE queue_name = 'oea' AND kind NOT IN ('enqueued', 'claimed', 'failed', 'dead_lettered')
 ORDER BY event_id;

SELECT queue.drop_queue('oea', force => true);
SELECT kind, details->>'by' AS by FROM queue.events WHERE queue_name = 'oea';
RESET SESSION AUTHORIZATION;

DELETE FROM queue.events WHERE queue_name = 'oea';
DELETE FROM queue.worker_registry WHERE worker = 'oea_w1';
DROP ROLE regress_oea_admin;
DROP ROLE regress_oea_producer;
DROP ROLE regress_oea_bot;
