-- enqueue_batch with group_keys: a group's items are handed out one at a
-- time in input order (their ids), and the first of them is the head, also
-- when dedup_keys make the batch write its keyed rows in key order.
\set VERBOSITY terse

CREATE ROLE regress_bgo_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_bgo_worker LOGIN IN ROLE queue_worker;

SELECT queue.create_queue('bgo');

-- case: keys out of alphabetical order, one group
SET ROLE regress_bgo_producer;
SELECT array_agg(id ORDER BY ord) = array_agg(id ORDER BY id) AS ids_in_input_order
  FROM queue.enqueue_batch('bgo', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                           dedup_keys => ARRAY['z', 'a', 'm'],
                           group_keys => ARRAY['g', 'g', 'g']) WITH ORDINALITY AS t(id, ord);
RESET ROLE;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'bgo' ORDER BY item_id;
SET ROLE regress_bgo_worker;
SELECT payload->>'n' AS n, queue.complete('bgo', item_id, lease_token)
  FROM queue.dequeue('bgo', 'bgo-w', batch_size => 10);
SELECT payload->>'n' AS n, queue.complete('bgo', item_id, lease_token)
  FROM queue.dequeue('bgo', 'bgo-w', batch_size => 10);
SELECT payload->>'n' AS n, queue.complete('bgo', item_id, lease_token)
  FROM queue.dequeue('bgo', 'bgo-w', batch_size => 10);
RESET ROLE;

-- case: an item without a key before a keyed one, and two groups
SET ROLE regress_bgo_producer;
SELECT count(*) FROM queue.enqueue_batch('bgo',
         ARRAY['{"n": "h1"}', '{"n": "k1"}', '{"n": "h2"}', '{"n": "k2"}']::jsonb[],
         dedup_keys => ARRAY[NULL, 'b', 'a', NULL],
         group_keys => ARRAY['h', 'k', 'h', 'k']);
RESET ROLE;
SELECT payload->>'n' AS n, state, waiting FROM queue.items
 WHERE queue_name = 'bgo' ORDER BY item_id;
SET ROLE regress_bgo_worker;
SELECT payload->>'n' AS n, queue.complete('bgo', item_id, lease_token)
  FROM queue.dequeue('bgo', 'bgo-w', batch_size => 10) ORDER BY 1;
SELECT payload->>'n' AS n, queue.complete('bgo', item_id, lease_token)
  FROM queue.dequeue('bgo', 'bgo-w', batch_size => 10) ORDER BY 1;
RESET ROLE;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'bgo';

SELECT queue.drop_queue('bgo', force => true);
DROP ROLE regress_bgo_producer;
DROP ROLE regress_bgo_worker;
