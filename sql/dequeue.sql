-- Consuming: dequeue, complete, complete_batch, order, batches, limits.
\set VERBOSITY terse

SELECT queue.create_queue('q_deq', max_attempts => 3);

-- case: dequeue from an empty queue returns no rows
SELECT count(*) FROM queue.dequeue('q_deq', 'w1');

-- case: dequeue claims an item and returns every documented column
SELECT queue.enqueue('q_deq', '{"job": "a"}', priority => 4, dedup_key => 'job-a',
       correlation_id => 'corr-a') AS a \gset
BEGIN;
SELECT item_id = :a AS same_item, lease_token IS NOT NULL AS has_token, payload, attempt,
       max_attempts, priority, enqueued_at <= now() AS enqueued_past,
       lease_expires_at = statement_timestamp() + interval '5 min' AS lease_5min, dedup_key, correlation_id
  FROM queue.dequeue('q_deq', 'w1');
COMMIT;
SELECT state, attempt, worker, lease_expires_at > now() AS leased
  FROM queue.items WHERE queue_name = 'q_deq' AND item_id = :a;

-- case: a leased item is not handed out again
SELECT count(*) FROM queue.dequeue('q_deq', 'w2');

-- case: complete moves the item to history with its result
SELECT queue.enqueue('q_deq', '{"job": "b"}') AS b \gset
SELECT item_id = :b AS same_item, lease_token AS tb FROM queue.dequeue('q_deq', 'w1') \gset
SELECT :'same_item' AS claimed_b;
SELECT queue.complete('q_deq', :b, :tb, '{"ok": true}');
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_deq' AND item_id = :b;
SELECT payload, result, attempts, worker, completed_at >= claimed_at AS ordered_times,
       claimed_at >= enqueued_at AS claimed_after_enqueue
  FROM queue.history WHERE queue_name = 'q_deq' AND item_id = :b;
SELECT state FROM queue.item('q_deq', :b);

-- case: completing twice, or with a wrong token, or an unknown id, returns false
SELECT queue.complete('q_deq', :b, :tb);
SELECT queue.complete('q_deq', :b, :tb + 1);
SELECT queue.complete('q_deq', -1, :tb);
SELECT count(*) AS history_rows FROM queue.history WHERE queue_name = 'q_deq';

-- case: complete without result stores NULL
SELECT queue.enqueue('q_deq', '{"job": "c"}') AS c \gset
SELECT lease_token AS tc FROM queue.dequeue('q_deq', 'w1') \gset
SELECT queue.complete('q_deq', :c, :tc);
SELECT result IS NULL AS no_result FROM queue.history WHERE queue_name = 'q_deq' AND item_id = :c;

-- case: a token is bound to its queue: the same id and token on another queue is not a lease
SELECT queue.create_queue('q_deq_other');
SELECT queue.enqueue('q_deq', '{"job": "d"}') AS d \gset
SELECT lease_token AS td FROM queue.dequeue('q_deq', 'w1') \gset
SELECT queue.complete('q_deq_other', :d, :td);
SELECT state FROM queue.items WHERE queue_name = 'q_deq' AND item_id = :d;
SELECT queue.complete('q_deq', :d, :td);

-- case: order is priority (lower first), then the time an item became claimable, then id
SELECT count(queue.enqueue('q_deq', jsonb_build_object('name', n), priority => p))
  FROM (VALUES ('p3-first', 3), ('p1-first', 1), ('p2', 2), ('p1-second', 1), ('p3-second', 3),
               ('p0', 0), ('p1000', 1000)) AS v(n, p);
SELECT ordinality, payload->>'name' AS name, priority
  FROM queue.dequeue('q_deq', 'w1', batch_size => 10) WITH ORDINALITY;

-- case: an item that became claimable later goes after older ones of the same priority,
-- even with a lower id
SELECT queue.enqueue('q_deq', '{"name": "older"}') AS older \gset
SELECT queue.enqueue('q_deq', '{"name": "newer"}') AS newer \gset
SELECT item_id = :older AS got_older, lease_token AS to1 FROM queue.dequeue('q_deq', 'w1') \gset
SELECT :'got_older' AS got_older;
SELECT queue.fail('q_deq', :older, :to1, 'try again', retry_in => '0 s');
SELECT ordinality, payload->>'name' AS name, attempt
  FROM queue.dequeue('q_deq', 'w1', batch_size => 10) WITH ORDINALITY;

-- case: with priority_aging an item's effective priority drops by one per period waited,
-- so an older low-priority item overtakes a newer higher-priority one
SELECT queue.create_queue('q_aging', priority_aging => '500 ms');
SELECT queue.create_queue('q_no_aging');
SELECT queue.enqueue('q_aging', '{"name": "old p5"}', priority => 5) AS old5 \gset
SELECT queue.enqueue('q_no_aging', '{"name": "old p5"}', priority => 5) AS old5n \gset
SELECT pg_sleep(1.1);
SELECT queue.enqueue('q_aging', '{"name": "new p4"}', priority => 4) AS new4 \gset
SELECT queue.enqueue('q_no_aging', '{"name": "new p4"}', priority => 4) AS new4n \gset
-- (aging may be computed at claim time or stored by sweep, so sweep runs first)
SELECT count(*) > 0 AS swept FROM queue.sweep();
SELECT ordinality, payload->>'name' AS name
  FROM queue.dequeue('q_aging', 'w1', batch_size => 2) WITH ORDINALITY;
SELECT ordinality, payload->>'name' AS name
  FROM queue.dequeue('q_no_aging', 'w1', batch_size => 2) WITH ORDINALITY;
SELECT queue.drop_queue('q_aging', force => true);
SELECT queue.drop_queue('q_no_aging', force => true);

-- case: batch_size limits the batch; the rest stays queued
SELECT count(*) FROM queue.enqueue_batch('q_deq', array_fill('{"bulk": true}'::jsonb, ARRAY[25]));
SELECT count(*) AS claimed FROM queue.dequeue('q_deq', 'w2', batch_size => 10);
SELECT count(*) AS claimed FROM queue.dequeue('q_deq', 'w3', batch_size => 10000);
SELECT count(*) AS claimed FROM queue.dequeue('q_deq', 'w3', batch_size => 10);
SELECT worker, count(*) FROM queue.items
 WHERE queue_name = 'q_deq' AND payload = '{"bulk": true}' GROUP BY worker ORDER BY worker;

-- case: lease_timeout overrides the queue's lease for this claim
SELECT queue.enqueue('q_deq', '{"job": "short"}') AS s \gset
BEGIN;
SELECT lease_expires_at = statement_timestamp() + interval '42 s' AS lease_42s
  FROM queue.dequeue('q_deq', 'w1', lease_timeout => '42 s');
COMMIT;

-- case: scheduled and on-hold items are not handed out
SELECT queue.enqueue('q_deq', '{"job": "later"}', run_at => now() + interval '1 h') AS later \gset
SELECT queue.enqueue('q_deq', '{"job": "held"}') AS held \gset
SELECT queue.hold('q_deq', :held);
SELECT count(*) FROM queue.dequeue('q_deq', 'w1', batch_size => 100);
SELECT state FROM queue.items WHERE item_id IN (:later, :held) AND queue_name = 'q_deq' ORDER BY item_id;

-- case: complete_batch completes the pairs whose token is current and skips the rest
SELECT count(*) FROM queue.enqueue_batch('q_deq', ARRAY['{"cb": 1}', '{"cb": 2}', '{"cb": 3}']::jsonb[]);
SELECT array_agg(item_id ORDER BY item_id) AS cb_ids, array_agg(lease_token ORDER BY item_id) AS cb_tokens
  FROM queue.dequeue('q_deq', 'w1', batch_size => 3) \gset
SELECT queue.complete_batch('q_deq', :'cb_ids'::bigint[],
       (:'cb_tokens'::bigint[])[1:2] || ((:'cb_tokens'::bigint[])[3] + 1));
SELECT h.payload FROM queue.history h
 WHERE h.queue_name = 'q_deq' AND h.item_id = ANY (:'cb_ids'::bigint[]) ORDER BY h.item_id;
SELECT payload, state FROM queue.items WHERE queue_name = 'q_deq' AND item_id = ANY (:'cb_ids'::bigint[]);
SELECT queue.complete_batch('q_deq', :'cb_ids'::bigint[], :'cb_tokens'::bigint[], '{"late": true}');
SELECT result FROM queue.history WHERE queue_name = 'q_deq' AND item_id = (:'cb_ids'::bigint[])[3];
SELECT queue.complete_batch('q_deq', ARRAY[]::bigint[], ARRAY[]::bigint[]);

-- case: a paused queue hands out nothing; in-flight items finish normally
SELECT queue.create_queue('q_pause');
SELECT queue.enqueue('q_pause', '{"p": 1}') AS p1 \gset
SELECT queue.enqueue('q_pause', '{"p": 2}') AS p2 \gset
SELECT lease_token AS tp1 FROM queue.dequeue('q_pause', 'w1') \gset
SELECT queue.pause('q_pause', 'maintenance');
SELECT count(*) FROM queue.dequeue('q_pause', 'w1');
SELECT queue.complete('q_pause', :p1, :tp1);
SELECT queue.resume('q_pause');
SELECT item_id = :p2 AS got_p2 FROM queue.dequeue('q_pause', 'w1');

-- case: max_in_flight caps the items in processing
SELECT queue.create_queue('q_cap', max_in_flight => 2);
SELECT count(*) FROM queue.enqueue_batch('q_cap', array_fill('{}'::jsonb, ARRAY[5]));
SELECT count(*) AS claimed FROM queue.dequeue('q_cap', 'w1', batch_size => 5);
SELECT count(*) AS claimed FROM queue.dequeue('q_cap', 'w2');
SELECT state, count(*) FROM queue.items WHERE queue_name = 'q_cap' GROUP BY state ORDER BY state;

-- case: a bot that claims and completes in one transaction: the history
-- never says it finished before it was claimed (its run time is not
-- negative), through complete (a plain item, and a grouped one, by
-- statement) and complete_batch alike
SELECT queue.create_queue('q_one_tx');
SELECT count(*) FROM (SELECT queue.enqueue('q_one_tx', jsonb_build_object('n', n),
                                           group_key => CASE WHEN n = 2 THEN 'g' END)
                        FROM generate_series(1, 3) n) e;
BEGIN;
SELECT pg_sleep(0.05);
CREATE TEMP TABLE one_tx AS SELECT item_id, lease_token, payload->>'n' AS n
  FROM queue.dequeue('q_one_tx', 'w1', batch_size => 3);
SELECT pg_sleep(0.05);
SELECT queue.complete('q_one_tx', item_id, lease_token) FROM one_tx WHERE n IN ('1', '2');
SELECT queue.complete_batch('q_one_tx', array_agg(item_id), array_agg(lease_token)) FROM one_tx WHERE n = '3';
COMMIT;
SELECT payload->>'n' AS n, completed_at >= claimed_at AS ordered_times,
       completed_at - claimed_at >= interval '50 ms' AS ran_for_the_work
  FROM queue.history WHERE queue_name = 'q_one_tx' ORDER BY item_id;
SELECT run_p50 >= interval '0' AS run_not_negative FROM queue.stats('q_one_tx');
DROP TABLE one_tx;
SELECT queue.drop_queue('q_one_tx', force => true);

SELECT queue.drop_queue('q_cap', force => true);
SELECT queue.drop_queue('q_pause', force => true);
SELECT queue.drop_queue('q_deq_other');
SELECT queue.drop_queue('q_deq', force => true);
