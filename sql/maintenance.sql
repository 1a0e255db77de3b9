-- Maintenance: sweep (spent leases, expiry, aging, retention, its batch bound,
-- alerts), snapshot_metrics, enable_cron / disable_cron.
-- Time passes by rewriting timestamps as superuser, not by sleeping.
\set VERBOSITY terse

SELECT queue.create_queue('m_spent', lease_timeout => '1 min', max_attempts => 1);
SELECT queue.create_queue('m_exp');
SELECT queue.create_queue('m_age', priority_aging => '10 min');
SELECT queue.create_queue('m_ret', retention => '1 day', dedup_window => '1 h');

-- case: sweep returns one row per queue, all zeros when there is nothing to do
SELECT * FROM queue.sweep() WHERE queue_name LIKE 'm\_%' ORDER BY queue_name;

-- case: a lost lease on the last attempt becomes a dead letter (lease_expired),
-- counted in dead_lettered and as a failed attempt; a current lease is left alone
SELECT queue.enqueue('m_spent', '{"k": "lost"}') AS lost \gset
SELECT queue.enqueue('m_spent', '{"k": "held"}') AS held \gset
SELECT count(*) FROM queue.dequeue('m_spent', 'w1', batch_size => 2);
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'm_spent' AND item_id = :lost;
SELECT dead_lettered, expired FROM queue.sweep() WHERE queue_name = 'm_spent';
SELECT reason, attempts, last_error, error_code, worker FROM queue.dead_letters
 WHERE queue_name = 'm_spent' AND item_id = :lost;
SELECT kind, attempt, worker FROM queue.failure_log WHERE queue_name = 'm_spent';
SELECT state FROM queue.items WHERE queue_name = 'm_spent' AND item_id = :held;
SELECT kind FROM queue.events WHERE queue_name = 'm_spent' ORDER BY event_id;
-- idempotent: a second sweep finds nothing more
SELECT dead_lettered, expired FROM queue.sweep() WHERE queue_name = 'm_spent';

-- case: expiry dead-letters queued, scheduled and on-hold items past expires_at
-- (reason expired, counted in expired); a processing item finishes first
SELECT queue.enqueue('m_exp', '{"k": "queued"}') AS e_queued \gset
SELECT queue.enqueue('m_exp', '{"k": "scheduled"}', run_at => now() + interval '1 h') AS e_sched \gset
SELECT queue.enqueue('m_exp', '{"k": "held"}') AS e_held \gset
SELECT queue.enqueue('m_exp', '{"k": "fresh"}', expires_at => now() + interval '1 h') AS e_fresh \gset
SELECT queue.hold('m_exp', :e_held);
SELECT queue.enqueue('m_exp', '{"k": "processing"}', priority => 0) AS e_proc \gset
SELECT item_id = :e_proc AS got_processing FROM queue.dequeue('m_exp', 'w1');
UPDATE queue.item_live SET expires_at = now() - interval '1 s'
 WHERE queue_name = 'm_exp' AND item_id <> :e_fresh;
SELECT dead_lettered, expired FROM queue.sweep() WHERE queue_name = 'm_exp';
SELECT payload->>'k' AS k, reason FROM queue.dead_letters WHERE queue_name = 'm_exp' ORDER BY item_id;
SELECT payload->>'k' AS k, state FROM queue.items WHERE queue_name = 'm_exp' ORDER BY item_id;
SELECT kind, count(*) FROM queue.events WHERE queue_name = 'm_exp' GROUP BY kind ORDER BY kind;

-- case: priority aging stores greatest(0, priority - floor(waited / priority_aging)),
-- waited from when the item became claimable; aged counts changed rows
SELECT queue.enqueue('m_age', '{"k": "p5 waited 35 min"}', priority => 5) AS a5 \gset
SELECT queue.enqueue('m_age', '{"k": "p1 waited 35 min"}', priority => 1) AS a1 \gset
SELECT queue.enqueue('m_age', '{"k": "p5 waited 5 min"}', priority => 5) AS a5b \gset
SELECT queue.enqueue('m_age', '{"k": "p5 scheduled"}', priority => 5, run_at => now() + interval '1 h') AS a5s \gset
SELECT queue.enqueue('m_age', '{"k": "p3 fresh"}', priority => 3) AS a3 \gset
UPDATE queue.item_live
   SET enqueued_at = enqueued_at - interval '35 min', run_at = run_at - interval '35 min',
       visible_at = visible_at - interval '35 min'
 WHERE queue_name = 'm_age' AND item_id IN (:a5, :a1);
UPDATE queue.item_live
   SET enqueued_at = enqueued_at - interval '5 min', run_at = run_at - interval '5 min',
       visible_at = visible_at - interval '5 min'
 WHERE queue_name = 'm_age' AND item_id = :a5b;
-- enqueued long ago but claimable only since a backoff ended 15 min ago
UPDATE queue.item_live
   SET enqueued_at = enqueued_at - interval '2 h', run_at = now() - interval '15 min',
       visible_at = now() - interval '15 min'
 WHERE queue_name = 'm_age' AND item_id = :a3;
SELECT aged FROM queue.sweep() WHERE queue_name = 'm_age';
SELECT payload->>'k' AS k, priority, effective_priority FROM queue.items
 WHERE queue_name = 'm_age' ORDER BY item_id;
SELECT aged FROM queue.sweep() WHERE queue_name = 'm_age';
SELECT ordinality, payload->>'k' AS k
  FROM queue.dequeue('m_age', 'w1', batch_size => 4) WITH ORDINALITY;

-- case: an item whose lease ran out became claimable again at the lease's
-- end: its waited starts there, not at its first enqueue, so it does not
-- keep the priority it had aged to before its claim
SELECT queue.create_queue('m_age_lost', priority_aging => '10 min');
SELECT queue.enqueue('m_age_lost', '{"k": "p5 waited 35 min, then lost its lease"}', priority => 5) AS l5 \gset
UPDATE queue.item_live
   SET enqueued_at = enqueued_at - interval '35 min', run_at = run_at - interval '35 min',
       visible_at = visible_at - interval '35 min'
 WHERE queue_name = 'm_age_lost' AND item_id = :l5;
SELECT aged FROM queue.sweep() WHERE queue_name = 'm_age_lost';
SELECT effective_priority AS aged_before_claim FROM queue.items WHERE item_id = :l5;
SELECT count(*) AS claimed FROM queue.dequeue('m_age_lost', 'w1');
UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
 WHERE queue_name = 'm_age_lost' AND item_id = :l5;
SELECT queue.enqueue('m_age_lost', '{"k": "p4 fresh"}', priority => 4) AS l4 \gset
SELECT recovered FROM queue.sweep() WHERE queue_name = 'm_age_lost';
SELECT payload->>'k' AS k, state, priority, effective_priority FROM queue.items
 WHERE queue_name = 'm_age_lost' ORDER BY item_id;
SELECT ordinality, payload->>'k' AS k, attempt
  FROM queue.dequeue('m_age_lost', 'w1', batch_size => 2) WITH ORDINALITY;
-- ... and so does an item put on hold and back: claimable again from the
-- unhold, it waits from there
SELECT queue.enqueue('m_age_lost', '{"k": "p5 waited 35 min, then held"}', priority => 5) AS h5 \gset
UPDATE queue.item_live
   SET enqueued_at = enqueued_at - interval '35 min', run_at = run_at - interval '35 min',
       visible_at = visible_at - interval '35 min'
 WHERE queue_name = 'm_age_lost' AND item_id = :h5;
SELECT aged FROM queue.sweep() WHERE queue_name = 'm_age_lost';
SELECT queue.hold('m_age_lost', :h5) AS held, queue.unhold('m_age_lost', :h5) AS unheld;
SELECT queue.enqueue('m_age_lost', '{"k": "p4 fresh"}', priority => 4) AS h4 \gset
SELECT aged FROM queue.sweep() WHERE queue_name = 'm_age_lost';
SELECT payload->>'k' AS k, state, priority, effective_priority FROM queue.items
 WHERE queue_name = 'm_age_lost' AND state = 'queued' ORDER BY item_id;
SELECT ordinality, payload->>'k' AS k
  FROM queue.dequeue('m_age_lost', 'w1', batch_size => 2) WITH ORDINALITY;
SELECT queue.drop_queue('m_age_lost', force => true);

-- case: retention purges processed history, reviewed dead letters, events,
-- failures, cleared alerts and old metrics (purged counts history, dead
-- letters, events and metrics), and the dedup keys past the window go too
-- (not counted: not retention)
SELECT queue.enqueue('m_ret', '{"k": "old"}', dedup_key => 'k-old') AS r_old \gset
SELECT queue.enqueue('m_ret', '{"k": "new"}', dedup_key => 'k-new') AS r_new \gset
SELECT queue.enqueue('m_ret', '{"k": "dead resolved"}') AS r_dres \gset
SELECT queue.enqueue('m_ret', '{"k": "dead new"}') AS r_dnew \gset
SELECT queue.enqueue('m_ret', '{"k": "dead recent review"}') AS r_drec \gset
SELECT count(*) FROM (
    SELECT queue.complete('m_ret', item_id, lease_token)
      FROM queue.dequeue('m_ret', 'w1', batch_size => 2)) c;
SELECT queue.cancel('m_ret', :r_dres), queue.cancel('m_ret', :r_dnew), queue.cancel('m_ret', :r_drec);
SELECT queue.review('m_ret', :r_dres, 'resolved'), queue.review('m_ret', :r_drec, 'rejected');
UPDATE queue.item_done SET completed_at = now() - interval '2 days'
 WHERE queue_name = 'm_ret' AND item_id = :r_old;
UPDATE queue.dedup_done SET completed_at = now() - interval '2 h'
 WHERE queue_name = 'm_ret' AND dedup_key = 'k-old';
UPDATE queue.dead_letters SET reviewed_at = now() - interval '2 days', dead_at = now() - interval '3 days'
 WHERE queue_name = 'm_ret' AND item_id IN (:r_dres, :r_dnew);
INSERT INTO queue.events (queue_name, kind, at) VALUES
    ('m_ret', 'paused', now() - interval '2 days'), ('m_ret', 'resumed', now() - interval '2 days');
INSERT INTO queue.failure_log (queue_name, item_id, kind, error, at) VALUES
    ('m_ret', :r_old, 'transient', 'old', now() - interval '2 days'),
    ('m_ret', :r_old, 'transient', 'recent', now() - interval '2 h');
INSERT INTO queue.alerts (queue_name, kind, message, raised_at, cleared_at) VALUES
    ('m_ret', 'sla_warning', 'old', now() - interval '3 days', now() - interval '2 days');
INSERT INTO queue.metrics_history (queue_name, taken_at, queued)
SELECT 'm_ret', now() - g * interval '1 day', g FROM generate_series(2, 5) g;
SELECT purged FROM queue.sweep() WHERE queue_name = 'm_ret';
SELECT item_id = :r_new AS kept_recent FROM queue.history WHERE queue_name = 'm_ret';
SELECT payload->>'k' AS k, review_status FROM queue.dead_letters WHERE queue_name = 'm_ret' ORDER BY item_id;
SELECT count(*) AS old_events FROM queue.events WHERE queue_name = 'm_ret' AND at < now() - interval '1 day';
SELECT error FROM queue.failure_log WHERE queue_name = 'm_ret';
SELECT dedup_key FROM queue.dedup_done WHERE queue_name = 'm_ret';
SELECT count(*) AS cleared_alerts FROM queue.alerts WHERE queue_name = 'm_ret' AND cleared_at IS NOT NULL;
-- the newest three snapshots stay even past retention (health compares them)
SELECT queued FROM queue.metrics_history WHERE queue_name = 'm_ret' ORDER BY taken_at;
SELECT purged FROM queue.sweep() WHERE queue_name = 'm_ret';

-- case: one call does at most 10,000 rows of a kind per queue; the next goes on
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, completed_at)
SELECT 'm_ret', nextval('queue.item_id_seq'), '{}', 1, now() - interval '3 days', now() - interval '3 days'
  FROM generate_series(1, 10050);
SELECT purged FROM queue.sweep() WHERE queue_name = 'm_ret';
SELECT purged FROM queue.sweep() WHERE queue_name = 'm_ret';
SELECT purged FROM queue.sweep() WHERE queue_name = 'm_ret';

-- case: alerts: sla_warning past half the sla, sla_critical past 85 % replaces it,
-- both cleared when the backlog is gone (NOTIFY: see test/t/051_listen.pl)
SELECT queue.create_queue('m_alert', sla => '10 min', max_attempts => 1);
SELECT queue.enqueue('m_alert', '{"k": "waiting"}') AS w1 \gset
-- a completion just now: workers are at work (no workers_idle alert)
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
VALUES ('m_alert', nextval('queue.item_id_seq'), '{}', 1, now(), now(), now());
UPDATE queue.item_live SET visible_at = now() - interval '6 min'
 WHERE queue_name = 'm_alert' AND item_id = :w1;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT kind, message, cleared_at IS NULL AS open FROM queue.alerts
 WHERE queue_name = 'm_alert' ORDER BY alert_id;
UPDATE queue.item_live SET visible_at = now() - interval '9 min'
 WHERE queue_name = 'm_alert' AND item_id = :w1;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT kind, message, cleared_at IS NULL AS open FROM queue.alerts
 WHERE queue_name = 'm_alert' ORDER BY alert_id;
-- sweeping again raises nothing new
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT count(*) AS alerts FROM queue.alerts WHERE queue_name = 'm_alert';
SELECT count(*) FROM (SELECT queue.cancel('m_alert', :w1)) c;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT kind, cleared_at IS NULL AS open FROM queue.alerts
 WHERE queue_name = 'm_alert' ORDER BY alert_id;

-- case: dead_letters is open while a dead letter is still new; reviewing clears it
SELECT queue.review('m_alert', :w1, 'in_review');
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT kind, cleared_at IS NULL AS open FROM queue.alerts
 WHERE queue_name = 'm_alert' AND kind = 'dead_letters' ORDER BY alert_id;

-- case: stalled_lease: a lease held past 3x the p95 run time of the last hour
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
SELECT 'm_alert', nextval('queue.item_id_seq'), '{}', 1, now() - interval '1 min',
       now() - interval '20 s', now() - interval '20 s' + g * interval '1 s'
  FROM generate_series(1, 3) g;
SELECT queue.enqueue('m_alert', '{"k": "slow"}') AS slow \gset
SELECT count(*) FROM queue.dequeue('m_alert', 'w-slow');
UPDATE queue.item_live SET claimed_at = now() - interval '30 s'
 WHERE queue_name = 'm_alert' AND item_id = :slow;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT kind, message FROM queue.alerts
 WHERE queue_name = 'm_alert' AND kind = 'stalled_lease' AND cleared_at IS NULL;

-- case: worker_offline: an offline worker held one of the queue's items; sweep
-- ends its lease (the last attempt: a dead letter, counted in dead_lettered)
-- and clears the alert once the worker is back
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'w-slow';
-- (and the queue's previous offline check an hour earlier too, as if that
-- hour had passed: the check reads the signs of life since then)
UPDATE queue.offline_check SET checked_until = checked_until - interval '1 h'
 WHERE queue_name = 'm_alert';
SELECT recovered, dead_lettered FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT kind, message, details FROM queue.alerts
 WHERE queue_name = 'm_alert' AND kind = 'worker_offline' AND cleared_at IS NULL;
UPDATE queue.worker_registry SET last_seen = now() WHERE worker = 'w-slow';
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_alert';
SELECT count(*) AS open_worker_offline FROM queue.alerts
 WHERE queue_name = 'm_alert' AND kind = 'worker_offline' AND cleared_at IS NULL;

-- case: the worker_offline alert names every offline worker (ten in its
-- message, a hundred in details.workers, the count in details.offline),
-- and while it stays open it names those that go offline later too
SELECT queue.create_queue('m_offline', lease_timeout => '10 min');
SELECT count(*) FROM queue.enqueue_batch('m_offline', array_fill('{}'::jsonb, ARRAY[4]));
SELECT w.worker, count(d.item_id) AS claimed
  FROM (VALUES ('m-off-a'), ('m-off-b'), ('m-off-c')) w(worker),
       LATERAL queue.dequeue('m_offline', w.worker) d
 GROUP BY w.worker ORDER BY w.worker;
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker LIKE 'm-off-%';
SELECT recovered FROM queue.sweep('m_offline');
SELECT message, details FROM queue.alerts
 WHERE queue_name = 'm_offline' AND kind = 'worker_offline' AND cleared_at IS NULL;
SELECT count(*) FROM queue.dequeue('m_offline', 'm-off-d');
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'm-off-d';
UPDATE queue.offline_check SET checked_until = checked_until - interval '1 h'
 WHERE queue_name = 'm_offline';
SELECT recovered FROM queue.sweep('m_offline');
SELECT count(*) AS alerts, min(message) AS message, min(details::text) AS details
  FROM queue.alerts WHERE queue_name = 'm_offline' AND kind = 'worker_offline';

-- case: sweep: recovered counts the leases whose items are claimable again,
-- dead_lettered the other dead-lettering: offline recovery of a lease on
-- the last attempt makes a dead letter (lease_expired) and counts there
SELECT queue.create_queue('m_off_dead', lease_timeout => '10 min', max_attempts => 1);
SELECT count(*) FROM queue.enqueue_batch('m_off_dead', array_fill('{}'::jsonb, ARRAY[2]));
SELECT count(*) FROM queue.dequeue('m_off_dead', 'm-dying', batch_size => 2);
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'm-dying';
SELECT recovered, dead_lettered FROM queue.sweep('m_off_dead');
SELECT reason, last_error, count(*) FROM queue.dead_letters
 WHERE queue_name = 'm_off_dead' GROUP BY reason, last_error;

-- case: breaker_open: open while the breaker is, cleared by resume
SELECT queue.create_queue('m_brk', breaker_threshold => 0.5, breaker_min_samples => 2, max_attempts => 9);
SELECT count(*) FROM queue.enqueue_batch('m_brk', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) FROM (
    SELECT queue.fail('m_brk', item_id, lease_token, 'ERP down', error_code => 'ERP_TIMEOUT')
      FROM queue.dequeue('m_brk', 'w1', batch_size => 2)) f;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_brk';
SELECT kind, message, cleared_at IS NULL AS open FROM queue.alerts WHERE queue_name = 'm_brk';
SELECT queue.resume('m_brk');
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'm_brk';
SELECT kind, cleared_at IS NULL AS open FROM queue.alerts WHERE queue_name = 'm_brk';

-- case: snapshot_metrics writes one row per queue; processed and failed count
-- since the previous row, NULL in a queue's first row
SELECT queue.create_queue('m_snap');
SELECT count(*) FROM queue.enqueue_batch('m_snap', array_fill('{}'::jsonb, ARRAY[4]));
SELECT queue.snapshot_metrics() = (SELECT count(*) FROM queue.queues) AS one_row_per_queue;
SELECT queued, processing, processed, failed FROM queue.metrics_history WHERE queue_name = 'm_snap';
SELECT count(*) FROM (
    SELECT CASE WHEN ordinality <= 2 THEN queue.complete('m_snap', item_id, lease_token)::text
                ELSE queue.fail('m_snap', item_id, lease_token, 'boom') END
      FROM queue.dequeue('m_snap', 'w1', batch_size => 3) WITH ORDINALITY) x;
SELECT queue.snapshot_metrics() > 0 AS wrote;
SELECT queued, scheduled, processing, processed_1h, failed_1h, processed, failed
  FROM queue.metrics_history WHERE queue_name = 'm_snap' ORDER BY taken_at;
-- twice in one transaction: the second finds its rows already taken
BEGIN;
SELECT queue.snapshot_metrics() > 0 AS wrote;
SELECT queue.snapshot_metrics() AS wrote_again;
COMMIT;

-- case: prometheus counters are running totals kept by snapshot_metrics, so
-- retention purging history, failures and dead letters does not make them fall
SELECT count(*) FROM (SELECT queue.cancel('m_snap', item_id) FROM queue.items
                       WHERE queue_name = 'm_snap' AND state = 'queued') c;
SELECT queue.snapshot_metrics() > 0 AS wrote;
SELECT l FROM regexp_split_to_table(queue.prometheus(), E'\n') AS l
 WHERE l ~ '^queue_[a-z_]+_total\{queue="m_snap"' ORDER BY l;
UPDATE queue.item_done SET completed_at = now() - interval '30 days' WHERE queue_name = 'm_snap';
UPDATE queue.failure_log SET at = now() - interval '30 days' WHERE queue_name = 'm_snap';
SELECT count(queue.review('m_snap', item_id, 'rejected')) FROM queue.dead_letters WHERE queue_name = 'm_snap';
UPDATE queue.dead_letters SET reviewed_at = now() - interval '30 days' WHERE queue_name = 'm_snap';
SELECT purged FROM queue.sweep() WHERE queue_name = 'm_snap';
SELECT (SELECT count(*) FROM queue.history WHERE queue_name = 'm_snap') AS history,
       (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'm_snap') AS dead_letters;
SELECT l FROM regexp_split_to_table(queue.prometheus(), E'\n') AS l
 WHERE l ~ '^queue_[a-z_]+_total\{queue="m_snap"' ORDER BY l;

-- case: pg_cron absent: a clear error with a hint (55000)
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.enable_cron();
SELECT queue.disable_cron();
\set VERBOSITY terse
\set SHOW_CONTEXT errors
SELECT queue.enable_cron(sweep_schedule => NULL);

-- case: with pg_cron, enable_cron registers two named jobs; enabling again
-- replaces their schedules; disable_cron removes them and may run twice
CREATE EXTENSION pg_cron;
SELECT queue.enable_cron();
SELECT jobname, schedule, command, database = current_database() AS here, active
  FROM cron.job ORDER BY jobname;
SELECT queue.enable_cron('*/5 * * * *', '*/2 * * * *');
SELECT jobname, schedule FROM cron.job ORDER BY jobname;
-- a schedule pg_cron refuses: 22023 naming the argument, and nothing changes
SELECT queue.enable_cron('not a schedule');
SELECT queue.enable_cron('*/10 * * * *', 'every minute');
SELECT jobname, schedule FROM cron.job ORDER BY jobname;
SELECT queue.disable_cron();
SELECT count(*) AS jobs FROM cron.job;
SELECT queue.disable_cron();
DROP EXTENSION pg_cron;

SELECT queue.drop_queue(q, force => true)
  FROM unnest(ARRAY['m_spent', 'm_exp', 'm_age', 'm_ret', 'm_alert', 'm_offline', 'm_off_dead', 'm_brk', 'm_snap']) AS q;
DELETE FROM queue.worker_registry WHERE worker LIKE 'm-off-%' OR worker = 'm-dying';
