/* queue--0.1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION queue" to load this file. \quit

-- source: schema/00_schema.sql
-- Schema, sequences and the shared vocabulary of the extension.
--
-- Every table that holds per-item rows carries queue_name as the first
-- column of its primary key, so the extension stays distributable by queue
-- (see the scale-out notes in README.md).  Item ids and lease tokens come
-- from two global sequences: unique per queue, roughly increasing.

CREATE SEQUENCE queue.item_id_seq;
CREATE SEQUENCE queue.lease_token_seq;
CREATE SEQUENCE queue.event_id_seq;
CREATE SEQUENCE queue.failure_id_seq;
CREATE SEQUENCE queue.alert_id_seq;
CREATE SEQUENCE queue.maintenance_id_seq;

-- source: schema/10_tables.sql
-- Tables.
--
-- queue_config      one row per queue: settings, pause and breaker state
-- item_live         items that are queued, scheduled, on hold or processing
-- item_done         processed items (the history), until retention
-- dead_letters      dead items with their error history and review status
-- dedup_done        dedup keys of completed items, for dedup_window
-- failure_log       one row per failed attempt (transient, permanent, lost
--                   lease): failed_1h, breaker window, worker success rate
-- worker_registry   bots that dequeue; maintenance_window their windows
-- queue_grant       per-queue access grants (tenant isolation)
-- events, alerts, metrics_history: audit trail and observability
--
-- Claim order lives in one btree: (queue_name, priority, visible_at,
-- item_id).  visible_at is when the item is next claimable: run_at for a
-- queued or scheduled item, the end of the backoff after a failure, the
-- lease expiry while it is leased, and 'infinity' while on hold.  A claim
-- therefore reads the head of its priority range and never walks past
-- leased, scheduled or held rows, and an expired lease is claimable the
-- moment it expires without any sweeper.

CREATE TABLE queue.queue_config (
    queue_name          text        NOT NULL PRIMARY KEY,
    lease_timeout       interval    NOT NULL,
    max_attempts        int         NOT NULL,
    backoff_base        interval    NOT NULL,
    backoff_factor      float8      NOT NULL,
    backoff_max         interval    NOT NULL,
    backoff_jitter      float8      NOT NULL,
    item_ttl            interval,
    dedup_window        interval,
    priority_aging      interval,
    max_in_flight       int,
    retention           interval    NOT NULL,
    sla                 interval,
    notify              boolean     NOT NULL,
    audit               text        NOT NULL,
    breaker_threshold   float8,
    breaker_window      interval    NOT NULL,
    breaker_min_samples int         NOT NULL,
    breaker_cooldown    interval    NOT NULL,
    -- state
    paused              boolean     NOT NULL DEFAULT false,
    pause_reason        text,
    paused_at           timestamptz,
    breaker_state       text        NOT NULL DEFAULT 'closed'
                        CHECK (breaker_state IN ('closed', 'open', 'probing')),
    breaker_opened_at   timestamptz,
    breaker_since       timestamptz NOT NULL DEFAULT '-infinity',
    probe_item_id       bigint,
    probe_expires_at    timestamptz,
    -- per-queue grants exist for this access kind (see queue_grant)
    restrict_reader     boolean     NOT NULL DEFAULT false,
    restrict_producer   boolean     NOT NULL DEFAULT false,
    restrict_worker     boolean     NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queue.item_live (
    queue_name       text        NOT NULL,
    item_id          bigint      NOT NULL DEFAULT nextval('queue.item_id_seq'),
    priority         int         NOT NULL,   -- effective (aged) priority
    visible_at       timestamptz NOT NULL,   -- next claimable at (see above)
    base_priority    int         NOT NULL,   -- priority as enqueued
    run_at           timestamptz NOT NULL,   -- became (or becomes) claimable
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    attempt          int         NOT NULL DEFAULT 0,
    max_attempts     int         NOT NULL,
    lease_token      bigint,                 -- current lease; NULL if none
    lease_expires_at timestamptz,
    worker           text,                   -- holder of the lease
    claimed_at       timestamptz,
    cap_stripe       smallint,               -- max_in_flight stripe charged
    on_hold          boolean     NOT NULL DEFAULT false,
    hold_reason      text,
    expires_at       timestamptz,
    dedup_key        text,
    correlation_id   text,
    payload          jsonb       NOT NULL,
    progress         jsonb,
    last_error       text,
    error_code       text,
    errors           jsonb       NOT NULL DEFAULT '[]',
    PRIMARY KEY (queue_name, item_id)
) WITH (fillfactor = 90);

CREATE INDEX item_live_claim_idx
    ON queue.item_live (queue_name, priority, visible_at, item_id);
CREATE UNIQUE INDEX item_live_dedup_idx
    ON queue.item_live (queue_name, dedup_key) WHERE dedup_key IS NOT NULL;
-- leases by holder: heartbeat, offline recovery, capacity, in-flight counts
CREATE INDEX item_live_worker_idx
    ON queue.item_live (queue_name, worker) WHERE worker IS NOT NULL;
-- items with a deadline, for sweep's expiry (only items with expires_at pay for it)
CREATE INDEX item_live_expires_idx ON queue.item_live (queue_name, expires_at) WHERE expires_at IS NOT NULL;

ALTER TABLE queue.item_live SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE queue.item_done (
    queue_name     text        NOT NULL,
    item_id        bigint      NOT NULL,
    payload        jsonb       NOT NULL,
    result         jsonb,
    attempts       int         NOT NULL,
    worker         text,
    enqueued_at    timestamptz NOT NULL,
    claimed_at     timestamptz,
    completed_at   timestamptz NOT NULL,
    dedup_key      text,
    correlation_id text,
    progress       jsonb,
    PRIMARY KEY (queue_name, item_id)
);
-- per-queue completions by time: stats' last hour, snapshots, breaker window, retention
CREATE INDEX item_done_queue_completed_idx ON queue.item_done (queue_name, completed_at);

CREATE TABLE queue.dead_letters (
    queue_name     text        NOT NULL,
    item_id        bigint      NOT NULL,
    payload        jsonb       NOT NULL,
    progress       jsonb,
    attempts       int         NOT NULL,
    reason         text        NOT NULL
                   CHECK (reason IN ('max_attempts', 'permanent', 'expired',
                                     'lease_expired', 'cancelled')),
    last_error     text,
    error_code     text,
    errors         jsonb       NOT NULL DEFAULT '[]',
    dead_at        timestamptz NOT NULL DEFAULT now(),
    review_status  text        NOT NULL DEFAULT 'new'
                   CHECK (review_status IN ('new', 'in_review', 'resolved', 'rejected')),
    review_note    text,
    reviewed_at    timestamptz,
    replayed_as    bigint,
    dedup_key      text,
    correlation_id text,
    enqueued_at    timestamptz NOT NULL,
    priority       int         NOT NULL DEFAULT 2,
    max_attempts   int,
    worker         text,
    PRIMARY KEY (queue_name, item_id)
);
CREATE INDEX dead_letters_open_idx
    ON queue.dead_letters (queue_name, dead_at)
    WHERE review_status IN ('new', 'in_review');

CREATE TABLE queue.dedup_done (
    queue_name   text        NOT NULL,
    dedup_key    text        NOT NULL,
    item_id      bigint      NOT NULL,
    completed_at timestamptz NOT NULL,
    PRIMARY KEY (queue_name, dedup_key)
);
CREATE INDEX dedup_done_completed_idx ON queue.dedup_done (queue_name, completed_at);

CREATE TABLE queue.failure_log (
    queue_name  text        NOT NULL,
    failure_id  bigint      NOT NULL DEFAULT nextval('queue.failure_id_seq'),
    at          timestamptz NOT NULL DEFAULT now(),
    item_id     bigint      NOT NULL,
    attempt     int,
    worker      text,
    kind        text        NOT NULL
                CHECK (kind IN ('transient', 'permanent', 'lease_expired', 'offline')),
    error_code  text,
    error       text,
    PRIMARY KEY (queue_name, failure_id)
);
CREATE INDEX failure_log_at_idx ON queue.failure_log (queue_name, at);

CREATE TABLE queue.worker_registry (
    worker        text        NOT NULL PRIMARY KEY,
    queues        text[],
    capacity      int,
    info          jsonb       NOT NULL DEFAULT '{}',
    draining      boolean     NOT NULL DEFAULT false,
    registered_at timestamptz NOT NULL DEFAULT now(),
    last_seen     timestamptz NOT NULL DEFAULT now(),
    offline_handled_at timestamptz
);

CREATE TABLE queue.maintenance_window (
    worker         text        NOT NULL,
    window_id      bigint      NOT NULL DEFAULT nextval('queue.maintenance_id_seq'),
    starts_at      timestamptz NOT NULL,
    ends_at        timestamptz NOT NULL,
    reason         text,
    PRIMARY KEY (worker, window_id),
    CHECK (ends_at > starts_at)
);

CREATE TABLE queue.queue_grant (
    queue_name text NOT NULL,
    grantee    regrole NOT NULL,   -- dumped and restored by name
    access     text NOT NULL CHECK (access IN ('producer', 'worker', 'reader')),
    PRIMARY KEY (queue_name, access, grantee)
);

CREATE TABLE queue.events (
    queue_name text        NOT NULL,
    event_id   bigint      NOT NULL DEFAULT nextval('queue.event_id_seq'),
    item_id    bigint,
    at         timestamptz NOT NULL DEFAULT now(),
    kind       text        NOT NULL,
    worker     text,
    attempt    int,
    details    jsonb       NOT NULL DEFAULT '{}',
    PRIMARY KEY (queue_name, event_id)
);
CREATE INDEX events_at_idx ON queue.events (queue_name, at);
CREATE INDEX events_item_idx ON queue.events (queue_name, item_id) WHERE item_id IS NOT NULL;

CREATE TABLE queue.alerts (
    queue_name text        NOT NULL,
    alert_id   bigint      NOT NULL DEFAULT nextval('queue.alert_id_seq'),
    kind       text        NOT NULL,
    message    text        NOT NULL,
    details    jsonb       NOT NULL DEFAULT '{}',
    raised_at  timestamptz NOT NULL DEFAULT now(),
    cleared_at timestamptz,
    PRIMARY KEY (queue_name, alert_id)
);
CREATE UNIQUE INDEX alerts_open_idx
    ON queue.alerts (queue_name, kind) WHERE cleared_at IS NULL;

CREATE TABLE queue.metrics_history (
    queue_name        text        NOT NULL,
    taken_at          timestamptz NOT NULL,
    queued            bigint,
    scheduled         bigint,
    processing        bigint,
    on_hold           bigint,
    dead              bigint,
    oldest_queued_age interval,
    processed_1h      bigint,
    failed_1h         bigint,
    wait_p50          interval,
    wait_p95          interval,
    run_p50           interval,
    run_p95           interval,
    paused            boolean,
    processed         bigint,
    failed            bigint,
    PRIMARY KEY (queue_name, taken_at)
);

-- source: schema/20_internal.sql
-- Internal functions: the SQL face of the C checks, audit events, alerts,
-- dead-lettering and the circuit breaker's bookkeeping.  Not granted to
-- anyone; the API functions call them.

CREATE FUNCTION queue._check_name(queue_name text) RETURNS text
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_name_sql';
COMMENT ON FUNCTION queue._check_name(text) IS 'Validates a queue name (22023 / 22004) and returns it';

CREATE FUNCTION queue._check_payload(payload jsonb) RETURNS void
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_payload_sql';
COMMENT ON FUNCTION queue._check_payload(jsonb) IS 'Rejects a NULL or oversized payload';

CREATE FUNCTION queue._check_access(queue_name text, access text) RETURNS void
    LANGUAGE c STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'queue_check_access_sql';
COMMENT ON FUNCTION queue._check_access(text, text) IS 'Fails unless the queue exists (42704) and the caller has the access (42501)';

CREATE FUNCTION queue._can_read(queue_name text) RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_can_read_sql';
COMMENT ON FUNCTION queue._can_read(text) IS 'Whether the caller may see the rows of a queue';

CREATE FUNCTION queue._caller() RETURNS oid
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_caller';
COMMENT ON FUNCTION queue._caller() IS 'The role calling into the extension (outside SECURITY DEFINER)';

CREATE FUNCTION queue._worker_offline_after() RETURNS int
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_worker_offline_after_seconds';
COMMENT ON FUNCTION queue._worker_offline_after() IS 'queue.worker_offline_after in seconds';

-- The hot path caches queue settings per backend; any change to the
-- settings table tells every backend to drop its cache.
CREATE FUNCTION queue._invalidate_cache() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'queue_invalidate_cache';
COMMENT ON FUNCTION queue._invalidate_cache() IS 'Drops the cached queue settings of every backend';

CREATE TRIGGER queue_config_invalidate
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON queue.queue_config
    FOR EACH STATEMENT EXECUTE FUNCTION queue._invalidate_cache();

-- dequeue also caches each worker's gates: drain, capacity, windows.
-- last_seen moving forward is no news; moving back (an operator or a test
-- ageing a worker) is.
CREATE TRIGGER worker_registry_invalidate
    AFTER INSERT OR DELETE OR TRUNCATE ON queue.worker_registry
    FOR EACH STATEMENT EXECUTE FUNCTION queue._invalidate_cache();
CREATE TRIGGER worker_registry_gates_invalidate
    AFTER UPDATE ON queue.worker_registry
    FOR EACH ROW
    WHEN (OLD.draining IS DISTINCT FROM NEW.draining
          OR OLD.capacity IS DISTINCT FROM NEW.capacity
          OR OLD.last_seen > NEW.last_seen)
    EXECUTE FUNCTION queue._invalidate_cache();
CREATE TRIGGER maintenance_window_invalidate
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON queue.maintenance_window
    FOR EACH STATEMENT EXECUTE FUNCTION queue._invalidate_cache();

-- Which events a queue's audit level keeps.
CREATE FUNCTION queue._audit_keeps(audit text, kind text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
             WHEN kind OPERATOR(pg_catalog.=) ANY ('{paused,resumed,purged,breaker_open,breaker_closed,queue_dropped}'::pg_catalog.text[])
               THEN true
             WHEN audit OPERATOR(pg_catalog.=) 'all' THEN true
             WHEN audit OPERATOR(pg_catalog.=) 'none' THEN false
             ELSE NOT (kind OPERATOR(pg_catalog.=) ANY ('{enqueued,claimed,completed,released}'::pg_catalog.text[]))
           END
$$;

-- Record an event unless the queue's audit level leaves it out.
CREATE FUNCTION queue._event(p_queue text, p_item_id bigint, p_kind text,
                             p_worker text DEFAULT NULL, p_attempt int DEFAULT NULL,
                             p_details jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_audit text;
BEGIN
    SELECT c.audit INTO v_audit FROM queue.queue_config c WHERE c.queue_name = p_queue;
    IF queue._audit_keeps(coalesce(v_audit, 'failures'), p_kind) THEN
        INSERT INTO queue.events (queue_name, item_id, kind, worker, attempt, details)
        VALUES (p_queue, p_item_id, p_kind, p_worker, p_attempt, coalesce(p_details, '{}'));
    END IF;
END
$$;
COMMENT ON FUNCTION queue._event(text, bigint, text, text, int, jsonb) IS 'Records an event unless the queue''s audit level leaves it out';

-- Raise an alert unless one of that kind is open; new alerts NOTIFY queue_alerts.
CREATE FUNCTION queue._raise_alert(p_queue text, p_kind text, p_message text,
                                   p_details jsonb DEFAULT '{}')
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_row queue.alerts;
BEGIN
    INSERT INTO queue.alerts (queue_name, kind, message, details)
    VALUES (p_queue, p_kind, p_message, coalesce(p_details, '{}'))
    ON CONFLICT (queue_name, kind) WHERE cleared_at IS NULL DO NOTHING
    RETURNING * INTO v_row;
    IF v_row.alert_id IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('queue_alerts', row_to_json(v_row)::text);
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._raise_alert(text, text, text, jsonb) IS 'Raises an alert unless one of its kind is open; NOTIFY queue_alerts with the row';

CREATE FUNCTION queue._clear_alert(p_queue text, p_kind text)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    UPDATE queue.alerts SET cleared_at = now()
     WHERE queue_name = p_queue AND kind = p_kind AND cleared_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION queue._clear_alert(text, text) IS 'Clears the open alert of a kind';

-- An interval the way people say it: '10 min', '1 h', '30 s'.
CREATE FUNCTION queue._say_interval(p interval) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    s numeric := extract(epoch FROM p);
BEGIN
    RETURN CASE
             WHEN s >= 86400 AND s % 86400 = 0 THEN (s / 86400)::bigint || ' d'
             WHEN s >= 3600 AND s % 3600 = 0 THEN (s / 3600)::bigint || ' h'
             WHEN s >= 60 AND s % 60 = 0 THEN (s / 60)::bigint || ' min'
             ELSE round(s, 1)::text || ' s'
           END;
END
$$;
COMMENT ON FUNCTION queue._say_interval(interval) IS 'An interval as people say it: 10 min, 1 h, 30 s';

-- Move a live item to the dead letters.  p_error is the failure that
-- killed it (NULL for expiry, cancel and a lost last lease).
CREATE FUNCTION queue._bury(p_queue text, p_item_id bigint, p_reason text,
                            p_error text, p_error_code text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r queue.item_live;
BEGIN
    DELETE FROM queue.item_live
     WHERE queue_name = p_queue AND item_id = p_item_id
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    IF p_reason IN ('permanent', 'max_attempts') THEN
        r.errors := r.errors || jsonb_build_array(jsonb_build_object(
            'attempt', r.attempt, 'at', now(), 'worker', r.worker,
            'error', p_error, 'error_code', p_error_code));
        r.last_error := p_error;
        r.error_code := p_error_code;
    ELSIF p_reason = 'lease_expired' THEN
        r.errors := r.errors || jsonb_build_array(jsonb_build_object(
            'attempt', r.attempt, 'at', r.lease_expires_at, 'worker', r.worker,
            'error', 'lease expired', 'error_code', 'lease_expired'));
        r.last_error := 'lease expired';
        r.error_code := 'lease_expired';
        INSERT INTO queue.failure_log (queue_name, item_id, attempt, worker, kind, error_code, error)
        VALUES (p_queue, p_item_id, r.attempt, r.worker, 'lease_expired', 'lease_expired', 'lease expired');
        PERFORM queue._event(p_queue, p_item_id, 'failed', r.worker, r.attempt,
                             jsonb_build_object('error', 'lease expired', 'error_code', 'lease_expired'));
    ELSIF p_reason = 'expired' THEN
        r.last_error := coalesce(r.last_error, 'expired');
    ELSIF p_reason = 'cancelled' THEN
        r.last_error := coalesce(p_error, 'cancelled');
    END IF;

    INSERT INTO queue.dead_letters (queue_name, item_id, payload, progress, attempts, reason,
                                    last_error, error_code, errors, dedup_key, correlation_id,
                                    enqueued_at, priority, max_attempts, worker)
    VALUES (p_queue, p_item_id, r.payload, r.progress, r.attempt, p_reason,
            r.last_error, r.error_code, r.errors, r.dedup_key, r.correlation_id,
            r.enqueued_at, r.base_priority, r.max_attempts, r.worker);

    PERFORM queue._event(p_queue, p_item_id,
                         CASE p_reason WHEN 'expired' THEN 'expired'
                                       WHEN 'cancelled' THEN 'cancelled'
                                       ELSE 'dead_lettered' END,
                         r.worker, r.attempt,
                         jsonb_build_object('reason', p_reason, 'error', r.last_error,
                                            'error_code', r.error_code));
    PERFORM queue._raise_alert(p_queue, 'dead_letters',
                               format('queue %s has new dead letters', p_queue),
                               jsonb_build_object('first_item_id', p_item_id, 'reason', p_reason));
    IF p_reason = 'lease_expired' THEN
        PERFORM queue._breaker_check(p_queue);
    END IF;
END
$$;
COMMENT ON FUNCTION queue._bury(text, bigint, text, text, text) IS 'Moves a live item to the dead letters';

-- Leases that ran out and were claimed again by dequeue: each counts as a
-- failed attempt of the previous holder.
CREATE FUNCTION queue._leases_lost(p_queue text, p_item_ids bigint[])
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT i.item_id, i.attempt - 1 AS attempt, i.errors -> -1 ->> 'worker' AS worker
          FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.item_id = ANY (p_item_ids)
    LOOP
        INSERT INTO queue.failure_log (queue_name, item_id, attempt, worker, kind, error_code, error)
        VALUES (p_queue, r.item_id, r.attempt, r.worker, 'lease_expired', 'lease_expired', 'lease expired');
        PERFORM queue._event(p_queue, r.item_id, 'failed', r.worker, r.attempt,
                             jsonb_build_object('error', 'lease expired', 'error_code', 'lease_expired'));
        PERFORM queue._event(p_queue, r.item_id, 'recovered', r.worker, r.attempt,
                             jsonb_build_object('reason', 'lease_expired'));
    END LOOP;
    PERFORM queue._breaker_check(p_queue);
END
$$;
COMMENT ON FUNCTION queue._leases_lost(text, bigint[]) IS 'Records re-claimed expired leases as failed attempts';

-- Circuit breaker: after a failure, trip when the failed fraction of the
-- outcomes in breaker_window exceeds breaker_threshold with at least
-- breaker_min_samples outcomes.
CREATE FUNCTION queue._breaker_check(p_queue text)
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

    SELECT coalesce(f.error_code, f.error), count(*) INTO v_top, v_top_n
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

-- The half-open probe finished: success closes the breaker and resumes the
-- queue, failure re-opens it for another cooldown.
CREATE FUNCTION queue._breaker_probe_done(p_queue text, p_item_id bigint, p_success boolean)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF p_success THEN
        UPDATE queue.queue_config
           SET paused = false, pause_reason = NULL, paused_at = NULL,
               breaker_state = 'closed', breaker_opened_at = NULL, breaker_since = now(),
               probe_item_id = NULL, probe_expires_at = NULL
         WHERE queue_name = p_queue AND breaker_state = 'probing' AND probe_item_id = p_item_id;
        IF FOUND THEN
            PERFORM queue._event(p_queue, NULL, 'breaker_closed', NULL, NULL,
                                 jsonb_build_object('probe_item_id', p_item_id));
            PERFORM queue._event(p_queue, NULL, 'resumed', NULL, NULL,
                                 jsonb_build_object('by', 'breaker'));
            PERFORM queue._clear_alert(p_queue, 'breaker_open');
        END IF;
    ELSE
        UPDATE queue.queue_config
           SET breaker_state = 'open', breaker_opened_at = now(),
               probe_item_id = NULL, probe_expires_at = NULL
         WHERE queue_name = p_queue AND breaker_state = 'probing' AND probe_item_id = p_item_id;
        IF FOUND THEN
            PERFORM queue._event(p_queue, NULL, 'breaker_open', NULL, NULL,
                                 jsonb_build_object('probe_item_id', p_item_id, 'reopened', true));
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION queue._breaker_probe_done(text, bigint, boolean) IS 'Closes or re-opens the breaker after its half-open probe';

-- source: schema/30_queues.sql
-- ======================================================================
-- Queues: create_queue, alter_queue, drop_queue, purge, the queues view
-- ======================================================================

-- Validate the settings of a queue (after defaults and alterations are
-- applied).  One message per rule, naming the setting and the bad value.
CREATE FUNCTION queue._check_settings(c queue.queue_config)
RETURNS void LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF c.lease_timeout IS NULL OR c.max_attempts IS NULL OR c.backoff_base IS NULL
       OR c.backoff_factor IS NULL OR c.backoff_max IS NULL OR c.backoff_jitter IS NULL
       OR c.retention IS NULL OR c.notify IS NULL OR c.audit IS NULL
       OR c.breaker_window IS NULL OR c.breaker_min_samples IS NULL OR c.breaker_cooldown IS NULL THEN
        RAISE EXCEPTION 'queue settings must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  DETAIL = 'lease_timeout, max_attempts, backoff_*, retention, notify, audit and breaker_window/min_samples/cooldown always have a value.',
                  HINT = 'Leave the argument out to get its default.';
    END IF;
    IF c.lease_timeout <= interval '0' THEN
        RAISE EXCEPTION 'lease_timeout must be positive, not "%"', c.lease_timeout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts must be at least 1, not %', c.max_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.backoff_base < interval '0' THEN
        RAISE EXCEPTION 'backoff_base must not be negative, not "%"', c.backoff_base
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.backoff_factor < 1 OR c.backoff_factor = 'NaN'::float8 OR c.backoff_factor = 'Infinity'::float8 THEN
        RAISE EXCEPTION 'backoff_factor must be at least 1, not %', c.backoff_factor
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use 1 for a constant backoff, 2 or 3 for an exponential one.';
    END IF;
    IF c.backoff_max < interval '0' THEN
        RAISE EXCEPTION 'backoff_max must not be negative, not "%"', c.backoff_max
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (c.backoff_jitter >= 0 AND c.backoff_jitter <= 1) THEN
        RAISE EXCEPTION 'backoff_jitter must be between 0 and 1, not %', c.backoff_jitter
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The jitter is a fraction: 0.1 spreads each backoff by +/- 10%.';
    END IF;
    IF c.item_ttl <= interval '0' THEN
        RAISE EXCEPTION 'item_ttl must be positive, not "%"', c.item_ttl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.dedup_window <= interval '0' THEN
        RAISE EXCEPTION 'dedup_window must be positive, not "%"', c.dedup_window
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.priority_aging <= interval '0' THEN
        RAISE EXCEPTION 'priority_aging must be positive, not "%"', c.priority_aging
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be at least 1, not %', c.max_in_flight
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.retention < interval '0' THEN
        RAISE EXCEPTION 'retention must not be negative, not "%"', c.retention
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.sla <= interval '0' THEN
        RAISE EXCEPTION 'sla must be positive, not "%"', c.sla
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.audit NOT IN ('all', 'failures', 'none') THEN
        RAISE EXCEPTION 'invalid audit level "%"', c.audit
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid levels are ''all'', ''failures'' and ''none''.';
    END IF;
    IF NOT (c.breaker_threshold > 0 AND c.breaker_threshold < 1) THEN
        RAISE EXCEPTION 'breaker_threshold must be between 0 and 1 (exclusive), not %', c.breaker_threshold
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'It is the failed fraction that trips the breaker: 0.5 trips when more than half the outcomes fail.';
    END IF;
    IF c.breaker_window <= interval '0' THEN
        RAISE EXCEPTION 'breaker_window must be positive, not "%"', c.breaker_window
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.breaker_min_samples < 1 THEN
        RAISE EXCEPTION 'breaker_min_samples must be at least 1, not %', c.breaker_min_samples
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.breaker_cooldown <= interval '0' THEN
        RAISE EXCEPTION 'breaker_cooldown must be positive, not "%"', c.breaker_cooldown
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
COMMENT ON FUNCTION queue._check_settings(queue.queue_config) IS 'Validates a queue''s settings';

CREATE FUNCTION queue.create_queue(
    queue_name          text,
    lease_timeout       interval DEFAULT '5 min',
    max_attempts        int      DEFAULT 5,
    backoff_base        interval DEFAULT '5 s',
    backoff_factor      float8   DEFAULT 3,
    backoff_max         interval DEFAULT '1 h',
    backoff_jitter      float8   DEFAULT 0.1,
    item_ttl            interval DEFAULT NULL,
    dedup_window        interval DEFAULT NULL,
    priority_aging      interval DEFAULT NULL,
    max_in_flight       int      DEFAULT NULL,
    retention           interval DEFAULT '7 days',
    sla                 interval DEFAULT NULL,
    notify              boolean  DEFAULT true,
    audit               text     DEFAULT 'failures',
    breaker_threshold   float8   DEFAULT NULL,
    breaker_window      interval DEFAULT '10 min',
    breaker_min_samples int      DEFAULT 20,
    breaker_cooldown    interval DEFAULT '5 min',
    if_not_exists       boolean  DEFAULT false)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
BEGIN
    c.queue_name := queue._check_name(create_queue.queue_name);
    c.lease_timeout := create_queue.lease_timeout;
    c.max_attempts := create_queue.max_attempts;
    c.backoff_base := create_queue.backoff_base;
    c.backoff_factor := create_queue.backoff_factor;
    c.backoff_max := create_queue.backoff_max;
    c.backoff_jitter := create_queue.backoff_jitter;
    c.item_ttl := create_queue.item_ttl;
    c.dedup_window := create_queue.dedup_window;
    c.priority_aging := create_queue.priority_aging;
    c.max_in_flight := create_queue.max_in_flight;
    c.retention := create_queue.retention;
    c.sla := create_queue.sla;
    c.notify := create_queue.notify;
    c.audit := create_queue.audit;
    c.breaker_threshold := create_queue.breaker_threshold;
    c.breaker_window := create_queue.breaker_window;
    c.breaker_min_samples := create_queue.breaker_min_samples;
    c.breaker_cooldown := create_queue.breaker_cooldown;
    PERFORM queue._check_settings(c);

    INSERT INTO queue.queue_config AS q
           (queue_name, lease_timeout, max_attempts, backoff_base, backoff_factor, backoff_max,
            backoff_jitter, item_ttl, dedup_window, priority_aging, max_in_flight, retention, sla,
            notify, audit, breaker_threshold, breaker_window, breaker_min_samples, breaker_cooldown)
    VALUES (c.queue_name, c.lease_timeout, c.max_attempts, c.backoff_base, c.backoff_factor,
            c.backoff_max, c.backoff_jitter, c.item_ttl, c.dedup_window, c.priority_aging,
            c.max_in_flight, c.retention, c.sla, c.notify, c.audit, c.breaker_threshold,
            c.breaker_window, c.breaker_min_samples, c.breaker_cooldown)
    ON CONFLICT ON CONSTRAINT queue_config_pkey DO NOTHING;
    IF NOT FOUND AND NOT coalesce(create_queue.if_not_exists, false) THEN
        RAISE EXCEPTION 'queue "%" already exists', c.queue_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Pass if_not_exists => true to accept an existing queue, or change it with queue.alter_queue().';
    END IF;
END
$$;
COMMENT ON FUNCTION queue.create_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, boolean)
    IS 'Creates a queue with its lease, retry, retention, audit and breaker settings';

CREATE FUNCTION queue.alter_queue(
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
    -- a queue without a breaker cannot stay paused by one
    IF c.breaker_threshold IS NULL AND c.breaker_state <> 'closed' THEN
        PERFORM queue.resume(v_name);
    END IF;
END
$$;
COMMENT ON FUNCTION queue.alter_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval)
    IS 'Changes queue settings; NULL leaves a setting unchanged, zero switches an optional one off';

CREATE FUNCTION queue.drop_queue(queue_name text, force boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(drop_queue.queue_name);
    v_live bigint;
    v_counts jsonb;
BEGIN
    PERFORM 1 FROM queue.queue_config q WHERE q.queue_name = v_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT count(*) INTO v_live FROM queue.item_live i WHERE i.queue_name = v_name;
    IF v_live > 0 AND NOT coalesce(drop_queue.force, false) THEN
        RAISE EXCEPTION 'queue "%" has % live items', v_name, v_live
            USING ERRCODE = 'object_in_use',
                  DETAIL = 'Queued, scheduled, on-hold and processing items would be lost.',
                  HINT = 'Let the items finish, purge them, or pass force => true.';
    END IF;

    WITH l AS (DELETE FROM queue.item_live i WHERE i.queue_name = v_name RETURNING 1),
         h AS (DELETE FROM queue.item_done d WHERE d.queue_name = v_name RETURNING 1),
         x AS (DELETE FROM queue.dead_letters d WHERE d.queue_name = v_name RETURNING 1),
         e AS (DELETE FROM queue.events e WHERE e.queue_name = v_name RETURNING 1)
    SELECT jsonb_build_object('live', (SELECT count(*) FROM l), 'history', (SELECT count(*) FROM h),
                              'dead_letters', (SELECT count(*) FROM x), 'events', (SELECT count(*) FROM e))
      INTO v_counts;
    DELETE FROM queue.dedup_done d WHERE d.queue_name = v_name;
    DELETE FROM queue.failure_log f WHERE f.queue_name = v_name;
    DELETE FROM queue.alerts a WHERE a.queue_name = v_name;
    DELETE FROM queue.metrics_history m WHERE m.queue_name = v_name;
    DELETE FROM queue.metrics_totals t WHERE t.queue_name = v_name;
    DELETE FROM queue.queue_grant g WHERE g.queue_name = v_name;
    DELETE FROM queue.queue_config q WHERE q.queue_name = v_name;
    INSERT INTO queue.events (queue_name, kind, details)
    VALUES (v_name, 'queue_dropped', v_counts || jsonb_build_object('force', coalesce(drop_queue.force, false)));
END
$$;
COMMENT ON FUNCTION queue.drop_queue(text, boolean)
    IS 'Drops a queue; refuses while it has live items unless force, which removes its history, dead letters and events too';

CREATE FUNCTION queue.purge(queue_name text)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(purge.queue_name);
    v_n bigint;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    -- everything not under a current lease: queued, scheduled, on hold
    WITH d AS (
        DELETE FROM queue.item_live i
         WHERE i.queue_name = v_name
           AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > now())
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    PERFORM queue._event(v_name, NULL, 'purged', NULL, NULL, jsonb_build_object('items', v_n));
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue.purge(text)
    IS 'Deletes the queued, scheduled and on-hold items of a queue (not processing ones); returns how many';

CREATE VIEW queue.queues WITH (security_barrier) AS
SELECT c.queue_name, c.lease_timeout, c.max_attempts, c.backoff_base, c.backoff_factor,
       c.backoff_max, c.backoff_jitter, c.item_ttl, c.dedup_window, c.priority_aging,
       c.max_in_flight, c.retention, c.sla, c.notify, c.audit, c.breaker_threshold,
       c.breaker_window, c.breaker_min_samples, c.breaker_cooldown,
       c.paused, c.pause_reason, c.paused_at,
       CASE WHEN c.breaker_state = 'probing' THEN 'half_open'
            WHEN c.breaker_state = 'open' AND c.breaker_opened_at + c.breaker_cooldown <= now()
              THEN 'half_open'
            ELSE c.breaker_state END AS breaker_state,
       c.created_at
  FROM queue.queue_config c
 WHERE queue._can_read(c.queue_name);
COMMENT ON VIEW queue.queues IS 'Every queue the caller may read, with its settings and pause state';

-- source: schema/40_items.sql
-- ======================================================================
-- Items: producing, consuming (C hot path), operator actions, views
--
-- The C functions pin search_path like every SECURITY DEFINER function,
-- and the statements they run qualify their names besides (src/queue.h).
-- ======================================================================

CREATE FUNCTION queue.enqueue(
    queue_name     text,
    payload        jsonb,
    priority       int         DEFAULT 2,
    run_at         timestamptz DEFAULT now(),
    dedup_key      text        DEFAULT NULL,
    expires_at     timestamptz DEFAULT NULL,
    max_attempts   int         DEFAULT NULL,
    correlation_id text        DEFAULT NULL)
RETURNS bigint LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_enqueue';
COMMENT ON FUNCTION queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text)
    IS 'Adds an item; with a dedup_key held by a live item returns that item''s id instead';

CREATE FUNCTION queue.enqueue_batch(
    queue_name   text,
    payloads     jsonb[],
    priority     int         DEFAULT 2,
    run_at       timestamptz DEFAULT now(),
    dedup_keys   text[]      DEFAULT NULL,
    expires_at   timestamptz DEFAULT NULL,
    max_attempts int         DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_enqueue_batch';
COMMENT ON FUNCTION queue.enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int)
    IS 'Adds many items in one call; returns their ids in input order';

CREATE FUNCTION queue.dequeue(
    queue_name    text,
    worker        text,
    batch_size    int      DEFAULT 1,
    lease_timeout interval DEFAULT NULL)
RETURNS TABLE (item_id bigint, lease_token bigint, payload jsonb, progress jsonb,
               attempt int, max_attempts int, priority int, enqueued_at timestamptz,
               lease_expires_at timestamptz, dedup_key text, correlation_id text)
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_dequeue';
COMMENT ON FUNCTION queue.dequeue(text, text, int, interval)
    IS 'Claims up to batch_size items under a lease with a fencing token';

CREATE FUNCTION queue.complete(queue_name text, item_id bigint, lease_token bigint,
                               result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_complete';
COMMENT ON FUNCTION queue.complete(text, bigint, bigint, jsonb)
    IS 'Moves a leased item to the history; false if the lease is not current';

CREATE FUNCTION queue.complete_batch(queue_name text, item_ids bigint[], lease_tokens bigint[],
                                     result jsonb DEFAULT NULL)
RETURNS int LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_complete_batch';
COMMENT ON FUNCTION queue.complete_batch(text, bigint[], bigint[], jsonb)
    IS 'Completes the items whose lease tokens are current; returns how many';

CREATE FUNCTION queue.fail(queue_name text, item_id bigint, lease_token bigint, error text,
                           error_code text DEFAULT NULL, permanent boolean DEFAULT false,
                           retry_in interval DEFAULT NULL)
RETURNS text LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_fail';
COMMENT ON FUNCTION queue.fail(text, bigint, bigint, text, text, boolean, interval)
    IS 'Reports a failed attempt: ''retrying'' (backoff) or ''dead'' (dead letter); NULL if the lease is not current';

CREATE FUNCTION queue.release(queue_name text, item_id bigint, lease_token bigint,
                              run_at timestamptz DEFAULT now())
RETURNS boolean LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_release';
COMMENT ON FUNCTION queue.release(text, bigint, bigint, timestamptz)
    IS 'Gives a leased item back without counting the attempt';

CREATE FUNCTION queue.extend_lease(queue_name text, item_id bigint, lease_token bigint,
                                   extend_by interval DEFAULT NULL)
RETURNS timestamptz LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_extend_lease';
COMMENT ON FUNCTION queue.extend_lease(text, bigint, bigint, interval)
    IS 'Moves the lease''s expiry to now() + extend_by; NULL if the lease is lost';

CREATE FUNCTION queue.checkpoint(queue_name text, item_id bigint, lease_token bigint,
                                 progress jsonb)
RETURNS boolean LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_checkpoint';
COMMENT ON FUNCTION queue.checkpoint(text, bigint, bigint, jsonb)
    IS 'Merges progress into the item; it survives retries, dead-lettering and replay';

-- Operator actions --------------------------------------------------------

CREATE FUNCTION queue.hold(queue_name text, item_id bigint, reason text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(hold.queue_name);
BEGIN
    IF hold.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.item_live i
       SET on_hold = true, hold_reason = hold.reason, visible_at = 'infinity',
           lease_token = NULL, lease_expires_at = NULL, worker = NULL
     WHERE i.queue_name = v_name AND i.item_id = hold.item_id AND NOT i.on_hold
       AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > now());
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._event(v_name, hold.item_id, 'held', NULL, NULL,
                         jsonb_build_object('reason', hold.reason));
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.hold(text, bigint, text) IS 'Puts a queued item on hold; false for other states';

CREATE FUNCTION queue.unhold(queue_name text, item_id bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(unhold.queue_name);
BEGIN
    IF unhold.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.item_live i
       SET on_hold = false, hold_reason = NULL,
           visible_at = greatest(i.run_at, now()), run_at = greatest(i.run_at, now())
     WHERE i.queue_name = v_name AND i.item_id = unhold.item_id AND i.on_hold;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._event(v_name, unhold.item_id, 'unheld');
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.unhold(text, bigint) IS 'Returns an on-hold item to the queue; false for other states';

CREATE FUNCTION queue.cancel(queue_name text, item_id bigint, reason text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(cancel.queue_name);
BEGIN
    IF cancel.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    PERFORM 1 FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.item_id = cancel.item_id
       AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > now())
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._bury(v_name, cancel.item_id, 'cancelled', cancel.reason, NULL);
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.cancel(text, bigint, text)
    IS 'Makes a queued or on-hold item a dead letter with reason cancelled; false for other states';

-- Views -------------------------------------------------------------------

-- The state of a live row, by the rules of the claim index.
CREATE FUNCTION queue._live_state(on_hold boolean, lease_token bigint,
                                  lease_expires_at timestamptz, visible_at timestamptz)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
             WHEN on_hold THEN 'on_hold'
             WHEN lease_token IS NOT NULL
                  AND lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.now() THEN 'processing'
             WHEN visible_at OPERATOR(pg_catalog.>) pg_catalog.now() THEN 'scheduled'
             ELSE 'queued'
           END
$$;
COMMENT ON FUNCTION queue._live_state(boolean, bigint, timestamptz, timestamptz)
    IS 'State of a live item; inlined into views, so every name is qualified';

CREATE VIEW queue.items WITH (security_barrier) AS
SELECT i.queue_name, i.item_id,
       queue._live_state(i.on_hold, i.lease_token, i.lease_expires_at, i.visible_at) AS state,
       i.base_priority AS priority, i.attempt, i.max_attempts, i.run_at, i.enqueued_at,
       CASE WHEN i.lease_token IS NOT NULL THEN i.lease_expires_at END AS lease_expires_at,
       i.worker, i.dedup_key, i.correlation_id, i.last_error, i.payload, i.progress,
       i.priority AS effective_priority, i.expires_at, i.error_code, i.hold_reason, i.claimed_at
  FROM queue.item_live i
 WHERE queue._can_read(i.queue_name);
COMMENT ON VIEW queue.items IS 'Live items: queued, scheduled, processing or on hold';

CREATE VIEW queue.history WITH (security_barrier) AS
SELECT d.queue_name, d.item_id, d.payload, d.result, d.attempts, d.worker, d.enqueued_at,
       d.claimed_at, d.completed_at, d.dedup_key, d.correlation_id, d.progress
  FROM queue.item_done d
 WHERE queue._can_read(d.queue_name);
COMMENT ON VIEW queue.history IS 'Processed items, kept for the queue''s retention';

CREATE FUNCTION queue.item(queue_name text, item_id bigint)
RETURNS TABLE (state text, priority int, attempt int,
               max_attempts int, payload jsonb, progress jsonb, result jsonb, worker text,
               enqueued_at timestamptz, run_at timestamptz, lease_expires_at timestamptz,
               finished_at timestamptz, last_error text, error_code text, reason text,
               dedup_key text, correlation_id text, replayed_as bigint)
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(item.queue_name);
BEGIN
    IF item.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    RETURN QUERY
    SELECT queue._live_state(i.on_hold, i.lease_token, i.lease_expires_at, i.visible_at),
           i.base_priority, i.attempt, i.max_attempts, i.payload,
           i.progress, NULL::jsonb, i.worker, i.enqueued_at, i.run_at,
           CASE WHEN i.lease_token IS NOT NULL THEN i.lease_expires_at END,
           NULL::timestamptz, i.last_error, i.error_code, NULL::text, i.dedup_key,
           i.correlation_id, NULL::bigint
      FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.item_id = item.item_id;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 'processed'::text, NULL::int, d.attempts, NULL::int,
           d.payload, d.progress, d.result, d.worker, d.enqueued_at, NULL::timestamptz,
           NULL::timestamptz, d.completed_at, NULL::text, NULL::text, NULL::text,
           d.dedup_key, d.correlation_id, NULL::bigint
      FROM queue.item_done d
     WHERE d.queue_name = v_name AND d.item_id = item.item_id;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 'dead'::text, x.priority, x.attempts, x.max_attempts,
           x.payload, x.progress, NULL::jsonb, x.worker, x.enqueued_at, NULL::timestamptz,
           NULL::timestamptz, x.dead_at, x.last_error, x.error_code, x.reason,
           x.dedup_key, x.correlation_id, x.replayed_as
      FROM queue.dead_letters x
     WHERE x.queue_name = v_name AND x.item_id = item.item_id;
END
$$;
COMMENT ON FUNCTION queue.item(text, bigint)
    IS 'One item wherever it is now: a live state, processed, or dead; no row if unknown or purged';

-- source: schema/50_dead_letters.sql
-- ======================================================================
-- Dead letters: replay, replay_all, review
-- ======================================================================

CREATE FUNCTION queue.replay(queue_name text, item_id bigint, payload jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(replay.queue_name);
    x queue.dead_letters;
    c queue.queue_config;
    v_payload jsonb;
    v_new bigint;
BEGIN
    IF replay.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = v_name;
    SELECT * INTO x FROM queue.dead_letters d
     WHERE d.queue_name = v_name AND d.item_id = replay.item_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF x.replayed_as IS NOT NULL THEN
        RAISE EXCEPTION 'dead letter % of queue "%" was already replayed as item %',
                        x.item_id, v_name, x.replayed_as
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = format('Follow item %s instead.', x.replayed_as);
    END IF;
    v_payload := coalesce(replay.payload, x.payload);
    PERFORM queue._check_payload(v_payload);

    INSERT INTO queue.item_live AS i (queue_name, priority, visible_at, base_priority, run_at,
                                      max_attempts, expires_at, dedup_key, correlation_id,
                                      payload, progress)
    VALUES (v_name, x.priority, now(), x.priority, now(),
            coalesce(x.max_attempts, c.max_attempts), now() + c.item_ttl,
            x.dedup_key, x.correlation_id, v_payload, x.progress)
    ON CONFLICT (queue_name, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING i.item_id INTO v_new;
    IF v_new IS NULL THEN
        -- the key is held by a live item: that item stands for the replay
        SELECT i.item_id INTO v_new FROM queue.item_live i
         WHERE i.queue_name = v_name AND i.dedup_key = x.dedup_key;
    ELSIF c.notify THEN
        PERFORM pg_notify('queue_' || v_name, '');
    END IF;

    UPDATE queue.dead_letters d
       SET review_status = 'resolved', replayed_as = v_new, reviewed_at = now()
     WHERE d.queue_name = v_name AND d.item_id = x.item_id;
    PERFORM queue._event(v_name, x.item_id, 'replayed', NULL, NULL,
                         jsonb_build_object('replayed_as', v_new,
                                            'payload_changed', replay.payload IS NOT NULL));
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION queue.replay(text, bigint, jsonb)
    IS 'Re-enqueues a dead letter with attempts reset and its progress kept; returns the new item id';

CREATE FUNCTION queue.replay_all(queue_name text, error_code text DEFAULT NULL,
                                 since timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(replay_all.queue_name);
    v_id bigint;
    v_n bigint := 0;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    FOR v_id IN
        SELECT d.item_id FROM queue.dead_letters d
         WHERE d.queue_name = v_name
           AND d.review_status IN ('new', 'in_review')
           AND d.replayed_as IS NULL
           AND (replay_all.error_code IS NULL OR d.error_code = replay_all.error_code)
           AND (replay_all.since IS NULL OR d.dead_at >= replay_all.since)
         ORDER BY d.dead_at, d.item_id
    LOOP
        PERFORM queue.replay(v_name, v_id);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue.replay_all(text, text, timestamptz)
    IS 'Replays every dead letter still new or in review, optionally of one error_code or dead since a time';

CREATE FUNCTION queue.review(queue_name text, item_id bigint, review_status text,
                             note text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(review.queue_name);
BEGIN
    IF review.item_id IS NULL OR review.review_status IS NULL THEN
        RAISE EXCEPTION '% must not be null',
                        CASE WHEN review.item_id IS NULL THEN 'item_id' ELSE 'review_status' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF review.review_status NOT IN ('new', 'in_review', 'resolved', 'rejected') THEN
        RAISE EXCEPTION 'invalid review_status "%"', review.review_status
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid statuses are ''new'', ''in_review'', ''resolved'' and ''rejected''.';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.dead_letters d
       SET review_status = review.review_status,
           review_note = coalesce(review.note, d.review_note),
           reviewed_at = now()
     WHERE d.queue_name = v_name AND d.item_id = review.item_id;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION queue.review(text, bigint, text, text)
    IS 'Sets a dead letter''s review status (new, in_review, resolved, rejected); false if unknown';

-- source: schema/60_fleet.sql
-- ======================================================================
-- Fleet control: pause and resume
-- ======================================================================

CREATE FUNCTION queue.pause(queue_name text, reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(pause.queue_name);
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.queue_config c
       SET paused = true, pause_reason = coalesce(pause.reason, 'paused by ' || session_user),
           paused_at = now()
     WHERE c.queue_name = v_name;
    PERFORM queue._event(v_name, NULL, 'paused', NULL, NULL,
                         jsonb_build_object('reason', pause.reason, 'by', session_user));
END
$$;
COMMENT ON FUNCTION queue.pause(text, text) IS 'Stops handing out items of a queue; in-flight items finish normally';

CREATE FUNCTION queue.resume(queue_name text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(resume.queue_name);
    v_state text;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    SELECT c.breaker_state INTO v_state FROM queue.queue_config c
     WHERE c.queue_name = v_name FOR UPDATE;
    -- a manual resume closes the breaker and forgets earlier outcomes
    UPDATE queue.queue_config c
       SET paused = false, pause_reason = NULL, paused_at = NULL,
           breaker_state = 'closed', breaker_opened_at = NULL, breaker_since = now(),
           probe_item_id = NULL, probe_expires_at = NULL
     WHERE c.queue_name = v_name;
    IF v_state <> 'closed' THEN
        PERFORM queue._event(v_name, NULL, 'breaker_closed', NULL, NULL,
                             jsonb_build_object('by', session_user));
        PERFORM queue._clear_alert(v_name, 'breaker_open');
    END IF;
    PERFORM queue._event(v_name, NULL, 'resumed', NULL, NULL,
                         jsonb_build_object('by', session_user));
END
$$;
COMMENT ON FUNCTION queue.resume(text) IS 'Resumes a paused queue; closes an open circuit breaker';

-- ======================================================================
-- Fleet control: workers, heartbeats, draining, maintenance windows,
-- offline recovery
-- ======================================================================

-- Validate a worker name argument.
CREATE FUNCTION queue._check_worker(p_worker text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF p_worker IS NULL THEN
        RAISE EXCEPTION 'worker must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_worker = '' THEN
        RAISE EXCEPTION 'worker must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Name the bot, for example ''bot-07''.';
    END IF;
    RETURN p_worker;
END
$$;
COMMENT ON FUNCTION queue._check_worker(text) IS 'Validates a worker name';

CREATE FUNCTION queue.register_worker(worker text, queues text[] DEFAULT NULL,
                                      capacity int DEFAULT NULL, info jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text := queue._check_worker(register_worker.worker);
    v_q text;
BEGIN
    IF register_worker.capacity IS NOT NULL AND register_worker.capacity < 1 THEN
        RAISE EXCEPTION 'capacity must be at least 1, not %', register_worker.capacity
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL for a worker without a limit.';
    END IF;
    FOREACH v_q IN ARRAY coalesce(register_worker.queues, '{}') LOOP
        PERFORM queue._check_name(v_q);
    END LOOP;
    INSERT INTO queue.worker_registry AS w (worker, queues, capacity, info, last_seen)
    VALUES (v_worker, register_worker.queues, register_worker.capacity,
            coalesce(register_worker.info, '{}'), now())
    ON CONFLICT (worker) DO UPDATE
       SET queues = EXCLUDED.queues, capacity = EXCLUDED.capacity, info = EXCLUDED.info,
           last_seen = now(), offline_handled_at = NULL;
END
$$;
COMMENT ON FUNCTION queue.register_worker(text, text[], int, jsonb)
    IS 'Registers a worker with its queues, capacity (most leases held at once) and info';

CREATE FUNCTION queue.heartbeat(worker text)
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text := queue._check_worker(heartbeat.worker);
    q record;
    v_n int;
    v_total int := 0;
BEGIN
    INSERT INTO queue.worker_registry AS w (worker) VALUES (v_worker)
    ON CONFLICT (worker) DO UPDATE SET last_seen = now(), offline_handled_at = NULL;
    -- one statement per queue, each on the queue's leases of this worker
    FOR q IN SELECT c.queue_name, c.lease_timeout FROM queue.queue_config c ORDER BY 1 LOOP
        UPDATE queue.item_live i
           SET lease_expires_at = now() + q.lease_timeout,
               visible_at = now() + q.lease_timeout
         WHERE i.queue_name = q.queue_name AND i.worker = v_worker
           AND i.lease_token IS NOT NULL;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_total := v_total + v_n;
    END LOOP;
    RETURN v_total;
END
$$;
COMMENT ON FUNCTION queue.heartbeat(text)
    IS 'Marks the worker alive and renews every lease it still holds; returns how many';

CREATE FUNCTION queue.drain_worker(worker text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text := queue._check_worker(drain_worker.worker);
BEGIN
    INSERT INTO queue.worker_registry AS w (worker, draining, last_seen)
    VALUES (v_worker, true, '-infinity')
    ON CONFLICT (worker) DO UPDATE SET draining = true;
END
$$;
COMMENT ON FUNCTION queue.drain_worker(text)
    IS 'Gives the worker nothing new; its in-flight items finish normally';

CREATE FUNCTION queue.undrain_worker(worker text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text := queue._check_worker(undrain_worker.worker);
BEGIN
    UPDATE queue.worker_registry w SET draining = false WHERE w.worker = v_worker;
END
$$;
COMMENT ON FUNCTION queue.undrain_worker(text) IS 'Lets a drained worker claim items again';

CREATE FUNCTION queue.add_maintenance(worker text, starts_at timestamptz, ends_at timestamptz,
                                      reason text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text := queue._check_worker(add_maintenance.worker);
    v_id bigint;
BEGIN
    IF add_maintenance.starts_at IS NULL OR add_maintenance.ends_at IS NULL THEN
        RAISE EXCEPTION '% must not be null',
                        CASE WHEN add_maintenance.starts_at IS NULL THEN 'starts_at' ELSE 'ends_at' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF add_maintenance.ends_at <= add_maintenance.starts_at THEN
        RAISE EXCEPTION 'maintenance window ends (%) before it starts (%)',
                        add_maintenance.ends_at, add_maintenance.starts_at
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass ends_at later than starts_at.';
    END IF;
    INSERT INTO queue.worker_registry AS w (worker, last_seen) VALUES (v_worker, '-infinity')
    ON CONFLICT (worker) DO NOTHING;
    INSERT INTO queue.maintenance_window (worker, starts_at, ends_at, reason)
    VALUES (v_worker, add_maintenance.starts_at, add_maintenance.ends_at, add_maintenance.reason)
    RETURNING window_id INTO v_id;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION queue.add_maintenance(text, timestamptz, timestamptz, text)
    IS 'Adds a maintenance window inside which the worker gets nothing new; returns its id';

-- Orphan recovery: the leases on this queue held by offline workers end now.
-- Each counts as a failed attempt (dead letter lease_expired when it was the
-- last); the items are claimable at once.  Returns how many were recovered.
CREATE FUNCTION queue._recover_offline(p_queue text)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_cutoff timestamptz := now() - make_interval(secs => queue._worker_offline_after());
    r record;
    v_n bigint := 0;
BEGIN
    FOR r IN
        SELECT i.item_id, i.worker, i.attempt, i.max_attempts
          FROM queue.item_live i
          JOIN queue.worker_registry w ON w.worker = i.worker
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL AND i.lease_token IS NOT NULL
           AND w.last_seen < v_cutoff
         ORDER BY i.item_id
         LIMIT 10000
           FOR UPDATE OF i SKIP LOCKED
    LOOP
        IF r.attempt >= r.max_attempts THEN
            PERFORM queue._bury(p_queue, r.item_id, 'lease_expired', NULL, NULL);
        ELSE
            UPDATE queue.item_live i
               SET lease_token = NULL, lease_expires_at = NULL, worker = NULL,
                   visible_at = now(), run_at = now(), priority = i.base_priority,
                   last_error = 'worker offline', error_code = 'worker_offline',
                   errors = i.errors || jsonb_build_array(jsonb_build_object(
                       'attempt', i.attempt, 'at', now(), 'worker', r.worker,
                       'error', 'worker offline', 'error_code', 'worker_offline'))
             WHERE i.queue_name = p_queue AND i.item_id = r.item_id;
            INSERT INTO queue.failure_log (queue_name, item_id, attempt, worker, kind, error_code, error)
            VALUES (p_queue, r.item_id, r.attempt, r.worker, 'offline', 'worker_offline', 'worker offline');
            PERFORM queue._event(p_queue, r.item_id, 'recovered', r.worker, r.attempt,
                                 jsonb_build_object('reason', 'worker_offline', 'worker', r.worker));
        END IF;
        PERFORM queue._raise_alert(p_queue, 'worker_offline',
                                   format('worker %s went offline holding items of queue %s',
                                          r.worker, p_queue),
                                   jsonb_build_object('worker', r.worker));
        UPDATE queue.worker_registry w SET offline_handled_at = now() WHERE w.worker = r.worker;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue._recover_offline(text) IS 'Ends the leases of offline workers on a queue; returns how many';

CREATE VIEW queue.workers AS
SELECT w.worker,
       CASE
         WHEN w.last_seen < now() - make_interval(secs => queue._worker_offline_after()) THEN 'offline'
         WHEN w.draining THEN 'draining'
         WHEN EXISTS (SELECT 1 FROM queue.maintenance_window m
                       WHERE m.worker = w.worker AND m.starts_at <= now() AND m.ends_at > now())
           THEN 'maintenance'
         WHEN f.in_flight > 0 THEN 'active'
         ELSE 'idle'
       END AS status,
       w.last_seen, f.in_flight, d.completed_24h, fl.failed_24h, d.mean_run_time,
       CASE WHEN d.completed_24h + fl.failed_24h > 0
            THEN round(d.completed_24h::numeric / (d.completed_24h + fl.failed_24h), 4) END
         AS success_rate,
       w.capacity, w.draining, w.queues, w.info, w.registered_at
  FROM queue.worker_registry w
 CROSS JOIN LATERAL (
        SELECT count(*) AS in_flight
          FROM queue.queue_config q
          JOIN queue.item_live i ON i.queue_name = q.queue_name AND i.worker = w.worker
         WHERE i.lease_token IS NOT NULL AND i.lease_expires_at > now()) f
 CROSS JOIN LATERAL (
        SELECT count(*) AS completed_24h, avg(h.completed_at - h.claimed_at) AS mean_run_time
          FROM queue.item_done h
         WHERE h.completed_at > now() - interval '24 hours' AND h.worker = w.worker) d
 CROSS JOIN LATERAL (
        SELECT count(*) AS failed_24h
          FROM queue.failure_log x
         WHERE x.at > now() - interval '24 hours' AND x.worker = w.worker) fl;
COMMENT ON VIEW queue.workers
    IS 'Every worker: status (active, idle, draining, maintenance, offline), in-flight items, 24 h results';

-- source: schema/70_maintenance.sql
-- ======================================================================
-- Maintenance: sweep, snapshot_metrics, enable_cron, disable_cron
-- ======================================================================
--
-- sweep() loops over the queues and runs the per-queue work in
-- queue._sweep_queue(), each queue in its own subtransaction so that one
-- broken queue never stops the maintenance of the others.  A queue is swept
-- under a transaction advisory lock taken with pg_try_advisory_xact_lock:
-- a second sweeper skips the queues the first one holds (its row shows
-- zeros), so sweeps are safe to run concurrently and never wait.  Every
-- statement filters queue_name, and each kind of work stops after
-- queue._sweep_batch() rows per queue and call, so one call never holds
-- many row locks on a queue with millions of items; the next call goes on.
-- Correctness never depends on the sweeper: dequeue reclaims expired
-- leases and buries expired or spent items itself.
--
-- Priority aging is stored by sweep, 10,000 re-prioritised items per queue
-- and call (measured: 0.5 s per call on a queue of 10 million items).  A
-- backlog in which more than 10,000 x (priority_aging / sweep interval)
-- items change priority per step ages late, oldest items first; claim-time
-- aging in dequeue would be the remedy for such queues.

-- Rows per queue, per call and per kind of work.
CREATE FUNCTION queue._sweep_batch() RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT 10000';
COMMENT ON FUNCTION queue._sweep_batch() IS 'How many rows sweep handles per queue, per call and per kind of work';

-- Second key of the advisory lock that serialises sweeps of one queue
-- (dequeue's max_in_flight lock uses 1903520101).
CREATE FUNCTION queue._sweep_lock_key() RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT 1903520102';
COMMENT ON FUNCTION queue._sweep_lock_key() IS 'Second key of the per-queue sweep advisory lock';

-- A duration in whole seconds as HH:MM:SS (hours may pass 24), the same
-- under every IntervalStyle: alert messages and health reasons use it.
CREATE FUNCTION queue._say_duration(p interval) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_char(make_interval(secs => floor(extract(epoch FROM p))), 'HH24:MI:SS')
$$;
COMMENT ON FUNCTION queue._say_duration(interval) IS 'A duration as HH:MM:SS, independent of IntervalStyle';

-- Alerts of one queue: raise what holds, clear what no longer does.
CREATE FUNCTION queue._sweep_alerts(p_queue text)
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
        PERFORM queue._raise_alert(p_queue, 'worker_offline',
            format('queue %s: offline worker%s %s held its items', p_queue,
                   CASE WHEN cardinality(v_workers) > 1 THEN 's' ELSE '' END,
                   array_to_string(v_workers, ', ')),
            jsonb_build_object('workers', to_jsonb(v_workers)));
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

-- The work of sweep() on one queue.  swept is false when another session
-- is sweeping the queue (or it was dropped meanwhile).
CREATE FUNCTION queue._sweep_queue(p_queue text,
                                   OUT swept boolean, OUT recovered bigint,
                                   OUT dead_lettered bigint, OUT expired bigint,
                                   OUT aged bigint, OUT purged bigint)
RETURNS record LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    v_batch int := queue._sweep_batch();
    v_now timestamptz := now();
    v_id bigint;
    v_n bigint;
    v_aging float8;
    v_keep_failures interval;
    v_oldest_kept timestamptz;
BEGIN
    swept := false;
    recovered := 0;
    dead_lettered := 0;
    expired := 0;
    aged := 0;
    purged := 0;
    IF NOT pg_try_advisory_xact_lock(hashtext(p_queue), queue._sweep_lock_key()) THEN
        RETURN;
    END IF;
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    swept := true;

    -- Offline workers: their leases are released at once (orphan recovery).
    recovered := coalesce(queue._recover_offline(p_queue), 0);

    -- Lost leases on the last attempt become dead letters.  Leased rows
    -- keep worker set until they are claimed again: the worker index
    -- finds them without reading the backlog.
    FOR v_id IN
        SELECT i.item_id FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_token IS NOT NULL AND i.lease_expires_at <= v_now
           AND i.attempt >= i.max_attempts AND NOT i.on_hold
         ORDER BY i.item_id
         LIMIT v_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM queue._bury(p_queue, v_id, 'lease_expired', NULL, NULL);
        dead_lettered := dead_lettered + 1;
    END LOOP;

    -- Expiry: every item past expires_at that is not under a current lease
    -- (queued, scheduled or on hold); a processing item finishes first.
    FOR v_id IN
        SELECT i.item_id FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.expires_at IS NOT NULL
           AND i.expires_at <= v_now
           AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > v_now)
         ORDER BY i.expires_at, i.item_id
         LIMIT v_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM queue._bury(p_queue, v_id, 'expired', NULL, NULL);
        expired := expired + 1;
    END LOOP;

    -- Priority aging: effective = greatest(0, base - floor(waited / aging)),
    -- waited from when the item became claimable (visible_at of a claimable
    -- row: run_at, the backoff's end, an unhold or a lease's expiry).  Only
    -- rows that waited at least one step can change.
    IF c.priority_aging IS NOT NULL THEN
        v_aging := extract(epoch FROM c.priority_aging);
        WITH cand AS (
            SELECT i.item_id,
                   greatest(0, i.base_priority
                               - floor(extract(epoch FROM v_now - greatest(i.enqueued_at, i.visible_at))
                                       / v_aging))::int AS np
              FROM queue.item_live i
             WHERE i.queue_name = p_queue
               AND i.visible_at <= v_now - c.priority_aging
               AND NOT i.on_hold
               AND i.priority <> greatest(0, i.base_priority
                               - floor(extract(epoch FROM v_now - greatest(i.enqueued_at, i.visible_at))
                                       / v_aging))::int
             ORDER BY i.item_id
             LIMIT v_batch
               FOR UPDATE SKIP LOCKED),
        upd AS (
            UPDATE queue.item_live i SET priority = cand.np
              FROM cand
             WHERE i.queue_name = p_queue AND i.item_id = cand.item_id
            RETURNING 1)
        SELECT count(*) INTO aged FROM upd;
    END IF;

    -- Retention.  Processed history:
    WITH d AS (
        DELETE FROM queue.item_done d
         WHERE d.queue_name = p_queue
           AND d.item_id = ANY (ARRAY(SELECT x.item_id FROM queue.item_done x
                              WHERE x.queue_name = p_queue
                                AND x.completed_at < v_now - c.retention
                              LIMIT v_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    purged := purged + v_n;

    -- resolved or rejected dead letters, kept for retention after review:
    WITH d AS (
        DELETE FROM queue.dead_letters d
         WHERE d.queue_name = p_queue
           AND d.item_id = ANY (ARRAY(SELECT x.item_id FROM queue.dead_letters x
                              WHERE x.queue_name = p_queue
                                AND x.review_status IN ('resolved', 'rejected')
                                AND coalesce(x.reviewed_at, x.dead_at) < v_now - c.retention
                              LIMIT v_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    purged := purged + v_n;

    -- events:
    WITH d AS (
        DELETE FROM queue.events e
         WHERE e.queue_name = p_queue
           AND e.event_id = ANY (ARRAY(SELECT x.event_id FROM queue.events x
                               WHERE x.queue_name = p_queue AND x.at < v_now - c.retention
                               LIMIT v_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    purged := purged + v_n;

    -- failed attempts, kept at least for the breaker window and the hour
    -- that stats() and health() look at:
    v_keep_failures := greatest(c.retention, c.breaker_window, interval '1 hour');
    WITH d AS (
        DELETE FROM queue.failure_log f
         WHERE f.queue_name = p_queue
           AND f.failure_id = ANY (ARRAY(SELECT x.failure_id FROM queue.failure_log x
                                 WHERE x.queue_name = p_queue
                                   AND x.at < v_now - v_keep_failures
                                 LIMIT v_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    purged := purged + v_n;

    -- dedup keys of completed items, past the dedup window (all of them
    -- when the queue has none):
    WITH d AS (
        DELETE FROM queue.dedup_done k
         WHERE k.queue_name = p_queue
           AND k.dedup_key = ANY (ARRAY(SELECT x.dedup_key FROM queue.dedup_done x
                                WHERE x.queue_name = p_queue
                                  AND x.completed_at < v_now - coalesce(c.dedup_window, interval '0')
                                LIMIT v_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    purged := purged + v_n;

    -- cleared alerts:
    WITH d AS (
        DELETE FROM queue.alerts a
         WHERE a.queue_name = p_queue
           AND a.alert_id = ANY (ARRAY(SELECT x.alert_id FROM queue.alerts x
                               WHERE x.queue_name = p_queue
                                 AND x.cleared_at < v_now - c.retention
                               LIMIT v_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    purged := purged + v_n;

    -- metrics snapshots, always keeping the newest three (health's backlog rule):
    SELECT m.taken_at INTO v_oldest_kept FROM queue.metrics_history m
     WHERE m.queue_name = p_queue ORDER BY m.taken_at DESC OFFSET 2 LIMIT 1;
    WITH d AS (
        DELETE FROM queue.metrics_history m
         WHERE m.queue_name = p_queue
           AND m.taken_at = ANY (ARRAY(SELECT x.taken_at FROM queue.metrics_history x
                               WHERE x.queue_name = p_queue
                                 AND x.taken_at < v_now - c.retention
                                 AND x.taken_at < v_oldest_kept
                               ORDER BY x.taken_at
                               LIMIT v_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    purged := purged + v_n;

    -- Breaker: an open breaker pauses the queue; a closed one may trip on
    -- failures that arrived without a fail() call (lost leases).
    PERFORM queue._breaker_check(p_queue);

    PERFORM queue._sweep_alerts(p_queue);
END
$$;
COMMENT ON FUNCTION queue._sweep_queue(text) IS 'The per-queue work of sweep(), under the queue''s sweep lock';

CREATE FUNCTION queue.sweep()
RETURNS TABLE (queue_name text, recovered bigint, dead_lettered bigint, expired bigint,
               aged bigint, purged bigint)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text;
    r record;
BEGIN
    FOR v_name IN SELECT c.queue_name FROM queue.queue_config c ORDER BY c.queue_name
    LOOP
        BEGIN
            SELECT * INTO r FROM queue._sweep_queue(v_name) s;
        EXCEPTION WHEN OTHERS THEN
            -- one broken queue must not stop the maintenance of the others
            RAISE WARNING 'sweep of queue "%" failed: %', v_name, SQLERRM
                USING DETAIL = format('SQLSTATE %s; the queue''s work of this call was rolled back.', SQLSTATE);
            CONTINUE;
        END;
        IF r.swept IS NULL THEN
            CONTINUE;
        END IF;
        queue_name := v_name;
        recovered := r.recovered;
        dead_lettered := r.dead_lettered;
        expired := r.expired;
        aged := r.aged;
        purged := r.purged;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION queue.sweep()
    IS 'Maintenance of every queue: offline recovery, spent leases, expiry, aging, retention, breaker and alerts; one row per queue';

-- ----------------------------------------------------------------------
-- Metrics snapshots
-- ----------------------------------------------------------------------

-- Running totals behind prometheus()'s counters.  History, failure_log and
-- dead letters shrink by retention, so counting their rows would make the
-- counters fall back now and then (a reset to Prometheus).  Each snapshot
-- adds what completed, failed and died since counted_until; prometheus()
-- adds the rows after counted_until, a minute's worth under pg_cron.
CREATE TABLE queue.metrics_totals (
    queue_name    text        NOT NULL PRIMARY KEY,
    processed     bigint      NOT NULL,
    failed        bigint      NOT NULL,
    dead          jsonb       NOT NULL DEFAULT '{}',   -- by reason
    counted_until timestamptz NOT NULL
);
COMMENT ON TABLE queue.metrics_totals IS 'Cumulative processed, failed and dead counts per queue, kept by snapshot_metrics()';

-- Dead letters of a queue by reason in a time range, as {"reason": n}.
CREATE FUNCTION queue._dead_by_reason(p_queue text, p_after timestamptz, p_until timestamptz)
RETURNS jsonb LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v jsonb;
BEGIN
    SELECT coalesce(jsonb_object_agg(x.reason, x.n), '{}') INTO v
      FROM (SELECT d.reason, count(*) AS n FROM queue.dead_letters d
             WHERE d.queue_name = p_queue AND d.dead_at > p_after AND d.dead_at <= p_until
             GROUP BY d.reason) x;
    RETURN v;
END
$$;
COMMENT ON FUNCTION queue._dead_by_reason(text, timestamptz, timestamptz) IS 'Dead letters of a queue by reason, dead in (after, until]';

-- Adds two {"reason": n} objects.
CREATE FUNCTION queue._add_counts(a jsonb, b jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(k, n), '{}')
      FROM (SELECT e.key AS k, sum(e.value::bigint) AS n
              FROM (SELECT * FROM jsonb_each_text(a) UNION ALL SELECT * FROM jsonb_each_text(b)) e
             GROUP BY e.key) x
$$;
COMMENT ON FUNCTION queue._add_counts(jsonb, jsonb) IS 'Sums two objects of counts by key';

CREATE FUNCTION queue.snapshot_metrics()
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text;
    v_prev timestamptz;
    v_now timestamptz := now();
    v_processed bigint;
    v_failed bigint;
    v_rows int := 0;
    v_until timestamptz;
    s record;
BEGIN
    FOR v_name IN SELECT c.queue_name FROM queue.queue_config c ORDER BY c.queue_name
    LOOP
        SELECT m.taken_at INTO v_prev FROM queue.metrics_history m
         WHERE m.queue_name = v_name ORDER BY m.taken_at DESC LIMIT 1;
        IF v_prev IS NULL THEN
            -- a queue's first row has nothing to count from
            v_processed := NULL;
            v_failed := NULL;
        ELSE
            SELECT count(*) INTO v_processed FROM queue.item_done d
             WHERE d.queue_name = v_name AND d.completed_at > v_prev AND d.completed_at <= v_now;
            SELECT count(*) INTO v_failed FROM queue.failure_log f
             WHERE f.queue_name = v_name AND f.at > v_prev AND f.at <= v_now;
        END IF;
        SELECT * INTO s FROM queue._stats(v_name) x;
        INSERT INTO queue.metrics_history AS m
               (queue_name, taken_at, queued, scheduled, processing, on_hold, dead,
                oldest_queued_age, processed_1h, failed_1h, wait_p50, wait_p95, run_p50,
                run_p95, paused, processed, failed)
        VALUES (v_name, v_now, s.queued, s.scheduled, s.processing, s.on_hold, s.dead,
                s.oldest_queued_age, s.processed_1h, s.failed_1h, s.wait_p50, s.wait_p95,
                s.run_p50, s.run_p95, s.paused, v_processed, v_failed)
        ON CONFLICT ON CONSTRAINT metrics_history_pkey DO NOTHING;
        IF FOUND THEN
            v_rows := v_rows + 1;
        END IF;

        -- running totals: everything retained the first time, then what
        -- happened since the last snapshot
        SELECT t.counted_until INTO v_until FROM queue.metrics_totals t
         WHERE t.queue_name = v_name FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO queue.metrics_totals AS t (queue_name, processed, failed, dead, counted_until)
            SELECT v_name,
                   (SELECT count(*) FROM queue.item_done d
                     WHERE d.queue_name = v_name AND d.completed_at <= v_now),
                   (SELECT count(*) FROM queue.failure_log f
                     WHERE f.queue_name = v_name AND f.at <= v_now),
                   queue._dead_by_reason(v_name, '-infinity', v_now),
                   v_now
            ON CONFLICT ON CONSTRAINT metrics_totals_pkey DO NOTHING;
        ELSIF v_until < v_now THEN
            UPDATE queue.metrics_totals t
               SET processed = t.processed
                               + (SELECT count(*) FROM queue.item_done d
                                   WHERE d.queue_name = v_name AND d.completed_at > v_until
                                     AND d.completed_at <= v_now),
                   failed = t.failed
                            + (SELECT count(*) FROM queue.failure_log f
                                WHERE f.queue_name = v_name AND f.at > v_until AND f.at <= v_now),
                   dead = queue._add_counts(t.dead, queue._dead_by_reason(v_name, v_until, v_now)),
                   counted_until = v_now
             WHERE t.queue_name = v_name;
        END IF;
    END LOOP;
    -- totals of dropped queues
    DELETE FROM queue.metrics_totals t
     WHERE NOT EXISTS (SELECT 1 FROM queue.queue_config c WHERE c.queue_name = t.queue_name);
    RETURN v_rows;
END
$$;
COMMENT ON FUNCTION queue.snapshot_metrics()
    IS 'Writes one metrics_history row per queue (the stats columns, processed and failed since the previous row) and advances the running totals';

-- ----------------------------------------------------------------------
-- pg_cron
-- ----------------------------------------------------------------------
-- cron.* is referenced only inside plpgsql bodies, which are not checked
-- before they run: the extension installs and works without pg_cron.

CREATE FUNCTION queue._require_pg_cron()
RETURNS void LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pg_cron is not installed in database "%"', current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('pg_cron runs its jobs from the database named by cron.database_name (now %s).',
                                  coalesce(quote_literal(current_setting('cron.database_name', true)),
                                           'not set: pg_cron is not loaded')),
                  HINT = 'Add pg_cron to shared_preload_libraries, restart the server, and run CREATE EXTENSION pg_cron in that database; or schedule SELECT queue.sweep() and SELECT queue.snapshot_metrics() with another scheduler.';
    END IF;
END
$$;
COMMENT ON FUNCTION queue._require_pg_cron() IS 'Fails with a hint (55000) unless pg_cron is installed in this database';

CREATE FUNCTION queue.enable_cron(sweep_schedule text DEFAULT '* * * * *',
                                  metrics_schedule text DEFAULT '* * * * *')
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF enable_cron.sweep_schedule IS NULL OR enable_cron.metrics_schedule IS NULL THEN
        RAISE EXCEPTION '% must not be null',
                        CASE WHEN enable_cron.sweep_schedule IS NULL THEN 'sweep_schedule'
                             ELSE 'metrics_schedule' END
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Leave the argument out for every minute (''* * * * *''), or use disable_cron() to stop the jobs.';
    END IF;
    PERFORM queue._require_pg_cron();
    -- scheduling by name replaces a job of the same name: enabling twice
    -- changes the schedules, never adds jobs
    PERFORM cron.schedule_in_database('queue_sweep', enable_cron.sweep_schedule,
                                      'SELECT count(*) FROM queue.sweep()', current_database());
    PERFORM cron.schedule_in_database('queue_snapshot_metrics', enable_cron.metrics_schedule,
                                      'SELECT queue.snapshot_metrics()', current_database());
END
$$;
COMMENT ON FUNCTION queue.enable_cron(text, text)
    IS 'Schedules sweep() and snapshot_metrics() with pg_cron as jobs queue_sweep and queue_snapshot_metrics';

CREATE FUNCTION queue.disable_cron()
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_job bigint;
BEGIN
    PERFORM queue._require_pg_cron();
    FOR v_job IN
        SELECT j.jobid FROM cron.job j
         WHERE j.jobname IN ('queue_sweep', 'queue_snapshot_metrics')
           AND j.database = current_database()
    LOOP
        PERFORM cron.unschedule(v_job);
    END LOOP;
END
$$;
COMMENT ON FUNCTION queue.disable_cron()
    IS 'Removes the pg_cron jobs of enable_cron(); does nothing when they do not exist';

-- source: schema/80_observability.sql
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
BEGIN
    SELECT c.paused INTO paused FROM queue.queue_config c WHERE c.queue_name = p_queue;

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

    -- claimable the longest: the first claimable entry of each priority
    SELECT v_now - min(x.v) INTO oldest_queued_age
      FROM unnest(v_prios) AS u(p)
     CROSS JOIN LATERAL (SELECT i.visible_at AS v FROM queue.item_live i
                          WHERE i.queue_name = p_queue AND i.priority = u.p
                            AND i.visible_at <= v_now
                          ORDER BY i.visible_at LIMIT 1) x;

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

CREATE FUNCTION queue._health(p_queue text, OUT status text, OUT reasons text[])
RETURNS record LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp SET jit = off
SET enable_seqscan = off    -- a LIMITed seq scan may read the whole table before the queue's rows
AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    s record;
    v_level int := 0;      -- 0 ok, 1 warning, 2 critical
    v_n bigint;
    v_items bigint;
    v_workers text[];
    v_queued bigint[];
    v_from timestamptz;
    v_failed bigint;
    v_ok bigint;
BEGIN
    reasons := '{}';
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    SELECT * INTO s FROM queue._stats(p_queue) x;

    -- oldest queued age against the sla
    IF c.sla IS NOT NULL AND s.oldest_queued_age > c.sla * 0.85 THEN
        v_level := 2;
        reasons := reasons || format('oldest queued item has waited %s, over 85%% of the %s sla',
                                     queue._say_duration(s.oldest_queued_age), queue._say_interval(c.sla));
    ELSIF c.sla IS NOT NULL AND s.oldest_queued_age > c.sla * 0.5 THEN
        v_level := 1;
        reasons := reasons || format('oldest queued item has waited %s, over half the %s sla',
                                     queue._say_duration(s.oldest_queued_age), queue._say_interval(c.sla));
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
        SELECT count(*) INTO v_failed FROM queue.failure_log f
         WHERE f.queue_name = p_queue AND f.at > v_from AND f.kind <> 'offline';
        SELECT count(*) INTO v_ok FROM queue.item_done d
         WHERE d.queue_name = p_queue AND d.completed_at > v_from;
        IF v_failed + v_ok >= c.breaker_min_samples
           AND v_failed::float8 / (v_failed + v_ok) > c.breaker_threshold / 2 THEN
            v_level := greatest(v_level, 1);
            reasons := reasons || format('%s%% of %s outcomes failed in %s, over half the breaker threshold (%s%%)',
                                         round(100.0 * v_failed / (v_failed + v_ok)), v_failed + v_ok,
                                         queue._say_interval(c.breaker_window),
                                         trim_scale(round((100 * c.breaker_threshold)::numeric, 1)));
        END IF;
    END IF;

    IF c.paused THEN
        status := 'paused';
        reasons := format('paused: %s', coalesce(c.pause_reason, 'no reason given')) || reasons;
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

CREATE FUNCTION queue.prometheus()
RETURNS text LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_out text;
BEGIN
    WITH s AS MATERIALIZED (
        SELECT c.queue_name AS q, queue._prom_label(c.queue_name) AS ql, x.*
          FROM queue.queue_config c
         CROSS JOIN LATERAL queue._stats(c.queue_name) x
         WHERE queue._can_read(c.queue_name)),
    fam (ord, name, kind, help) AS (VALUES
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
        (12, 'queue_dead_letters_total', 'counter', 'Items dead-lettered, by reason (running total kept by snapshot_metrics).')),
    smp (ord, q, sub, labels, val) AS (
        SELECT 1, s.q, k.n, format('queue=%s,state=%s', s.ql, queue._prom_label(k.state)), k.v::numeric
          FROM s CROSS JOIN LATERAL (VALUES (1, 'queued', s.queued), (2, 'scheduled', s.scheduled),
                                            (3, 'processing', s.processing),
                                            (4, 'on_hold', s.on_hold)) AS k(n, state, v)
        UNION ALL
        SELECT 2, s.q, 0, format('queue=%s', s.ql), s.dead FROM s
        UNION ALL
        SELECT 3, s.q, 0, format('queue=%s', s.ql), extract(epoch FROM s.oldest_queued_age) FROM s
        UNION ALL
        SELECT 4, s.q, 0, format('queue=%s', s.ql), s.processed_1h FROM s
        UNION ALL
        SELECT 5, s.q, 0, format('queue=%s', s.ql), s.failed_1h FROM s
        UNION ALL
        SELECT 6, s.q, k.n, format('queue=%s,quantile=%s', s.ql, queue._prom_label(k.quantile)),
               extract(epoch FROM k.v)
          FROM s CROSS JOIN LATERAL (VALUES (1, '0.5', s.wait_p50), (2, '0.95', s.wait_p95)) AS k(n, quantile, v)
        UNION ALL
        SELECT 7, s.q, k.n, format('queue=%s,quantile=%s', s.ql, queue._prom_label(k.quantile)),
               extract(epoch FROM k.v)
          FROM s CROSS JOIN LATERAL (VALUES (1, '0.5', s.run_p50), (2, '0.95', s.run_p95)) AS k(n, quantile, v)
        UNION ALL
        SELECT 8, s.q, 0, format('queue=%s', s.ql), CASE WHEN s.paused THEN 1 ELSE 0 END FROM s
        UNION ALL
        SELECT 9, s.q, 0, format('queue=%s,kind=%s', s.ql, queue._prom_label(a.kind)), count(*)
          FROM s JOIN queue.alerts a ON a.queue_name = s.q AND a.cleared_at IS NULL
         GROUP BY s.q, s.ql, a.kind
        UNION ALL
        SELECT 10, s.q, 0, format('queue=%s', s.ql),
               coalesce(t.processed, 0)
               + (SELECT count(*) FROM queue.item_done d
                   WHERE d.queue_name = s.q AND d.completed_at > coalesce(t.counted_until, '-infinity'))
          FROM s LEFT JOIN queue.metrics_totals t ON t.queue_name = s.q
        UNION ALL
        SELECT 11, s.q, 0, format('queue=%s', s.ql),
               coalesce(t.failed, 0)
               + (SELECT count(*) FROM queue.failure_log f
                   WHERE f.queue_name = s.q AND f.at > coalesce(t.counted_until, '-infinity'))
          FROM s LEFT JOIN queue.metrics_totals t ON t.queue_name = s.q
        UNION ALL
        SELECT 12, s.q, 0, format('queue=%s,reason=%s', s.ql, queue._prom_label(r.key)), r.value::numeric
          FROM s LEFT JOIN queue.metrics_totals t ON t.queue_name = s.q
         CROSS JOIN LATERAL jsonb_each_text(queue._add_counts(
                   coalesce(t.dead, '{}'),
                   queue._dead_by_reason(s.q, coalesce(t.counted_until, '-infinity'), 'infinity'))) r),
    lines (ord, q, sub, labels, line) AS (
        SELECT f.ord, '', -2, '', format('# HELP %s %s', f.name, f.help) FROM fam f
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

-- source: schema/90_security.sql
-- ======================================================================
-- Security: group roles, privileges, row-level security, per-queue
-- grants, and what pg_dump keeps.  Runs last, after every object exists.
-- ======================================================================
--
-- Who may call what is decided twice: EXECUTE / SELECT privileges of the
-- four group roles below decide which functions and relations a role may
-- use at all; per-queue grants (grant_queue) then close one access kind of
-- one queue to the roles granted it (src/access.c).  The tables belong to
-- the extension owner, a superuser: nobody else may write them, the
-- SECURITY DEFINER functions do it for them with search_path pinned to
-- pg_catalog, pg_temp, and no argument is ever spliced into SQL text.

-- Group roles ---------------------------------------------------------------

-- Roles are cluster-wide: a second database reuses them and DROP EXTENSION
-- leaves them.  Create only what is missing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_admin') THEN
        CREATE ROLE queue_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_producer') THEN
        CREATE ROLE queue_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_worker') THEN
        CREATE ROLE queue_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_reader') THEN
        CREATE ROLE queue_reader NOLOGIN;
    END IF;
END
$$;

-- Per-queue grants --------------------------------------------------------

-- The checks grant_queue and revoke_queue share: a valid name of an
-- existing queue (its row locked, so the restrict_* flags stay in step with
-- queue_grant), an access kind, and an existing role.
CREATE FUNCTION queue._grant_target(p_queue text, p_role name, p_access text,
                                    OUT queue_name text, OUT grantee oid)
RETURNS record LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    queue_name := queue._check_name(p_queue);
    IF p_role IS NULL THEN
        RAISE EXCEPTION 'role must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_access IS NULL THEN
        RAISE EXCEPTION 'access must not be null' USING ERRCODE = 'null_value_not_allowed',
            HINT = 'Valid access kinds are ''producer'', ''worker'' and ''reader''.';
    END IF;
    IF p_access NOT IN ('producer', 'worker', 'reader') THEN
        RAISE EXCEPTION 'invalid access "%"', p_access
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid access kinds are ''producer'', ''worker'' and ''reader''.';
    END IF;
    PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = _grant_target.queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', _grant_target.queue_name
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT r.oid INTO grantee FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
    IF grantee IS NULL THEN
        RAISE EXCEPTION 'role "%" does not exist', p_role
            USING ERRCODE = 'undefined_object',
                  HINT = 'Grant queue access to an existing login or group role.';
    END IF;
END
$$;
COMMENT ON FUNCTION queue._grant_target(text, name, text)
    IS 'Validates the arguments of grant_queue / revoke_queue and locks the queue''s settings row';

-- A kind of access is closed on a queue while any grant of that kind exists.
CREATE FUNCTION queue._grant_flags(p_queue text)
RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    UPDATE queue.queue_config c
       SET restrict_reader = EXISTS (SELECT 1 FROM queue.queue_grant g
                                      WHERE g.queue_name = p_queue AND g.access = 'reader'),
           restrict_producer = EXISTS (SELECT 1 FROM queue.queue_grant g
                                        WHERE g.queue_name = p_queue AND g.access = 'producer'),
           restrict_worker = EXISTS (SELECT 1 FROM queue.queue_grant g
                                      WHERE g.queue_name = p_queue AND g.access = 'worker')
     WHERE c.queue_name = p_queue;
END
$$;
COMMENT ON FUNCTION queue._grant_flags(text)
    IS 'Recomputes a queue''s restrict_* flags from its grants';

CREATE FUNCTION queue.grant_queue(queue_name text, role name, access text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    t record;
BEGIN
    t := queue._grant_target(grant_queue.queue_name, grant_queue.role, grant_queue.access);
    INSERT INTO queue.queue_grant (queue_name, grantee, access)
    VALUES (t.queue_name, t.grantee, grant_queue.access)
    ON CONFLICT ON CONSTRAINT queue_grant_pkey DO NOTHING;
    IF FOUND THEN
        PERFORM queue._grant_flags(t.queue_name);
        PERFORM queue._event(t.queue_name, NULL, 'access_granted', NULL, NULL,
                             jsonb_build_object('role', grant_queue.role,
                                                'access', grant_queue.access,
                                                'by', session_user));
    END IF;
END
$$;
COMMENT ON FUNCTION queue.grant_queue(text, name, text)
    IS 'Gives a role producer, worker or reader access to one queue; the queue then admits only granted roles for that access';

CREATE FUNCTION queue.revoke_queue(queue_name text, role name, access text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    t record;
BEGIN
    t := queue._grant_target(revoke_queue.queue_name, revoke_queue.role, revoke_queue.access);
    DELETE FROM queue.queue_grant g
     WHERE g.queue_name = t.queue_name AND g.access = revoke_queue.access
       AND g.grantee = t.grantee;
    IF FOUND THEN
        PERFORM queue._grant_flags(t.queue_name);
        PERFORM queue._event(t.queue_name, NULL, 'access_revoked', NULL, NULL,
                             jsonb_build_object('role', revoke_queue.role,
                                                'access', revoke_queue.access,
                                                'by', session_user));
    END IF;
END
$$;
COMMENT ON FUNCTION queue.revoke_queue(text, name, text)
    IS 'Takes back a per-queue grant; when the last grant of a kind goes, that access is open to its group role again';

-- queue._can_read runs inside the views and the row-level security
-- policies, that is as the reader, and reads queue_config and queue_grant,
-- which readers may not select.  It runs as the owner instead, still
-- judging the outer user (GetOuterUserId).
ALTER FUNCTION queue._can_read(text) SECURITY DEFINER;
ALTER FUNCTION queue._can_read(text) SET search_path = pg_catalog, pg_temp;

-- Privileges --------------------------------------------------------------

-- Nothing for PUBLIC: functions are executable by PUBLIC by default.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON SCHEMA queue FROM PUBLIC;

-- The group roles see the schema; none may create in it or write a table.
GRANT USAGE ON SCHEMA queue TO queue_admin, queue_producer, queue_worker, queue_reader;

-- Reading: the views (which filter by queue._can_read) and the
-- observability tables (filtered by the policies below), for every role.
GRANT SELECT ON queue.queues, queue.items, queue.history, queue.dead_letters,
                queue.events, queue.alerts, queue.metrics_history
   TO queue_reader, queue_producer, queue_worker, queue_admin;

-- Functions by role, by exact signature.  Objects defined by later topic
-- files of a development tree may be missing: the permissions regression
-- test checks the whole list, so a gap fails there, not at install time.
DO $$
DECLARE
    r record;
    v_fn regprocedure;
    v_reader text[] := ARRAY[
        -- look at items and numbers
        'item(text, bigint)',
        'stats(text)',
        'health(text)',
        'prometheus()'];
    v_producer text[] := ARRAY[
        -- add work
        'enqueue(text, jsonb, integer, timestamp with time zone, text, timestamp with time zone, integer, text)',
        'enqueue_batch(text, jsonb[], integer, timestamp with time zone, text[], timestamp with time zone, integer)'];
    v_worker text[] := ARRAY[
        -- the bot's loop
        'dequeue(text, text, integer, interval)',
        'complete(text, bigint, bigint, jsonb)',
        'complete_batch(text, bigint[], bigint[], jsonb)',
        'fail(text, bigint, bigint, text, text, boolean, interval)',
        'release(text, bigint, bigint, timestamp with time zone)',
        'extend_lease(text, bigint, bigint, interval)',
        'checkpoint(text, bigint, bigint, jsonb)',
        'heartbeat(text)',
        'register_worker(text, text[], integer, jsonb)'];
BEGIN
    FOR r IN
        SELECT g.rolname, g.sig
          FROM (SELECT 'queue_reader' AS rolname, unnest(v_reader) AS sig
                UNION ALL SELECT 'queue_producer', unnest(v_reader || v_producer)
                UNION ALL SELECT 'queue_worker', unnest(v_reader || v_worker)) g
    LOOP
        v_fn := pg_catalog.to_regprocedure('queue.' || r.sig);
        IF v_fn IS NOT NULL THEN
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', v_fn, r.rolname);
        END IF;
    END LOOP;

    -- queue_admin may do everything: every API function of the schema
    -- (the names without a leading underscore), queue DDL, operator
    -- actions, worker control, maintenance, cron and per-queue grants.
    FOR v_fn IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'queue'::regnamespace
           AND p.proname !~ '^_'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO queue_admin', v_fn);
    END LOOP;

    -- Views read by every role may call helper functions of the schema
    -- (queue._can_read, queue._live_state...): those run as the caller.
    FOR v_fn IN
        SELECT DISTINCT d.refobjid::regprocedure
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_rewrite w ON w.oid = d.objid
          JOIN pg_catalog.pg_class v ON v.oid = w.ev_class
          JOIN pg_catalog.pg_proc p ON p.oid = d.refobjid
         WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass
           AND d.refclassid = 'pg_catalog.pg_proc'::regclass
           AND v.relnamespace = 'queue'::regnamespace
           AND p.pronamespace = 'queue'::regnamespace
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION %s TO queue_reader, queue_producer, queue_worker, queue_admin', v_fn);
    END LOOP;

    -- The fleet view, when defined, is read like the others.
    IF pg_catalog.to_regclass('queue.workers') IS NOT NULL THEN
        GRANT SELECT ON queue.workers TO queue_reader, queue_producer, queue_worker, queue_admin;
    END IF;
END
$$;

-- queue._can_read is also called by the row-level security policies.
GRANT EXECUTE ON FUNCTION queue._can_read(text)
   TO queue_reader, queue_producer, queue_worker, queue_admin;

-- Row-level security -------------------------------------------------------

-- The observability tables are read directly; a caller sees only the rows
-- of the queues it may read.  The SECURITY DEFINER functions run as the
-- owner, a superuser, and are not filtered.
ALTER TABLE queue.dead_letters ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue.alerts ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue.metrics_history ENABLE ROW LEVEL SECURITY;

CREATE POLICY dead_letters_read ON queue.dead_letters FOR SELECT
    USING (queue._can_read(queue_name));
CREATE POLICY events_read ON queue.events FOR SELECT
    USING (queue._can_read(queue_name));
CREATE POLICY alerts_read ON queue.alerts FOR SELECT
    USING (queue._can_read(queue_name));
CREATE POLICY metrics_history_read ON queue.metrics_history FOR SELECT
    USING (queue._can_read(queue_name));

-- pg_dump -----------------------------------------------------------------

-- The data of the extension's tables and the positions of its sequences
-- belong to the database, not to the extension: pg_dump keeps them.
DO $$
DECLARE
    v_rel regclass;
BEGIN
    FOR v_rel IN
        SELECT c.oid::regclass
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = 'queue'::regnamespace
           AND c.relkind IN ('r', 'S')
         ORDER BY c.relkind, c.relname
    LOOP
        PERFORM pg_catalog.pg_extension_config_dump(v_rel, '');
    END LOOP;
END
$$;
