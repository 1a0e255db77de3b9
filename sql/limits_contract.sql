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
