-- sweep's purged counts the rows retention removed of the kinds it keeps
-- for the queue's retention: the history, resolved or rejected dead
-- letters, events and metrics snapshots, so that it equals what went from
-- those relations.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

SELECT queue.create_queue('rp_q', retention => '1 day');
SELECT count(queue.enqueue('rp_q', jsonb_build_object('n', g))) AS enqueued FROM generate_series(1, 3) g;
SELECT count(queue.complete('rp_q', item_id, lease_token)) AS completed
  FROM queue.dequeue('rp_q', 'w1');
SELECT queue.fail('rp_q', item_id, lease_token, 'broken', 'E1', permanent => true)
  FROM queue.dequeue('rp_q', 'w1', batch_size => 2);
SELECT queue.review('rp_q', min(item_id), 'resolved') FROM queue.dead_letters WHERE queue_name = 'rp_q';

-- everything happened two days ago
UPDATE queue.item_done SET completed_at = completed_at - interval '2 days' WHERE queue_name = 'rp_q';
UPDATE queue.events SET at = at - interval '2 days' WHERE queue_name = 'rp_q';
UPDATE queue.failure_log SET at = at - interval '2 days' WHERE queue_name = 'rp_q';
UPDATE queue.dead_letters SET dead_at = dead_at - interval '2 days',
                              reviewed_at = reviewed_at - interval '2 days'
 WHERE queue_name = 'rp_q';

CREATE TEMP TABLE rp_before AS
SELECT (SELECT count(*) FROM queue.history WHERE queue_name = 'rp_q') AS history,
       (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'rp_q') AS dead_letters,
       (SELECT count(*) FROM queue.events WHERE queue_name = 'rp_q') AS events;
SELECT * FROM rp_before;

-- case: purged = 1 history row + 1 resolved dead letter + 5 events
-- (failed and dead_lettered twice, reviewed once); the new dead letter stays
SELECT purged FROM queue.sweep() WHERE queue_name = 'rp_q';
SELECT b.history - (SELECT count(*) FROM queue.history WHERE queue_name = 'rp_q') AS history_gone,
       b.dead_letters - (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'rp_q') AS dead_letters_gone,
       b.events - (SELECT count(*) FROM queue.events WHERE queue_name = 'rp_q') AS events_gone
  FROM rp_before b;
SELECT review_status FROM queue.dead_letters WHERE queue_name = 'rp_q';

-- case: nothing more is due
SELECT purged FROM queue.sweep() WHERE queue_name = 'rp_q';

-- case: purged counts the kinds retention keeps for the queue's retention
-- (history, reviewed dead letters, events, metrics): an alert cleared long
-- ago is tidied away too, but is not one of them
INSERT INTO queue.alerts (queue_name, kind, message, raised_at, cleared_at)
VALUES ('rp_q', 'sla_warning', 'old', now() - interval '3 days', now() - interval '2 days');
SELECT purged FROM queue.sweep() WHERE queue_name = 'rp_q';
SELECT count(*) AS old_alerts FROM queue.alerts WHERE queue_name = 'rp_q' AND cleared_at IS NOT NULL;

SELECT queue.drop_queue('rp_q', force => true);
