-- Tenant isolation of the helper functions that the views call: every
-- role may execute them (a view's functions run as its reader), so a
-- helper that reads a queue's rows answers only for a queue the caller may
-- read, and refuses any other with 42501, like the API functions.
\set VERBOSITY terse

CREATE ROLE regress_hi_a LOGIN IN ROLE queue_reader;
CREATE ROLE regress_hi_b LOGIN IN ROLE queue_reader;
SELECT queue.create_queue('hi_a');
SELECT queue.grant_queue('hi_a', 'regress_hi_a', 'reader');
SELECT queue.set_limit('hi_a', 'erp', max_in_flight => 1);
SELECT queue.enqueue('hi_a', '{"n": 1}', limit_key => 'erp') > 0 AS enqueued;
SELECT queue.enqueue('hi_a', '{"n": 2}', limit_key => 'erp') > 0 AS enqueued;
SELECT queue.enqueue('hi_a', '{"n": 3}', requires => ARRAY['hi_no_such_label']) > 0 AS enqueued;
SELECT count(*) AS claimed FROM queue.dequeue('hi_a', 'hi-w');

-- case: the helpers every role may execute
SELECT p.oid::regprocedure AS helper
  FROM pg_proc p
 WHERE p.pronamespace = 'queue'::regnamespace AND p.proname ~ '^_'
   AND has_function_privilege('queue_reader', p.oid, 'EXECUTE')
 ORDER BY 1::text;

-- case: the tenant's reader sees why its items wait
SET ROLE regress_hi_a;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'hi_a' ORDER BY item_id;
SELECT queue._flow_waiting('hi_a', false, true, 'erp', NULL) AS waiting;
RESET ROLE;

-- case: another tenant learns nothing of the queue's keys, their limits or
-- the labels of the fleet through the helper: 42501
SET ROLE regress_hi_b;
SELECT count(*) AS items_seen FROM queue.items WHERE queue_name = 'hi_a';
SELECT queue._flow_waiting('hi_a', false, true, 'erp', NULL);
SELECT queue._flow_waiting('hi_a', false, false, NULL, ARRAY['hi_no_such_label']);
SELECT queue._can_read('hi_a') AS can_read;
RESET ROLE;

-- case: within one transaction each call judges the role in effect then:
-- after SET ROLE from the tenant to another, the helper refuses
BEGIN;
SET LOCAL ROLE regress_hi_a;
SELECT queue._flow_waiting('hi_a', false, true, 'erp', NULL) AS waiting;
SET LOCAL ROLE regress_hi_b;
SELECT queue._flow_waiting('hi_a', false, true, 'erp', NULL);
ROLLBACK;

-- case: within one transaction, a grant taken back counts from the next call
BEGIN;
SET LOCAL ROLE regress_hi_a;
SELECT queue._flow_waiting('hi_a', false, true, 'erp', NULL) AS waiting;
RESET ROLE;
SELECT queue.grant_queue('hi_a', 'regress_hi_b', 'reader');
SELECT queue.revoke_queue('hi_a', 'regress_hi_a', 'reader');
SET LOCAL ROLE regress_hi_a;
SELECT queue._flow_waiting('hi_a', false, true, 'erp', NULL);
ROLLBACK;

-- case: an admin reads every queue
SELECT queue._flow_waiting('hi_a', false, true, 'erp', NULL) AS waiting;

SELECT queue.drop_queue('hi_a', force => true);
DROP ROLE regress_hi_a, regress_hi_b;
