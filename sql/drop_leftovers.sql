-- A dropped queue leaves nothing a tenant can read or a new queue of the
-- same name inherits: rows of queues that do not exist are for admins only,
-- create_queue starts a queue empty, and sweep removes what a dropped
-- queue left behind (its queue_dropped event after 7 days).  The races
-- themselves are in test/specs/drop_queue_race.spec; here leftovers are
-- written directly, as a race under an older release could leave them.
\set VERBOSITY terse
SET client_min_messages = warning;

CREATE ROLE regress_lo_reader LOGIN IN ROLE queue_reader;
CREATE ROLE regress_lo_admin LOGIN IN ROLE queue_admin;

CREATE FUNCTION pg_temp.leave_rows(q text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO queue.item_live (queue_name, priority, visible_at, base_priority, run_at,
                                 max_attempts, payload)
    VALUES (q, 2, now(), 2, now(), 5, '{"secret": "tenant data"}');
    INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, completed_at)
    VALUES (q, nextval('queue.item_id_seq'), '{"secret": "tenant data"}', 1, now(), now());
    INSERT INTO queue.dead_letters (queue_name, item_id, payload, attempts, reason, enqueued_at)
    VALUES (q, nextval('queue.item_id_seq'), '{"secret": "tenant data"}', 1, 'permanent', now());
    INSERT INTO queue.failure_log (queue_name, item_id, kind) VALUES (q, 1, 'transient');
    INSERT INTO queue.dedup_done (queue_name, dedup_key, item_id, completed_at) VALUES (q, 'k', 1, now());
    INSERT INTO queue.events (queue_name, kind) VALUES (q, 'failed');
    INSERT INTO queue.breaker_bucket (queue_name, bucket_start, stripe, failed)
    VALUES (q, date_bin('10 s', now(), 'epoch'), 1, 1);
$$;
CREATE FUNCTION pg_temp.rows_of(q text) RETURNS text LANGUAGE sql AS $$
    SELECT format('live %s, history %s, dead %s, failures %s, dedup %s, breaker buckets %s, events %s',
                  (SELECT count(*) FROM queue.item_live WHERE queue_name = q),
                  (SELECT count(*) FROM queue.item_done WHERE queue_name = q),
                  (SELECT count(*) FROM queue.dead_letters WHERE queue_name = q),
                  (SELECT count(*) FROM queue.failure_log WHERE queue_name = q),
                  (SELECT count(*) FROM queue.dedup_done WHERE queue_name = q),
                  (SELECT count(*) FROM queue.breaker_bucket WHERE queue_name = q),
                  (SELECT string_agg(kind, ',' ORDER BY event_id) FROM queue.events WHERE queue_name = q))
$$;

SELECT queue.create_queue('lo_gone');
SELECT queue.drop_queue('lo_gone');
SELECT pg_temp.leave_rows('lo_gone');

-- case: a reader sees nothing of a queue that does not exist: neither its
-- leftovers nor its queue_dropped event
SET ROLE regress_lo_reader;
SELECT (SELECT count(*) FROM queue.items WHERE queue_name = 'lo_gone') AS items,
       (SELECT count(*) FROM queue.history WHERE queue_name = 'lo_gone') AS history,
       (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'lo_gone') AS dead,
       (SELECT count(*) FROM queue.events WHERE queue_name = 'lo_gone') AS events;
RESET ROLE;
-- an admin does
SET ROLE regress_lo_admin;
SELECT (SELECT count(*) FROM queue.items WHERE queue_name = 'lo_gone') AS items,
       (SELECT string_agg(kind, ',' ORDER BY event_id) FROM queue.events WHERE queue_name = 'lo_gone') AS events;
RESET ROLE;

-- case: a queue created under the name starts empty; the old queue's
-- queue_dropped event stays on record
SELECT queue.create_queue('lo_gone');
SELECT pg_temp.rows_of('lo_gone');
SELECT * FROM queue.stats('lo_gone');

-- case: that event stays for admins only, also once a queue of the name
-- exists again: the new queue's readers see their own queue's events, not
-- the dropped one's
SELECT queue.pause('lo_gone');
SELECT queue.resume('lo_gone');
SET ROLE regress_lo_reader;
SELECT string_agg(kind, ',' ORDER BY event_id) AS events
  FROM queue.events WHERE queue_name = 'lo_gone';
RESET ROLE;
SET ROLE regress_lo_admin;
SELECT string_agg(kind, ',' ORDER BY event_id) AS events
  FROM queue.events WHERE queue_name = 'lo_gone';
RESET ROLE;

-- case: sweep removes the leftovers of a dropped queue and reports no row
-- for it; the queue_dropped event goes after 7 days
SELECT queue.drop_queue('lo_gone');
SELECT pg_temp.leave_rows('lo_gone');
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'lo_gone';
SELECT pg_temp.rows_of('lo_gone');
UPDATE queue.events SET at = now() - interval '8 days' WHERE queue_name = 'lo_gone';
SELECT count(*) FROM queue.sweep();
SELECT pg_temp.rows_of('lo_gone');

-- case: a dropped queue whose only leftovers are its breaker counts, its
-- offline-check bookmark and its alert channel: sweep finds the queue by
-- its queue_dropped event (kept 7 days) and removes them too
SELECT queue.create_queue('lo_small');
SELECT queue.drop_queue('lo_small');
INSERT INTO queue.breaker_bucket (queue_name, bucket_start, stripe, failed)
VALUES ('lo_small', date_bin('10 s', now(), 'epoch'), 1, 1);
INSERT INTO queue.offline_check (queue_name, checked_until) VALUES ('lo_small', now());
INSERT INTO queue.alert_channels (queue_name, channel) VALUES ('lo_small', 'queue_alerts_x');
SELECT count(*) FROM queue.sweep();
SELECT (SELECT count(*) FROM queue.breaker_bucket WHERE queue_name = 'lo_small') AS buckets,
       (SELECT count(*) FROM queue.offline_check WHERE queue_name = 'lo_small') AS bookmarks,
       (SELECT count(*) FROM queue.alert_channels WHERE queue_name = 'lo_small') AS channels;

-- case: the other queues' rows are untouched by the sweep of leftovers
SELECT queue.create_queue('lo_kept');
SELECT count(*) FROM queue.enqueue_batch('lo_kept', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM queue.sweep();
SELECT count(*) AS kept FROM queue.items WHERE queue_name = 'lo_kept';

SELECT queue.drop_queue('lo_kept', force => true);
DROP ROLE regress_lo_reader;
DROP ROLE regress_lo_admin;
