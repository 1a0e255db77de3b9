-- The dead_letters alert is open while the queue has dead letters with
-- review status new: a review that sets a letter back to new opens it at
-- once, as the call that made the letter did, without waiting for sweep.
-- Each call runs as a login role of its group role and commits on its own.
\set VERBOSITY terse

CREATE ROLE regress_dlar_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_dlar_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_dlar_producer LOGIN IN ROLE queue_producer;

SET ROLE regress_dlar_admin;
SELECT queue.create_queue('dlar_q');
RESET ROLE;
SET ROLE regress_dlar_producer;
SELECT queue.enqueue('dlar_q', '{"invoice": 7}') IS NOT NULL AS enqueued;
RESET ROLE;
SET ROLE regress_dlar_bot;
SELECT queue.fail('dlar_q', item_id, lease_token, 'customer unknown', 'NO_CUSTOMER', permanent => true)
  FROM queue.dequeue('dlar_q', 'dlar-bot');
RESET ROLE;
SELECT item_id AS letter FROM queue.dead_letters WHERE queue_name = 'dlar_q' \gset

-- case: the letter opened the alert; in review and swept, it is cleared
SELECT count(*) AS open_alerts FROM queue.alerts
 WHERE queue_name = 'dlar_q' AND kind = 'dead_letters' AND cleared_at IS NULL;
SET ROLE regress_dlar_admin;
SELECT queue.review('dlar_q', :letter, 'in_review', 'checking the customer');
RESET ROLE;
SET ROLE regress_dlar_admin;
SELECT dead_lettered FROM queue.sweep() WHERE queue_name = 'dlar_q';
RESET ROLE;
SELECT count(*) AS open_alerts FROM queue.alerts
 WHERE queue_name = 'dlar_q' AND kind = 'dead_letters' AND cleared_at IS NULL;

-- case: back to new, the alert is open again at once, with no sweep
SET ROLE regress_dlar_admin;
SELECT queue.review('dlar_q', :letter, 'new', 'not ours after all');
RESET ROLE;
SELECT count(*) AS open_alerts, min(message) AS message,
       min(details ->> 'first_item_id') = :'letter' AS names_letter
  FROM queue.alerts
 WHERE queue_name = 'dlar_q' AND kind = 'dead_letters' AND cleared_at IS NULL;

-- case: a review that keeps it new raises nothing more (one open alert)
SET ROLE regress_dlar_admin;
SELECT queue.review('dlar_q', :letter, 'new', 'still not ours');
RESET ROLE;
SELECT count(*) AS alerts FROM queue.alerts WHERE queue_name = 'dlar_q' AND kind = 'dead_letters';

SELECT queue.drop_queue('dlar_q', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'dlar-bot';
DROP ROLE regress_dlar_admin, regress_dlar_bot, regress_dlar_producer;
