-- The circuit breaker and the operator: who pauses, who resumes.
\set VERBOSITY terse

-- Helper: make an open breaker's cooldown pass (as if time went by).
CREATE FUNCTION pg_temp.cooldown_over(q text) RETURNS void LANGUAGE sql AS $$
    UPDATE queue.queue_config SET breaker_opened_at = now() - interval '1 h'
     WHERE queue_name = q AND breaker_state = 'open'
$$;

-- case: operator before breaker: a manual pause keeps its reason when the
-- breaker trips on the failures of items that were in flight
SELECT queue.create_queue('b_op', breaker_threshold => 0.5, breaker_min_samples => 2,
                          breaker_cooldown => '1 min', max_attempts => 9);
SELECT count(*) FROM queue.enqueue_batch('b_op', array_fill('{}'::jsonb, ARRAY[4]));
CREATE TEMP TABLE b_held AS SELECT item_id, lease_token FROM queue.dequeue('b_op', 'w1', batch_size => 2);
SELECT queue.pause('b_op', 'ERP maintenance');
SELECT queue.fail('b_op', item_id, lease_token, 'ERP down', 'ERP_DOWN') FROM b_held ORDER BY item_id;
SELECT paused, pause_reason, paused_by, breaker_state, breaker_reason LIKE 'circuit breaker: 100% of 2 outcomes failed in 10 min, mostly ERP_DOWN (100%)' AS breaker_reason
  FROM queue.queues WHERE queue_name = 'b_op';

-- case: operator before breaker: no probe comes out of a manually paused queue
SELECT pg_temp.cooldown_over('b_op');
SELECT count(*) AS probes FROM queue.dequeue('b_op', 'w1');
SELECT breaker_state FROM queue.queue_config WHERE queue_name = 'b_op';
SELECT paused, pause_reason FROM queue.queues WHERE queue_name = 'b_op';

-- case: operator before breaker: switching the breaker off closes it but
-- keeps the manual pause
SELECT queue.alter_queue('b_op', breaker_threshold => 0);
SELECT paused, pause_reason, paused_by, breaker_state, breaker_reason FROM queue.queues WHERE queue_name = 'b_op';
SELECT count(*) AS claimed_while_paused FROM queue.dequeue('b_op', 'w1');
SELECT queue.resume('b_op');
SELECT paused, pause_reason, paused_by, breaker_state FROM queue.queues WHERE queue_name = 'b_op';
SELECT count(*) AS claimed_after_resume FROM queue.dequeue('b_op', 'w1');

-- case: the breaker alone pauses with its own reason and resumes by its probe
SELECT queue.create_queue('b_alone', breaker_threshold => 0.5, breaker_min_samples => 2,
                          breaker_cooldown => '1 min', max_attempts => 9, backoff_base => '0 s');
SELECT count(*) FROM queue.enqueue_batch('b_alone', array_fill('{}'::jsonb, ARRAY[4]));
SELECT queue.fail('b_alone', item_id, lease_token, 'ERP down', 'ERP_DOWN')
  FROM queue.dequeue('b_alone', 'w1', batch_size => 2) ORDER BY item_id;
SELECT paused, pause_reason LIKE 'circuit breaker: %' AS breaker_text, paused_by, breaker_state
  FROM queue.queues WHERE queue_name = 'b_alone';
SELECT (queue.stats('b_alone')).paused AS stats_paused;
SELECT status FROM queue.health('b_alone');
SELECT count(*) AS before_cooldown FROM queue.dequeue('b_alone', 'w1');
SELECT pg_temp.cooldown_over('b_alone');
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_alone';
SELECT queue.complete('b_alone', item_id, lease_token) AS probe_done FROM queue.dequeue('b_alone', 'w1', batch_size => 5);
SELECT paused, pause_reason, paused_by, breaker_state FROM queue.queues WHERE queue_name = 'b_alone';
SELECT kind, details->>'by' AS by FROM queue.events
 WHERE queue_name = 'b_alone' AND item_id IS NULL ORDER BY event_id;

-- case: operator before breaker: a pause during the half-open probe holds;
-- the probe's success closes the breaker but does not resume the queue
SELECT queue.fail('b_alone', item_id, lease_token, 'ERP down', 'ERP_DOWN')
  FROM queue.dequeue('b_alone', 'w1', batch_size => 2) ORDER BY item_id;
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_alone';
SELECT pg_temp.cooldown_over('b_alone');
CREATE TEMP TABLE b_probe AS SELECT item_id, lease_token FROM queue.dequeue('b_alone', 'w1');
SELECT count(*) AS probes FROM b_probe;
SELECT queue.pause('b_alone', 'ERP upgrade');
SELECT queue.complete('b_alone', item_id, lease_token) FROM b_probe;
SELECT paused, pause_reason, paused_by, breaker_state FROM queue.queues WHERE queue_name = 'b_alone';
SELECT count(*) AS claimed_while_paused FROM queue.dequeue('b_alone', 'w1');
SELECT queue.resume('b_alone');

-- case: the breaker reason in the breaker_open alert is the breaker's, not the pause's
SELECT queue.create_queue('b_alert', breaker_threshold => 0.5, breaker_min_samples => 2, max_attempts => 9);
SELECT count(*) FROM queue.enqueue_batch('b_alert', array_fill('{}'::jsonb, ARRAY[2]));
CREATE TEMP TABLE b_held2 AS SELECT item_id, lease_token FROM queue.dequeue('b_alert', 'w1', batch_size => 2);
SELECT queue.pause('b_alert', 'nightly');
SELECT count(*) FROM (SELECT queue.fail('b_alert', item_id, lease_token, 'boom', 'BOOM') FROM b_held2) f;
SELECT count(*) FROM queue.sweep() WHERE queue_name = 'b_alert';
SELECT kind, message LIKE 'circuit breaker: %' AS breaker_text FROM queue.alerts
 WHERE queue_name = 'b_alert' AND cleared_at IS NULL ORDER BY kind;
SELECT status, reasons[1] FROM queue.health('b_alert');

-- case: by default only the fraction rule trips the breaker: 6 successes
-- then 4 failures in a row is 40 % < 50 %, so it stays closed
SELECT queue.create_queue('b_frac', breaker_threshold => 0.5, breaker_min_samples => 4,
                          max_attempts => 9, backoff_base => '0 s');
SELECT count(*) FROM queue.enqueue_batch('b_frac', array_fill('{}'::jsonb, ARRAY[10]));
SELECT count(*) FILTER (WHERE queue.complete('b_frac', item_id, lease_token)) AS completed
  FROM queue.dequeue('b_frac', 'w1', batch_size => 6);
SELECT queue.fail('b_frac', item_id, lease_token, 'down', 'DOWN') FROM queue.dequeue('b_frac', 'w1', batch_size => 4);
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'b_frac';

-- case: the run rule (queue.breaker_run_rule = on): earlier successes
-- cannot dilute a sudden outage; failures broken by a success do not trip it
SET queue.breaker_run_rule = on;
SELECT queue.create_queue('b_run', breaker_threshold => 0.5, breaker_min_samples => 3,
                          max_attempts => 9, backoff_base => '0 s');
SELECT count(*) FROM queue.enqueue_batch('b_run', array_fill('{}'::jsonb, ARRAY[20]));
SELECT count(*) FILTER (WHERE queue.complete('b_run', item_id, lease_token)) AS completed
  FROM queue.dequeue('b_run', 'w1', batch_size => 10);
SELECT queue.fail('b_run', item_id, lease_token, 'down', 'DOWN') FROM queue.dequeue('b_run', 'w1', batch_size => 2);
SELECT queue.complete('b_run', item_id, lease_token) FROM queue.dequeue('b_run', 'w1');
SELECT queue.fail('b_run', item_id, lease_token, 'down', 'DOWN') FROM queue.dequeue('b_run', 'w1', batch_size => 2);
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_run';
SELECT queue.fail('b_run', item_id, lease_token, 'down', 'DOWN') FROM queue.dequeue('b_run', 'w1');
SELECT paused, paused_by, breaker_state, breaker_reason FROM queue.queues WHERE queue_name = 'b_run';
RESET queue.breaker_run_rule;

-- case: the pause reason's percentages are whole percents rounded down, as
-- in the example of the contract: 35 failures of 40 outcomes read 87%;
-- 30 of the 35 with one code read 85%
SELECT queue.create_queue('b_pct', breaker_threshold => 0.85, breaker_min_samples => 40,
                          max_attempts => 1);
SELECT count(*) FROM queue.enqueue_batch('b_pct', array_fill('{}'::jsonb, ARRAY[40]));
SELECT count(*) FILTER (WHERE queue.complete('b_pct', item_id, lease_token)) AS completed
  FROM queue.dequeue('b_pct', 'w1', batch_size => 5);
CREATE TEMP TABLE b_pct_held AS
SELECT row_number() OVER (ORDER BY item_id) AS n, item_id, lease_token
  FROM queue.dequeue('b_pct', 'w1', batch_size => 35);
SELECT count(queue.fail('b_pct', item_id, lease_token, 'no answer',
                        CASE WHEN n <= 30 THEN 'ERP_TIMEOUT' ELSE 'ERP_REFUSED' END)) AS failed
  FROM (SELECT * FROM b_pct_held ORDER BY n) h;
SELECT breaker_state, breaker_reason FROM queue.queues WHERE queue_name = 'b_pct';

-- case: a breaker_window shorter than a bucket of the counts (10 s) sees
-- the outcomes within it, and only those (the bucket holding the window's
-- start is counted from its rows)
SELECT queue.create_queue('b_short', breaker_threshold => 0.5, breaker_min_samples => 3,
                          breaker_window => '5 s', max_attempts => 9, backoff_base => '1 h');
SELECT count(*) FROM queue.enqueue_batch('b_short', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(queue.fail('b_short', item_id, lease_token, 'ERP down'))
  FROM queue.dequeue('b_short', 'w1', batch_size => 3);
SELECT failed, outcomes FROM queue._breaker_outcomes('b_short', now() - interval '5 s', 0);
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_short';
-- (a bucket of counts before the window's start counts nothing)
INSERT INTO queue.breaker_bucket (queue_name, bucket_start, stripe, succeeded, failed)
VALUES ('b_short', date_bin('10 s', now() - interval '1 h', 'epoch'), 0, 0, 4);
SELECT failed, outcomes FROM queue._breaker_outcomes('b_short', now() - interval '5 s', 0);

-- case: half-open hands out exactly one probe: while the probe's bot keeps
-- its lease extended no other probe comes out, and its success closes the
-- breaker; a probe whose lease ran out is a failed probe: the breaker is
-- open for another cooldown, counted from the lease's end, then probes again
SELECT queue.create_queue('b_one', breaker_threshold => 0.5, breaker_min_samples => 1,
                          breaker_cooldown => '1 s', max_attempts => 9, backoff_base => '0 s');
SELECT count(*) FROM queue.enqueue_batch('b_one', array_fill('{}'::jsonb, ARRAY[4]));
SELECT queue.fail('b_one', item_id, lease_token, 'ERP down') FROM queue.dequeue('b_one', 'w1');
SELECT pg_temp.cooldown_over('b_one');
CREATE TEMP TABLE b_one_probe AS
SELECT item_id, lease_token FROM queue.dequeue('b_one', 'w1', lease_timeout => '300 ms');
SELECT count(*) AS probes FROM b_one_probe;
SELECT queue.extend_lease('b_one', item_id, lease_token, '1 min') IS NOT NULL AS extended FROM b_one_probe;
SELECT pg_sleep(0.4);
SELECT count(*) AS second_probe FROM queue.dequeue('b_one', 'w2');
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_one';
SELECT queue.complete('b_one', item_id, lease_token) AS probe_done FROM b_one_probe;
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'b_one';
SELECT queue.fail('b_one', item_id, lease_token, 'ERP down again') FROM queue.dequeue('b_one', 'w1');
SELECT pg_temp.cooldown_over('b_one');
SELECT count(*) AS probes FROM queue.dequeue('b_one', 'w1', lease_timeout => '100 ms');
SELECT pg_sleep(0.2);
SELECT count(*) AS probe_after_lost_probe FROM queue.dequeue('b_one', 'w2');
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_one';
SELECT queue.desired_workers('b_one') AS desired_while_cooling;
SELECT pg_sleep(1.5);
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_one';
SELECT count(*) AS probe_after_cooldown FROM queue.dequeue('b_one', 'w2');
-- a heartbeat keeps the probe alive as extend_lease does
SELECT queue.create_queue('b_hb', breaker_threshold => 0.5, breaker_min_samples => 1,
                          breaker_cooldown => '1 s', max_attempts => 9, backoff_base => '0 s');
SELECT count(*) FROM queue.enqueue_batch('b_hb', array_fill('{}'::jsonb, ARRAY[3]));
SELECT queue.fail('b_hb', item_id, lease_token, 'ERP down') FROM queue.dequeue('b_hb', 'w-hb');
SELECT pg_temp.cooldown_over('b_hb');
SELECT count(*) AS probes FROM queue.dequeue('b_hb', 'w-hb', lease_timeout => '100 ms');
SELECT queue.heartbeat('w-hb') AS renewed;
SELECT pg_sleep(1.3);
SELECT count(*) AS second_probe FROM queue.dequeue('b_hb', 'w-other');
SELECT breaker_state FROM queue.queues WHERE queue_name = 'b_hb';

-- case: a probe whose lease a restart or offline recovery ends is a failed
-- probe at once: the breaker is open again for another cooldown from
-- then, not from the end its lease would have had, and probes again after it
SELECT queue.create_queue('b_end', breaker_threshold => 0.5, breaker_min_samples => 1,
                          breaker_cooldown => '1 min', lease_timeout => '1 h',
                          max_attempts => 9, backoff_base => '0 s');
SELECT count(*) FROM queue.enqueue_batch('b_end', array_fill('{}'::jsonb, ARRAY[4]));
SELECT queue.fail('b_end', item_id, lease_token, 'ERP down') FROM queue.dequeue('b_end', 'w-end');
SELECT pg_temp.cooldown_over('b_end');
SELECT count(*) AS probes FROM queue.dequeue('b_end', 'w-end');
SELECT queue.register_worker('w-end', restart => true);
SELECT breaker_state, breaker_opened_at > now() - interval '1 min' AS reopened_now
  FROM queue.queues WHERE queue_name = 'b_end';
SELECT count(*) AS reopened_events FROM queue.events
 WHERE queue_name = 'b_end' AND kind = 'breaker_open' AND (details->>'reopened')::boolean;
SELECT count(*) AS probe_while_cooling FROM queue.dequeue('b_end', 'w-other');
SELECT pg_temp.cooldown_over('b_end');
SELECT count(*) AS probes FROM queue.dequeue('b_end', 'w-gone');
UPDATE queue.worker_registry SET last_seen = now() - interval '1 day' WHERE worker = 'w-gone';
SELECT recovered FROM queue.sweep() WHERE queue_name = 'b_end';
SELECT breaker_state, breaker_opened_at > now() - interval '1 min' AS reopened_now
  FROM queue.queues WHERE queue_name = 'b_end';
SELECT count(*) AS reopened_events FROM queue.events
 WHERE queue_name = 'b_end' AND kind = 'breaker_open' AND (details->>'reopened')::boolean;
SELECT count(*) AS probe_while_cooling FROM queue.dequeue('b_end', 'w-other');
SELECT pg_temp.cooldown_over('b_end');
SELECT queue.complete('b_end', item_id, lease_token) AS probe_done FROM queue.dequeue('b_end', 'w-other');
SELECT paused, breaker_state FROM queue.queues WHERE queue_name = 'b_end';

-- case: an empty error_code is no code: the reason names the error text
SELECT queue.create_queue('b_nocode', breaker_threshold => 0.5, breaker_min_samples => 2,
                          max_attempts => 9, backoff_base => '0 s');
SELECT count(*) FROM queue.enqueue_batch('b_nocode', array_fill('{}'::jsonb, ARRAY[2]));
SELECT queue.fail('b_nocode', item_id, lease_token, 'ERP timeout', error_code => '')
  FROM queue.dequeue('b_nocode', 'w-nocode', batch_size => 2);
SELECT paused, breaker_reason FROM queue.queues WHERE queue_name = 'b_nocode';

SELECT queue.drop_queue(q, force => true) FROM unnest('{b_op,b_alone,b_alert,b_frac,b_run,b_pct,b_short,b_one,b_hb,b_end,b_nocode}'::text[]) q;
