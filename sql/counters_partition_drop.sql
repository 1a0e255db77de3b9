-- prometheus()'s counters never fall back when maintain_history() drops a
-- partition of the history or of the failure log that holds rows the
-- running totals have not counted yet (the totals count only up to the
-- oldest open transaction; a partition goes whole once it is past every
-- queue's keep window).  Time passes by giving _history_drop a later
-- "now", as in history_partitions.
\set VERBOSITY terse

CREATE ROLE regress_cpd_reader LOGIN IN ROLE queue_reader;

-- the counters of one queue, as a reader scrapes them
CREATE FUNCTION pg_temp.cpd_totals() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(l, ', ' ORDER BY l)
      FROM regexp_split_to_table(queue.prometheus(), E'\n') AS l
     WHERE l LIKE 'queue\_%\_total{queue="cpd"%'
$$;

SELECT queue.create_queue('cpd', retention => '1 hour', max_attempts => 1);
SELECT count(*) FROM queue.enqueue_batch('cpd', array_fill('{}'::jsonb, ARRAY[2]));
SELECT queue.complete('cpd', item_id, lease_token) FROM queue.dequeue('cpd', 'cpd_w1');
SELECT queue.fail('cpd', item_id, lease_token, 'boom') FROM queue.dequeue('cpd', 'cpd_w1');
-- the totals count what is there (up to now)
SELECT queue.snapshot_metrics() > 0 AS snapshot;
-- the partitions of the next slots, and a completion and a failed attempt
-- stamped tomorrow in them, which no count has reached yet
SELECT count(*) > 0 AS maintained FROM queue.maintain_history();
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, completed_at)
VALUES ('cpd', -1, '{}', 1, now(), date_bin('1 day', now(), '2000-01-03 00:00:00+00') + interval '1 day 1 hour');
INSERT INTO queue.failure_log (queue_name, item_id, attempt, worker, kind, error, at)
VALUES ('cpd', -1, 1, 'cpd_w1', 'transient', 'boom',
        date_bin('1 day', now(), '2000-01-03 00:00:00+00') + interval '1 day 1 hour');
SELECT tableoid::regclass::text ~ '_p\d{8}$' AS in_range_partition, count(*)
  FROM queue.item_done WHERE queue_name = 'cpd' GROUP BY 1 ORDER BY 1;

SET ROLE regress_cpd_reader;
SELECT pg_temp.cpd_totals() AS before_drop;
RESET ROLE;

-- a month on, every partition is past every queue's keep window
SELECT queue._history_drop('item_done', now() + interval '30 days') > 0 AS dropped_history;
SELECT queue._history_drop('failure_log', now() + interval '30 days') > 0 AS dropped_failures;
SELECT count(*) AS history_rows FROM queue.item_done WHERE queue_name = 'cpd';

SET ROLE regress_cpd_reader;
SELECT pg_temp.cpd_totals() AS after_drop;
RESET ROLE;
-- and the next snapshot counts them in its interval
SELECT queue.snapshot_metrics() > 0 AS snapshot;
SELECT processed, failed FROM queue.metrics_history WHERE queue_name = 'cpd'
 ORDER BY taken_at DESC LIMIT 1;

SELECT queue.drop_queue('cpd', force => true);
DELETE FROM queue.worker_registry WHERE worker = 'cpd_w1';
DROP ROLE regress_cpd_reader;
