-- Caps stay exact when a cap is turned on for a busy queue.
\set VERBOSITY terse

-- case: leases taken before max_in_flight was set count against the cap
-- spread over its stripes, not all against one, so the cap holds
SELECT queue.create_queue('c_busy');
SELECT count(*) FROM queue.enqueue_batch('c_busy', array_fill('{}'::jsonb, ARRAY[40]));
SELECT count(*) AS before_cap FROM queue.dequeue('c_busy', 'w1', batch_size => 8);
SELECT queue.alter_queue('c_busy', max_in_flight => 16);
SELECT count(*) AS claimed_under_cap FROM queue.dequeue('c_busy', 'w2', batch_size => 20);
SELECT count(*) AS claimed_more FROM queue.dequeue('c_busy', 'w3', batch_size => 20);
SELECT count(*) AS in_flight FROM queue.item_live
 WHERE queue_name = 'c_busy' AND lease_expires_at > now();

SELECT queue.drop_queue('c_busy', force => true);
