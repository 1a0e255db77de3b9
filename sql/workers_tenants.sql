-- The workers view is filtered per queue like the other views: a reader
-- sees the workers it registered and those that registered for, hold, or
-- in the last 24 h completed or failed items of queues it may read, with
-- their counts and queue lists limited to those queues; an admin sees
-- every worker.  Its 24-hour counts come from indexes led by the worker.
\set VERBOSITY terse
SET client_min_messages = warning;

CREATE ROLE regress_wt_ra LOGIN IN ROLE queue_reader;
CREATE ROLE regress_wt_rb LOGIN IN ROLE queue_reader;
CREATE ROLE regress_wt_admin LOGIN IN ROLE queue_admin;
SELECT queue.create_queue('wt_a');
SELECT queue.create_queue('wt_b');
SELECT queue.grant_queue('wt_a', 'regress_wt_ra', 'reader');
SELECT queue.grant_queue('wt_b', 'regress_wt_rb', 'reader');
SELECT count(*) FROM queue.enqueue_batch('wt_a', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM queue.enqueue_batch('wt_b', array_fill('{}'::jsonb, ARRAY[3]));
SELECT queue.register_worker('wt-bot-a', queues => ARRAY['wt_a'], info => '{"host": "tenant-a-vm"}');
SELECT queue.register_worker('wt-bot-b', queues => ARRAY['wt_b'], info => '{"host": "tenant-b-vm"}');
-- the shared bot works both queues
SELECT queue.register_worker('wt-bot-shared', queues => ARRAY['wt_a', 'wt_b']);
SELECT count(queue.complete('wt_a', item_id, lease_token)) FROM queue.dequeue('wt_a', 'wt-bot-a');
SELECT count(queue.fail('wt_b', item_id, lease_token, 'b failed')) FROM queue.dequeue('wt_b', 'wt-bot-b');
SELECT count(queue.complete('wt_a', item_id, lease_token)) FROM queue.dequeue('wt_a', 'wt-bot-shared');
SELECT count(queue.complete('wt_b', item_id, lease_token)) FROM queue.dequeue('wt_b', 'wt-bot-shared');
SELECT count(*) FROM queue.dequeue('wt_b', 'wt-bot-shared');

-- case: tenant A's reader sees A's bot and the shared bot, with A's numbers only
SET ROLE regress_wt_ra;
SELECT worker, in_flight, completed_24h, failed_24h, queues, info
  FROM queue.workers WHERE worker LIKE 'wt-%' ORDER BY worker;
RESET ROLE;

-- case: tenant B's reader sees B's bot and the shared bot, with B's numbers only
SET ROLE regress_wt_rb;
SELECT worker, in_flight, completed_24h, failed_24h, queues, info
  FROM queue.workers WHERE worker LIKE 'wt-%' ORDER BY worker;
RESET ROLE;

-- case: an admin sees every worker and all its numbers
SET ROLE regress_wt_admin;
SELECT worker, in_flight, completed_24h, failed_24h, queues
  FROM queue.workers WHERE worker LIKE 'wt-%' ORDER BY worker;
RESET ROLE;

-- case: the 24-hour counts read indexes led by the worker, not the whole
-- day of history (each partition has them, copied from the DEFAULT one)
SELECT indexrelid::regclass AS index, pg_get_indexdef(indexrelid) LIKE '%(worker, %' AS led_by_worker
  FROM pg_index
 WHERE indrelid IN ('queue.item_done_default'::regclass, 'queue.failure_log_default'::regclass)
   AND pg_get_indexdef(indexrelid) LIKE '%(worker, %'
 ORDER BY 1;

SELECT queue.drop_queue('wt_a', force => true);
SELECT queue.drop_queue('wt_b', force => true);
DELETE FROM queue.worker_registry WHERE worker LIKE 'wt-%';
DROP ROLE regress_wt_ra;
DROP ROLE regress_wt_rb;
DROP ROLE regress_wt_admin;
