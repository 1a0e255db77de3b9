--
-- estimate: stats() counts past its exact limit from the btree structure
-- (src/estimate.c); the range counts are checked against exact counts on
-- an index of a few hundred leaf pages, with a second queue interleaved.
--
SET client_min_messages = warning;
SELECT queue.create_queue('e_a');
SELECT queue.create_queue('e_b');
SELECT count(*) FROM queue.enqueue_batch('e_a', array_fill('{}'::jsonb, ARRAY[20000]), priority => 1);
SELECT count(*) FROM queue.enqueue_batch('e_b', array_fill('{}'::jsonb, ARRAY[20000]), priority => 1);
SELECT count(*) FROM queue.enqueue_batch('e_a', array_fill('{}'::jsonb, ARRAY[20000]), priority => 2);
SELECT count(*) FROM queue.enqueue_batch('e_a', array_fill('{}'::jsonb, ARRAY[4000]), priority => 2,
                                         run_at => now() + interval '1 h');
SELECT count(*) FROM queue.enqueue_batch('e_a', array_fill('{}'::jsonb, ARRAY[2000]), priority => 2,
                                         run_at => now() + interval '2 h');
WITH h AS (SELECT item_id FROM queue.item_live WHERE queue_name = 'e_a' AND priority = 1
            ORDER BY item_id LIMIT 3000)
SELECT count(queue.hold('e_a', item_id)) FROM h;
VACUUM queue.item_live;

CREATE TEMP TABLE est_case (label text, q text, p int, lo timestamptz, lo_incl boolean,
                            hi timestamptz, hi_incl boolean);
INSERT INTO est_case VALUES
  ('claimable, priority 1',      'e_a', 1, '-infinity', true, now(), true),
  ('claimable, priority 2',      'e_a', 2, '-infinity', true, now(), true),
  ('scheduled, priority 2',      'e_a', 2, now(), false, 'infinity', false),
  ('scheduled within 1 h',       'e_a', 2, now(), false, now() + interval '90 min', true),
  ('scheduled after 1 h',        'e_a', 2, now() + interval '90 min', false, 'infinity', false),
  ('on hold, priority 1',        'e_a', 1, 'infinity', true, 'infinity', true),
  ('on hold, priority 2 (none)', 'e_a', 2, 'infinity', true, 'infinity', true),
  ('priority 3 (none)',          'e_a', 3, '-infinity', true, 'infinity', true),
  ('empty time range',           'e_a', 2, now() + interval '3 h', true, now() + interval '4 h', true),
  ('other queue',                'e_b', 1, '-infinity', true, 'infinity', true),
  ('unknown queue',              'e_c', 1, '-infinity', true, 'infinity', true);

-- within 3 % of the exact count, and exact where the range is empty
SELECT c.label, x.exact,
       CASE WHEN x.exact = 0 THEN e.est = 0
            ELSE abs(e.est - x.exact) <= 0.03 * x.exact END AS close
  FROM est_case c
 CROSS JOIN LATERAL (SELECT count(*) AS exact FROM queue.item_live i
                      WHERE i.queue_name = c.q AND i.priority = c.p
                        AND (i.visible_at > c.lo OR (c.lo_incl AND i.visible_at = c.lo))
                        AND (i.visible_at < c.hi OR (c.hi_incl AND i.visible_at = c.hi))) x
 CROSS JOIN LATERAL (SELECT queue._claim_range_estimate(c.q, c.p, c.lo, c.lo_incl, c.hi, c.hi_incl) AS est) e
 ORDER BY c.label;

-- stats() past the exact limit (1,000) reports the structure's counts
SELECT abs(queued - 37000) <= 1110 AS queued_close, scheduled = 6000 AS scheduled_exact,
       abs(on_hold - 3000) <= 90 AS on_hold_close, processing
  FROM queue.stats('e_a');

-- history: completions of the last hour, past the limit
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
SELECT 'e_a', nextval('queue.item_id_seq'), '{}', 1, now() - interval '2 h', now() - interval '2 h',
       now() - (g % 7200) * interval '1 s'
  FROM generate_series(1, 9000) g;
VACUUM queue.item_done;
-- 5,400 of them in the last hour
SELECT abs(queue._done_since_estimate('e_a', now() - interval '1 hour') - 5400) <= 162 AS done_close,
       queue._done_since_estimate('e_b', now() - interval '1 hour') AS other_queue,
       abs(processed_1h - 5400) <= 162 AS processed_1h_close
  FROM queue.stats('e_a');

SELECT queue.drop_queue('e_a', force => true);
SELECT queue.drop_queue('e_b', force => true);
