-- Flow control as the contract states it: per-key caps and rates, the
-- queue-wide rate and cap, and capability routing.
\set VERBOSITY terse

-- case: drop_limit validates its limit_key like set_limit: an empty key is
-- 22023 and changes nothing (the queue-wide rate, limit_key NULL, stays)
SELECT queue.create_queue('lc_drop');
SELECT queue.set_limit('lc_drop', NULL, rate => 5, per => '1 min');
SELECT queue.set_limit('lc_drop', 'k', max_in_flight => 1);
SELECT queue.drop_limit('lc_drop', '');
SELECT coalesce(limit_key, '(queue)') AS limit_key, max_in_flight, rate
  FROM queue.limits WHERE queue_name = 'lc_drop' ORDER BY 1;
SELECT queue.drop_limit('lc_drop', NULL);
SELECT queue.drop_limit('lc_drop', 'k');
SELECT count(*) AS limits_left FROM queue.limits WHERE queue_name = 'lc_drop';
SELECT queue.drop_queue('lc_drop', force => true);

-- case: the unroutable rule counts how long an item has waited to be
-- claimed, from when it became claimable: an item enqueued just now with a
-- backdated run_at has not waited past the sla
SELECT queue.create_queue('lc_route', sla => '1 min');
SELECT count(queue.enqueue('lc_route', '{}', run_at => now() - interval '1 hour',
                           requires => ARRAY['lc_fpga'])) AS enqueued;
SELECT status, reasons FROM queue.health('lc_route');
SELECT count(*) FROM queue.sweep('lc_route');
SELECT count(*) AS open_unroutable FROM queue.alerts
 WHERE queue_name = 'lc_route' AND kind = 'unroutable' AND cleared_at IS NULL;
-- two minutes later (the item claimable since then) it has
UPDATE queue.item_live SET enqueued_at = enqueued_at - interval '2 min',
                           visible_at = visible_at - interval '2 min'
 WHERE queue_name = 'lc_route';
SELECT r AS reason FROM queue.health('lc_route'), unnest(reasons) r WHERE r LIKE 'unroutable:%';
SELECT queue.drop_queue('lc_route', force => true);

-- case: a queue's max_in_flight lowered while items are in flight holds
-- at once: no claim takes the queue over the new cap, whichever of its
-- leases were taken under the old one
SELECT queue.create_queue('lc_cap', max_in_flight => 16);
SELECT count(*) AS enqueued FROM queue.enqueue_batch('lc_cap', array_fill('{}'::jsonb, ARRAY[40]));
SELECT count(*) AS claimed_under_16 FROM queue.dequeue('lc_cap', 'w1', batch_size => 2);
SELECT queue.alter_queue('lc_cap', max_in_flight => 4);
SELECT count(*) AS claimed_under_4 FROM queue.dequeue('lc_cap', 'w2', batch_size => 10);
SELECT count(*) AS claimed_more FROM queue.dequeue('lc_cap', 'w3', batch_size => 10);
SELECT processing FROM queue.stats('lc_cap');
-- and lowered below what is in flight: nothing until enough leases end
SELECT queue.alter_queue('lc_cap', max_in_flight => 3);
SELECT count(*) AS claimed_over_cap FROM queue.dequeue('lc_cap', 'w3', batch_size => 10);
SELECT count(queue.complete('lc_cap', item_id, lease_token)) AS completed
  FROM (SELECT i.item_id, l.lease_token FROM queue.item_live l
          JOIN queue.items i ON i.queue_name = l.queue_name AND i.item_id = l.item_id
         WHERE l.queue_name = 'lc_cap' AND i.state = 'processing'
         ORDER BY l.item_id LIMIT 2) x;
SELECT count(*) AS claimed_to_cap FROM queue.dequeue('lc_cap', 'w3', batch_size => 10);
SELECT processing FROM queue.stats('lc_cap');
SELECT queue.drop_queue('lc_cap', force => true);
