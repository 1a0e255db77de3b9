-- The audit trail records each change of a queue's pause once: a pause()
-- of a queue the operator paused already records nothing and keeps when it
-- was paused (paused_at) and its reason, unless it gives a new reason
-- (recorded, the queue still paused since the first pause); a resume() of
-- a queue that nothing paused records nothing.  Each call is committed on
-- its own.
\set VERBOSITY terse

CREATE ROLE regress_pre_admin LOGIN IN ROLE queue_admin;
SET SESSION AUTHORIZATION regress_pre_admin;
SELECT queue.create_queue('pre');

SELECT queue.pause('pre', 'deploy');
SELECT paused_at AS first_paused_at FROM queue.queues WHERE queue_name = 'pre' \gset
-- the same pause again, or one without a reason: nothing changes
SELECT queue.pause('pre', 'deploy');
SELECT queue.pause('pre');
SELECT pause_reason, paused_at = :'first_paused_at' AS paused_since_first
  FROM queue.queues WHERE queue_name = 'pre';
-- a new reason: the reason changes, not since when
SELECT queue.pause('pre', 'database upgrade');
SELECT paused, pause_reason, paused_at = :'first_paused_at' AS paused_since_first
  FROM queue.queues WHERE queue_name = 'pre';
SELECT queue.resume('pre');
-- resuming a running queue: nothing to record
SELECT queue.resume('pre');
SELECT paused, pause_reason, paused_at FROM queue.queues WHERE queue_name = 'pre';

SELECT kind, details->>'reason' AS reason, details->>'by' AS by
  FROM queue.events WHERE queue_name = 'pre' ORDER BY event_id;

SELECT queue.drop_queue('pre');
RESET SESSION AUTHORIZATION;
DELETE FROM queue.events WHERE queue_name = 'pre';
DROP ROLE regress_pre_admin;
