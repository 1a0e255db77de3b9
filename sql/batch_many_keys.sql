-- A batch dequeue over many limited keys is the same as that many single
-- dequeues: it takes every claimable item of every key that has room, in
-- claim order, and never hands out an item of a lower priority while one
-- of a higher priority is claimable (70 keys, more than a call once
-- opened).
\set VERBOSITY terse

CREATE ROLE regress_bmk_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_bmk_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_bmk_worker LOGIN IN ROLE queue_worker;

SET ROLE regress_bmk_admin;
SELECT queue.create_queue('bmk');
SELECT count(queue.set_limit('bmk', 'k' || i, max_in_flight => 1)) FROM generate_series(1, 70) i;
RESET ROLE;
SET ROLE regress_bmk_producer;
-- two items per key (the key's cap lets one out), then ten plain items
-- of a lower priority
SELECT count(*) FROM queue.enqueue_batch('bmk',
    (SELECT array_agg(jsonb_build_object('n', 'k' || i || '-' || j) ORDER BY j, i)
       FROM generate_series(1, 70) i, generate_series(1, 2) j),
    priority => 1,
    limit_keys => (SELECT array_agg('k' || i ORDER BY j, i)
                     FROM generate_series(1, 70) i, generate_series(1, 2) j));
SELECT count(*) FROM queue.enqueue_batch('bmk',
    (SELECT array_agg(jsonb_build_object('n', 'p' || i) ORDER BY i) FROM generate_series(1, 10) i),
    priority => 2);
RESET ROLE;

SET ROLE regress_bmk_worker;
CREATE TEMP TABLE bmk_got AS
SELECT ord, payload->>'n' AS n, priority
  FROM queue.dequeue('bmk', 'bmk-w', batch_size => 100) WITH ORDINALITY
       AS d(item_id, lease_token, payload, progress, attempt, max_attempts, priority,
            enqueued_at, lease_expires_at, dedup_key, correlation_id, ord);
RESET ROLE;
-- every key's first item (one per key: its cap), then the plain items
SELECT count(*) AS claimed,
       count(*) FILTER (WHERE priority = 1) AS keyed,
       count(DISTINCT n) FILTER (WHERE priority = 1) AS distinct_keyed,
       count(*) FILTER (WHERE priority = 2) AS plain
  FROM bmk_got;
-- in claim order, and no keyed item passed over while plain ones went out
SELECT string_agg(n, ' ' ORDER BY ord) FILTER (WHERE ord > 68) AS tail FROM bmk_got;
SELECT limit_key, in_flight FROM queue.limits
 WHERE queue_name = 'bmk' AND in_flight <> 1 ORDER BY limit_key;

DROP TABLE bmk_got;
SELECT queue.drop_queue('bmk', force => true);
DROP ROLE regress_bmk_admin, regress_bmk_producer, regress_bmk_worker;
