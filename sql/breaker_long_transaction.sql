-- The breaker judges each outcome at the time of the call that reported
-- it, as the history stamps a completion: a bot that claims, works and
-- reports inside one transaction has its failure or completion counted
-- in the breaker_window when it reports, however long ago its transaction
-- began.
\set VERBOSITY terse

CREATE ROLE regress_blt_bot LOGIN IN ROLE queue_worker;

-- case: a failure reported in a transaction older than the window, then a
-- second failure right after it: two failures of two outcomes within the
-- window trip the breaker
SELECT queue.create_queue('blt_fail', breaker_threshold => 0.5, breaker_min_samples => 2,
                          breaker_window => '3 s', backoff_base => '1 h');
SELECT count(*) FROM queue.enqueue_batch('blt_fail', array_fill('{}'::jsonb, ARRAY[3]));
SET ROLE regress_blt_bot;
BEGIN;
SELECT item_id AS a, lease_token AS ta FROM queue.dequeue('blt_fail', 'blt-bot') \gset
SELECT pg_sleep(4);
SELECT queue.fail('blt_fail', :a, :ta, 'ERP timeout', 'ERP_TIMEOUT');
COMMIT;
SELECT queue.fail('blt_fail', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('blt_fail', 'blt-bot');
SELECT paused, breaker_state, breaker_reason FROM queue.queues WHERE queue_name = 'blt_fail';
SELECT status, reasons FROM queue.health('blt_fail');
RESET ROLE;

-- case: a completion reported in a transaction older than the window,
-- then two failures: one success and two failures within the window are
-- 66 %, under the 70 % threshold, so the breaker stays closed and health
-- counts three outcomes
SELECT queue.create_queue('blt_done', breaker_threshold => 0.7, breaker_min_samples => 2,
                          breaker_window => '12 s', backoff_base => '1 h');
SELECT count(*) FROM queue.enqueue_batch('blt_done', array_fill('{}'::jsonb, ARRAY[3]));
SET ROLE regress_blt_bot;
BEGIN;
SELECT item_id AS c, lease_token AS tc FROM queue.dequeue('blt_done', 'blt-bot') \gset
SELECT pg_sleep(13);
SELECT queue.complete('blt_done', :c, :tc);
COMMIT;
SELECT queue.fail('blt_done', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('blt_done', 'blt-bot');
SELECT queue.fail('blt_done', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('blt_done', 'blt-bot');
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'blt_done';
SELECT status, reasons FROM queue.health('blt_done');
RESET ROLE;

SELECT queue.drop_queue('blt_fail', force => true);
SELECT queue.drop_queue('blt_done', force => true);
DROP ROLE regress_blt_bot;
