-- The claim order across limited keys and the rest of the queue: by
-- effective priority, then the time an item became claimable, then id,
-- whatever key an item has; a batch comes back in that order.
\set VERBOSITY terse

SELECT queue.create_queue('fo_q');
SELECT queue.set_limit('fo_q', 'erp', max_in_flight => 5);
SELECT queue.set_limit('fo_q', 'crm', rate => 100, per => '1 min');

-- case: an unlimited urgent item comes before a limited key's low-priority
-- item enqueued earlier; between keys, priority decides, not which key
-- has been ready longest
SELECT queue.enqueue('fo_q', '{"k": "erp-low"}', priority => 9, limit_key => 'erp') > 0 AS enqueued;
SELECT queue.enqueue('fo_q', '{"k": "urgent"}', priority => 0) > 0 AS enqueued;
SELECT queue.enqueue('fo_q', '{"k": "crm-high"}', priority => 1, limit_key => 'crm') > 0 AS enqueued;
SELECT queue.enqueue('fo_q', '{"k": "plain"}', priority => 5) > 0 AS enqueued;
SELECT queue.enqueue('fo_q', '{"k": "erp-mid"}', priority => 5, limit_key => 'erp') > 0 AS enqueued;
SELECT payload->>'k' AS k, priority FROM queue.dequeue('fo_q', 'w1');
-- case: a batch takes the first items in that order and returns them in it
SELECT payload->>'k' AS k, priority FROM queue.dequeue('fo_q', 'w1', batch_size => 3);
SELECT payload->>'k' AS k, priority FROM queue.dequeue('fo_q', 'w1', batch_size => 3);

-- case: a full key is still skipped: the batch fills from the rest in order
SELECT queue.set_limit('fo_q', 'erp', max_in_flight => 2);
SELECT queue.enqueue('fo_q', '{"k": "erp-top"}', priority => 0, limit_key => 'erp') > 0 AS enqueued;
SELECT queue.enqueue('fo_q', '{"k": "plain-2"}', priority => 3) > 0 AS enqueued;
SELECT payload->>'k' AS k, priority FROM queue.dequeue('fo_q', 'w1', batch_size => 3);

-- case: among many limited keys, the one whose first item comes first in
-- the claim order is served first, whichever key became ready first
SELECT queue.create_queue('fo_many');
SELECT count(queue.set_limit('fo_many', 'k' || i, max_in_flight => 5)) FROM generate_series(1, 70) i;
SELECT count(queue.enqueue('fo_many', jsonb_build_object('k', 'k' || i), priority => 5,
                           limit_key => 'k' || i)) FROM generate_series(1, 70) i;
SELECT queue.enqueue('fo_many', '{"k": "k70-urgent"}', priority => 0, limit_key => 'k70') > 0 AS enqueued;
SELECT queue.enqueue('fo_many', '{"k": "k69-soon"}', priority => 1, limit_key => 'k69') > 0 AS enqueued;
SELECT payload->>'k' AS k, priority FROM queue.dequeue('fo_many', 'w1');
SELECT payload->>'k' AS k, priority FROM queue.dequeue('fo_many', 'w1');
-- a batch takes an item of every key that has one, as many single calls would
SELECT count(*) AS claimed, count(DISTINCT payload->>'k') AS keys
  FROM queue.dequeue('fo_many', 'w1', batch_size => 100);

-- case: under the queue's max_in_flight a batch takes the first items in
-- claim order too, as many of a limited key as the key and the queue allow
SELECT queue.create_queue('fo_cap', max_in_flight => 3);
SELECT queue.set_limit('fo_cap', 'erp', max_in_flight => 5);
SELECT count(queue.enqueue('fo_cap', jsonb_build_object('k', k), limit_key => l))
  FROM (VALUES ('erp-1', 'erp'), ('erp-2', 'erp'), ('erp-3', 'erp'), ('plain-1', NULL),
               ('plain-2', NULL)) AS x(k, l);
SELECT payload->>'k' AS k FROM queue.dequeue('fo_cap', 'w1', batch_size => 10);
SELECT queue.create_queue('fo_cap2', max_in_flight => 2);
SELECT queue.set_limit('fo_cap2', 'erp', max_in_flight => 5);
SELECT count(queue.enqueue('fo_cap2', jsonb_build_object('k', 'erp-' || i), limit_key => 'erp'))
  FROM generate_series(1, 3) i;
SELECT payload->>'k' AS k FROM queue.dequeue('fo_cap2', 'w1', batch_size => 10);
SELECT limit_key, in_flight FROM queue.limits WHERE queue_name = 'fo_cap2';

SELECT queue.drop_queue('fo_cap', force => true);
SELECT queue.drop_queue('fo_cap2', force => true);
SELECT queue.drop_queue('fo_q', force => true);
SELECT queue.drop_queue('fo_many', force => true);
