-- A cancelled dead letter carries no error code of an earlier failure:
-- its last_error is the cancel's reason, so its error_code is NULL (the
-- failures before it, and the bot's own report, stay in errors), and
-- replay_all of an error code redrives the items that died of that error,
-- not the ones an operator cancelled.  Each call runs as a login role of
-- its group role and commits on its own.
\set VERBOSITY terse

CREATE ROLE regress_ce_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_ce_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_ce_producer LOGIN IN ROLE queue_producer;

SET ROLE regress_ce_admin;
SELECT queue.create_queue('ce_q', max_attempts => 3, backoff_base => '0', backoff_jitter => 0);
RESET ROLE;
SET ROLE regress_ce_producer;
SELECT queue.enqueue('ce_q', '{"n": "queued"}') AS a \gset
SELECT queue.enqueue('ce_q', '{"n": "running"}') AS b \gset
SELECT queue.enqueue('ce_q', '{"n": "spent"}') AS c \gset
RESET ROLE;

-- every item fails once with ERP_TIMEOUT and is retried
SET ROLE regress_ce_bot;
SELECT count(queue.fail('ce_q', item_id, lease_token, 'ERP did not answer', 'ERP_TIMEOUT'))
  FROM queue.dequeue('ce_q', 'ce-bot', batch_size => 3);
RESET ROLE;

-- all three are claimed again: c fails for good, a is given back, b keeps running
SET ROLE regress_ce_bot;
SELECT max(lease_token) FILTER (WHERE item_id = :a) AS ta,
       max(lease_token) FILTER (WHERE item_id = :b) AS tb,
       max(lease_token) FILTER (WHERE item_id = :c) AS tc
  FROM queue.dequeue('ce_q', 'ce-bot', batch_size => 3) \gset
RESET ROLE;
SET ROLE regress_ce_bot;
SELECT queue.fail('ce_q', :c, :tc, 'ERP did not answer', 'ERP_TIMEOUT', permanent => true) AS c_outcome;
RESET ROLE;
SET ROLE regress_ce_bot;
SELECT queue.release('ce_q', :a, :ta) AS a_released;
RESET ROLE;

-- case: cancel of a queued item that failed before
SET ROLE regress_ce_admin;
SELECT queue.cancel('ce_q', :a, 'order withdrawn') AS a_cancelled;
RESET ROLE;

-- case: cancel of a running item that failed before; its bot reports its own error
SET ROLE regress_ce_admin;
SELECT queue.cancel('ce_q', :b, 'duplicate order') AS b_cancel_requested;
RESET ROLE;
SET ROLE regress_ce_bot;
SELECT queue.fail('ce_q', :b, :tb, 'stopped on cancel', 'STOPPED') AS b_outcome;
RESET ROLE;

SET ROLE regress_ce_admin;
SELECT payload->>'n' AS n, reason, last_error, error_code,
       jsonb_path_query_array(errors, '$[*].error_code') AS codes
  FROM queue.dead_letters WHERE queue_name = 'ce_q' ORDER BY item_id;
SELECT reason, last_error, error_code FROM queue.item('ce_q', :a);
RESET ROLE;

-- case: replay_all of ERP_TIMEOUT redrives only the item that died of it
SET ROLE regress_ce_admin;
SELECT queue.replay_all('ce_q', error_code => 'ERP_TIMEOUT') AS redriven;
RESET ROLE;
SET ROLE regress_ce_admin;
SELECT payload->>'n' AS n, review_status, replayed_as IS NOT NULL AS replayed
  FROM queue.dead_letters WHERE queue_name = 'ce_q' ORDER BY item_id;
SELECT payload->>'n' AS n FROM queue.items WHERE queue_name = 'ce_q' ORDER BY item_id;
SELECT queue.drop_queue('ce_q', force => true);
RESET ROLE;

DROP ROLE regress_ce_admin;
DROP ROLE regress_ce_bot;
DROP ROLE regress_ce_producer;
