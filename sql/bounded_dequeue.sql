-- Bounded work per call: one dequeue dead-letters at most 100 expired or
-- spent items it meets; the rest is left to later calls and sweep.
\set VERBOSITY terse

SELECT queue.create_queue('q_bd', max_attempts => 1);

-- case: 250 expired items ahead of a claimable one: each dequeue buries at
-- most 100 of them, and the claimable item comes out once they are gone
SELECT count(*) AS expiring FROM queue.enqueue_batch('q_bd', array_fill('{"stale": true}'::jsonb, ARRAY[250]),
                                                     expires_at => now() + interval '1 h');
SELECT queue.enqueue('q_bd', '{"fresh": true}') AS fresh \gset
UPDATE queue.item_live SET expires_at = now() - interval '1 s'
 WHERE queue_name = 'q_bd' AND payload ? 'stale';
SELECT count(*) AS claimed FROM queue.dequeue('q_bd', 'bd_bot');
SELECT count(*) AS dead FROM queue.dead_letters WHERE queue_name = 'q_bd';
SELECT count(*) AS claimed FROM queue.dequeue('q_bd', 'bd_bot', batch_size => 10);
SELECT count(*) AS dead FROM queue.dead_letters WHERE queue_name = 'q_bd';
SELECT item_id = :fresh AS fresh_claimed FROM queue.dequeue('q_bd', 'bd_bot');
SELECT reason, count(*) FROM queue.dead_letters WHERE queue_name = 'q_bd' GROUP BY reason;

-- case: spent lost leases count against the same bound
SELECT count(*) AS enqueued FROM queue.enqueue_batch('q_bd', array_fill('{"lost": true}'::jsonb, ARRAY[120]));
SELECT count(*) AS claimed FROM queue.dequeue('q_bd', 'bd_bot', batch_size => 120);
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'q_bd' AND payload ? 'lost';
SELECT count(*) AS claimed FROM queue.dequeue('q_bd', 'bd_bot');
SELECT reason, count(*) FROM queue.dead_letters WHERE queue_name = 'q_bd' GROUP BY reason ORDER BY reason;

-- case: sweep buries what dequeue left
SELECT expired + dead_lettered AS swept FROM queue.sweep() WHERE queue_name = 'q_bd';
SELECT reason, count(*) FROM queue.dead_letters WHERE queue_name = 'q_bd' GROUP BY reason ORDER BY reason;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_bd';

SELECT queue.drop_queue('q_bd', force => true);
