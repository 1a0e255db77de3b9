-- Capacity: queue.desired_workers() for autoscalers, and the capacity_short
-- and workers_idle rules of health() and sweep's alerts.

CREATE OR REPLACE FUNCTION queue._idle_after() RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT interval '1 min'$$;
COMMENT ON FUNCTION queue._idle_after() IS 'Claimable this long with no claims: the queue''s workers are idle';

CREATE OR REPLACE FUNCTION queue._claim_gate(c queue.queue_config)
RETURNS text LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    RETURN CASE
             -- a probe whose lease ran out failed: cooling down again
             WHEN c.breaker_state = 'probing' AND c.probe_expires_at <= now()
                  AND now() < c.probe_expires_at + c.breaker_cooldown THEN 'breaker_open'
             WHEN c.breaker_state = 'probing' THEN 'half_open'
             WHEN c.breaker_state = 'open' AND c.breaker_opened_at + c.breaker_cooldown <= now()
               THEN 'half_open'
             WHEN c.breaker_state = 'open' THEN 'breaker_open'
             WHEN c.paused THEN 'paused'
             ELSE 'open'
           END;
END
$$;
COMMENT ON FUNCTION queue._claim_gate(queue.queue_config)
    IS 'Whether dequeue hands out items of a queue now: open, paused, breaker_open or half_open';

CREATE OR REPLACE FUNCTION queue.desired_workers(queue_name text, items_per_worker int DEFAULT 1)
RETURNS int LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(desired_workers.queue_name);
    c queue.queue_config;
    v_gate text;
    v_demand bigint;
    v_blocked bigint;
BEGIN
    IF desired_workers.items_per_worker IS NULL THEN
        RAISE EXCEPTION 'items_per_worker must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF desired_workers.items_per_worker < 1 THEN
        RAISE EXCEPTION 'items_per_worker must be at least 1, not %', desired_workers.items_per_worker
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass how many items one worker processes at once, for example its capacity.';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = v_name;
    v_gate := queue._claim_gate(c);
    IF v_gate IN ('paused', 'breaker_open') THEN
        RETURN 0;
    END IF;
    SELECT s.queued + s.processing INTO v_demand FROM queue._stats(v_name) s;
    -- items that cannot be claimed need no worker: members waiting behind
    -- their group's head that stats counts as queued (due, not on hold:
    -- those due later are scheduled and those held on hold, neither in
    -- the demand; those past their expires_at stats leaves out itself),
    -- and the items of a limited key beyond its max_in_flight (each read
    -- through its partial index)
    SELECT count(*) INTO v_blocked FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.group_wait AND NOT i.on_hold
       AND i.run_at <= now() AND (i.expires_at IS NULL OR i.expires_at > now());
    v_demand := v_demand - v_blocked;
    -- nor do the items stats counts as queued that dequeue never hands
    -- out but buries when it meets them (as sweep does): lost leases
    -- whose attempts are spent or whose cancel was requested (through the
    -- worker index, among the queue's leases); stats counts no item past
    -- its expires_at as queued
    SELECT count(*) INTO v_blocked FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.worker IS NOT NULL
       AND i.lease_token IS NOT NULL AND i.lease_expires_at <= now()
       AND (i.attempt >= i.max_attempts OR i.cancel_requested_at IS NOT NULL)
       AND (i.expires_at IS NULL OR i.expires_at > now());
    v_demand := v_demand - v_blocked;
    IF c.flow_limits THEN
        SELECT coalesce(sum(greatest(x.n - l.max_in_flight, 0)), 0) INTO v_blocked
          FROM queue.flow_limit l
         CROSS JOIN LATERAL (
                SELECT count(*) AS n FROM queue.item_live i
                 WHERE i.queue_name = v_name AND i.limit_key = l.limit_key
                   AND NOT i.group_wait AND NOT i.on_hold
                   -- claimable (but those never handed out, left out above),
                   -- or processing
                   AND ((i.visible_at <= now()
                         AND (i.expires_at IS NULL OR i.expires_at > now())
                         AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at <= now()
                                  AND (i.attempt >= i.max_attempts
                                       OR i.cancel_requested_at IS NOT NULL)))
                        OR (i.worker IS NOT NULL AND i.lease_expires_at > now()))) x
         WHERE l.queue_name = v_name AND l.max_in_flight IS NOT NULL;
        v_demand := v_demand - v_blocked;
    END IF;
    v_demand := greatest(v_demand, 0);
    IF c.max_in_flight IS NOT NULL THEN
        v_demand := least(v_demand, c.max_in_flight);
    END IF;
    IF v_gate = 'half_open' THEN
        v_demand := least(v_demand, 1);     -- the probe
    END IF;
    RETURN least(ceil(v_demand::numeric / desired_workers.items_per_worker), 2147483647)::int;
END
$$;
COMMENT ON FUNCTION queue.desired_workers(text, int)
    IS 'Workers the queue needs now: claimable plus processing items over items_per_worker, within max_in_flight; 0 while paused or the breaker is open';

CREATE OR REPLACE FUNCTION queue._capacity_rules(p_queue text, p_queued bigint, p_oldest interval,
                                      p_processed_1h bigint,
                                      OUT kind text, OUT reason text, OUT details jsonb)
RETURNS SETOF record LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    v_online timestamptz := now() - make_interval(secs => queue._worker_offline_after());
    v_idle interval := queue._idle_after();
    v_workers bigint;
    v_full bigint;
    v_needed bigint;
    w record;
    v_draining boolean;
    v_capacity int;
    v_held bigint;
BEGIN
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    IF NOT FOUND OR queue._claim_gate(c) <> 'open' OR p_oldest IS NULL THEN
        RETURN;
    END IF;

    -- capacity_short: past half the sla, every live holder at capacity
    -- (a draining worker, or one in a maintenance window, takes nothing new),
    -- and room under the queue's max_in_flight: while that is reached,
    -- dequeue hands another worker nothing, so more workers would not help
    IF c.sla IS NOT NULL AND p_oldest > c.sla * 0.5
       AND (c.max_in_flight IS NULL
            OR (SELECT count(*) FROM (SELECT 1 FROM queue.item_live i
                                       WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
                                         AND i.lease_expires_at > now()
                                       LIMIT c.max_in_flight) x) < c.max_in_flight) THEN
        -- The holders are read from this queue's items, then each one's
        -- leases are counted over all queues in a statement of its own:
        -- on Citus the queues are on several nodes, and a join of the
        -- two (a lateral count per holder) cannot be planned there.
        v_workers := 0;
        v_full := 0;
        FOR w IN SELECT DISTINCT i.worker FROM queue.item_live i
                  WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
                    AND i.lease_token IS NOT NULL AND i.lease_expires_at > now() LOOP
            SELECT r.draining, r.capacity INTO v_draining, v_capacity
              FROM queue.worker_registry r
             WHERE r.worker = w.worker AND r.last_seen >= v_online;
            CONTINUE WHEN NOT FOUND;
            v_workers := v_workers + 1;
            IF v_draining
               OR EXISTS (SELECT 1 FROM queue.maintenance_window m
                           WHERE m.worker = w.worker
                             AND m.starts_at <= now() AND m.ends_at > now()) THEN
                v_full := v_full + 1;
                CONTINUE;
            END IF;
            SELECT count(*) INTO v_held
              FROM queue.queue_config q
              JOIN queue.item_live i ON i.queue_name = q.queue_name
             WHERE i.worker = w.worker
               AND i.lease_token IS NOT NULL AND i.lease_expires_at > now();
            IF v_held >= coalesce(v_capacity, 1) THEN
                v_full := v_full + 1;
            END IF;
        END LOOP;
        IF v_workers > 0 AND v_full = v_workers THEN
            -- each worker's share of the last hour's rate, over the sla
            IF p_processed_1h > 0 THEN
                v_needed := ceil(p_queued::numeric * v_workers * 3600
                                 / (p_processed_1h * extract(epoch FROM c.sla)));
                v_needed := greatest(v_needed - v_workers, 1);
            END IF;
            kind := 'capacity_short';
            reason := format('capacity short: all %s worker%s holding its items %s at capacity; %s',
                             v_workers, CASE WHEN v_workers > 1 THEN 's' ELSE '' END,
                             CASE WHEN v_workers > 1 THEN 'are' ELSE 'is' END,
                             CASE WHEN v_needed IS NULL
                                  THEN 'no item was processed in the last hour to size the shortfall'
                                  ELSE format('about %s more worker%s would clear the %s queued item%s within the %s sla at the last hour''s rate',
                                              v_needed, CASE WHEN v_needed > 1 THEN 's' ELSE '' END,
                                              p_queued, CASE WHEN p_queued > 1 THEN 's' ELSE '' END,
                                              queue._say_interval(c.sla))
                             END);
            details := jsonb_build_object('workers', v_workers, 'more_workers', v_needed,
                                          'queued', p_queued, 'processed_1h', p_processed_1h,
                                          'oldest_queued_age', extract(epoch FROM p_oldest),
                                          'sla', extract(epoch FROM c.sla));
            RETURN NEXT;
        END IF;
    END IF;

    -- workers_idle: claimable for a while, nobody holding or claiming
    IF p_oldest > v_idle
       AND NOT EXISTS (SELECT 1 FROM queue.item_live i
                        JOIN queue.worker_registry r ON r.worker = i.worker
                       WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
                         AND ((i.lease_token IS NOT NULL AND i.lease_expires_at > now()
                               AND r.last_seen >= v_online)
                              OR i.claimed_at > now() - v_idle))
       AND NOT EXISTS (SELECT 1 FROM queue.item_done d
                        WHERE d.queue_name = p_queue AND d.completed_at > now() - v_idle)
       AND NOT EXISTS (SELECT 1 FROM queue.failure_log f
                        WHERE f.queue_name = p_queue AND f.at > now() - v_idle
                          AND f.kind IN ('transient', 'permanent'))
    THEN
        SELECT count(*) INTO v_workers FROM queue.worker_registry r
         WHERE r.last_seen >= v_online AND NOT r.draining
           AND (r.queues IS NULL OR p_queue = ANY (r.queues));
        kind := 'workers_idle';
        reason := format('workers idle: items have been claimable for %s and no worker claimed one in the last %s (%s)',
                         queue._say_duration(p_oldest), queue._say_interval(v_idle),
                         CASE WHEN v_workers = 0 THEN 'no worker is online'
                              ELSE format('%s worker%s online', v_workers,
                                          CASE WHEN v_workers > 1 THEN 's' ELSE '' END) END);
        details := jsonb_build_object('queued', p_queued, 'online_workers', v_workers,
                                      'oldest_queued_age', extract(epoch FROM p_oldest));
        RETURN NEXT;
    END IF;
END
$$;
COMMENT ON FUNCTION queue._capacity_rules(text, bigint, interval, bigint)
    IS 'The capacity_short and workers_idle rules of one queue that hold now, with reasons and details';

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
BEGIN
    reasons := '{}';
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    SELECT * INTO s FROM queue._stats(p_queue) x;

    -- oldest queued age against the sla
    IF c.sla IS NOT NULL AND s.oldest_queued_age > c.sla * 0.85 THEN
        v_level := 2;
        reasons := reasons || format('oldest queued item has waited %s, over 85%% of the %s sla',
                                     queue._say_run_time(s.oldest_queued_age), queue._say_interval(c.sla));
    ELSIF c.sla IS NOT NULL AND s.oldest_queued_age > c.sla * 0.5 THEN
        v_level := 1;
        reasons := reasons || format('oldest queued item has waited %s, over half the %s sla',
                                     queue._say_run_time(s.oldest_queued_age), queue._say_interval(c.sla));
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

    -- leases held past 3x the p95 run time
    IF s.run_p95 IS NOT NULL THEN
        SELECT count(*) INTO v_n FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_expires_at > now()
           AND i.claimed_at < now() - s.run_p95 * 3;
        IF v_n > 0 THEN
            v_level := greatest(v_level, 1);
            reasons := reasons || format('%s lease%s held longer than 3x the p95 run time (%s)', v_n,
                                         CASE WHEN v_n > 1 THEN 's' ELSE '' END,
                                         queue._say_duration(s.run_p95));
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
BEGIN
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO s FROM queue._stats(p_queue) x;

    -- sla_critical replaces sla_warning (and the other way round)
    v_age := s.oldest_queued_age;
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
    -- the last day (holds one now, or failed or lost one since)
    SELECT array_agg(w.worker ORDER BY w.worker) INTO v_workers
      FROM queue.worker_registry w
     WHERE w.last_seen < now() - make_interval(secs => queue._worker_offline_after())
       AND (EXISTS (SELECT 1 FROM queue.item_live i
                     WHERE i.queue_name = p_queue AND i.worker = w.worker)
            OR EXISTS (SELECT 1 FROM queue.failure_log f
                        WHERE f.queue_name = p_queue AND f.at > now() - interval '1 day'
                          AND f.worker = w.worker));
    IF v_workers IS NOT NULL THEN
        -- a scale-down may take hundreds of bots offline at once: the
        -- message names ten, the details a hundred, and both say how many
        PERFORM queue._raise_alert(p_queue, 'worker_offline',
            format('queue %s: offline worker%s %s%s held its items', p_queue,
                   CASE WHEN cardinality(v_workers) > 1 THEN 's' ELSE '' END,
                   array_to_string(v_workers[1:10], ', '),
                   CASE WHEN cardinality(v_workers) > 10
                        THEN format(' and %s more', cardinality(v_workers) - 10) ELSE '' END),
            jsonb_build_object('workers', to_jsonb(v_workers[1:100]),
                               'offline', cardinality(v_workers)));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'worker_offline');
    END IF;

    -- stalled_lease: a current lease held past 3x the p95 run time
    v_n := 0;
    IF s.run_p95 IS NOT NULL THEN
        SELECT count(*) INTO v_n FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_expires_at > now()
           AND i.claimed_at < now() - s.run_p95 * 3;
    END IF;
    IF v_n > 0 THEN
        PERFORM queue._raise_alert(p_queue, 'stalled_lease',
            format('queue %s: %s lease%s held longer than 3x the p95 run time (%s)', p_queue, v_n,
                   CASE WHEN v_n > 1 THEN 's' ELSE '' END, queue._say_duration(s.run_p95)),
            jsonb_build_object('leases', v_n, 'run_p95', extract(epoch FROM s.run_p95)));
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

-- New functions start executable by PUBLIC; as in schema/90_security.sql.
REVOKE ALL ON FUNCTION queue._idle_after(), queue._claim_gate(queue.queue_config),
    queue.desired_workers(text, int), queue._capacity_rules(text, bigint, interval, bigint)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue.desired_workers(text, int)
   TO queue_reader, queue_producer, queue_worker, queue_admin;
