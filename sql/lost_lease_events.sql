-- Events per failure: failed, then retrying or dead_lettered.  A lost lease
-- counts as a failed attempt, so its failed event is followed by retrying
-- when the item comes back (by dead_lettered on its last attempt), whoever
-- counts it: the dequeue that re-claims the item, sweep, or a restart of
-- the worker that held it.
\set VERBOSITY terse

SELECT queue.create_queue('q_lle', audit => 'all', max_attempts => 3);
SELECT queue.enqueue('q_lle', '{"n": "a"}', priority => 0) AS a \gset
SELECT queue.enqueue('q_lle', '{"n": "b"}') AS b \gset

-- case: a lost lease counted by the dequeue that re-claims the item
SELECT item_id = :a AS a_claimed FROM queue.dequeue('q_lle', 'w-lost', lease_timeout => '0.1 s');
SELECT pg_sleep(0.15);
SELECT item_id = :a AS a_reclaimed, attempt FROM queue.dequeue('q_lle', 'w-next', lease_timeout => '0.1 s');

-- case: a lost lease counted by sweep
SELECT pg_sleep(0.15);
SELECT recovered FROM queue.sweep() WHERE queue_name = 'q_lle';

-- case: leases ended by a restart of their worker: a's was its last attempt
SELECT CASE item_id WHEN :a THEN 'a' WHEN :b THEN 'b' END AS item, attempt
  FROM queue.dequeue('q_lle', 'w-restart', 2);
SELECT queue.register_worker('w-restart', restart => true);

-- each item's trail, and what follows each failed event
SELECT CASE item_id WHEN :a THEN 'a' WHEN :b THEN 'b' END AS item,
       string_agg(kind, ',' ORDER BY event_id) AS events
  FROM queue.events WHERE queue_name = 'q_lle' AND item_id IS NOT NULL
 GROUP BY item_id ORDER BY item_id;
SELECT nxt AS after_failed, count(*)
  FROM (SELECT kind, lead(kind) OVER (PARTITION BY item_id ORDER BY event_id) AS nxt
          FROM queue.events WHERE queue_name = 'q_lle') e
 WHERE kind = 'failed' GROUP BY nxt ORDER BY nxt;

-- the retrying event of a lost lease: the item is claimable again at once
SELECT worker, attempt, details
  FROM queue.events WHERE queue_name = 'q_lle' AND kind = 'retrying' ORDER BY event_id;

SELECT queue.drop_queue('q_lle', force => true);
