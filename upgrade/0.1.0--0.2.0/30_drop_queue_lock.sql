-- drop_queue leaves nothing behind: the queue lock (shared by every call
-- that uses a queue, exclusive for drop_queue), one function that removes
-- a queue's rows, a new queue starting empty.

CREATE OR REPLACE FUNCTION queue._lock_queue(queue_name text, exclusive boolean) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_queue_sql';
COMMENT ON FUNCTION queue._lock_queue(text, boolean) IS 'Takes the queue lock until the transaction ends: shared by every call using the queue, exclusive to drop it';

CREATE OR REPLACE FUNCTION queue._forget_queue(p_queue text, p_keep_dropped boolean)
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
         g AS (DELETE FROM queue.queue_grant g WHERE g.queue_name = p_queue RETURNING 1)
    SELECT jsonb_build_object('item_live', (SELECT count(*) FROM l),
                              'item_done', (SELECT count(*) FROM h),
                              'dead_letters', (SELECT count(*) FROM x),
                              'events', (SELECT count(*) FROM e),
                              'dedup_done', (SELECT count(*) FROM k),
                              'failure_log', (SELECT count(*) FROM f),
                              'alerts', (SELECT count(*) FROM a),
                              'metrics_history', (SELECT count(*) FROM m),
                              'metrics_totals', (SELECT count(*) FROM t),
                              'queue_grant', (SELECT count(*) FROM g))
      INTO v_counts;
    RETURN v_counts;
END
$$;
COMMENT ON FUNCTION queue._forget_queue(text, boolean)
    IS 'Deletes the rows of a queue from every per-queue table but the settings; returns the counts by table';

REVOKE ALL ON FUNCTION queue._lock_queue(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._forget_queue(text, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue.create_queue(
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
    IF NOT FOUND THEN
        IF NOT coalesce(create_queue.if_not_exists, false) THEN
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
COMMENT ON FUNCTION queue.create_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, boolean)
    IS 'Creates a queue with its lease, retry, retention, audit and breaker settings';

CREATE OR REPLACE FUNCTION queue.drop_queue(queue_name text, force boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(drop_queue.queue_name);
    v_live bigint;
    v_counts jsonb;
BEGIN
    -- NB: first the queue lock: the calls adding rows to the queue finish
    -- (their rows are then seen and removed below), later ones wait for
    -- this transaction and then find no queue
    PERFORM queue._lock_queue(v_name, true);
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

    v_counts := queue._forget_queue(v_name, false);
    v_counts := jsonb_build_object('live', v_counts -> 'item_live', 'history', v_counts -> 'item_done',
                                   'dead_letters', v_counts -> 'dead_letters',
                                   'events', v_counts -> 'events');
    DELETE FROM queue.queue_config q WHERE q.queue_name = v_name;
    INSERT INTO queue.events (queue_name, kind, details)
    VALUES (v_name, 'queue_dropped', v_counts || jsonb_build_object('force', coalesce(drop_queue.force, false)));
END
$$;
COMMENT ON FUNCTION queue.drop_queue(text, boolean)
    IS 'Drops a queue; refuses while it has live items unless force, which removes its history, dead letters and events too';

