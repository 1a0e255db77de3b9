-- The circuit breaker's own state, apart from the operator's pause
-- (schema/25_breaker.sql, src/breaker.c).

ALTER TABLE queue.queue_config ADD COLUMN IF NOT EXISTS breaker_reason text;

-- A queue the breaker paused under 0.1.0 kept its reason in pause_reason:
-- move it to the breaker, so the operator's pause is free.
UPDATE queue.queue_config
   SET breaker_reason = pause_reason, paused = false, pause_reason = NULL, paused_at = NULL
 WHERE breaker_state <> 'closed' AND paused AND pause_reason LIKE 'circuit breaker:%';

CREATE OR REPLACE FUNCTION queue._breaker_outcomes(p_queue text, p_from timestamptz, p_run_max int,
                                        OUT failed bigint, OUT outcomes bigint,
                                        OUT run bigint, OUT last_ok timestamptz)
RETURNS record LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    SELECT count(*) INTO failed FROM queue.failure_log f
     WHERE f.queue_name = p_queue AND f.at > p_from;
    SELECT count(*) INTO outcomes FROM queue.item_done d
     WHERE d.queue_name = p_queue AND d.completed_at > p_from;
    outcomes := outcomes + failed;
    -- failures since the last success, counted up to p_run_max
    SELECT max(d.completed_at) INTO last_ok FROM queue.item_done d
     WHERE d.queue_name = p_queue AND d.completed_at > p_from;
    SELECT count(*) INTO run FROM (
        SELECT 1 FROM queue.failure_log f
         WHERE f.queue_name = p_queue AND f.at > greatest(p_from, last_ok)
         LIMIT p_run_max) x;
END
$$;
COMMENT ON FUNCTION queue._breaker_outcomes(text, timestamptz, int)
    IS 'Failed and total outcomes of a queue since a time, and the run of failures since its last success';

CREATE OR REPLACE FUNCTION queue._breaker_check(p_queue text)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    o record;
    v_from timestamptz;
    v_top_from timestamptz;
    v_by_run boolean;
    v_top text;
    v_top_n bigint;
    v_top_all bigint;
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
    SELECT * INTO o FROM queue._breaker_outcomes(p_queue, v_from, c.breaker_min_samples) x;
    IF o.failed = 0 OR o.outcomes < c.breaker_min_samples THEN
        RETURN false;
    END IF;
    v_by_run := o.run >= c.breaker_min_samples;
    IF NOT v_by_run AND o.failed::float8 / o.outcomes <= c.breaker_threshold THEN
        RETURN false;
    END IF;

    -- the dominant error of the failures that tripped it
    v_top_from := CASE WHEN v_by_run THEN greatest(v_from, o.last_ok) ELSE v_from END;
    SELECT queue._excerpt(coalesce(f.error_code, f.error)), count(*), sum(count(*)) OVER ()
      INTO v_top, v_top_n, v_top_all
      FROM queue.failure_log f
     WHERE f.queue_name = p_queue AND f.at > v_top_from
     GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1;
    v_reason := format('circuit breaker: %s%% of %s outcomes failed in %s%s, mostly %s (%s%%)',
                       round(100.0 * o.failed / o.outcomes), o.outcomes,
                       queue._say_interval(c.breaker_window),
                       CASE WHEN v_by_run AND o.failed::float8 / o.outcomes <= c.breaker_threshold
                            THEN format(', the last %s in a row', o.run) ELSE '' END,
                       v_top, round(100.0 * v_top_n / v_top_all));
    UPDATE queue.queue_config
       SET breaker_state = 'open', breaker_opened_at = now(), breaker_reason = v_reason,
           probe_item_id = NULL, probe_expires_at = NULL
     WHERE queue_name = p_queue;
    PERFORM queue._event(p_queue, NULL, 'breaker_open', NULL, NULL,
                         jsonb_build_object('reason', v_reason, 'failed', o.failed,
                                            'outcomes', o.outcomes, 'run', o.run,
                                            'top_error', v_top));
    IF NOT c.paused THEN
        PERFORM queue._event(p_queue, NULL, 'paused', NULL, NULL,
                             jsonb_build_object('reason', v_reason, 'by', 'breaker'));
    END IF;
    PERFORM queue._raise_alert(p_queue, 'breaker_open', v_reason,
                               jsonb_build_object('failed', o.failed, 'outcomes', o.outcomes,
                                                  'run', o.run, 'top_error', v_top, 'top_share',
                                                  round(1.0 * v_top_n / v_top_all, 3)));
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._breaker_check(text) IS 'Trips a closed circuit breaker when its fraction or run rule holds';

CREATE OR REPLACE FUNCTION queue._breaker_close(p_queue text, p_details jsonb)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_was text;
BEGIN
    SELECT c.breaker_state INTO v_was FROM queue.queue_config c
     WHERE c.queue_name = p_queue FOR UPDATE;
    UPDATE queue.queue_config c
       SET breaker_state = 'closed', breaker_opened_at = NULL, breaker_reason = NULL,
           breaker_since = now(), probe_item_id = NULL, probe_expires_at = NULL
     WHERE c.queue_name = p_queue;
    IF v_was IS NULL OR v_was = 'closed' THEN
        RETURN false;
    END IF;
    PERFORM queue._event(p_queue, NULL, 'breaker_closed', NULL, NULL, coalesce(p_details, '{}'));
    PERFORM queue._clear_alert(p_queue, 'breaker_open');
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._breaker_close(text, jsonb)
    IS 'Closes the circuit breaker and forgets earlier outcomes, leaving the operator''s pause as it is';

CREATE OR REPLACE FUNCTION queue._breaker_probe_done(p_queue text, p_item_id bigint, p_success boolean)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM queue.queue_config c
     WHERE c.queue_name = p_queue AND c.breaker_state = 'probing' AND c.probe_item_id = p_item_id
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_success THEN
        PERFORM queue._breaker_close(p_queue, jsonb_build_object('probe_item_id', p_item_id));
        -- operator before breaker: a manual pause holds
        IF NOT (SELECT c.paused FROM queue.queue_config c WHERE c.queue_name = p_queue) THEN
            PERFORM queue._event(p_queue, NULL, 'resumed', NULL, NULL,
                                 jsonb_build_object('by', 'breaker'));
        END IF;
    ELSE
        UPDATE queue.queue_config
           SET breaker_state = 'open', breaker_opened_at = now(),
               probe_item_id = NULL, probe_expires_at = NULL
         WHERE queue_name = p_queue;
        PERFORM queue._event(p_queue, NULL, 'breaker_open', NULL, NULL,
                             jsonb_build_object('probe_item_id', p_item_id, 'reopened', true));
    END IF;
END
$$;
COMMENT ON FUNCTION queue._breaker_probe_done(text, bigint, boolean) IS 'Closes or re-opens the breaker after its half-open probe';

CREATE OR REPLACE FUNCTION queue._breaker_probe_back(p_queue text, p_item_id bigint)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    UPDATE queue.queue_config c
       SET breaker_state = 'open', probe_item_id = NULL, probe_expires_at = NULL,
           breaker_opened_at = least(c.breaker_opened_at, now() - c.breaker_cooldown)
     WHERE c.queue_name = p_queue AND c.breaker_state = 'probing' AND c.probe_item_id = p_item_id;
END
$$;
COMMENT ON FUNCTION queue._breaker_probe_back(text, bigint) IS 'Re-opens the breaker, cooldown over, when its probe was released';

CREATE OR REPLACE FUNCTION queue._pause_state(c queue.queue_config,
                                   OUT paused boolean, OUT pause_reason text,
                                   OUT paused_at timestamptz, OUT paused_by text)
RETURNS record LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT c.paused OR c.breaker_state OPERATOR(pg_catalog.<>) 'closed',
           CASE WHEN c.paused THEN c.pause_reason ELSE c.breaker_reason END,
           CASE WHEN c.paused THEN c.paused_at ELSE c.breaker_opened_at END,
           CASE WHEN c.paused THEN 'operator'
                WHEN c.breaker_state OPERATOR(pg_catalog.<>) 'closed' THEN 'breaker' END
$$;
COMMENT ON FUNCTION queue._pause_state(queue.queue_config)
    IS 'Whether a queue hands out nothing, why, since when and by whom (operator before breaker)';

CREATE OR REPLACE FUNCTION queue.resume(queue_name text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(resume.queue_name);
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.queue_config c
       SET paused = false, pause_reason = NULL, paused_at = NULL
     WHERE c.queue_name = v_name;
    -- a manual resume also closes the breaker and forgets earlier outcomes
    PERFORM queue._breaker_close(v_name, jsonb_build_object('by', session_user));
    PERFORM queue._event(v_name, NULL, 'resumed', NULL, NULL,
                         jsonb_build_object('by', session_user));
END
$$;
COMMENT ON FUNCTION queue.resume(text) IS 'Resumes a paused queue; closes an open circuit breaker';

CREATE OR REPLACE FUNCTION queue.alter_queue(
    queue_name          text,
    lease_timeout       interval DEFAULT NULL,
    max_attempts        int      DEFAULT NULL,
    backoff_base        interval DEFAULT NULL,
    backoff_factor      float8   DEFAULT NULL,
    backoff_max         interval DEFAULT NULL,
    backoff_jitter      float8   DEFAULT NULL,
    item_ttl            interval DEFAULT NULL,
    dedup_window        interval DEFAULT NULL,
    priority_aging      interval DEFAULT NULL,
    max_in_flight       int      DEFAULT NULL,
    retention           interval DEFAULT NULL,
    sla                 interval DEFAULT NULL,
    notify              boolean  DEFAULT NULL,
    audit               text     DEFAULT NULL,
    breaker_threshold   float8   DEFAULT NULL,
    breaker_window      interval DEFAULT NULL,
    breaker_min_samples int      DEFAULT NULL,
    breaker_cooldown    interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    v_name text := queue._check_name(alter_queue.queue_name);
BEGIN
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = v_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Create it with queue.create_queue(%L).', v_name);
    END IF;
    c.lease_timeout := coalesce(alter_queue.lease_timeout, c.lease_timeout);
    c.max_attempts := coalesce(alter_queue.max_attempts, c.max_attempts);
    c.backoff_base := coalesce(alter_queue.backoff_base, c.backoff_base);
    c.backoff_factor := coalesce(alter_queue.backoff_factor, c.backoff_factor);
    c.backoff_max := coalesce(alter_queue.backoff_max, c.backoff_max);
    c.backoff_jitter := coalesce(alter_queue.backoff_jitter, c.backoff_jitter);
    -- optional settings: a zero value switches them off
    c.item_ttl := nullif(coalesce(alter_queue.item_ttl, c.item_ttl), interval '0');
    c.dedup_window := nullif(coalesce(alter_queue.dedup_window, c.dedup_window), interval '0');
    c.priority_aging := nullif(coalesce(alter_queue.priority_aging, c.priority_aging), interval '0');
    c.max_in_flight := nullif(coalesce(alter_queue.max_in_flight, c.max_in_flight), 0);
    c.sla := nullif(coalesce(alter_queue.sla, c.sla), interval '0');
    c.breaker_threshold := nullif(coalesce(alter_queue.breaker_threshold, c.breaker_threshold), 0);
    c.retention := coalesce(alter_queue.retention, c.retention);
    c.notify := coalesce(alter_queue.notify, c.notify);
    c.audit := coalesce(alter_queue.audit, c.audit);
    c.breaker_window := coalesce(alter_queue.breaker_window, c.breaker_window);
    c.breaker_min_samples := coalesce(alter_queue.breaker_min_samples, c.breaker_min_samples);
    c.breaker_cooldown := coalesce(alter_queue.breaker_cooldown, c.breaker_cooldown);
    PERFORM queue._check_settings(c);

    UPDATE queue.queue_config q
       SET lease_timeout = c.lease_timeout, max_attempts = c.max_attempts,
           backoff_base = c.backoff_base, backoff_factor = c.backoff_factor,
           backoff_max = c.backoff_max, backoff_jitter = c.backoff_jitter,
           item_ttl = c.item_ttl, dedup_window = c.dedup_window,
           priority_aging = c.priority_aging, max_in_flight = c.max_in_flight,
           retention = c.retention, sla = c.sla, notify = c.notify, audit = c.audit,
           breaker_threshold = c.breaker_threshold, breaker_window = c.breaker_window,
           breaker_min_samples = c.breaker_min_samples, breaker_cooldown = c.breaker_cooldown
     WHERE q.queue_name = v_name;
    -- without aging, items claim at the priority they were given
    IF c.priority_aging IS NULL THEN
        UPDATE queue.item_live i SET priority = i.base_priority
         WHERE i.queue_name = v_name AND i.priority <> i.base_priority;
    END IF;
    -- a queue without a breaker cannot stay paused by one; the
    -- operator's pause stays (operator before breaker)
    IF c.breaker_threshold IS NULL AND queue._breaker_close(v_name, jsonb_build_object('by', 'alter_queue'))
       AND NOT c.paused THEN
        PERFORM queue._event(v_name, NULL, 'resumed', NULL, NULL,
                             jsonb_build_object('by', 'alter_queue'));
    END IF;
END
$$;
COMMENT ON FUNCTION queue.alter_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval)
    IS 'Changes queue settings; NULL leaves a setting unchanged, zero switches an optional one off';

CREATE OR REPLACE VIEW queue.queues WITH (security_barrier) AS
SELECT c.queue_name, c.lease_timeout, c.max_attempts, c.backoff_base, c.backoff_factor,
       c.backoff_max, c.backoff_jitter, c.item_ttl, c.dedup_window, c.priority_aging,
       c.max_in_flight, c.retention, c.sla, c.notify, c.audit, c.breaker_threshold,
       c.breaker_window, c.breaker_min_samples, c.breaker_cooldown,
       p.paused, p.pause_reason, p.paused_at,
       CASE WHEN c.breaker_state = 'probing' THEN 'half_open'
            WHEN c.breaker_state = 'open' AND c.breaker_opened_at + c.breaker_cooldown <= now()
              THEN 'half_open'
            ELSE c.breaker_state END AS breaker_state,
       c.created_at,
       p.paused_by, c.breaker_reason, c.breaker_opened_at
  FROM queue.queue_config c
 CROSS JOIN LATERAL queue._pause_state(c) p
 WHERE queue._can_read(c.queue_name);
COMMENT ON VIEW queue.queues IS 'Every queue the caller may read, with its settings, pause (operator first, else breaker) and breaker state';

REVOKE ALL ON FUNCTION queue._breaker_outcomes(text, timestamptz, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._breaker_close(text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._breaker_probe_back(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._pause_state(queue.queue_config) FROM PUBLIC;
-- the queues view calls it as the reader
GRANT EXECUTE ON FUNCTION queue._pause_state(queue.queue_config)
   TO queue_reader, queue_producer, queue_worker, queue_admin;
