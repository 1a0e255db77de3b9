-- A group member enqueued with a run_at still ahead is scheduled, whether
-- or not it waits behind its group's head: items, item() and stats say
-- so, and it stays scheduled (not queued) when its turn comes before its
-- run_at.  A member due now that waits behind its head is queued.
\set VERBOSITY terse

CREATE ROLE regress_gs_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_gs_worker LOGIN IN ROLE queue_worker;
CREATE ROLE regress_gs_reader LOGIN IN ROLE queue_reader;

SELECT queue.create_queue('gs_q');
SET ROLE regress_gs_producer;
SELECT queue.enqueue('gs_q', '{"n": 1}', group_key => 'a') > 0 AS enqueued;
SELECT queue.enqueue('gs_q', '{"n": 2}', group_key => 'a') > 0 AS enqueued;
SELECT queue.enqueue('gs_q', '{"n": 3}', group_key => 'a', run_at => now() + interval '1 hour') > 0 AS enqueued;
SELECT queue.enqueue('gs_q', '{"n": 4}', group_key => 'b', run_at => now() + interval '1 hour') > 0 AS enqueued;
SELECT queue.enqueue('gs_q', '{"n": 5}', group_key => 'b') > 0 AS enqueued;
RESET ROLE;

-- case: behind a queued head and behind a scheduled head
SET ROLE regress_gs_reader;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'gs_q' ORDER BY item_id;
SELECT payload->>'n' AS n, (SELECT state FROM queue.item('gs_q', i.item_id)) AS item_state
  FROM queue.items i WHERE queue_name = 'gs_q' ORDER BY item_id;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('gs_q');
RESET ROLE;

-- case: the heads of group a done, its scheduled member's turn comes
-- before its run_at: still scheduled
SET ROLE regress_gs_worker;
SELECT queue.complete('gs_q', item_id, lease_token) AS completed
  FROM queue.dequeue('gs_q', 'gs-w', batch_size => 10);
SELECT queue.complete('gs_q', item_id, lease_token) AS completed
  FROM queue.dequeue('gs_q', 'gs-w', batch_size => 10);
RESET ROLE;
SET ROLE regress_gs_reader;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'gs_q' ORDER BY item_id;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('gs_q');
RESET ROLE;

-- case: past a thousand waiting members, stats still counts those whose
-- run_at is ahead as scheduled, whatever their place in line
SELECT queue.create_queue('gs_many');
SET ROLE regress_gs_producer;
SELECT count(*) FROM queue.enqueue_batch('gs_many', array_fill('{}'::jsonb, ARRAY[1201]),
                                         group_keys => array_fill('g'::text, ARRAY[1201]));
SELECT count(*) FROM queue.enqueue_batch('gs_many', array_fill('{}'::jsonb, ARRAY[300]),
                                         run_at => now() + interval '1 day',
                                         group_keys => array_fill('g'::text, ARRAY[300]));
RESET ROLE;
SET ROLE regress_gs_reader;
SELECT state, count(*) FROM queue.items WHERE queue_name = 'gs_many' GROUP BY 1 ORDER BY 1;
SELECT scheduled, queued >= 1000 AS queued_many FROM queue.stats('gs_many');
RESET ROLE;

SELECT queue.drop_queue('gs_q', force => true);
SELECT queue.drop_queue('gs_many', force => true);
DROP ROLE regress_gs_producer;
DROP ROLE regress_gs_worker;
DROP ROLE regress_gs_reader;
