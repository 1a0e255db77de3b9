-- Observability: stats (every state, hourly numbers, percentiles, the estimate
-- path, errors), health (each rule and the status it gives), prometheus format.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

SELECT queue.create_queue('o_stats', max_attempts => 3, lease_timeout => '1 min');
SELECT queue.create_queue('o_empty');

-- case: an empty queue: zero counts, NULL ages and percentiles
SELECT * FROM queue.stats('o_empty');

-- case: stats counts each state once: queued = claimable now (an expired lease
-- nobody re-claimed included), scheduled = run_at or backoff ahead, processing,
-- on_hold; dead = dead letters new or in review
SELECT count(*) FROM queue.enqueue_batch('o_stats', array_fill('{"k": "q"}'::jsonb, ARRAY[3]));
SELECT queue.enqueue('o_stats', '{"k": "later"}', run_at => now() + interval '1 h') AS later \gset
SELECT queue.enqueue('o_stats', '{"k": "held"}', priority => 7) AS held \gset
SELECT queue.hold('o_stats', :held);
SELECT queue.enqueue('o_stats', '{"k": "p0 a"}', priority => 0) AS p0a \gset
SELECT queue.enqueue('o_stats', '{"k": "p0 b"}', priority => 0) AS p0b \gset
SELECT queue.enqueue('o_stats', '{"k": "p0 c"}', priority => 0) AS p0c \gset
SELECT queue.enqueue('o_stats', '{"k": "p0 d"}', priority => 0) AS p0d \gset
SELECT item_id AS lost, lease_token AS t_lost FROM queue.dequeue('o_stats', 'w1') \gset
SELECT item_id AS ok1, lease_token AS t_ok1 FROM queue.dequeue('o_stats', 'w1') \gset
SELECT item_id AS ok2, lease_token AS t_ok2 FROM queue.dequeue('o_stats', 'w1') \gset
SELECT item_id AS busy FROM queue.dequeue('o_stats', 'w2') \gset
SELECT queue.complete('o_stats', :ok1, :t_ok1), queue.fail('o_stats', :ok2, :t_ok2, 'later please');
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'o_stats' AND item_id = :lost;
SELECT count(*) FROM queue.enqueue_batch('o_stats', array_fill('{"k": "dead"}'::jsonb, ARRAY[3]));
SELECT count(queue.cancel('o_stats', item_id)) FROM queue.items
 WHERE queue_name = 'o_stats' AND payload = '{"k": "dead"}';
SELECT queue.review('o_stats', item_id, s)
  FROM (SELECT item_id, (ARRAY['in_review', 'resolved'])[row_number() OVER (ORDER BY item_id)] AS s
          FROM queue.dead_letters WHERE queue_name = 'o_stats' ORDER BY item_id LIMIT 2) x;
SELECT queue_name, queued, scheduled, processing, on_hold, dead, processed_1h, failed_1h, paused
  FROM queue.stats('o_stats');
-- the same numbers as the items view
SELECT state, count(*) FROM queue.items WHERE queue_name = 'o_stats' GROUP BY state ORDER BY state;

-- case: oldest_queued_age is how long the longest-claimable item has been claimable
UPDATE queue.item_live SET visible_at = now() - interval '5 min', run_at = now() - interval '5 min'
 WHERE queue_name = 'o_stats' AND payload = '{"k": "q"}'
   AND item_id = (SELECT min(item_id) FROM queue.item_live WHERE queue_name = 'o_stats' AND payload = '{"k": "q"}');
SELECT oldest_queued_age >= interval '5 min' AND oldest_queued_age < interval '5 min 10 s' AS about_5_min
  FROM queue.stats('o_stats');

-- case: failed_1h counts failed attempts (lost leases included) of the last hour;
-- processed_1h, waits (claim - enqueue) and run times (completion - claim) come
-- from the history of the last hour
INSERT INTO queue.failure_log (queue_name, item_id, kind, at) VALUES
    ('o_stats', 0, 'lease_expired', now() - interval '10 min'),
    ('o_stats', 0, 'transient', now() - interval '2 h');
DELETE FROM queue.item_done WHERE queue_name = 'o_stats';
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
SELECT 'o_stats', nextval('queue.item_id_seq'), '{}'::jsonb, 1,
       now() - interval '30 min' - g * interval '10 s', now() - interval '30 min',
       now() - interval '30 min' + g * interval '1 s'
  FROM generate_series(1, 3) g
UNION ALL
SELECT 'o_stats', nextval('queue.item_id_seq'), '{}'::jsonb, 1, now() - interval '3 h', now() - interval '3 h',
       now() - interval '2 h';
SELECT processed_1h, failed_1h, wait_p50, wait_p95, run_p50, run_p95 FROM queue.stats('o_stats');

-- case: without an argument, one row per queue the caller may read
SELECT queue_name, queued FROM queue.stats() WHERE queue_name LIKE 'o\_%' ORDER BY queue_name;

-- case: errors: malformed (22023) and unknown (42704) queue names
SELECT * FROM queue.stats('Bad Name');
SELECT * FROM queue.stats('o_missing');

-- case: above queue._stats_exact_limit() rows a count comes from the index
-- structure (exact here: few leaf pages are all read) and never below the limit
SELECT queue.create_queue('o_big');
SELECT count(*) FROM queue.enqueue_batch('o_big', array_fill('{}'::jsonb, ARRAY[30]));
SELECT count(*) FROM queue.enqueue_batch('o_big', array_fill('{}'::jsonb, ARRAY[12]), run_at => now() + interval '1 h');
ALTER FUNCTION queue._stats_exact_limit() RENAME TO _stats_exact_limit_saved;
CREATE FUNCTION queue._stats_exact_limit() RETURNS bigint LANGUAGE sql IMMUTABLE AS 'SELECT 10::bigint';
SELECT queued, scheduled, processing, on_hold FROM queue.stats('o_big');
DROP FUNCTION queue._stats_exact_limit();
ALTER FUNCTION queue._stats_exact_limit_saved() RENAME TO _stats_exact_limit;
SELECT queued, scheduled FROM queue.stats('o_big');

-- case: health ok
SELECT * FROM queue.health('o_empty');

-- case: oldest queued age past half the sla: warning; past 85 %: critical
SELECT queue.create_queue('o_sla', sla => '10 min');
SELECT queue.enqueue('o_sla', '{}') AS s1 \gset
-- a completion just now: workers are at work, only the sla rule speaks
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
VALUES ('o_sla', nextval('queue.item_id_seq'), '{}', 1, now(), now(), now());
UPDATE queue.item_live SET visible_at = now() - interval '6 min' WHERE queue_name = 'o_sla' AND item_id = :s1;
SELECT * FROM queue.health('o_sla');
UPDATE queue.item_live SET visible_at = now() - interval '9 min' WHERE queue_name = 'o_sla' AND item_id = :s1;
SELECT * FROM queue.health('o_sla');

-- case: a paused queue is paused whatever else holds; its reason comes first
SELECT queue.pause('o_sla', 'ERP maintenance');
SELECT * FROM queue.health('o_sla');
SELECT queue.resume('o_sla');

-- case: a backlog that grew across the last three snapshots: warning
SELECT queue.create_queue('o_backlog');
INSERT INTO queue.metrics_history (queue_name, taken_at, queued) VALUES
    ('o_backlog', now() - interval '3 min', 10), ('o_backlog', now() - interval '2 min', 20),
    ('o_backlog', now() - interval '1 min', 35);
SELECT * FROM queue.health('o_backlog');
INSERT INTO queue.metrics_history (queue_name, taken_at, queued) VALUES ('o_backlog', now(), 35);
SELECT * FROM queue.health('o_backlog');

-- case: leases held past 3x the p95 run time, and offline workers holding items: warning
SELECT queue.create_queue('o_fleet');
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
SELECT 'o_fleet', nextval('queue.item_id_seq'), '{}', 1, now() - interval '1 min',
       now() - interval '20 s', now() - interval '19 s'
  FROM generate_series(1, 3) g;
SELECT count(*) FROM queue.enqueue_batch('o_fleet', array_fill('{}'::jsonb, ARRAY[2]));
SELECT count(*) FROM queue.dequeue('o_fleet', 'o-bot-gone', batch_size => 2);
UPDATE queue.item_live SET claimed_at = now() - interval '10 s' WHERE queue_name = 'o_fleet';
SELECT * FROM queue.health('o_fleet');
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'o-bot-gone';
SELECT * FROM queue.health('o_fleet');

-- case: the p95 run time in the stalled-lease reason keeps its fraction of a
-- second: 0.2 s, not 00:00:00
SELECT queue.create_queue('o_fast');
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
SELECT 'o_fast', nextval('queue.item_id_seq'), '{}', 1, now() - interval '1 min',
       now() - interval '20 s', now() - interval '20 s' + interval '0.2 s'
  FROM generate_series(1, 3) g;
SELECT count(*) FROM queue.enqueue('o_fast', '{}');
SELECT count(*) FROM queue.dequeue('o_fast', 'o-bot-fast');
UPDATE queue.item_live SET claimed_at = now() - interval '10 s' WHERE queue_name = 'o_fast';
SELECT * FROM queue.health('o_fast');

-- case: failure rate over half the breaker threshold (breaker_window,
-- breaker_min_samples): warning; below min_samples: nothing
SELECT queue.create_queue('o_rate', breaker_threshold => 0.8, breaker_min_samples => 4);
INSERT INTO queue.failure_log (queue_name, item_id, kind, error_code, at)
SELECT 'o_rate', g, 'transient', 'ERP_TIMEOUT', now() - interval '1 min' FROM generate_series(1, 2) g;
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
VALUES ('o_rate', nextval('queue.item_id_seq'), '{}', 1, now(), now(), now());
-- (and their running counts for the breaker, as fail() and complete() keep them)
INSERT INTO queue.breaker_bucket (queue_name, bucket_start, stripe, succeeded, failed)
VALUES ('o_rate', date_bin('10 s', now() - interval '1 min', 'epoch'), 0, 0, 2),
       ('o_rate', date_bin('10 s', now(), 'epoch'), 0, 1, 0);
SELECT * FROM queue.health('o_rate');
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
VALUES ('o_rate', nextval('queue.item_id_seq'), '{}', 1, now(), now(), now());
UPDATE queue.breaker_bucket SET succeeded = succeeded + 1 WHERE queue_name = 'o_rate' AND succeeded > 0;
SELECT * FROM queue.health('o_rate');
-- failures older than breaker_window do not count
UPDATE queue.failure_log SET at = now() - interval '11 min' WHERE queue_name = 'o_rate';
UPDATE queue.breaker_bucket SET bucket_start = bucket_start - interval '10 min'
 WHERE queue_name = 'o_rate' AND failed > 0;
SELECT * FROM queue.health('o_rate');

-- case: health() without an argument: one row per readable queue; errors as stats
SELECT queue_name, status FROM queue.health() WHERE queue_name LIKE 'o\_%' ORDER BY queue_name;
SELECT * FROM queue.health('o_missing');

-- case: label values are escaped (backslash, double quote, newline)
SELECT queue._prom_label(E'a\\b"c\nd');

-- case: prometheus: every line is a HELP, a TYPE or a sample in the text
-- exposition grammar; one HELP and one TYPE per family, before its samples;
-- the output ends with a newline
SELECT queue.prometheus() AS prom \gset
SELECT right(:'prom', 1) = E'\n' AS ends_with_newline;
SELECT count(*) FILTER (WHERE l ~ '^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+$') AS help,
       count(*) FILTER (WHERE l ~ '^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped)$') AS type,
       count(*) FILTER (WHERE l ~ ('^[a-zA-Z_:][a-zA-Z0-9_:]*'
                                   || '(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"'
                                   || '(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})?'
                                   || ' ([-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|NaN|[-+]Inf)$')) > 20 AS has_samples,
       count(*) FILTER (WHERE l !~ '^# (HELP|TYPE) ' AND l !~ ('^[a-zA-Z_:][a-zA-Z0-9_:]*'
                                   || '(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"'
                                   || '(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})?'
                                   || ' ([-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|NaN|[-+]Inf)$')) AS bad
  FROM regexp_split_to_table(rtrim(:'prom', E'\n'), E'\n') AS l;
-- each family declared once, and all its samples follow its TYPE line
WITH l AS (SELECT l, ordinality AS n FROM regexp_split_to_table(rtrim(:'prom', E'\n'), E'\n') WITH ORDINALITY AS l),
     t AS (SELECT split_part(l, ' ', 3) AS fam, n FROM l WHERE l LIKE '# TYPE %'),
     s AS (SELECT substring(l FROM '^[a-zA-Z_:][a-zA-Z0-9_:]*') AS fam, n FROM l WHERE l NOT LIKE '#%')
SELECT (SELECT count(*) = count(DISTINCT fam) FROM t) AS families_once,
       bool_and(s.n > t.n AND NOT EXISTS (SELECT 1 FROM t t2 WHERE t2.n > t.n AND t2.n < s.n)) AS grouped
  FROM s JOIN t USING (fam);
SELECT l FROM regexp_split_to_table(:'prom', E'\n') AS l
 WHERE (l LIKE '%queue="o\_stats"%' AND l NOT LIKE 'queue_oldest%') OR l LIKE '# TYPE %' ORDER BY l;

SELECT queue.drop_queue(q, force => true)
  FROM unnest(ARRAY['o_stats', 'o_empty', 'o_big', 'o_sla', 'o_backlog', 'o_fleet', 'o_fast', 'o_rate']) AS q;

-- case: messages say intervals as people do: whole seconds without a
-- decimal, fractions to a tenth, round minutes, hours and days by name
SELECT queue._say_interval(i) AS said
  FROM unnest(ARRAY['30 s', '1.25 s', '90 s', '10 min', '2 h', '1 day']::interval[]) AS i;
