-- The breaker counts the outcomes of the last breaker_window and no
-- others: however short the window, outcomes older than it are forgotten,
-- and the pause reason counts only those within it.
\set VERBOSITY terse

CREATE ROLE regress_bw_bot LOGIN IN ROLE queue_worker;
SELECT queue.create_queue('bw_q', breaker_threshold => 0.5, breaker_min_samples => 3,
                          breaker_window => '2 s', backoff_base => '1 h');
SELECT count(*) FROM queue.enqueue_batch('bw_q', array_fill('{}'::jsonb, ARRAY[6]));

-- case: two failures, then a third once the window has passed the first
-- two: one outcome within the window, no trip, and health counts none
SET ROLE regress_bw_bot;
SELECT queue.fail('bw_q', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('bw_q', 'bw-bot');
SELECT queue.fail('bw_q', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('bw_q', 'bw-bot');
SELECT pg_sleep(2.5);
SELECT queue.fail('bw_q', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('bw_q', 'bw-bot');
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'bw_q';
SELECT status, reasons FROM queue.health('bw_q');

-- case: three failures within the window trip it; the reason counts them
SELECT queue.fail('bw_q', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('bw_q', 'bw-bot');
SELECT queue.fail('bw_q', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('bw_q', 'bw-bot');
SELECT paused, breaker_state, breaker_reason FROM queue.queues WHERE queue_name = 'bw_q';
RESET ROLE;

SELECT queue.drop_queue('bw_q', force => true);
DROP ROLE regress_bw_bot;
