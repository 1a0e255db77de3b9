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
                           requires => ARRAY['gpu'])) AS enqueued;
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
