-- prometheus() read by a strict parser of the text exposition format, as
-- a queue_reader sees it: every sample value is a number (an empty queue,
-- a queue with nothing completed yet), every family has one HELP and one
-- TYPE before its samples, counters end in _total, and a queue name of 47
-- characters (every allowed character) is a plain label value.
\set VERBOSITY terse

CREATE ROLE regress_px_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_px_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_px_bot LOGIN IN ROLE queue_worker;
CREATE ROLE regress_px_reader LOGIN IN ROLE queue_reader;

-- The exposition as rows: line number, kind (help, type, sample, bad),
-- family, labels and value.
CREATE FUNCTION pg_temp.px_lines(p text,
    OUT n bigint, OUT kind text, OUT fam text, OUT labels text, OUT val text)
RETURNS SETOF record LANGUAGE sql AS $$
    SELECT l.n,
           CASE WHEN l.l ~ '^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* \S.*$' THEN 'help'
                WHEN l.l ~ '^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped)$' THEN 'type'
                WHEN l.l ~ ('^[a-zA-Z_:][a-zA-Z0-9_:]*'
                            || '\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"'
                            || '(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\}'
                            || ' [-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$') THEN 'sample'
                ELSE 'bad' END,
           CASE WHEN l.l LIKE '#%' THEN split_part(l.l, ' ', 3)
                ELSE substring(l.l FROM '^[a-zA-Z_:][a-zA-Z0-9_:]*') END,
           substring(l.l FROM '\{(.*)\} '),
           CASE WHEN l.l NOT LIKE '#%' THEN substring(l.l FROM ' (\S+)$') END
      FROM regexp_split_to_table(rtrim(p, E'\n'), E'\n') WITH ORDINALITY AS l(l, n)
$$;

-- The checks of the format: what breaks it, as a list (empty when valid).
CREATE FUNCTION pg_temp.px_problems(p text) RETURNS SETOF text LANGUAGE sql AS $$
    SELECT 'no final newline' WHERE right(p, 1) <> E'\n'
    UNION ALL
    SELECT format('line %s does not parse (a value that is no number?): %s', x.n,
                  split_part(p, E'\n', x.n::int))
      FROM pg_temp.px_lines(p) x WHERE x.kind = 'bad'
    UNION ALL
    SELECT format('family %s: %s HELP and %s TYPE lines', f.fam, f.h, f.t)
      FROM (SELECT x.fam, count(*) FILTER (WHERE x.kind = 'help') AS h,
                   count(*) FILTER (WHERE x.kind = 'type') AS t
              FROM pg_temp.px_lines(p) x GROUP BY x.fam) f
     WHERE f.h <> 1 OR f.t <> 1
    UNION ALL
    SELECT format('sample on line %s comes before its family''s TYPE or after another family', s.n)
      FROM pg_temp.px_lines(p) s
     WHERE s.kind = 'sample'
       AND NOT EXISTS (SELECT 1 FROM pg_temp.px_lines(p) t
                        WHERE t.kind = 'type' AND t.fam = s.fam AND t.n < s.n
                          AND NOT EXISTS (SELECT 1 FROM pg_temp.px_lines(p) o
                                           WHERE o.kind = 'type' AND o.n > t.n AND o.n < s.n))
    UNION ALL
    SELECT format('%s %s: counters and only counters end in _total', x.fam,
                  split_part(split_part(p, E'\n', x.n::int), ' ', 4))
      FROM pg_temp.px_lines(p) x
     WHERE x.kind = 'type'
       AND (split_part(split_part(p, E'\n', x.n::int), ' ', 4) = 'counter') <> (x.fam LIKE '%\_total')
$$;

-- case: an empty queue and one with items but no completion yet: no NaN,
-- the oldest queued age of an empty queue is 0, and the wait and run
-- quantiles are left out until an item was processed in the last hour
SET ROLE regress_px_admin;
SELECT queue.create_queue('px_empty');
SELECT queue.create_queue('px_waiting');
SET ROLE regress_px_producer;
SELECT count(*) FROM queue.enqueue('px_waiting', '{}');
SET ROLE regress_px_reader;
SELECT * FROM pg_temp.px_problems(queue.prometheus());
SELECT fam, labels, val FROM pg_temp.px_lines(queue.prometheus())
 WHERE kind = 'sample' AND labels LIKE 'queue="px_empty"%' AND fam NOT LIKE '%\_total'
 ORDER BY n;
SELECT fam, labels FROM pg_temp.px_lines(queue.prometheus())
 WHERE kind = 'sample' AND labels LIKE 'queue="px_waiting"%'
   AND fam IN ('queue_wait_seconds', 'queue_run_seconds', 'queue_oldest_queued_age_seconds')
 ORDER BY n;
RESET ROLE;

-- case: once an item was processed, the quantiles are the stats() figures
-- in seconds; the claimable item's age is a number
SET ROLE regress_px_producer;
SELECT count(*) FROM queue.enqueue('px_waiting', '{}');
SET ROLE regress_px_bot;
SELECT queue.complete('px_waiting', item_id, lease_token)
  FROM queue.dequeue('px_waiting', 'px-bot');
SET ROLE regress_px_reader;
SELECT * FROM pg_temp.px_problems(queue.prometheus());
SELECT x.fam, x.labels,
       x.val::numeric = extract(epoch FROM CASE x.labels
           WHEN 'queue="px_waiting",quantile="0.5"' THEN
                CASE x.fam WHEN 'queue_wait_seconds' THEN s.wait_p50 ELSE s.run_p50 END
           ELSE CASE x.fam WHEN 'queue_wait_seconds' THEN s.wait_p95 ELSE s.run_p95 END END) AS as_stats
  FROM pg_temp.px_lines(queue.prometheus()) x, queue.stats('px_waiting') s
 WHERE x.kind = 'sample' AND x.labels LIKE 'queue="px_waiting"%'
   AND x.fam IN ('queue_wait_seconds', 'queue_run_seconds')
 ORDER BY x.n;
SELECT val::numeric > 0 AS oldest_age_positive
  FROM pg_temp.px_lines(queue.prometheus())
 WHERE fam = 'queue_oldest_queued_age_seconds' AND labels = 'queue="px_waiting"';
RESET ROLE;

-- case: a queue name of 47 characters, every allowed character in it, is
-- its own label value; the output as a whole stays valid
SET ROLE regress_px_admin;
SELECT queue.create_queue('px_abcdefghijklmnopqrstuvwxyz_0123456789_zzzzzz');
SET ROLE regress_px_reader;
SELECT * FROM pg_temp.px_problems(queue.prometheus());
SELECT count(*) AS samples, count(DISTINCT fam) AS families
  FROM pg_temp.px_lines(queue.prometheus())
 WHERE kind = 'sample' AND labels LIKE 'queue="px\_abcdefghijklmnopqrstuvwxyz\_0123456789\_zzzzzz"%';
RESET ROLE;

SET ROLE regress_px_admin;
SELECT queue.drop_queue('px_empty');
SELECT queue.drop_queue('px_waiting', force => true);
SELECT queue.drop_queue('px_abcdefghijklmnopqrstuvwxyz_0123456789_zzzzzz');
RESET ROLE;
DROP ROLE regress_px_admin, regress_px_producer, regress_px_bot, regress_px_reader;
