-- An item past its expires_at is never handed out, so it is not claimable:
-- stats() does not count it as queued nor age the queue by it, and
-- health()'s sla rule does not judge it, also before a sweep or a dequeue
-- has made it the expired dead letter it is bound to be (a group member
-- waiting behind its head included).  What is claimable still counts.
\set VERBOSITY terse

CREATE ROLE regress_enq_prod LOGIN IN ROLE queue_producer;
CREATE ROLE regress_enq_bot LOGIN IN ROLE queue_worker;
SELECT queue.create_queue('q_exq', sla => '2 s');

SET ROLE regress_enq_prod;
SELECT queue.enqueue('q_exq', '{"n": 1}', expires_at => now() + interval '1 s') AS expiring \gset
SELECT queue.enqueue('q_exq', '{"n": 2}', run_at => now() + interval '1 h') > 0 AS scheduled;
-- a group whose head is processing, and a member behind it that expires
SELECT queue.enqueue('q_exq', '{"n": 3}', priority => 0, group_key => 'g') AS head \gset
RESET ROLE;
SET ROLE regress_enq_bot;
SELECT item_id = :head AS head_claimed FROM queue.dequeue('q_exq', 'exq-bot');
RESET ROLE;
SET ROLE regress_enq_prod;
SELECT queue.enqueue('q_exq', '{"n": 4}', group_key => 'g',
                     expires_at => now() + interval '1 s') > 0 AS member;
RESET ROLE;
SELECT pg_sleep(2.5);

-- case: nothing claimable: queued 0, no oldest queued age, health ok
SELECT queued, scheduled, processing, on_hold, oldest_queued_age IS NULL AS no_oldest
  FROM queue.stats('q_exq');
SELECT status, reasons FROM queue.health('q_exq');
SELECT queue.desired_workers('q_exq') AS desired;

-- case: a claimable item enqueued now counts, from its own wait
SET ROLE regress_enq_prod;
SELECT queue.enqueue('q_exq', '{"n": 5}') > 0 AS fresh;
RESET ROLE;
SELECT queued, scheduled, processing, on_hold, oldest_queued_age < interval '2 s' AS young
  FROM queue.stats('q_exq');
SELECT status FROM queue.health('q_exq');

-- the expired items are still bound for the dead letters
SELECT expired FROM queue.sweep('q_exq');
SELECT reason FROM queue.dead_letters WHERE queue_name = 'q_exq' ORDER BY item_id;

SELECT queue.drop_queue('q_exq', force => true);
DROP ROLE regress_enq_prod;
DROP ROLE regress_enq_bot;
