-- Ordered groups through the life of an item: the head is the group's
-- lowest-id live item, so a head that a dequeue dead-letters on the spot
-- (expired, or a lost lease on its last attempt) lets that very dequeue
-- hand out the group's next item, like an ungrouped item behind it.
\set VERBOSITY terse

CREATE ROLE regress_gl_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_gl_worker LOGIN IN ROLE queue_worker;

-- case: an expired head: the dequeue that meets it returns the next member
SELECT queue.create_queue('gl_exp');
SET ROLE regress_gl_producer;
SELECT queue.enqueue('gl_exp', '{"n": 1}', group_key => 'a',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('gl_exp', '{"n": 2}', group_key => 'a') > 0 AS enqueued;
SELECT queue.enqueue('gl_exp', '{"n": 3}', group_key => 'a') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_gl_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('gl_exp', 'gl-w', batch_size => 10);
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'gl_exp';
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'gl_exp' ORDER BY item_id;

-- case: the next members expired too: the same dequeue passes them all
-- and returns the first live one
SELECT queue.create_queue('gl_exp3');
SET ROLE regress_gl_producer;
SELECT count(*) FROM queue.enqueue_batch('gl_exp3', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                                         expires_at => clock_timestamp() + interval '50 ms',
                                         group_keys => ARRAY['a', 'a', 'a']);
SELECT queue.enqueue('gl_exp3', '{"n": 4}', group_key => 'a') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_gl_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('gl_exp3', 'gl-w', batch_size => 10);
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'gl_exp3' ORDER BY item_id;

-- case: a head whose lease ran out on its last attempt: the dequeue that
-- dead-letters it returns the next member
SELECT queue.create_queue('gl_spent', max_attempts => 1);
SET ROLE regress_gl_producer;
SELECT count(*) FROM queue.enqueue_batch('gl_spent', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
                                         group_keys => ARRAY['a', 'a']);
RESET ROLE;
SET ROLE regress_gl_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('gl_spent', 'gl-gone', lease_timeout => '10 ms');
RESET ROLE;
SELECT pg_sleep(0.05);
SET ROLE regress_gl_worker;
SELECT payload->>'n' AS n, attempt FROM queue.dequeue('gl_spent', 'gl-w', batch_size => 10);
RESET ROLE;
SELECT payload->>'n' AS n, reason FROM queue.dead_letters WHERE queue_name = 'gl_spent';

-- case: with group_on_dead = 'block' the dead head holds its group
-- instead: the dequeue returns nothing of it
SELECT queue.create_queue('gl_block', group_on_dead => 'block');
SET ROLE regress_gl_producer;
SELECT queue.enqueue('gl_block', '{"n": 1}', group_key => 'a',
                     expires_at => clock_timestamp() + interval '50 ms') > 0 AS enqueued;
SELECT queue.enqueue('gl_block', '{"n": 2}', group_key => 'a') > 0 AS enqueued;
SELECT queue.enqueue('gl_block', '{"n": 3}', group_key => 'b') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(0.1);
SET ROLE regress_gl_worker;
SELECT payload->>'n' AS n FROM queue.dequeue('gl_block', 'gl-w', batch_size => 10);
SELECT payload->>'n' AS n FROM queue.dequeue('gl_block', 'gl-w', batch_size => 10);
RESET ROLE;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'gl_block' ORDER BY item_id;

SELECT queue.drop_queue(q, force => true) FROM unnest(ARRAY['gl_exp', 'gl_exp3', 'gl_spent', 'gl_block']) q;
DROP ROLE regress_gl_producer;
DROP ROLE regress_gl_worker;
