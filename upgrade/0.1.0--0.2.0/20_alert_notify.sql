-- Alerts never fail their caller: NOTIFY queue_alerts carries the alert's
-- id, queue and kind; alerts and the breaker's pause reason quote bounded
-- excerpts of error texts and worker lists.

CREATE OR REPLACE FUNCTION queue._excerpt(p text, p_max int DEFAULT 200) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pg_catalog.length(s) OPERATOR(pg_catalog.<=) p_max THEN s
                ELSE pg_catalog.left(s, p_max OPERATOR(pg_catalog.-) 3) OPERATOR(pg_catalog.||) '...' END
      FROM (SELECT pg_catalog.btrim(pg_catalog.regexp_replace(
                       pg_catalog.left(p, 4 OPERATOR(pg_catalog.*) p_max), '\s+', ' ', 'g')) AS s) x
$$;
COMMENT ON FUNCTION queue._excerpt(text, int) IS 'A caller''s text as alerts quote it: whitespace folded, at most p_max characters';

REVOKE ALL ON FUNCTION queue._excerpt(text, int) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue._raise_alert(p_queue text, p_kind text, p_message text,
                                   p_details jsonb DEFAULT '{}')
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO queue.alerts (queue_name, kind, message, details)
    VALUES (p_queue, p_kind, queue._excerpt(p_message, 1000), coalesce(p_details, '{}'))
    ON CONFLICT (queue_name, kind) WHERE cleared_at IS NULL DO NOTHING
    RETURNING alert_id INTO v_id;
    IF v_id IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('queue_alerts',
                      json_build_object('alert_id', v_id, 'queue_name', p_queue, 'kind', p_kind)::text);
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._raise_alert(text, text, text, jsonb) IS 'Raises an alert unless one of its kind is open; NOTIFY queue_alerts with its id, queue and kind';

CREATE OR REPLACE FUNCTION queue._breaker_check(p_queue text)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    v_from timestamptz;
    v_failed bigint;
    v_ok bigint;
    v_total bigint;
    v_top text;
    v_top_n bigint;
    v_reason text;
BEGIN
    SELECT * INTO c FROM queue.queue_config WHERE queue_name = p_queue;
    IF NOT FOUND OR c.breaker_threshold IS NULL OR c.breaker_state <> 'closed' THEN
        RETURN false;
    END IF;
    -- NB: failures of one queue judge the breaker one at a time, each
    -- seeing the failures committed before it; otherwise two concurrent
    -- failures could each miss the other and never trip it.
    SELECT * INTO c FROM queue.queue_config WHERE queue_name = p_queue FOR UPDATE;
    IF c.breaker_state <> 'closed' THEN
        RETURN false;
    END IF;
    v_from := greatest(now() - c.breaker_window, c.breaker_since);
    SELECT count(*) INTO v_failed FROM queue.failure_log f
     WHERE f.queue_name = p_queue AND f.at > v_from AND f.kind <> 'offline';
    IF v_failed = 0 THEN
        RETURN false;
    END IF;
    SELECT count(*) INTO v_ok FROM queue.item_done d
     WHERE d.queue_name = p_queue AND d.completed_at > v_from;
    v_total := v_failed + v_ok;
    IF v_total < c.breaker_min_samples OR v_failed::float8 / v_total <= c.breaker_threshold THEN
        RETURN false;
    END IF;

    SELECT queue._excerpt(coalesce(f.error_code, f.error)), count(*) INTO v_top, v_top_n
      FROM queue.failure_log f
     WHERE f.queue_name = p_queue AND f.at > v_from AND f.kind <> 'offline'
     GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1;
    v_reason := format('circuit breaker: %s%% of %s outcomes failed in %s, mostly %s (%s%%)',
                       round(100.0 * v_failed / v_total), v_total,
                       queue._say_interval(c.breaker_window),
                       v_top, round(100.0 * v_top_n / v_failed));
    UPDATE queue.queue_config
       SET paused = true, pause_reason = v_reason, paused_at = now(),
           breaker_state = 'open', breaker_opened_at = now(),
           probe_item_id = NULL, probe_expires_at = NULL
     WHERE queue_name = p_queue;
    PERFORM queue._event(p_queue, NULL, 'breaker_open', NULL, NULL,
                         jsonb_build_object('reason', v_reason, 'failed', v_failed,
                                            'outcomes', v_total, 'top_error', v_top));
    PERFORM queue._event(p_queue, NULL, 'paused', NULL, NULL,
                         jsonb_build_object('reason', v_reason, 'by', 'breaker'));
    PERFORM queue._raise_alert(p_queue, 'breaker_open', v_reason,
                               jsonb_build_object('failed', v_failed, 'outcomes', v_total,
                                                  'top_error', v_top, 'top_share',
                                                  round(1.0 * v_top_n / v_failed, 3)));
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._breaker_check(text) IS 'Trips the circuit breaker when the failed fraction passes the threshold';

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
                   p_queue, queue._say_duration(v_age), queue._say_interval(c.sla)),
            jsonb_build_object('oldest_queued_age', extract(epoch FROM v_age),
                               'sla', extract(epoch FROM c.sla), 'queued', s.queued));
    ELSIF c.sla IS NOT NULL AND v_age > c.sla * 0.5 THEN
        PERFORM queue._clear_alert(p_queue, 'sla_critical');
        PERFORM queue._raise_alert(p_queue, 'sla_warning',
            format('queue %s: oldest queued item has waited %s, over half the %s sla',
                   p_queue, queue._say_duration(v_age), queue._say_interval(c.sla)),
            jsonb_build_object('oldest_queued_age', extract(epoch FROM v_age),
                               'sla', extract(epoch FROM c.sla), 'queued', s.queued));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'sla_critical');
        PERFORM queue._clear_alert(p_queue, 'sla_warning');
    END IF;

    -- breaker_open: raised by the breaker itself; closed by probe or resume
    IF c.breaker_state <> 'closed' THEN
        PERFORM queue._raise_alert(p_queue, 'breaker_open',
                                   coalesce(c.pause_reason, 'circuit breaker open'),
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

