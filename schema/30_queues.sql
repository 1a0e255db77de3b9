-- ======================================================================
-- Queues: create_queue, alter_queue, drop_queue, purge, the queues view
-- ======================================================================

-- Validate the settings of a queue (after defaults and alterations are
-- applied).  One message per rule, naming the setting and the bad value.
CREATE FUNCTION queue._check_settings(c queue.queue_config)
RETURNS void LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_setting text;
    v_value interval;
BEGIN
    -- the settings that always have a value, named in create_queue's order
    v_setting := CASE
                   WHEN c.lease_timeout IS NULL THEN 'lease_timeout'
                   WHEN c.max_attempts IS NULL THEN 'max_attempts'
                   WHEN c.backoff_base IS NULL THEN 'backoff_base'
                   WHEN c.backoff_factor IS NULL THEN 'backoff_factor'
                   WHEN c.backoff_max IS NULL THEN 'backoff_max'
                   WHEN c.backoff_jitter IS NULL THEN 'backoff_jitter'
                   WHEN c.retention IS NULL THEN 'retention'
                   WHEN c.notify IS NULL THEN 'notify'
                   WHEN c.audit IS NULL THEN 'audit'
                   WHEN c.breaker_window IS NULL THEN 'breaker_window'
                   WHEN c.breaker_min_samples IS NULL THEN 'breaker_min_samples'
                   WHEN c.breaker_cooldown IS NULL THEN 'breaker_cooldown'
                 END;
    IF v_setting IS NOT NULL THEN
        RAISE EXCEPTION '% must not be null', v_setting
            USING ERRCODE = 'null_value_not_allowed',
                  DETAIL = 'lease_timeout, max_attempts, backoff_*, retention, notify, audit and breaker_window/min_samples/cooldown always have a value.',
                  HINT = 'Leave the argument out to get its default.';
    END IF;
    -- every time computed from a duration (now() plus or minus it) must
    -- be a timestamp: past that, sweep(), health() or a claim would fail
    FOR v_setting, v_value IN
        VALUES ('lease_timeout', c.lease_timeout), ('backoff_base', c.backoff_base),
               ('backoff_max', c.backoff_max), ('item_ttl', c.item_ttl),
               ('dedup_window', c.dedup_window), ('priority_aging', c.priority_aging),
               ('retention', c.retention), ('sla', c.sla),
               ('breaker_window', c.breaker_window), ('breaker_cooldown', c.breaker_cooldown)
    LOOP
        IF v_value > interval '1000 years' THEN
            RAISE EXCEPTION '% must be at most 1000 years, not "%"', v_setting, v_value
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Durations are bounded so that every time computed from them is a valid timestamp.';
        END IF;
    END LOOP;
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
    IF c.backoff_factor = 'NaN'::float8 OR c.backoff_factor = 'Infinity'::float8 THEN
        RAISE EXCEPTION 'backoff_factor must be a finite number, not %', c.backoff_factor
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use 1 for a constant backoff, 2 or 3 for an exponential one.';
    END IF;
    IF c.backoff_factor < 1 THEN
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
    IF c.group_on_dead IS NULL THEN
        RAISE EXCEPTION 'group_on_dead must not be null'
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Pass ''continue'' or ''block''.';
    END IF;
    IF c.group_on_dead NOT IN ('continue', 'block') THEN
        RAISE EXCEPTION 'invalid group_on_dead "%"', c.group_on_dead
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid values are ''continue'' (a dead head lets its group move on) and ''block''.';
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
    if_not_exists       boolean  DEFAULT false,
    group_on_dead       text     DEFAULT 'continue')
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
BEGIN
    c.queue_name := queue._check_name(create_queue.queue_name);
    IF create_queue.if_not_exists IS NULL THEN
        RAISE EXCEPTION 'if_not_exists must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass true to accept an existing queue, or leave the argument out.';
    END IF;
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
    c.group_on_dead := create_queue.group_on_dead;
    PERFORM queue._check_settings(c);

    INSERT INTO queue.queue_config AS q
           (queue_name, lease_timeout, max_attempts, backoff_base, backoff_factor, backoff_max,
            backoff_jitter, item_ttl, dedup_window, priority_aging, max_in_flight, retention, sla,
            notify, audit, breaker_threshold, breaker_window, breaker_min_samples, breaker_cooldown,
            group_on_dead)
    VALUES (c.queue_name, c.lease_timeout, c.max_attempts, c.backoff_base, c.backoff_factor,
            c.backoff_max, c.backoff_jitter, c.item_ttl, c.dedup_window, c.priority_aging,
            c.max_in_flight, c.retention, c.sla, c.notify, c.audit, c.breaker_threshold,
            c.breaker_window, c.breaker_min_samples, c.breaker_cooldown, c.group_on_dead)
    ON CONFLICT ON CONSTRAINT queue_config_pkey DO NOTHING;
    IF NOT FOUND THEN
        IF NOT create_queue.if_not_exists THEN
            RAISE EXCEPTION 'queue "%" already exists', c.queue_name
                USING ERRCODE = 'duplicate_object',
                      HINT = 'Pass if_not_exists => true to accept an existing queue, or change it with queue.alter_queue().';
        END IF;
        RETURN;
    END IF;
    -- a new queue starts empty, whatever an earlier queue of the name left
    PERFORM queue._lock_queue(c.queue_name, true);
    PERFORM queue._forget_queue(c.queue_name, true);
END
$$;
COMMENT ON FUNCTION queue.create_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, boolean, text)
    IS 'Creates a queue with its lease, retry, retention, audit and breaker settings';

-- The max_in_flight stripes' locks, all of them (src/dequeue.c), for
-- alter_queue while it deals the current leases out over a new cap.
CREATE FUNCTION queue._lock_cap_stripes(queue_name text) RETURNS int
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_cap_stripes_sql';
COMMENT ON FUNCTION queue._lock_cap_stripes(text)
    IS 'Waits for every max_in_flight stripe lock of the queue until the end of the transaction; returns the most stripes a cap has';

-- The max_in_flight stripes' locks that a heartbeat's revivals of expired
-- leases wait for, in one order (src/dequeue.c); charged is each lease's
-- coalesce(cap_stripe, item_id).
CREATE FUNCTION queue._lock_revival_stripes(queue_name text, charged bigint[]) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_revival_stripes_sql';
COMMENT ON FUNCTION queue._lock_revival_stripes(text, bigint[])
    IS 'Waits, in ascending order, for the max_in_flight stripe locks the revivals of these leases count against, until the end of the transaction';

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
    breaker_cooldown    interval DEFAULT NULL,
    group_on_dead       text     DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    v_name text := queue._check_name(alter_queue.queue_name);
    v_old_window interval;
    v_old_on_dead text;
    v_old_threshold float8;
    v_old_aging interval;
    v_now timestamptz := now();   -- a value: Citus refuses now() in a CASE of an UPDATE
    v_since timestamptz;
    v_group text;
    v_stripes int;
    v_lease bigint;
    v_n int := 0;
BEGIN
    -- a dedup_window set or lengthened takes the keys completed within it
    -- from the history (below): wait for the transactions using the queue,
    -- so that a completion in flight is in the history by then and one
    -- that comes later sees the new window and records its key
    IF alter_queue.dedup_window > interval '0' THEN
        PERFORM queue._lock_queue(v_name, true);
    END IF;
    -- a max_in_flight given spreads the current leases over the new cap's
    -- stripes (below), under every stripe lock, taken before the settings
    -- row as dequeue takes them
    IF alter_queue.max_in_flight IS NOT NULL THEN
        v_stripes := queue._lock_cap_stripes(v_name);
    END IF;
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = v_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Create it with queue.create_queue(%L).', v_name);
    END IF;
    v_old_window := c.dedup_window;
    v_old_on_dead := c.group_on_dead;
    v_old_threshold := c.breaker_threshold;
    v_old_aging := c.priority_aging;
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
    c.group_on_dead := coalesce(alter_queue.group_on_dead, c.group_on_dead);
    PERFORM queue._check_settings(c);
    IF v_old_threshold IS NULL AND c.breaker_threshold IS NOT NULL THEN
        v_since := now();
    END IF;

    UPDATE queue.queue_config q
       SET lease_timeout = c.lease_timeout, max_attempts = c.max_attempts,
           backoff_base = c.backoff_base, backoff_factor = c.backoff_factor,
           backoff_max = c.backoff_max, backoff_jitter = c.backoff_jitter,
           item_ttl = c.item_ttl, dedup_window = c.dedup_window,
           priority_aging = c.priority_aging, max_in_flight = c.max_in_flight,
           retention = c.retention, sla = c.sla, notify = c.notify, audit = c.audit,
           breaker_threshold = c.breaker_threshold, breaker_window = c.breaker_window,
           breaker_min_samples = c.breaker_min_samples, breaker_cooldown = c.breaker_cooldown,
           group_on_dead = c.group_on_dead,
           -- a breaker switched on counts the outcomes from now on (worked
           -- out here: Citus refuses now() inside a CASE of an UPDATE)
           breaker_since = coalesce(v_since, q.breaker_since)
     WHERE q.queue_name = v_name;
    -- Caps stay exact when a cap is set or changed with leases out: each
    -- stripe of the cap (src/dequeue.c) may hold its share of it, so the
    -- leases, whatever stripes they were charged to under the old cap,
    -- are dealt out in turn over the new stripes.  Within the cap, no
    -- stripe then holds more than its share and every free place can be
    -- claimed; beyond it, every stripe is full.  A lease whose row is
    -- locked (its bot is finishing it) keeps its stripe: dequeue takes
    -- what a stripe holds over its share off the others' room.
    IF alter_queue.max_in_flight IS NOT NULL AND c.max_in_flight IS NOT NULL THEN
        v_stripes := least(c.max_in_flight, v_stripes);
        FOR v_lease IN SELECT i.item_id FROM queue.item_live i
                        WHERE i.queue_name = v_name AND i.worker IS NOT NULL
                          AND i.lease_expires_at > now()
                        ORDER BY i.item_id
                          FOR UPDATE SKIP LOCKED LOOP
            UPDATE queue.item_live i SET cap_stripe = v_n % v_stripes
             WHERE i.queue_name = v_name AND i.item_id = v_lease;
            v_n := v_n + 1;
        END LOOP;
    END IF;
    -- keys completed within a window set or lengthened, as complete() would
    -- have kept them: the newest completion of each key, never replacing a
    -- newer one (keys sweep dropped as past a shorter window come back
    -- while the history has them)
    IF c.dedup_window IS NOT NULL AND (v_old_window IS NULL OR c.dedup_window > v_old_window) THEN
        INSERT INTO queue.dedup_done AS k (queue_name, dedup_key, item_id, completed_at)
        SELECT DISTINCT ON (h.dedup_key) h.queue_name, h.dedup_key, h.item_id, h.completed_at
          FROM queue.item_done h
         WHERE h.queue_name = v_name AND h.dedup_key IS NOT NULL
           AND h.completed_at > now() - c.dedup_window
         ORDER BY h.dedup_key, h.completed_at DESC, h.item_id DESC
        ON CONFLICT (queue_name, dedup_key) DO UPDATE
           SET item_id = excluded.item_id, completed_at = excluded.completed_at
         WHERE k.completed_at < excluded.completed_at;
    END IF;
    -- a queue that no longer has group_on_dead = 'block' lets the groups
    -- a dead head blocked move on (their dead letters stay as they are),
    -- locking the groups in the order commits lock them
    IF v_old_on_dead = 'block' AND c.group_on_dead = 'continue' THEN
        FOR v_group IN SELECT f.group_key FROM queue.flow_group f
                        WHERE f.queue_name = v_name AND f.blocked_by IS NOT NULL
                        ORDER BY f.group_key COLLATE "C" LOOP
            UPDATE queue.flow_group f SET blocked_by = NULL
             WHERE f.queue_name = v_name AND f.group_key = v_group AND f.blocked_by IS NOT NULL;
            IF FOUND THEN
                PERFORM queue._group_settle(v_name, v_group, NULL);
            END IF;
        END LOOP;
    END IF;
    -- without aging, items claim at the priority they were given
    IF c.priority_aging IS NULL THEN
        UPDATE queue.item_live i SET priority = i.base_priority
         WHERE i.queue_name = v_name AND i.priority % 100000 <> i.base_priority;   -- band kept
    ELSIF c.priority_aging IS DISTINCT FROM v_old_aging THEN
        -- a new step: the items the old one aged take their priority under
        -- the new one, as sweep computes it (a longer step gives back
        -- priority that the old one took); sweep ages the others as they
        -- reach a step.  A row not claimable now has its own priority.
        UPDATE queue.item_live i
           SET priority = CASE WHEN i.visible_at <= v_now AND NOT i.on_hold
                               THEN greatest(0, i.base_priority - floor(
                                        extract(epoch FROM v_now - greatest(i.enqueued_at, i.visible_at))
                                        / extract(epoch FROM c.priority_aging)))::int
                               ELSE i.base_priority END   -- band kept
         WHERE i.queue_name = v_name AND i.priority % 100000 <> i.base_priority;
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
COMMENT ON FUNCTION queue.alter_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, text)
    IS 'Changes queue settings; NULL leaves a setting unchanged, zero switches an optional one off';

-- Delete every row of a queue from every table that has per-queue rows,
-- except the settings row; with p_keep_dropped, queue_dropped events stay.
-- Returns the counts by table.  The caller holds the queue lock
-- exclusively.  NB: a new table with per-queue rows belongs here and in
-- queue.sweep_dropped().
CREATE FUNCTION queue._forget_queue(p_queue text, p_keep_dropped boolean)
RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_counts jsonb;
BEGIN
    WITH l AS (DELETE FROM queue.item_live i WHERE i.queue_name = p_queue RETURNING 1),
         h AS (DELETE FROM queue.item_done d WHERE d.queue_name = p_queue RETURNING 1),
         x AS (DELETE FROM queue.dead_letters d WHERE d.queue_name = p_queue RETURNING 1),
         e AS (DELETE FROM queue.events e WHERE e.queue_name = p_queue
                  AND NOT (p_keep_dropped AND e.kind = 'queue_dropped') RETURNING 1),
         k AS (DELETE FROM queue.dedup_done k WHERE k.queue_name = p_queue RETURNING 1),
         f AS (DELETE FROM queue.failure_log f WHERE f.queue_name = p_queue RETURNING 1),
         a AS (DELETE FROM queue.alerts a WHERE a.queue_name = p_queue RETURNING 1),
         m AS (DELETE FROM queue.metrics_history m WHERE m.queue_name = p_queue RETURNING 1),
         t AS (DELETE FROM queue.metrics_totals t WHERE t.queue_name = p_queue RETURNING 1),
         g AS (DELETE FROM queue.queue_grant g WHERE g.queue_name = p_queue RETURNING 1),
         fg AS (DELETE FROM queue.flow_group f WHERE f.queue_name = p_queue RETURNING 1),
         fl AS (DELETE FROM queue.flow_limit f WHERE f.queue_name = p_queue RETURNING 1),
         fc AS (DELETE FROM queue.flow_claim f WHERE f.queue_name = p_queue RETURNING 1),
         b AS (DELETE FROM queue.breaker_bucket b WHERE b.queue_name = p_queue RETURNING 1),
         o AS (DELETE FROM queue.offline_check o WHERE o.queue_name = p_queue RETURNING 1),
         n AS (DELETE FROM queue.alert_channels n WHERE n.queue_name = p_queue RETURNING 1)
    SELECT jsonb_build_object('item_live', (SELECT count(*) FROM l),
                              'item_done', (SELECT count(*) FROM h),
                              'dead_letters', (SELECT count(*) FROM x),
                              'events', (SELECT count(*) FROM e),
                              'dedup_done', (SELECT count(*) FROM k),
                              'failure_log', (SELECT count(*) FROM f),
                              'alerts', (SELECT count(*) FROM a),
                              'metrics_history', (SELECT count(*) FROM m),
                              'metrics_totals', (SELECT count(*) FROM t),
                              'queue_grant', (SELECT count(*) FROM g),
                              'flow_group', (SELECT count(*) FROM fg),
                              'flow_limit', (SELECT count(*) FROM fl),
                              'flow_claim', (SELECT count(*) FROM fc),
                              'breaker_bucket', (SELECT count(*) FROM b),
                              'offline_check', (SELECT count(*) FROM o),
                              'alert_channels', (SELECT count(*) FROM n))
      INTO v_counts;
    RETURN v_counts;
END
$$;
COMMENT ON FUNCTION queue._forget_queue(text, boolean)
    IS 'Deletes the rows of a queue from every per-queue table but the settings; returns the counts by table';

CREATE FUNCTION queue.drop_queue(queue_name text, force boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(drop_queue.queue_name);
    v_live bigint;
    v_counts jsonb;
BEGIN
    IF drop_queue.force IS NULL THEN
        RAISE EXCEPTION 'force must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- NB: first the queue lock: the calls adding rows to the queue finish
    -- (their rows are then seen and removed below), later ones wait for
    -- this transaction and then find no queue
    PERFORM queue._lock_queue(v_name, true);
    PERFORM 1 FROM queue.queue_config q WHERE q.queue_name = v_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'queue.queues lists the queues that exist.';
    END IF;
    SELECT count(*) INTO v_live FROM queue.item_live i WHERE i.queue_name = v_name;
    IF v_live > 0 AND NOT coalesce(drop_queue.force, false) THEN
        RAISE EXCEPTION 'queue "%" has % live items', v_name, v_live
            USING ERRCODE = 'object_in_use',
                  DETAIL = 'Queued, scheduled, on-hold and processing items would be lost.',
                  HINT = 'Let the items finish, purge them, or pass force => true.';
    END IF;

    v_counts := queue._forget_queue(v_name, false);
    v_counts := jsonb_build_object('live', v_counts -> 'item_live', 'history', v_counts -> 'item_done',
                                   'dead_letters', v_counts -> 'dead_letters',
                                   'events', v_counts -> 'events');
    DELETE FROM queue.queue_config q WHERE q.queue_name = v_name;
    INSERT INTO queue.events (queue_name, kind, details)
    VALUES (v_name, 'queue_dropped', v_counts || jsonb_build_object('force', coalesce(drop_queue.force, false),
                                                                    'by', session_user));
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
    v_lost boolean := false;
    v_keyed bigint[];
    r record;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    -- a lease that ran out and nobody re-claimed is settled first, as sweep
    -- would: counted once as a lost lease (a failed attempt and outcome),
    -- or, on its last attempt or with its cancel requested, a dead letter
    -- (lease_expired, or cancelled as its cancel promised), not purged
    -- (all of them locked before any is settled: settling one writes rows
    -- a dequeue burying another may be writing too, alerts and breaker
    -- counts, and must not then wait for that dequeue's item; the loop
    -- meets the rows locked, statement_timestamp() being the call's)
    PERFORM 1 FROM queue.item_live i
      WHERE i.queue_name = v_name AND i.lease_token IS NOT NULL
        AND i.lease_expires_at <= statement_timestamp()
        AND (NOT i.lost_counted OR i.attempt >= i.max_attempts
             OR i.cancel_requested_at IS NOT NULL)
      ORDER BY i.item_id
        FOR UPDATE;
    FOR r IN
        SELECT i.item_id,
               i.attempt >= i.max_attempts OR i.cancel_requested_at IS NOT NULL AS spent
          FROM queue.item_live i
         WHERE i.queue_name = v_name AND i.lease_token IS NOT NULL
           AND i.lease_expires_at <= statement_timestamp()
           AND (NOT i.lost_counted OR i.attempt >= i.max_attempts
                OR i.cancel_requested_at IS NOT NULL)
         ORDER BY i.item_id
           FOR UPDATE
    LOOP
        IF r.spent THEN
            PERFORM queue._bury(v_name, r.item_id, 'lease_expired', NULL, NULL);
        ELSIF queue._lease_lost(v_name, r.item_id) THEN
            v_lost := true;
        END IF;
    END LOOP;
    IF v_lost THEN
        PERFORM queue._breaker_check(v_name);
    END IF;
    -- everything not under a current lease: queued, scheduled, on hold;
    -- the items with a dedup key taken all at once first (_lock_items), as
    -- a producer's enqueue_batch locks the holders of its keys in key
    -- order: purge must not wait for one while it holds another.  A keyed
    -- item enqueued after that is left to a later purge.
    v_keyed := ARRAY(SELECT i.item_id FROM queue.item_live i
                      WHERE i.queue_name = v_name AND i.dedup_key IS NOT NULL
                        AND NOT (i.lease_token IS NOT NULL
                                 AND i.lease_expires_at > statement_timestamp()));
    PERFORM queue._lock_items(v_name, v_keyed);
    WITH d AS (
        DELETE FROM queue.item_live i
         WHERE i.queue_name = v_name
           AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > statement_timestamp())
           AND (i.dedup_key IS NULL OR i.item_id = ANY (v_keyed))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    PERFORM queue._event(v_name, NULL, 'purged', NULL, NULL,
                         jsonb_build_object('items', v_n, 'by', session_user));
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
       p.paused, p.pause_reason, p.paused_at,
       CASE WHEN c.breaker_state = 'probing'
              -- a probe whose lease ran out failed: open for another cooldown
              THEN CASE WHEN c.probe_expires_at <= now()
                             AND now() < c.probe_expires_at + c.breaker_cooldown
                        THEN 'open' ELSE 'half_open' END
            WHEN c.breaker_state = 'open' AND c.breaker_opened_at + c.breaker_cooldown <= now()
              THEN 'half_open'
            ELSE c.breaker_state END AS breaker_state,
       c.created_at,
       p.paused_by, c.breaker_reason, c.breaker_opened_at, c.group_on_dead
  FROM queue.queue_config c
 CROSS JOIN LATERAL queue._pause_state(c.paused, c.pause_reason, c.paused_at, c.breaker_state,
                               c.breaker_reason, c.breaker_opened_at) p
 WHERE queue._can_read(c.queue_name);
COMMENT ON VIEW queue.queues IS 'Every queue the caller may read, with its settings, pause (operator first, else breaker) and breaker state';
