-- The observability functions that read the breaker's state apart from
-- the operator's pause (schema/25_breaker.sql); after 80_capacity.sql,
-- which redefines some of them.

CREATE OR REPLACE FUNCTION queue._stats(p_queue text,
    OUT queued bigint, OUT scheduled bigint, OUT processing bigint, OUT on_hold bigint,
    OUT dead bigint, OUT oldest_queued_age interval, OUT processed_1h bigint,
    OUT failed_1h bigint, OUT wait_p50 interval, OUT wait_p95 interval,
    OUT run_p50 interval, OUT run_p95 interval, OUT paused boolean)
RETURNS record LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp SET jit = off
SET enable_seqscan = off    -- a LIMITed seq scan may read the whole table before the queue's rows
AS $$
#variable_conflict use_column
DECLARE
    v_limit bigint := queue._stats_exact_limit();
    v_recent int := 1000;            -- completions behind the percentiles
    v_now timestamptz := now();
    v_prios int[];
    v_between bigint;
    v_parked bigint;
    v_parked_later bigint := 0;
    v_expired bigint;
BEGIN
    SELECT p.paused INTO paused
      FROM queue.queue_config c
     CROSS JOIN LATERAL queue._pause_state(c.paused, c.pause_reason, c.paused_at, c.breaker_state,
                                           c.breaker_reason, c.breaker_opened_at) p
     WHERE c.queue_name = p_queue;

    -- the priorities present: one index probe per priority
    WITH RECURSIVE pr(p) AS (
        SELECT (SELECT i.priority FROM queue.item_live i
                 WHERE i.queue_name = p_queue ORDER BY i.priority LIMIT 1)
        UNION ALL
        SELECT (SELECT i.priority FROM queue.item_live i
                 WHERE i.queue_name = p_queue AND i.priority > pr.p
                 ORDER BY i.priority LIMIT 1)
          FROM pr WHERE pr.p IS NOT NULL)
    SELECT coalesce(array_agg(pr.p), '{}') INTO v_prios FROM pr WHERE pr.p IS NOT NULL;

    SELECT count(*) INTO processing FROM queue.item_live i
     WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
       AND i.lease_expires_at > v_now;

    SELECT count(*) INTO queued FROM (
        SELECT 1 FROM unnest(v_prios) AS u(p)
         CROSS JOIN LATERAL (SELECT 1 FROM queue.item_live i
                              WHERE i.queue_name = p_queue AND i.priority = u.p
                                AND i.visible_at <= v_now
                              LIMIT v_limit) x
         LIMIT v_limit) y;

    -- between now and 'infinity': scheduled rows and current leases
    SELECT count(*) INTO v_between FROM (
        SELECT 1 FROM unnest(v_prios) AS u(p)
         CROSS JOIN LATERAL (SELECT 1 FROM queue.item_live i
                              WHERE i.queue_name = p_queue AND i.priority = u.p
                                AND i.visible_at > v_now
                                AND i.visible_at < 'infinity'
                              LIMIT v_limit + processing) x
         LIMIT v_limit + processing) y;
    scheduled := greatest(v_between - processing, 0);

    SELECT count(*) INTO on_hold FROM (
        SELECT 1 FROM unnest(v_prios) AS u(p)
         CROSS JOIN LATERAL (SELECT 1 FROM queue.item_live i
                              WHERE i.queue_name = p_queue AND i.priority = u.p
                                AND i.visible_at = 'infinity'
                              LIMIT v_limit) x
         LIMIT v_limit) y;

    -- past the limit, count the ranges from the index structure
    IF queued >= v_limit THEN
        SELECT greatest(v_limit, sum(queue._claim_range_estimate(p_queue, u.p,
                                     '-infinity', true, v_now, true)))
          INTO queued FROM unnest(v_prios) AS u(p);
    END IF;
    IF scheduled >= v_limit THEN
        SELECT greatest(v_limit, sum(queue._claim_range_estimate(p_queue, u.p,
                                     v_now, false, 'infinity', false)) - processing)
          INTO scheduled FROM unnest(v_prios) AS u(p);
    END IF;
    IF on_hold >= v_limit THEN
        SELECT greatest(v_limit, sum(queue._claim_range_estimate(p_queue, u.p,
                                     'infinity', true, 'infinity', true)))
          INTO on_hold FROM unnest(v_prios) AS u(p);
    END IF;

    -- group members waiting behind their head (45_flow.sql) are queued,
    -- or scheduled while their own run_at is ahead: they are parked at
    -- one instant of the claim index
    SELECT count(*) INTO v_parked FROM (
        SELECT 1 FROM unnest(v_prios) AS u(p)
         CROSS JOIN LATERAL (SELECT 1 FROM queue.item_live i
                              WHERE i.queue_name = p_queue AND i.priority = u.p
                                AND i.visible_at = queue._flow_parked()
                              LIMIT v_limit) x
         LIMIT v_limit) y;
    IF v_parked >= v_limit THEN
        SELECT greatest(v_limit, sum(queue._claim_range_estimate(p_queue, u.p,
                                     queue._flow_parked(), true, queue._flow_parked(), true)))
          INTO v_parked FROM unnest(v_prios) AS u(p);
    END IF;
    -- the parked whose own run_at is ahead (item_live_group_wait_run_idx:
    -- as many entries as there are such rows, at most the parked ones)
    IF v_parked > 0 THEN
        SELECT count(*) INTO v_parked_later
          FROM (SELECT 1 FROM queue.item_live i
                 WHERE i.queue_name = p_queue AND i.group_wait AND NOT i.on_hold
                   AND i.run_at > v_now
                 LIMIT v_parked) x;
    END IF;
    scheduled := greatest(scheduled - v_parked, 0) + v_parked_later;
    queued := queued + v_parked - v_parked_later;

    -- an item past its expires_at is never handed out: not claimable, so
    -- not queued, although it waits in the claim index (or in its group's
    -- line) until a sweep or a dequeue makes it a dead letter (the expiry
    -- index: as many entries as such rows, normally the few since the
    -- last sweep)
    SELECT count(*) INTO v_expired
      FROM (SELECT 1 FROM queue.item_live i
             WHERE i.queue_name = p_queue AND i.expires_at <= v_now AND NOT i.on_hold
               AND CASE WHEN i.group_wait THEN i.run_at <= v_now ELSE i.visible_at <= v_now END
             LIMIT v_limit) x;
    queued := greatest(queued - v_expired, 0);

    -- claimable the longest: the first claimable entry of each priority
    -- that is not past its expires_at, looked for among the first
    -- v_limit entries (a backlog of expired items nobody swept costs no
    -- more); when all of those are past it, the last of them bounds the
    -- age from above
    SELECT v_now - min(x.v) INTO oldest_queued_age
      FROM unnest(v_prios) AS u(p)
     CROSS JOIN LATERAL (
            SELECT coalesce(
                     (SELECT y.v
                        FROM (SELECT i.visible_at AS v, i.expires_at AS e FROM queue.item_live i
                               WHERE i.queue_name = p_queue AND i.priority = u.p
                                 AND i.visible_at <= v_now
                               ORDER BY i.visible_at LIMIT v_limit) y
                       WHERE y.e IS NULL OR y.e > v_now
                       ORDER BY y.v LIMIT 1),
                     (SELECT i.visible_at FROM queue.item_live i
                       WHERE i.queue_name = p_queue AND i.priority = u.p
                         AND i.visible_at <= v_now
                       ORDER BY i.visible_at OFFSET v_limit - 1 LIMIT 1)) AS v) x;

    SELECT count(*) INTO dead FROM queue.dead_letters d
     WHERE d.queue_name = p_queue AND d.review_status IN ('new', 'in_review');

    SELECT count(*) INTO failed_1h FROM queue.failure_log f
     WHERE f.queue_name = p_queue AND f.at > v_now - interval '1 hour';

    SELECT count(*) INTO processed_1h FROM (
        SELECT 1 FROM queue.item_done d
         WHERE d.queue_name = p_queue AND d.completed_at > v_now - interval '1 hour'
         LIMIT v_limit) x;
    IF processed_1h >= v_limit THEN
        processed_1h := greatest(v_limit,
                                 queue._done_since_estimate(p_queue, v_now - interval '1 hour'));
    END IF;

    SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY r.claimed_at - r.enqueued_at),
           percentile_cont(0.95) WITHIN GROUP (ORDER BY r.claimed_at - r.enqueued_at),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY r.completed_at - r.claimed_at),
           percentile_cont(0.95) WITHIN GROUP (ORDER BY r.completed_at - r.claimed_at)
      INTO wait_p50, wait_p95, run_p50, run_p95
      FROM (SELECT d.enqueued_at, d.claimed_at, d.completed_at FROM queue.item_done d
             WHERE d.queue_name = p_queue AND d.completed_at > v_now - interval '1 hour'
             ORDER BY d.completed_at DESC LIMIT v_recent) r;
END
$$;
COMMENT ON FUNCTION queue._stats(text) IS 'The stats of one queue (no access check); see stats()';

-- How long the oldest queued item has waited, for the sla rule of health
-- and the sla alerts: the oldest claimable item's age (stats'
-- oldest_queued_age), or, when older, that of a group member waiting in
-- line behind its head (processing, scheduled, on hold or a blocking dead
-- letter), which items and stats call queued though it is not claimable:
-- it waits from when it became due, greatest(run_at, enqueued_at), as the
-- unroutable rule counts it.  Read through item_live_group_wait_run_idx
-- (the first 1,000 due members by run_at: a member's wait starts at or
-- after its run_at), so a queue without groups pays one empty probe.
CREATE OR REPLACE FUNCTION queue._sla_wait(p_queue text, p_oldest interval)
RETURNS interval LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_member interval;
BEGIN
    SELECT now() - min(greatest(w.run_at, w.enqueued_at)) INTO v_member
      FROM (SELECT i.run_at, i.enqueued_at FROM queue.item_live i
             WHERE i.queue_name = p_queue AND i.group_wait AND NOT i.on_hold
               AND i.run_at <= now()
               AND (i.expires_at IS NULL OR i.expires_at > now())   -- never handed out
             ORDER BY i.run_at LIMIT 1000) w;
    RETURN greatest(p_oldest, v_member);    -- greatest ignores a NULL
END
$$;
COMMENT ON FUNCTION queue._sla_wait(text, interval)
    IS 'How long the oldest queued item has waited, a group member in line included, for the sla rule';
REVOKE ALL ON FUNCTION queue._sla_wait(text, interval) FROM PUBLIC;

-- The p95 run time a lease is judged stalled against (health and the
-- stalled_lease alert): the last hour's, as stats() says it, or when
-- nothing completed in the last hour, that of the queue's newest 1,000
-- completions still in the history.  A bot stuck on an item for over an
-- hour empties the last hour of completions itself; its lease must not
-- stop being stalled then.  NULL only when the history holds none.
CREATE OR REPLACE FUNCTION queue._stall_run_p95(p_queue text, p_run_p95 interval)
RETURNS interval LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_p95 interval := p_run_p95;
BEGIN
    IF v_p95 IS NULL THEN
        SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY r.completed_at - r.claimed_at)
          INTO v_p95
          FROM (SELECT d.claimed_at, d.completed_at FROM queue.item_done d
                 WHERE d.queue_name = p_queue
                 ORDER BY d.completed_at DESC LIMIT 1000) r;
    END IF;
    RETURN v_p95;
END
$$;
COMMENT ON FUNCTION queue._stall_run_p95(text, interval)
    IS 'The p95 run time stalled leases are judged by: the last hour''s, else that of the newest completions';
REVOKE ALL ON FUNCTION queue._stall_run_p95(text, interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue._health(p_queue text, OUT status text, OUT reasons text[])
RETURNS record LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp SET jit = off
SET enable_seqscan = off    -- a LIMITed seq scan may read the whole table before the queue's rows
AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    s record;
    v_pause record;
    v_level int := 0;      -- 0 ok, 1 warning, 2 critical
    v_n bigint;
    v_items bigint;
    v_workers text[];
    v_queued bigint[];
    v_from timestamptz;
    v_failed bigint;
    v_ok bigint;
    v_rule text;
    v_p95 interval;
    v_age interval;
BEGIN
    reasons := '{}';
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    SELECT * INTO s FROM queue._stats(p_queue) x;

    -- oldest queued age against the sla (a group member in line included)
    IF c.sla IS NOT NULL THEN
        v_age := queue._sla_wait(p_queue, s.oldest_queued_age);
    END IF;
    IF c.sla IS NOT NULL AND v_age > c.sla * 0.85 THEN
        v_level := 2;
        reasons := reasons || format('oldest queued item has waited %s, over 85%% of the %s sla',
                                     queue._say_run_time(v_age), queue._say_interval(c.sla));
    ELSIF c.sla IS NOT NULL AND v_age > c.sla * 0.5 THEN
        v_level := 1;
        reasons := reasons || format('oldest queued item has waited %s, over half the %s sla',
                                     queue._say_run_time(v_age), queue._say_interval(c.sla));
    END IF;

    -- a backlog that grew across the last three snapshots
    SELECT array_agg(m.queued ORDER BY m.taken_at) INTO v_queued
      FROM (SELECT x.taken_at, x.queued FROM queue.metrics_history x
             WHERE x.queue_name = p_queue ORDER BY x.taken_at DESC LIMIT 3) m;
    IF cardinality(v_queued) = 3 AND v_queued[1] < v_queued[2] AND v_queued[2] < v_queued[3] THEN
        v_level := greatest(v_level, 1);
        reasons := reasons || format('backlog grew across the last three snapshots (%s, %s, %s queued)',
                                     v_queued[1], v_queued[2], v_queued[3]);
    END IF;

    -- leases held past 3x the p95 run time (the newest completions' when
    -- none completed in the last hour)
    v_p95 := queue._stall_run_p95(p_queue, s.run_p95);
    IF v_p95 IS NOT NULL THEN
        SELECT count(*) INTO v_n FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_expires_at > now()
           AND i.claimed_at < now() - v_p95 * 3;
        IF v_n > 0 THEN
            v_level := greatest(v_level, 1);
            reasons := reasons || format('%s lease%s held longer than 3x the p95 run time (%s)', v_n,
                                         CASE WHEN v_n > 1 THEN 's' ELSE '' END,
                                         queue._say_run_time(v_p95));
        END IF;
    END IF;

    -- offline workers holding its items
    SELECT array_agg(DISTINCT i.worker ORDER BY i.worker), count(*) INTO v_workers, v_items
      FROM queue.item_live i
      JOIN queue.worker_registry w ON w.worker = i.worker
     WHERE i.queue_name = p_queue AND i.worker IS NOT NULL AND i.lease_token IS NOT NULL
       AND w.last_seen < now() - make_interval(secs => queue._worker_offline_after());
    IF v_items > 0 THEN
        v_level := greatest(v_level, 1);
        reasons := reasons || format('offline worker%s %s hold%s %s item%s',
                                     CASE WHEN cardinality(v_workers) > 1 THEN 's' ELSE '' END,
                                     array_to_string(v_workers, ', '),
                                     CASE WHEN cardinality(v_workers) > 1 THEN '' ELSE 's' END,
                                     v_items, CASE WHEN v_items > 1 THEN 's' ELSE '' END);
    END IF;

    -- failure rate over half the breaker threshold, counted as the breaker does
    IF c.breaker_threshold IS NOT NULL THEN
        v_from := greatest(now() - c.breaker_window, c.breaker_since);
        SELECT o.failed, o.outcomes - o.failed INTO v_failed, v_ok
          FROM queue._breaker_outcomes(p_queue, v_from, 0) o;
        IF v_failed + v_ok >= c.breaker_min_samples
           AND v_failed::float8 / (v_failed + v_ok) > c.breaker_threshold / 2 THEN
            v_level := greatest(v_level, 1);
            reasons := reasons || format('%s%% of %s outcomes failed in %s, over half the breaker threshold (%s%%)',
                                         floor(100.0 * v_failed / (v_failed + v_ok)), v_failed + v_ok,
                                         queue._say_interval(c.breaker_window),
                                         trim_scale(round((100 * c.breaker_threshold)::numeric, 1)));
        END IF;
    END IF;

    -- capacity: bots busy (capacity_short) or bots idle (workers_idle);
    -- routing: items no active bot can take (unroutable, 45_flow.sql)
    FOR v_rule IN
        SELECT r.reason FROM queue._capacity_rules(p_queue, s.queued, s.oldest_queued_age,
                                                   s.processed_1h) r
        UNION ALL
        SELECT f.reason FROM queue._flow_rules(p_queue) f
    LOOP
        v_level := greatest(v_level, 1);
        reasons := reasons || v_rule;
    END LOOP;

    SELECT * INTO v_pause FROM queue._pause_state(c) p;
    IF v_pause.paused THEN
        status := 'paused';
        reasons := format('paused: %s', coalesce(v_pause.pause_reason, 'no reason given')) || reasons;
    ELSE
        status := (ARRAY['ok', 'warning', 'critical'])[v_level + 1];
    END IF;
END
$$;
COMMENT ON FUNCTION queue._health(text) IS 'The health of one queue (no access check); see health()';

CREATE OR REPLACE FUNCTION queue._sweep_alerts(p_queue text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    s record;
    v_age interval;
    v_n bigint;
    v_workers text[];
    v_kinds text[];
    v_rule record;
    v_cutoff timestamptz := now() - make_interval(secs => queue._worker_offline_after());
    v_checked_until timestamptz;
    v_offline text[];
    v_message text;
    v_details jsonb;
    v_p95 interval;
BEGIN
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO s FROM queue._stats(p_queue) x;

    -- sla_critical replaces sla_warning (and the other way round); the
    -- oldest queued item may be a group member in line (_sla_wait)
    IF c.sla IS NOT NULL THEN
        v_age := queue._sla_wait(p_queue, s.oldest_queued_age);
    END IF;
    IF c.sla IS NOT NULL AND v_age > c.sla * 0.85 THEN
        PERFORM queue._clear_alert(p_queue, 'sla_warning');
        PERFORM queue._raise_alert(p_queue, 'sla_critical',
            format('queue %s: oldest queued item has waited %s, over 85%% of the %s sla',
                   p_queue, queue._say_run_time(v_age), queue._say_interval(c.sla)),
            jsonb_build_object('oldest_queued_age', extract(epoch FROM v_age),
                               'sla', extract(epoch FROM c.sla), 'queued', s.queued));
    ELSIF c.sla IS NOT NULL AND v_age > c.sla * 0.5 THEN
        PERFORM queue._clear_alert(p_queue, 'sla_critical');
        PERFORM queue._raise_alert(p_queue, 'sla_warning',
            format('queue %s: oldest queued item has waited %s, over half the %s sla',
                   p_queue, queue._say_run_time(v_age), queue._say_interval(c.sla)),
            jsonb_build_object('oldest_queued_age', extract(epoch FROM v_age),
                               'sla', extract(epoch FROM c.sla), 'queued', s.queued));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'sla_critical');
        PERFORM queue._clear_alert(p_queue, 'sla_warning');
    END IF;

    -- breaker_open: raised by the breaker itself; closed by probe or resume
    IF c.breaker_state <> 'closed' THEN
        PERFORM queue._raise_alert(p_queue, 'breaker_open',
                                   coalesce(c.breaker_reason, 'circuit breaker open'),
                                   jsonb_build_object('opened_at', c.breaker_opened_at));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'breaker_open');
    END IF;

    -- worker_offline: an offline worker held one of the queue's items in
    -- the last day (holds one now, or failed or lost one since).  Read:
    -- the workers offline at the previous check, and those whose last
    -- sign of life fell after its range (see offline_check above); a
    -- worker that held nothing of the queue when it went offline cannot
    -- come to hold anything later.
    SELECT o.checked_until, o.workers INTO v_checked_until, v_offline
      FROM queue.offline_check o WHERE o.queue_name = p_queue;
    SELECT array_agg(w.worker ORDER BY w.worker) INTO v_workers
      FROM (SELECT x.worker, x.last_seen FROM queue.worker_registry x
             WHERE x.worker = ANY (v_offline)
            UNION
            SELECT x.worker, x.last_seen FROM queue.worker_registry x
             WHERE x.last_seen >= coalesce(v_checked_until, '-infinity')
               AND x.last_seen < v_cutoff) w
     WHERE w.last_seen < v_cutoff
       AND (EXISTS (SELECT 1 FROM queue.item_live i
                     WHERE i.queue_name = p_queue AND i.worker = w.worker)
            OR EXISTS (SELECT 1 FROM queue.failure_log f
                        WHERE f.queue_name = p_queue AND f.at > now() - interval '1 day'
                          AND f.worker = w.worker));
    INSERT INTO queue.offline_check AS o (queue_name, checked_until, workers)
    VALUES (p_queue, least(v_cutoff, queue._open_since()), coalesce(v_workers, '{}'))
    ON CONFLICT ON CONSTRAINT offline_check_pkey DO UPDATE
       SET checked_until = EXCLUDED.checked_until, workers = EXCLUDED.workers;
    IF v_workers IS NOT NULL THEN
        -- a scale-down may take hundreds of bots offline at once: the
        -- message names ten, the details a hundred, and both say how many
        v_message := queue._excerpt(
            format('queue %s: offline worker%s %s%s held its items', p_queue,
                   CASE WHEN cardinality(v_workers) > 1 THEN 's' ELSE '' END,
                   array_to_string(v_workers[1:10], ', '),
                   CASE WHEN cardinality(v_workers) > 10
                        THEN format(' and %s more', cardinality(v_workers) - 10) ELSE '' END),
            1000);
        v_details := jsonb_build_object('workers', to_jsonb(v_workers[1:100]),
                                        'offline', cardinality(v_workers));
        -- an open alert names the workers offline now (one open alert per
        -- kind: the update sends no new NOTIFY)
        IF NOT queue._raise_alert(p_queue, 'worker_offline', v_message, v_details) THEN
            UPDATE queue.alerts a SET message = v_message, details = v_details
             WHERE a.queue_name = p_queue AND a.kind = 'worker_offline' AND a.cleared_at IS NULL
               AND (a.message IS DISTINCT FROM v_message OR a.details IS DISTINCT FROM v_details);
        END IF;
    ELSE
        PERFORM queue._clear_alert(p_queue, 'worker_offline');
    END IF;

    -- stalled_lease: a current lease held past 3x the p95 run time (the
    -- newest completions' when none completed in the last hour)
    v_n := 0;
    v_p95 := queue._stall_run_p95(p_queue, s.run_p95);
    IF v_p95 IS NOT NULL THEN
        SELECT count(*) INTO v_n FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_expires_at > now()
           AND i.claimed_at < now() - v_p95 * 3;
    END IF;
    IF v_n > 0 THEN
        PERFORM queue._raise_alert(p_queue, 'stalled_lease',
            format('queue %s: %s lease%s held longer than 3x the p95 run time (%s)', p_queue, v_n,
                   CASE WHEN v_n > 1 THEN 's' ELSE '' END, queue._say_run_time(v_p95)),
            jsonb_build_object('leases', v_n, 'run_p95', extract(epoch FROM v_p95)));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'stalled_lease');
    END IF;

    -- capacity_short and workers_idle: bots busy or bots idle; unroutable:
    -- items no active bot has the labels for (45_flow.sql)
    v_kinds := '{}';
    FOR v_rule IN
        SELECT r.kind, r.reason, r.details
          FROM queue._capacity_rules(p_queue, s.queued, s.oldest_queued_age, s.processed_1h) r
        UNION ALL
        SELECT f.kind, f.reason, f.details FROM queue._flow_rules(p_queue) f
    LOOP
        PERFORM queue._raise_alert(p_queue, v_rule.kind, format('queue %s: %s', p_queue, v_rule.reason),
                                   v_rule.details);
        v_kinds := v_kinds || v_rule.kind;
    END LOOP;
    PERFORM queue._clear_alert(p_queue, k.kind)
       FROM unnest(ARRAY['capacity_short', 'workers_idle', 'unroutable']) AS k(kind)
      WHERE k.kind <> ALL (v_kinds);

    -- dead_letters: open while dead letters wait for a first review
    PERFORM 1 FROM queue.dead_letters d
     WHERE d.queue_name = p_queue AND d.review_status = 'new' LIMIT 1;
    IF FOUND THEN
        PERFORM queue._raise_alert(p_queue, 'dead_letters',
                                   format('queue %s has new dead letters', p_queue),
                                   jsonb_build_object('open', s.dead));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'dead_letters');
    END IF;
END
$$;
COMMENT ON FUNCTION queue._sweep_alerts(text) IS 'Raises and clears the alerts of one queue';

CREATE OR REPLACE FUNCTION queue._claim_gate(c queue.queue_config)
RETURNS text LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    -- operator before breaker: a manual pause shuts the gate, probes included
    RETURN CASE
             WHEN c.paused THEN 'paused'
             -- a probe whose lease ran out failed: cooling down again
             WHEN c.breaker_state = 'probing' AND c.probe_expires_at <= now()
                  AND now() < c.probe_expires_at + c.breaker_cooldown THEN 'breaker_open'
             WHEN c.breaker_state = 'probing' THEN 'half_open'
             WHEN c.breaker_state = 'open' AND c.breaker_opened_at + c.breaker_cooldown <= now()
               THEN 'half_open'
             WHEN c.breaker_state = 'open' THEN 'breaker_open'
             ELSE 'open'
           END;
END
$$;
COMMENT ON FUNCTION queue._claim_gate(queue.queue_config)
    IS 'Whether dequeue hands out items of a queue now: open, paused, breaker_open or half_open';


