-- Lost leases as outcomes: the dequeue that meets expired leases counts
-- them as failed outcomes at once; when they trip the breaker, the queue
-- is paused and that dequeue hands out nothing.
\set VERBOSITY terse

CREATE ROLE regress_bll_bot LOGIN IN ROLE queue_worker;
SELECT queue.create_queue('bll_q', lease_timeout => '1 s', breaker_threshold => 0.5,
                          breaker_min_samples => 2, breaker_cooldown => '1 h');
SELECT count(*) FROM queue.enqueue_batch('bll_q', array_fill('{}'::jsonb, ARRAY[4]));

SET ROLE regress_bll_bot;
SELECT count(*) AS claimed FROM queue.dequeue('bll_q', 'bll-a', batch_size => 2);
SELECT pg_sleep(1.2);

-- case: the next dequeue meets the two lost leases, which trip the
-- breaker: it hands out nothing, and every item is claimable again
SELECT count(*) AS claimed FROM queue.dequeue('bll_q', 'bll-b', batch_size => 4);
SELECT paused, paused_by, breaker_state FROM queue.queues WHERE queue_name = 'bll_q';
SELECT queued, processing, failed_1h FROM queue.stats('bll_q');
SELECT state, attempt, count(*) FROM queue.items WHERE queue_name = 'bll_q'
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT count(*) AS claimed_while_open FROM queue.dequeue('bll_q', 'bll-b', batch_size => 4);
RESET ROLE;

-- case: once resumed, the items come out with their lost attempts counted
SELECT queue.resume('bll_q');
SET ROLE regress_bll_bot;
SELECT attempt, count(*) FROM queue.dequeue('bll_q', 'bll-b', batch_size => 4)
 GROUP BY 1 ORDER BY 1;
RESET ROLE;

SELECT queue.drop_queue('bll_q', force => true);
DROP ROLE regress_bll_bot;
