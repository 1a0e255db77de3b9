-- Priority aging follows the queue's current priority_aging: an item's
-- effective priority is greatest(0, priority - floor(waited / priority_aging))
-- under the setting of the moment, so a longer (or shorter) step set with
-- alter_queue re-prioritises items the old step had aged.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

SELECT queue.create_queue('ag_q', priority_aging => '10 min');
SELECT queue.enqueue('ag_q', '{"k": "p5 waited 35 min"}', priority => 5) AS a5 \gset
SELECT queue.enqueue('ag_q', '{"k": "p5 waited 25 min"}', priority => 5) AS b5 \gset
SELECT queue.enqueue('ag_q', '{"k": "p2 fresh"}', priority => 2) AS f2 \gset
SELECT queue.enqueue('ag_q', '{"k": "p4 fresh"}', priority => 4) AS f4 \gset
UPDATE queue.item_live
   SET enqueued_at = enqueued_at - interval '35 min', run_at = run_at - interval '35 min',
       visible_at = visible_at - interval '35 min'
 WHERE queue_name = 'ag_q' AND item_id = :a5;
UPDATE queue.item_live
   SET enqueued_at = enqueued_at - interval '25 min', run_at = run_at - interval '25 min',
       visible_at = visible_at - interval '25 min'
 WHERE queue_name = 'ag_q' AND item_id = :b5;

-- case: aged under a 10 min step: 5 - 3 = 2 and 5 - 2 = 3
SELECT aged FROM queue.sweep() WHERE queue_name = 'ag_q';
SELECT payload->>'k' AS k, priority, effective_priority FROM queue.items
 WHERE queue_name = 'ag_q' ORDER BY item_id;

-- case: a longer step (1 hour): 35 and 25 minutes are no step at all, both
-- are back at 5 (at the latest after the next sweep)
SELECT queue.alter_queue('ag_q', priority_aging => '1 hour');
SELECT count(*) AS swept FROM queue.sweep() WHERE queue_name = 'ag_q';
SELECT payload->>'k' AS k, priority, effective_priority FROM queue.items
 WHERE queue_name = 'ag_q' ORDER BY item_id;

-- case: a step in between (20 min): 5 - 1 = 4 for both
SELECT queue.alter_queue('ag_q', priority_aging => '20 min');
SELECT count(*) AS swept FROM queue.sweep() WHERE queue_name = 'ag_q';
SELECT payload->>'k' AS k, priority, effective_priority FROM queue.items
 WHERE queue_name = 'ag_q' ORDER BY item_id;

-- case: a shorter step (5 min): 5 - 7 -> 0 and 5 - 5 = 0
SELECT queue.alter_queue('ag_q', priority_aging => '5 min');
SELECT count(*) AS swept FROM queue.sweep() WHERE queue_name = 'ag_q';
SELECT payload->>'k' AS k, priority, effective_priority FROM queue.items
 WHERE queue_name = 'ag_q' ORDER BY item_id;

-- case: another setting changed leaves the aged priorities as they are
SELECT queue.alter_queue('ag_q', sla => '1 hour');
SELECT payload->>'k' AS k, effective_priority FROM queue.items
 WHERE queue_name = 'ag_q' ORDER BY item_id;

-- case: back to a 1 hour step: the claim order is by the priorities under it
SELECT queue.alter_queue('ag_q', priority_aging => '1 hour');
SELECT count(*) AS swept FROM queue.sweep() WHERE queue_name = 'ag_q';
SELECT ordinality, payload->>'k' AS k
  FROM queue.dequeue('ag_q', 'w1', batch_size => 4) WITH ORDINALITY;

SELECT queue.drop_queue('ag_q', force => true);
