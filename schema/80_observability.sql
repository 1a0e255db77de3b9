-- ======================================================================
-- Observability: stats, health, prometheus
-- ======================================================================
--
-- stats() must stay cheap enough to poll every few seconds on a queue of
-- ten million items, so queue._stats() never reads a queue's whole
-- backlog:
--
--   * The claim index (queue_name, priority, visible_at, item_id) orders
--     each priority by visible_at, and a live row's state follows from
--     visible_at: <= now() is claimable (an expired lease included),
--     'infinity' is on hold, anything between is scheduled or leased.  A
--     loose index scan finds the priorities present (one probe each), and
--     each state is then an index-only range count per priority; the
--     oldest claimable row is the first entry of each priority's range.
--   * processing comes from the partial worker index (leases only).
--     (The LIMIT inside each lateral subquery keeps it from being
--     flattened into a join that the planner may run as a sequential scan.)
--   * Each of queued, scheduled, on_hold and processed_1h is counted
--     exactly (MVCC) up to queue._stats_exact_limit() rows.  Past that the
--     range is counted from the index's structure (estimate.c): the
--     level-1 pages list the range's leaf pages, and their entries are
--     counted, or sampled when there are more than 100 leaves.  That count
--     includes entries of rows deleted but not yet vacuumed and of
--     uncommitted inserts, and is never reported below the limit.
--   * Every count is an index scan (enable_seqscan is off in _stats): on
--     a table shared by many queues, a LIMITed sequential scan the
--     planner may prefer reads everything before the queue's rows.
--   * The percentiles use the newest 1,000 completions of the last hour
--     (index on queue_name, completed_at).  failed_1h and dead are
--     index-only counts of the failure_log and the open dead letters.
--
-- Measured: see README, Performance.

-- Each queue's own alert channel: queue_alerts carries every queue's
-- alerts, and LISTEN is open to every role on every channel name, so a
-- tenant's alerts are kept from other tenants by a channel name they
-- cannot know: 'queue_alerts_' and 32 random hex digits, made on the first
-- alert_channel() call and told only to roles that may read the queue.
-- _raise_alert notifies it besides queue_alerts; drop_queue forgets it, so
-- a queue created again under the name gets a new one.
CREATE TABLE queue.alert_channels (
    queue_name text NOT NULL PRIMARY KEY,
    channel    text NOT NULL
);
COMMENT ON TABLE queue.alert_channels IS 'Per queue: the secret channel its alerts are also sent on';

CREATE FUNCTION queue.alert_channel(queue_name text)
RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(alert_channel.queue_name);
    v_channel text;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    -- NB: a look first: a channel made before is told in a read-only
    -- transaction too (a hot standby, default_transaction_read_only)
    SELECT a.channel INTO v_channel FROM queue.alert_channels a WHERE a.queue_name = v_name;
    IF v_channel IS NULL THEN
        IF current_setting('transaction_read_only')::boolean THEN
            RAISE EXCEPTION 'queue "%" has no alert channel yet', v_name
                USING ERRCODE = 'read_only_sql_transaction',
                      DETAIL = 'The first alert_channel() call of a queue makes its channel, a write.',
                      HINT = 'Call alert_channel() once in a read-write transaction (on the primary).';
        END IF;
        INSERT INTO queue.alert_channels AS a (queue_name, channel)
        VALUES (v_name, 'queue_alerts_' || replace(gen_random_uuid()::text, '-', ''))
        ON CONFLICT ON CONSTRAINT alert_channels_pkey DO NOTHING;
        SELECT a.channel INTO v_channel FROM queue.alert_channels a WHERE a.queue_name = v_name;
    END IF;
    RETURN v_channel;
END
$$;
COMMENT ON FUNCTION queue.alert_channel(text)
    IS 'The channel to LISTEN on for one queue''s alerts (rows as JSON, like queue_alerts), for roles that may read the queue';

-- Above this many rows a state's count is estimated.
CREATE FUNCTION queue._stats_exact_limit() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT 1000::bigint';
COMMENT ON FUNCTION queue._stats_exact_limit() IS 'Counts in stats() are exact up to this many rows, counted from the index structure above';

-- Range counts from the index structure (src/estimate.c).
CREATE FUNCTION queue._claim_range_estimate(queue_name text, priority int,
    lo timestamptz, lo_inclusive boolean, hi timestamptz, hi_inclusive boolean)
RETURNS bigint LANGUAGE c STRICT STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'queue_claim_range_estimate';
COMMENT ON FUNCTION queue._claim_range_estimate(text, int, timestamptz, boolean, timestamptz, boolean)
    IS 'Claim-index entries of one queue and priority with visible_at between lo and hi';

CREATE FUNCTION queue._done_since_estimate(queue_name text, since timestamptz)
RETURNS bigint LANGUAGE c STRICT STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'queue_done_since_estimate';
COMMENT ON FUNCTION queue._done_since_estimate(text, timestamptz)
    IS 'History-index entries of one queue completed after since';

-- The stats of one queue, without access checks.
CREATE FUNCTION queue._stats(p_queue text,
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

-- stats() and health() return these row types: PL/pgSQL refuses a result
-- column named like the queue_name argument, so RETURNS TABLE cannot be used.
CREATE TYPE queue.queue_stats AS (
    queue_name text, queued bigint, scheduled bigint, processing bigint, on_hold bigint,
    dead bigint, oldest_queued_age interval, processed_1h bigint, failed_1h bigint,
    wait_p50 interval, wait_p95 interval, run_p50 interval, run_p95 interval, paused boolean);
COMMENT ON TYPE queue.queue_stats IS 'A row of queue.stats()';

CREATE TYPE queue.queue_health AS (queue_name text, status text, reasons text[]);
COMMENT ON TYPE queue.queue_health IS 'A row of queue.health()';

CREATE FUNCTION queue.stats(queue_name text DEFAULT NULL)
RETURNS SETOF queue.queue_stats
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text;
BEGIN
    IF stats.queue_name IS NOT NULL THEN
        v_name := queue._check_name(stats.queue_name);
        PERFORM queue._check_access(v_name, 'reader');
        RETURN QUERY SELECT v_name, s.* FROM queue._stats(v_name) s;
        RETURN;
    END IF;
    FOR v_name IN
        SELECT c.queue_name FROM queue.queue_config c
         WHERE queue._can_read(c.queue_name) ORDER BY c.queue_name
    LOOP
        RETURN QUERY SELECT v_name, s.* FROM queue._stats(v_name) s;
    END LOOP;
END
$$;
COMMENT ON FUNCTION queue.stats(text)
    IS 'Live numbers of one queue, or of every queue the caller may read (NULL); cheap to poll';

-- ----------------------------------------------------------------------
-- Health
-- ----------------------------------------------------------------------

-- How long the oldest queued item has waited, for the sla rule of health
-- and the sla alerts: the oldest claimable item's age (stats'
-- oldest_queued_age), or, when older, that of a group member waiting in
-- line behind its head (processing, scheduled, on hold or a blocking dead
-- letter), which items and stats call queued though it is not claimable:
-- it waits from when it became due, greatest(run_at, enqueued_at), as the
-- unroutable rule counts it.  Read through item_live_group_wait_run_idx
-- (the first 1,000 due members by run_at: a member's wait starts at or
-- after its run_at), so a queue without groups pays one empty probe.
CREATE FUNCTION queue._sla_wait(p_queue text, p_oldest interval)
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

-- The p95 run time a lease is judged stalled against (health and the
-- stalled_lease alert): the last hour's, as stats() says it, or when
-- nothing completed in the last hour, that of the queue's newest 1,000
-- completions still in the history.  A bot stuck on an item for over an
-- hour empties the last hour of completions itself; its lease must not
-- stop being stalled then.  NULL only when the history holds none.
CREATE FUNCTION queue._stall_run_p95(p_queue text, p_run_p95 interval)
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

CREATE FUNCTION queue._health(p_queue text, OUT status text, OUT reasons text[])
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

CREATE FUNCTION queue.health(queue_name text DEFAULT NULL)
RETURNS SETOF queue.queue_health
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text;
BEGIN
    IF health.queue_name IS NOT NULL THEN
        v_name := queue._check_name(health.queue_name);
        PERFORM queue._check_access(v_name, 'reader');
        RETURN QUERY SELECT v_name, h.status, h.reasons FROM queue._health(v_name) h;
        RETURN;
    END IF;
    FOR v_name IN
        SELECT c.queue_name FROM queue.queue_config c
         WHERE queue._can_read(c.queue_name) ORDER BY c.queue_name
    LOOP
        RETURN QUERY SELECT v_name, h.status, h.reasons FROM queue._health(v_name) h;
    END LOOP;
END
$$;
COMMENT ON FUNCTION queue.health(text)
    IS 'ok, warning, critical or paused with the reasons, for one queue or every queue the caller may read';

-- ----------------------------------------------------------------------
-- Capacity: desired_workers and the capacity rules of health and alerts
-- ----------------------------------------------------------------------
--
-- An autoscaler (KEDA's PostgreSQL scaler, a dispatcher) asks how many
-- workers a queue needs now: its claimable plus processing items, over
-- the items one worker handles, bounded by what the claim gate lets out
-- (max_in_flight, a pause, an open breaker; one probe while half-open, so
-- that a fleet scaled to zero still runs the probe that closes it).
--
-- health() and sweep's alerts tell "queue deep, bots busy" from "queue
-- deep, bots idle":
--   * capacity_short: the oldest queued item is past half the sla and
--     every live worker holding one of the queue's items is at capacity
--     (holds as many current leases, in all queues, as its registered
--     capacity, or one without a capacity; draining or a maintenance
--     window now counts as full), and the queue's max_in_flight, if any,
--     is not reached (else a new worker would get nothing).
--   * workers_idle: items have been claimable for queue._idle_after()
--     while no live worker holds a current lease of the queue and nobody
--     claimed, completed or failed one of its items in that time.
-- Both are skipped while the claim gate is shut (paused, breaker open or
-- half-open): then nobody should be claiming.  The expensive parts run
-- only when the cheap condition on the oldest queued item holds.

-- How long items may be claimable with nobody claiming before the queue's
-- workers count as idle: a few of a bot's poll intervals.
CREATE FUNCTION queue._idle_after() RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT interval '1 min'$$;
COMMENT ON FUNCTION queue._idle_after() IS 'Claimable this long with no claims: the queue''s workers are idle';

-- What dequeue would hand out now, as a word: 'open', 'paused' (by an
-- operator), 'breaker_open' (cooling down), 'half_open' (one probe).
CREATE FUNCTION queue._claim_gate(c queue.queue_config)
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

CREATE FUNCTION queue.desired_workers(queue_name text, items_per_worker int DEFAULT 1)
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

-- The capacity rules of one queue (no access check): one row per rule
-- that holds, with its reason (for health) and details (for the alert).
-- The caller passes the queue's stats.
CREATE FUNCTION queue._capacity_rules(p_queue text, p_queued bigint, p_oldest interval,
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

-- ----------------------------------------------------------------------
-- Prometheus
-- ----------------------------------------------------------------------

-- A label value in the exposition format: backslash, double quote and
-- newline escaped.
CREATE FUNCTION queue._prom_label(v text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '"' || replace(replace(replace(v, E'\\', E'\\\\'), '"', E'\\"'), E'\n', E'\\n') || '"'
$$;
COMMENT ON FUNCTION queue._prom_label(text) IS 'Quotes and escapes a Prometheus label value';

-- A sample value: NULL is NaN, intervals are seconds.
CREATE FUNCTION queue._prom_value(v numeric) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(v::text, 'NaN')
$$;
COMMENT ON FUNCTION queue._prom_value(numeric) IS 'Formats a Prometheus sample value; NULL becomes NaN';

-- A queue's running totals (kept by snapshot_metrics, plus what happened
-- since) and its open alerts by kind, for prometheus().  One call per
-- queue, so that on Citus each reads the queue's own node.
CREATE FUNCTION queue._prom_totals(p_queue text, OUT processed bigint, OUT failed bigint,
                                   OUT dead jsonb, OUT alerts jsonb)
RETURNS record LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    t record;
    v_after timestamptz := '-infinity';
BEGIN
    SELECT m.processed, m.failed, m.dead, m.counted_until INTO t
      FROM queue.metrics_totals m WHERE m.queue_name = p_queue;
    IF FOUND THEN
        v_after := coalesce(t.counted_until, '-infinity');
    END IF;
    processed := coalesce(t.processed, 0)
        + (SELECT count(*) FROM queue.item_done d
            WHERE d.queue_name = p_queue AND d.completed_at >= v_after);
    failed := coalesce(t.failed, 0)
        + (SELECT count(*) FROM queue.failure_log f
            WHERE f.queue_name = p_queue AND f.at >= v_after);
    dead := queue._add_counts(coalesce(t.dead, '{}'),
                              queue._dead_by_reason(p_queue, v_after, 'infinity'));
    SELECT coalesce(jsonb_object_agg(x.kind, x.n), '{}') INTO alerts
      FROM (SELECT a.kind, count(*) AS n FROM queue.alerts a
             WHERE a.queue_name = p_queue AND a.cleared_at IS NULL
             GROUP BY a.kind) x;
END
$$;
COMMENT ON FUNCTION queue._prom_totals(text) IS 'Running totals and open alerts of a queue, for prometheus()';

CREATE FUNCTION queue.prometheus()
RETURNS text LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_out text;
BEGIN
    WITH s AS MATERIALIZED (
        SELECT c.queue_name AS q, queue._prom_label(c.queue_name) AS ql, x.*,
               n.processed AS total_processed, n.failed AS total_failed,
               n.dead AS total_dead, n.alerts AS open_alerts
          FROM queue.queue_config c
         CROSS JOIN LATERAL queue._stats(c.queue_name) x
         CROSS JOIN LATERAL queue._prom_totals(c.queue_name) n
         WHERE queue._can_read(c.queue_name)),
    -- no column lists on the CTEs: Citus loses them when it plans the CTEs
    fam AS (SELECT v.ord, v.name, v.kind, v.help FROM (VALUES
        (1,  'queue_items', 'gauge', 'Live items by state: queued (claimable now), scheduled, processing, on_hold.'),
        (2,  'queue_dead_letters_open', 'gauge', 'Dead letters still new or in review.'),
        (3,  'queue_oldest_queued_age_seconds', 'gauge', 'How long the longest-waiting claimable item has been claimable.'),
        (4,  'queue_processed_last_hour', 'gauge', 'Items processed in the last hour.'),
        (5,  'queue_failed_last_hour', 'gauge', 'Failed attempts (lost leases included) in the last hour.'),
        (6,  'queue_wait_seconds', 'gauge', 'Time from enqueue to claim of the items processed in the last hour.'),
        (7,  'queue_run_seconds', 'gauge', 'Time from claim to completion of the items processed in the last hour.'),
        (8,  'queue_paused', 'gauge', '1 while the queue is paused (manually or by its circuit breaker).'),
        (9,  'queue_alerts_open', 'gauge', 'Open alerts by kind.'),
        (10, 'queue_processed_total', 'counter', 'Items processed (running total kept by snapshot_metrics).'),
        (11, 'queue_failed_total', 'counter', 'Failed attempts, lost leases included (running total kept by snapshot_metrics).'),
        (12, 'queue_dead_letters_total', 'counter', 'Items dead-lettered, by reason (running total kept by snapshot_metrics).')) AS v(ord, name, kind, help)),
    smp AS (
        SELECT 1 AS ord, s.q, k.n AS sub, format('queue=%s,state=%s', s.ql, queue._prom_label(k.state)) AS labels,
               k.v::numeric AS val
          FROM s CROSS JOIN LATERAL (VALUES (1, 'queued', s.queued), (2, 'scheduled', s.scheduled),
                                            (3, 'processing', s.processing),
                                            (4, 'on_hold', s.on_hold)) AS k(n, state, v)
        UNION ALL
        SELECT 2, s.q, 0, format('queue=%s', s.ql), s.dead FROM s
        UNION ALL
        -- nothing claimable: nobody has waited (0, as stats' NULL means)
        SELECT 3, s.q, 0, format('queue=%s', s.ql), coalesce(extract(epoch FROM s.oldest_queued_age), 0) FROM s
        UNION ALL
        SELECT 4, s.q, 0, format('queue=%s', s.ql), s.processed_1h FROM s
        UNION ALL
        SELECT 5, s.q, 0, format('queue=%s', s.ql), s.failed_1h FROM s
        UNION ALL
        SELECT 6, s.q, k.n, format('queue=%s,quantile=%s', s.ql, queue._prom_label(k.quantile)),
               extract(epoch FROM k.v)
          FROM s CROSS JOIN LATERAL (VALUES (1, '0.5', s.wait_p50), (2, '0.95', s.wait_p95)) AS k(n, quantile, v)
         WHERE k.v IS NOT NULL   -- no completion in the last hour: no quantile, not NaN
        UNION ALL
        SELECT 7, s.q, k.n, format('queue=%s,quantile=%s', s.ql, queue._prom_label(k.quantile)),
               extract(epoch FROM k.v)
          FROM s CROSS JOIN LATERAL (VALUES (1, '0.5', s.run_p50), (2, '0.95', s.run_p95)) AS k(n, quantile, v)
         WHERE k.v IS NOT NULL   -- no completion in the last hour: no quantile, not NaN
        UNION ALL
        SELECT 8, s.q, 0, format('queue=%s', s.ql), CASE WHEN s.paused THEN 1 ELSE 0 END FROM s
        UNION ALL
        SELECT 9, s.q, 0, format('queue=%s,kind=%s', s.ql, queue._prom_label(a.key)), a.value::numeric
          FROM s CROSS JOIN LATERAL jsonb_each_text(s.open_alerts) a
        UNION ALL
        SELECT 10, s.q, 0, format('queue=%s', s.ql), s.total_processed FROM s
        UNION ALL
        SELECT 11, s.q, 0, format('queue=%s', s.ql), s.total_failed FROM s
        UNION ALL
        SELECT 12, s.q, 0, format('queue=%s,reason=%s', s.ql, queue._prom_label(r.key)), r.value::numeric
          FROM s CROSS JOIN LATERAL jsonb_each_text(s.total_dead) r),
    lines AS (
        SELECT f.ord, ''::text AS q, -2 AS sub, ''::text AS labels,
               format('# HELP %s %s', f.name, f.help) AS line FROM fam f
        UNION ALL
        SELECT f.ord, '', -1, '', format('# TYPE %s %s', f.name, f.kind) FROM fam f
        UNION ALL
        SELECT m.ord, m.q, m.sub, m.labels,
               format('%s{%s} %s', f.name, m.labels, queue._prom_value(m.val))
          FROM smp m JOIN fam f ON f.ord = m.ord)
    SELECT string_agg(l.line, E'\n' ORDER BY l.ord, l.q, l.sub, l.labels) || E'\n'
      INTO v_out
      FROM lines l;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION queue.prometheus()
    IS 'Prometheus text exposition of stats (gauges) and counters of every queue the caller may read';
