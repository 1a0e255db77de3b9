-- History partitions: item_done, events and failure_log are partitioned by
-- time.  maintain_history() (run by sweep() and run_sweep()) creates the
-- partitions ahead and drops whole partitions once every row in them is
-- past every queue's keep window; a DEFAULT partition catches any row no
-- partition covers.  Time passes by giving the internal functions a later
-- "now", not by sleeping.
\set VERBOSITY terse

-- start from a fresh install's layout, the DEFAULT partitions only (the
-- tests before this one swept)
DO $$
DECLARE
    v text;
BEGIN
    FOR v IN SELECT p.partition_name FROM queue._history_tables() t,
                    queue._history_partitions(t.table_name) p LOOP
        EXECUTE format('DROP TABLE queue.%I', v);
    END LOOP;
END
$$;
SHOW queue.history_partition_width;

-- the partitions of each table as slots of the width around now(): 0 is
-- the slot that holds now()
CREATE FUNCTION pg_temp.layout() RETURNS TABLE (table_name text, slots text)
LANGUAGE sql AS $$
    SELECT t.table_name,
           coalesce(string_agg(coalesce(((extract(epoch FROM p.lo - s.slot) / 86400)::int)::text, 'MIN')
                               || '..' || ((extract(epoch FROM p.hi - s.slot) / 86400)::int)::text,
                               ' ' ORDER BY p.hi), '-')
      FROM queue._history_tables() t
     CROSS JOIN (SELECT date_bin('1 day', now(), '2000-01-03 00:00:00+00') AS slot) s
      LEFT JOIN LATERAL queue._history_partitions(t.table_name) p ON true
     GROUP BY t.table_name
     ORDER BY t.table_name
$$;
SELECT * FROM pg_temp.layout();

SELECT queue.create_queue('hp', retention => '2 days', max_attempts => 1);

-- case: without partitions (no sweep yet) an insert never fails: the
-- history, its event and a failed attempt land in the DEFAULT partitions
SELECT count(*) FROM queue.enqueue_batch('hp', array_fill('{}'::jsonb, ARRAY[3]));
SELECT queue.complete('hp', item_id, lease_token) FROM queue.dequeue('hp', 'w1');
SELECT queue.fail('hp', item_id, lease_token, 'boom') FROM queue.dequeue('hp', 'w1');
SELECT tableoid::regclass AS partition, count(*) FROM queue.item_done WHERE queue_name = 'hp' GROUP BY 1;
SELECT tableoid::regclass AS partition, count(*) FROM queue.failure_log WHERE queue_name = 'hp' GROUP BY 1;
SELECT state FROM queue.item('hp', (SELECT min(item_id) FROM queue.item_done WHERE queue_name = 'hp'));

-- a row of last week and one of next month, no partition will cover
-- them; one stamped tomorrow
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, completed_at)
VALUES ('hp', -1, '{"old": true}', 1, now() - interval '8 days', now() - interval '7 days'),
       ('hp', -2, '{"future": true}', 1, now(), now() + interval '30 days'),
       ('hp', -3, '{"tomorrow": true}', 1, now(), date_bin('1 day', now(), '2000-01-03 00:00:00+00') + interval '1 day 1 hour');

-- case: maintain_history creates the partitions of the next two slots for
-- each table, never one that covers the present (rows of today stay in the
-- DEFAULT partition), and moves the rows of the new range out of the
-- DEFAULT partition; rows outside stay there
SELECT * FROM queue.maintain_history();
SELECT * FROM pg_temp.layout();
SELECT payload, tableoid::regclass::text ~ '^queue\.item_done_p\d{8}$' AS in_range_partition
  FROM queue.item_done WHERE queue_name = 'hp' ORDER BY item_id;
-- completions of today land in the DEFAULT partition, from tomorrow on in
-- the partitions
SELECT queue.complete('hp', item_id, lease_token) FROM queue.dequeue('hp', 'w1');
SELECT tableoid::regclass::text ~ '^queue\.item_done_p\d{8}$' AS in_range_partition, count(*)
  FROM queue.item_done WHERE queue_name = 'hp' GROUP BY 1 ORDER BY 1;
-- a second call has nothing to do
SELECT * FROM queue.maintain_history();

-- case: each partition has the DEFAULT partition's keys and indexes
SELECT t.table_name, count(DISTINCT i.indexrelid) / count(DISTINCT p.partition_name) AS indexes_each,
       bool_and(i.indisprimary OR NOT i.indisunique) AS one_unique_key
  FROM queue._history_tables() t
  JOIN LATERAL queue._history_partitions(t.table_name) p ON true
  JOIN pg_index i ON i.indrelid = ('queue.' || p.partition_name)::regclass
 GROUP BY t.table_name ORDER BY 1;

-- case: items are found wherever their history row is: a range partition,
-- the DEFAULT partition (old and future rows)
SELECT x.state, x.payload, x.finished_at > now() AS future
  FROM (SELECT item_id FROM queue.item_done WHERE queue_name = 'hp') i
 CROSS JOIN LATERAL queue.item('hp', i.item_id) x
 ORDER BY i.item_id;
SELECT payload, completed_at > now() AS future FROM queue.history WHERE queue_name = 'hp' ORDER BY item_id;

-- case: the stats read the history across partitions
SELECT processed_1h, failed_1h FROM queue.stats('hp');
-- (the estimate counts index entries: the entry the row moved out of the
-- DEFAULT partition left behind counts until vacuum, which runs first)
VACUUM queue.item_done_default;
SELECT queue._done_since_estimate('hp', now() - interval '1 hour') AS estimated_1h;

-- case: retention drops a partition once its newest possible row is past
-- the longest keep window (2 days here): four days on, the first goes, the
-- newer one stays; rows of the DEFAULT partition are untouched
SELECT queue._history_keep('item_done') AS keep_history, queue._history_keep('events') AS keep_events;
SELECT queue._history_drop('item_done', now() + interval '3 days') AS dropped_too_early;
SELECT queue._history_drop('item_done', now() + interval '4 days') AS dropped;
SELECT * FROM pg_temp.layout() WHERE table_name = 'item_done';
SELECT payload FROM queue.item_done WHERE queue_name = 'hp' ORDER BY item_id;

-- case: a queue that keeps its history longer holds the partitions back
SELECT queue.create_queue('hp_long', retention => '10 days');
SELECT queue._history_drop('failure_log', now() + interval '4 days') AS dropped_while_kept;
SELECT queue.drop_queue('hp_long', force => true);

-- case: the queue_dropped event of a queue dropped less than 7 days ago
-- keeps its partition of events (sweep_dropped keeps it for 7 days)
SELECT queue.create_queue('hp_gone');
SELECT queue.drop_queue('hp_gone');
-- (its event as if dropped tomorrow, in the first partition)
UPDATE queue.events SET at = date_bin('1 day', now(), '2000-01-03 00:00:00+00') + interval '1 day 1 hour'
 WHERE queue_name = 'hp_gone' AND kind = 'queue_dropped';
SELECT queue._history_drop('events', now() + interval '4 days') AS dropped_with_recent_drop;
SELECT queue._history_drop('events', now() + interval '9 days') AS dropped_a_week_later;
SELECT * FROM pg_temp.layout() WHERE table_name = 'events';

-- case: retention by the row: a queue whose keep window is the longest
-- deletes only rows of the DEFAULT partition; a queue with a shorter one
-- deletes its rows past it in every partition
SELECT queue.create_queue('hp_short', retention => '1 hour');
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, completed_at)
SELECT q, g, '{}', 1, now(), date_bin('1 day', now(), '2000-01-03 00:00:00+00') + interval '2 days 1 hour'
  FROM unnest(ARRAY['hp', 'hp_short']) q, generate_series(1, 3) g;
SELECT count(*) AS in_range_partition FROM queue.item_done
 WHERE queue_name LIKE 'hp%' AND tableoid::regclass::text ~ '^queue\.item_done_p\d{8}$';
SELECT queue._history_delete('item_done', 'hp', interval '2 days', now() + interval '4 days', 100) AS longest;
SELECT queue._history_delete('item_done', 'hp_short', interval '1 hour', now() + interval '4 days', 100) AS shorter;
SELECT queue_name, count(*) FROM queue.item_done WHERE queue_name LIKE 'hp%' GROUP BY 1 ORDER BY 1;

-- case: a width changed at run time applies to the partitions made next
-- (here, after the newest one was dropped, from the next slot on)
SET queue.history_partition_width = '6h';
SELECT queue._history_drop('item_done', now() + interval '10 days') AS dropped;
SELECT queue._history_extend('item_done', 'completed_at', now()) AS created;
SELECT (p.hi - p.lo) AS width, count(*) FROM queue._history_partitions('item_done') p GROUP BY 1 ORDER BY 1;
DO $$
DECLARE
    v text;
BEGIN
    FOR v IN SELECT p.partition_name FROM queue._history_partitions('item_done') p LOOP
        EXECUTE format('DROP TABLE queue.%I', v);
    END LOOP;
END
$$;
SET queue.history_partition_width = '30s';
RESET queue.history_partition_width;

-- case: sweep() and run_sweep() maintain the partitions (the ones dropped
-- above are made again)
SELECT count(*) FROM queue.sweep();
CALL queue.run_sweep();
SELECT * FROM pg_temp.layout();

SELECT queue.drop_queue('hp', force => true);
SELECT queue.drop_queue('hp_short', force => true);
