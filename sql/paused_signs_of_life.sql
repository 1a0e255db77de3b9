-- Signs of life on a paused queue: a dequeue is a sign of life of its
-- worker (and registers an unknown one) even when the queue is paused or
-- its breaker is open and nothing comes back.
\set VERBOSITY terse

CREATE ROLE regress_psl_bot LOGIN IN ROLE queue_worker;
SELECT queue.create_queue('psl_q');
SELECT queue.enqueue('psl_q', '{}') > 0 AS enqueued;
SELECT queue.pause('psl_q', 'ERP down');
SET queue.worker_offline_after = '1s';

-- case: the first dequeue registers an unknown worker, paused queue or not
SET ROLE regress_psl_bot;
SELECT count(*) AS claimed FROM queue.dequeue('psl_q', 'psl-new');
SELECT worker, status FROM queue.workers WHERE worker = 'psl-new';
RESET ROLE;
SELECT worker, registered_by FROM queue.worker_registry WHERE worker = 'psl-new';

-- case: a worker polling a paused queue is never offline
SET ROLE regress_psl_bot;
SELECT queue.register_worker('psl-poller');
SELECT pg_sleep(0.6);
SELECT count(*) AS claimed FROM queue.dequeue('psl_q', 'psl-poller');
SELECT pg_sleep(0.6);
SELECT count(*) AS claimed FROM queue.dequeue('psl_q', 'psl-poller');
SELECT pg_sleep(0.6);
SELECT count(*) AS claimed FROM queue.dequeue('psl_q', 'psl-poller');
SELECT worker, status FROM queue.workers WHERE worker = 'psl-poller';
RESET ROLE;

-- case: the same while the circuit breaker holds the queue
SELECT queue.resume('psl_q');
SELECT queue.alter_queue('psl_q', breaker_threshold => 0.5, breaker_min_samples => 1,
                         breaker_cooldown => '1 h', backoff_base => '1 h');
SET ROLE regress_psl_bot;
SELECT queue.fail('psl_q', d.item_id, d.lease_token, 'ERP timeout', 'ERP_TIMEOUT')
  FROM queue.dequeue('psl_q', 'psl-poller') d;
SELECT paused, paused_by, breaker_state FROM queue.queues WHERE queue_name = 'psl_q';
SELECT pg_sleep(0.6);
SELECT count(*) AS claimed FROM queue.dequeue('psl_q', 'psl-poller');
SELECT pg_sleep(0.6);
SELECT count(*) AS claimed FROM queue.dequeue('psl_q', 'psl-poller');
SELECT worker, status FROM queue.workers WHERE worker = 'psl-poller';
SELECT count(*) AS claimed FROM queue.dequeue('psl_q', 'psl-breaker-new');
SELECT worker, status FROM queue.workers WHERE worker = 'psl-breaker-new';
RESET ROLE;

RESET queue.worker_offline_after;
SELECT queue.drop_queue('psl_q', force => true);
DROP ROLE regress_psl_bot;
