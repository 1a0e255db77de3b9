-- Flow control and routing: the functions and views that changed.
--
-- Copies of their definitions in schema/ (20_internal.sql, 30_queues.sql,
-- 40_items.sql, 50_dead_letters.sql); the signatures of create_queue,
-- alter_queue, enqueue and enqueue_batch grew, so those are dropped and
-- created again with their grants.

-- from schema/30_queues.sql
CREATE OR REPLACE FUNCTION queue._check_settings(c queue.queue_config)
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

-- from schema/30_queues.sql
DROP FUNCTION IF EXISTS queue.create_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, boolean);
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

-- from schema/30_queues.sql
-- The max_in_flight stripes' locks, all of them (src/dequeue.c), for
-- alter_queue while it deals the current leases out over a new cap.
CREATE OR REPLACE FUNCTION queue._lock_cap_stripes(queue_name text) RETURNS int
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_cap_stripes_sql';
COMMENT ON FUNCTION queue._lock_cap_stripes(text)
    IS 'Waits for every max_in_flight stripe lock of the queue until the end of the transaction; returns the most stripes a cap has';
REVOKE ALL ON FUNCTION queue._lock_cap_stripes(text) FROM PUBLIC;

-- from schema/30_queues.sql
DROP FUNCTION IF EXISTS queue.alter_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval);
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

-- from schema/30_queues.sql
CREATE OR REPLACE VIEW queue.queues WITH (security_barrier) AS
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

-- from schema/40_items.sql
DROP FUNCTION IF EXISTS queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text);
CREATE FUNCTION queue.enqueue(
    queue_name     text,
    payload        jsonb,
    priority       int         DEFAULT 2,
    run_at         timestamptz DEFAULT now(),
    dedup_key      text        DEFAULT NULL,
    expires_at     timestamptz DEFAULT NULL,
    max_attempts   int         DEFAULT NULL,
    correlation_id text        DEFAULT NULL,
    group_key      text        DEFAULT NULL,
    limit_key      text        DEFAULT NULL,
    requires       text[]      DEFAULT NULL)
RETURNS bigint LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_enqueue';
COMMENT ON FUNCTION queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text, text, text, text[])
    IS 'Adds an item; with a dedup_key held by a live item returns that item''s id instead';

-- from schema/40_items.sql
DROP FUNCTION IF EXISTS queue.enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int);
CREATE FUNCTION queue.enqueue_batch(
    queue_name   text,
    payloads     jsonb[],
    priority     int         DEFAULT 2,
    run_at       timestamptz DEFAULT now(),
    dedup_keys   text[]      DEFAULT NULL,
    expires_at   timestamptz DEFAULT NULL,
    max_attempts int         DEFAULT NULL,
    group_keys   text[]      DEFAULT NULL,
    limit_keys   text[]      DEFAULT NULL,
    requires     text[]      DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'queue_enqueue_batch';
COMMENT ON FUNCTION queue.enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int, text[], text[], text[])
    IS 'Adds many items in one call; returns their ids in input order';

-- from schema/40_items.sql
CREATE OR REPLACE FUNCTION queue.unhold(queue_name text, item_id bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(unhold.queue_name);
    v_now timestamptz := now();     -- a value: Citus refuses now() in a CASE of an UPDATE
BEGIN
    IF unhold.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.item_live i
       SET on_hold = false, hold_reason = NULL,
           visible_at = CASE WHEN i.group_wait THEN queue._flow_parked()   -- still behind its head
                             ELSE greatest(i.run_at, v_now) END,
           run_at = greatest(i.run_at, v_now),
           -- claimable again from now: priority aging's wait starts over
           -- (a limited key's band is kept, 45_flow.sql)
           priority = i.base_priority
     WHERE i.queue_name = v_name AND i.item_id = unhold.item_id AND i.on_hold;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._event(v_name, unhold.item_id, 'unheld', NULL, NULL,
                         jsonb_build_object('by', session_user));
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.unhold(text, bigint) IS 'Returns an on-hold item to the queue; false for other states';

-- from schema/40_items.sql
CREATE OR REPLACE FUNCTION queue._flow_waiting(p_queue text, p_group_wait boolean, p_limited boolean,
                                    p_limit_key text, p_requires text[])
RETURNS text LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    l record;
BEGIN
    -- every role may call it (the items view calls it as the reader),
    -- so it answers only for a queue the caller may read
    IF NOT queue._can_read(p_queue) THEN
        RAISE EXCEPTION 'permission denied for queue "%"', p_queue
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only roles that may read the queue learn why its items wait.',
                  HINT = format('An admin can run queue.grant_queue(%L, <role>, ''reader'').', p_queue);
    END IF;
    IF p_group_wait THEN
        RETURN 'blocked_by_group';
    END IF;
    FOR l IN SELECT f.limit_key, f.max_in_flight, f.rate, f.per FROM queue.flow_limit f
              WHERE f.queue_name = p_queue
                AND ((p_limited AND f.limit_key = p_limit_key) OR f.limit_key = '')
              ORDER BY f.limit_key DESC LOOP
        IF l.max_in_flight IS NOT NULL
           AND (SELECT count(*) FROM queue.item_live i
                 WHERE i.queue_name = p_queue AND i.limit_key = l.limit_key
                   AND i.worker IS NOT NULL AND i.lease_expires_at > now()) >= l.max_in_flight THEN
            RETURN 'limit_full';
        END IF;
        IF l.rate IS NOT NULL
           AND (SELECT count(*) FROM queue.flow_claim c
                 WHERE c.queue_name = p_queue AND c.limit_key = l.limit_key
                   AND c.at > clock_timestamp() - l.per) >= l.rate THEN
            RETURN 'throttled';
        END IF;
    END LOOP;
    -- an active worker has the labels: not draining, not inside a
    -- maintenance window, seen lately (as the unroutable rule, 45_flow.sql)
    IF p_requires IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM queue.worker_registry w
                        WHERE p_requires <@ w.labels AND NOT w.draining
                          AND w.last_seen > now() - make_interval(secs => queue._worker_offline_after())
                          AND NOT EXISTS (SELECT 1 FROM queue.maintenance_window m
                                           WHERE m.worker = w.worker
                                             AND m.starts_at <= now() AND m.ends_at > now())) THEN
        RETURN 'no_capable_worker';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION queue._flow_waiting(text, boolean, boolean, text, text[])
    IS 'Why a queued item waits: blocked_by_group, limit_full, throttled, no_capable_worker, or NULL';

-- from schema/40_items.sql
CREATE OR REPLACE VIEW queue.items WITH (security_barrier) AS
SELECT i.queue_name, i.item_id,
       CASE WHEN i.group_wait AND NOT i.on_hold   -- in line behind its group's head:
                 THEN CASE WHEN i.run_at > now() THEN 'scheduled' ELSE 'queued' END   -- its own run_at
            ELSE queue._live_state(i.on_hold, i.lease_token, i.lease_expires_at, i.visible_at)
       END AS state,
       i.base_priority AS priority, i.attempt, i.max_attempts, i.run_at, i.enqueued_at,
       CASE WHEN i.lease_token IS NOT NULL THEN i.lease_expires_at END AS lease_expires_at,
       i.worker, i.dedup_key, i.correlation_id, i.last_error, i.payload, i.progress,
       i.priority % 100000 AS effective_priority, i.expires_at, i.error_code, i.hold_reason,
       i.claimed_at, i.group_key, i.limit_key, i.requires,
       CASE WHEN NOT i.on_hold
                 AND (i.group_wait
                      OR (i.visible_at <= now()   -- claimable: queued, or a lease ran out
                          AND (i.limit_key IS NOT NULL OR i.requires IS NOT NULL
                               OR i.queue_name IN (SELECT c.queue_name FROM queue.queue_config c
                                                    WHERE c.flow_rate))))
            THEN queue._flow_waiting(i.queue_name, i.group_wait, i.priority >= 100000,
                                     i.limit_key, i.requires)
       END AS waiting,
       i.cancel_requested_at, i.cancel_requested_by, i.cancel_reason
  FROM queue.item_live i
 WHERE queue._can_read(i.queue_name);
COMMENT ON VIEW queue.items IS 'Live items: queued, scheduled, processing or on hold';

-- from schema/50_dead_letters.sql
CREATE OR REPLACE FUNCTION queue.replay(queue_name text, item_id bigint, payload jsonb DEFAULT NULL)
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

    -- a group member keeps its place in line (group_pos): the replay of a
    -- head that blocked its group becomes the head
    INSERT INTO queue.item_live AS i (queue_name, priority, visible_at, base_priority, run_at,
                                      max_attempts, expires_at, dedup_key, correlation_id,
                                      payload, progress, group_key, group_pos, limit_key, requires)
    VALUES (v_name, x.priority, now(), x.priority, now(),
            coalesce(x.max_attempts, c.max_attempts), now() + c.item_ttl,
            x.dedup_key, x.correlation_id, v_payload, x.progress,
            x.group_key, x.group_pos, x.limit_key, x.requires)
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
                                            'payload_changed', replay.payload IS NOT NULL,
                                            'by', session_user));
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION queue.replay(text, bigint, jsonb)
    IS 'Re-enqueues a dead letter with attempts reset and its progress kept; returns the new item id';

-- grants of the re-created functions (as schema/90_security.sql)
REVOKE ALL ON FUNCTION queue.create_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, boolean, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue.alter_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text, text, text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue.enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int, text[], text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue.create_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, boolean, text) TO queue_admin;
GRANT EXECUTE ON FUNCTION queue.alter_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, text) TO queue_admin;
GRANT EXECUTE ON FUNCTION queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text, text, text, text[]) TO queue_producer, queue_admin;
GRANT EXECUTE ON FUNCTION queue.enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int, text[], text[], text[]) TO queue_producer, queue_admin;

-- new objects of 45_flow.sql
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON queue.flow_group, queue.flow_limit, queue.flow_claim, queue.limits FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue.set_limit(text, text, int, int, interval) TO queue_admin;
GRANT EXECUTE ON FUNCTION queue.drop_limit(text, text) TO queue_admin;
GRANT SELECT ON queue.limits TO queue_reader, queue_producer, queue_worker, queue_admin;
-- the items view calls it as the reader
REVOKE ALL ON FUNCTION queue._flow_waiting(text, boolean, boolean, text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue._flow_waiting(text, boolean, boolean, text, text[])
   TO queue_reader, queue_producer, queue_worker, queue_admin;
