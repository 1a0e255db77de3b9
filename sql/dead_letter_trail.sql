-- The trail of the operators' decisions on dead letters: who reviewed or
-- replayed a letter (one by one or with replay_all: the calling role) and
-- every note a review gave, also one a later review replaced on the
-- letter itself.  Each call
-- runs as a login role of its group role and commits on its own.
\set VERBOSITY terse

CREATE ROLE regress_dlt_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_dlt_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_dlt_producer LOGIN IN ROLE queue_producer;

SET ROLE regress_dlt_admin;
SELECT queue.create_queue('dlt_q');
RESET ROLE;
SET ROLE regress_dlt_producer;
SELECT count(*) FROM queue.enqueue_batch('dlt_q', array_fill('{}'::jsonb, ARRAY[3]));
RESET ROLE;
SET ROLE regress_dlt_bot;
SELECT count(*) FILTER (WHERE queue.fail('dlt_q', item_id, lease_token, 'ERP said no', 'ERP_REFUSED',
                                         permanent => true) = 'dead') AS dead
  FROM queue.dequeue('dlt_q', 'dlt-bot', batch_size => 3);
RESET ROLE;
SELECT min(item_id) AS a, max(item_id) AS c FROM queue.dead_letters WHERE queue_name = 'dlt_q' \gset

-- case: each review's note and the role that gave it are in its reviewed
-- event, also a note a later review replaced on the letter
SET ROLE regress_dlt_admin;
SELECT queue.review('dlt_q', :a, 'in_review', 'asked the ERP team');
RESET ROLE;
SET ROLE regress_dlt_admin;
SELECT queue.review('dlt_q', :a, 'in_review', 'ERP team fixed the customer record');
RESET ROLE;
SET ROLE regress_dlt_admin;
SELECT queue.review('dlt_q', :c, 'rejected');
RESET ROLE;
SELECT review_status, review_note FROM queue.dead_letters WHERE queue_name = 'dlt_q' AND item_id = :a;
SELECT item_id = :a AS letter_a, details ->> 'review_status' AS status, details ->> 'note' AS note,
       details ->> 'by' AS by
  FROM queue.events WHERE queue_name = 'dlt_q' AND kind = 'reviewed' ORDER BY event_id;

-- case: a replay says who replayed the letter, one by one and by replay_all
SET ROLE regress_dlt_admin;
SELECT queue.replay('dlt_q', :a) IS NOT NULL AS replayed;
RESET ROLE;
SET ROLE regress_dlt_admin;
SELECT queue.replay_all('dlt_q') AS replayed_by_all;
RESET ROLE;
SELECT item_id = :a AS letter_a, details ->> 'by' AS by, details ? 'replayed_as' AS has_replayed_as
  FROM queue.events WHERE queue_name = 'dlt_q' AND kind = 'replayed' ORDER BY event_id;

SELECT queue.drop_queue('dlt_q', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'dlt-bot';
DROP ROLE regress_dlt_admin, regress_dlt_bot, regress_dlt_producer;
