--
-- claim_hint: a session whose claims step over many index entries starts
-- its next claims where it last found rows (queue.claim_hint_threshold);
-- rows before that point are still claimed when a hinted claim comes back
-- short.  Threshold 0 makes every claim after the first hinted.  Order
-- across the hint is not asserted (a claim from the head runs every
-- second); that nothing is lost or handed out twice is.
--
SET client_min_messages = warning;
SELECT queue.create_queue('ch');
SET queue.claim_hint_threshold = 0;
SELECT count(*) FROM queue.enqueue_batch('ch', array_fill('{}'::jsonb, ARRAY[3]), priority => 5);
SELECT count(*) FROM queue.dequeue('ch', 'w');
-- before the hint: a higher priority, an older run_at, a released item
SELECT queue.enqueue('ch', '{"n": "urgent"}', priority => 0) > 0 AS enqueued;
SELECT queue.enqueue('ch', '{"n": "late"}', priority => 5, run_at => now() - interval '1 h') > 0 AS enqueued;
SELECT queue.release('ch', item_id, lease_token)
  FROM queue.dequeue('ch', 'w');
-- a batch larger than what lies past the hint is filled from before it
SELECT count(*) AS claimed, count(DISTINCT item_id) AS distinct_items
  FROM queue.dequeue('ch', 'w', 10);
SELECT count(*) AS still_claimable FROM queue.dequeue('ch', 'w');
SELECT state, count(*) FROM queue.items WHERE queue_name = 'ch' GROUP BY state;

-- single claims also find the rows before the hint, one by one
SELECT count(*) FROM queue.enqueue_batch('ch', array_fill('{}'::jsonb, ARRAY[2]), priority => 5);
SELECT count(*) FROM queue.dequeue('ch', 'w2');
SELECT queue.enqueue('ch', '{"n": "urgent"}', priority => 0) > 0 AS enqueued;
SELECT count(*) FROM queue.dequeue('ch', 'w2');
SELECT count(*) FROM queue.dequeue('ch', 'w2');
SELECT count(*) AS none_left FROM queue.dequeue('ch', 'w2');

-- the threshold accepts -1 (never) and nothing below
SET queue.claim_hint_threshold = -1;
SET queue.claim_hint_threshold = -2;
RESET queue.claim_hint_threshold;
SELECT queue.drop_queue('ch', force => true);
