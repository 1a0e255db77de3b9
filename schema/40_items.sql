-- ======================================================================
-- Items: producing, consuming (C hot path), operator actions, views
--
-- The C functions carry no SET clauses: PostgreSQL would apply and undo
-- them through the GUC machinery on every call.  Their statements run with
-- pg_catalog as the whole search path and without JIT instead, set where
-- they connect to SPI (src/statement_scope.c), and qualify their names
-- besides (src/queue.h).
-- ======================================================================

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
AS 'MODULE_PATHNAME', 'queue_enqueue';
COMMENT ON FUNCTION queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text, text, text, text[])
    IS 'Adds an item; with a dedup_key held by a live item returns that item''s id instead';

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
AS 'MODULE_PATHNAME', 'queue_enqueue_batch';
COMMENT ON FUNCTION queue.enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int, text[], text[], text[])
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
AS 'MODULE_PATHNAME', 'queue_dequeue';
COMMENT ON FUNCTION queue.dequeue(text, text, int, interval)
    IS 'Claims up to batch_size items under a lease with a fencing token';

CREATE FUNCTION queue.complete(queue_name text, item_id bigint, lease_token bigint,
                               result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'queue_complete';
COMMENT ON FUNCTION queue.complete(text, bigint, bigint, jsonb)
    IS 'Moves a leased item to the history; false if the lease is not current';

CREATE FUNCTION queue.complete_batch(queue_name text, item_ids bigint[], lease_tokens bigint[],
                                     result jsonb DEFAULT NULL)
RETURNS int LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'queue_complete_batch';
COMMENT ON FUNCTION queue.complete_batch(text, bigint[], bigint[], jsonb)
    IS 'Completes the items whose lease tokens are current; returns how many';

CREATE FUNCTION queue.fail(queue_name text, item_id bigint, lease_token bigint, error text,
                           error_code text DEFAULT NULL, permanent boolean DEFAULT false,
                           retry_in interval DEFAULT NULL)
RETURNS text LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'queue_fail';
COMMENT ON FUNCTION queue.fail(text, bigint, bigint, text, text, boolean, interval)
    IS 'Reports a failed attempt: ''retrying'' (backoff) or ''dead'' (dead letter); NULL if the lease is not current';

CREATE FUNCTION queue.release(queue_name text, item_id bigint, lease_token bigint,
                              run_at timestamptz DEFAULT now())
RETURNS boolean LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'queue_release';
COMMENT ON FUNCTION queue.release(text, bigint, bigint, timestamptz)
    IS 'Gives a leased item back without counting the attempt';

CREATE FUNCTION queue.extend_lease(queue_name text, item_id bigint, lease_token bigint,
                                   extend_by interval DEFAULT NULL)
RETURNS timestamptz LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'queue_extend_lease';
COMMENT ON FUNCTION queue.extend_lease(text, bigint, bigint, interval)
    IS 'Moves the lease''s expiry to now() + extend_by; NULL if the lease is lost';

CREATE FUNCTION queue.checkpoint(queue_name text, item_id bigint, lease_token bigint,
                                 progress jsonb)
RETURNS boolean LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
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
    r record;
BEGIN
    IF hold.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_text(hold.reason, 'reason');
    PERFORM queue._check_access(v_name, 'reader');
    -- a lease that ran out and nobody re-claimed is settled first, as sweep
    -- or dequeue would: counted once as a lost lease, and a dead letter when
    -- it was the last attempt or its cancel was requested (nothing to hold)
    SELECT i.attempt >= i.max_attempts OR i.cancel_requested_at IS NOT NULL AS spent,
           i.lost_counted
      INTO r FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.item_id = hold.item_id AND NOT i.on_hold
       AND i.lease_token IS NOT NULL AND i.lease_expires_at <= statement_timestamp()
       FOR UPDATE;
    IF FOUND THEN
        IF r.spent THEN
            PERFORM queue._bury(v_name, hold.item_id, 'lease_expired', NULL, NULL);
            RETURN false;
        ELSIF NOT r.lost_counted THEN
            PERFORM queue._lease_lost(v_name, hold.item_id);
            -- a failure like any other: the breaker judges it at once
            PERFORM queue._breaker_check(v_name);
        END IF;
    END IF;
    UPDATE queue.item_live i
       SET on_hold = true, hold_reason = hold.reason, visible_at = 'infinity',
           lease_token = NULL, lease_expires_at = NULL, worker = NULL
     WHERE i.queue_name = v_name AND i.item_id = hold.item_id AND NOT i.on_hold
       AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > statement_timestamp())
       AND i.cancel_requested_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._event(v_name, hold.item_id, 'held', NULL, NULL,
                         jsonb_build_object('reason', hold.reason, 'by', session_user));
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

-- cancel() of a queued, scheduled or on-hold item buries it at once.  Of a
-- processing item it is a request: the row is marked (when, by whom, why)
-- and its lease_token negated, so that extend_lease and checkpoint, which
-- look for the bot's token, refuse the lease from then on (src/ack.c);
-- whatever ends the lease other than complete (fail, release, expiry,
-- offline recovery) buries it as cancelled (queue._bury).  A complete that
-- comes first, or finds the item by either sign, wins: the work happened.
-- The row lock orders cancel against the bot's calls, which lock the same
-- row.
CREATE FUNCTION queue.cancel(queue_name text, item_id bigint, reason text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(cancel.queue_name);
    v_by text := queue._caller()::regrole::text;
    r record;
BEGIN
    IF cancel.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_text(cancel.reason, 'reason');
    PERFORM queue._check_access(v_name, 'reader');
    SELECT i.lease_token IS NOT NULL AND i.lease_expires_at > statement_timestamp() AS processing,
           i.lease_token IS NOT NULL AND i.lease_expires_at <= statement_timestamp() AS lost,
           i.attempt >= i.max_attempts AS spent, i.lost_counted,
           i.cancel_requested_at, i.worker, i.attempt
      INTO r
      FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.item_id = cancel.item_id
       FOR UPDATE;
    IF NOT FOUND OR r.cancel_requested_at IS NOT NULL THEN
        RETURN false;
    END IF;
    -- a lease that ran out and nobody re-claimed is settled first, as sweep
    -- or dequeue would (and as hold does): counted once as a lost lease,
    -- and a dead letter of its own when it was the last attempt
    IF r.lost THEN
        IF r.spent THEN
            PERFORM queue._bury(v_name, cancel.item_id, 'lease_expired', NULL, NULL);
            RETURN false;
        ELSIF NOT r.lost_counted THEN
            PERFORM queue._lease_lost(v_name, cancel.item_id);
            -- a failure like any other: the breaker judges it at once
            PERFORM queue._breaker_check(v_name);
        END IF;
    END IF;
    UPDATE queue.item_live i
       SET cancel_requested_at = now(), cancel_requested_by = v_by, cancel_reason = cancel.reason,
           lease_token = CASE WHEN r.processing THEN -i.lease_token ELSE i.lease_token END
     WHERE i.queue_name = v_name AND i.item_id = cancel.item_id;
    IF r.processing THEN
        PERFORM queue._event(v_name, cancel.item_id, 'cancel_requested', r.worker, r.attempt,
                             jsonb_build_object('reason', cancel.reason, 'by', v_by));
    ELSE
        PERFORM queue._bury(v_name, cancel.item_id, 'cancelled', NULL, NULL);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.cancel(text, bigint, text)
    IS 'Makes a queued or on-hold item a dead letter (cancelled); marks a processing item so that its lease ends as one; false for other states';

-- fail() and release() of a cancel-requested item: it ends as a dead
-- letter (cancelled), never retried.  p_lease_token is the bot's (the
-- item holds it negated).  False when the lease is not current.
CREATE FUNCTION queue._cancel_end(p_queue text, p_item_id bigint, p_lease_token bigint,
                                  p_error text, p_error_code text)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM queue.item_live i
     WHERE i.queue_name = p_queue AND i.item_id = p_item_id
       AND i.lease_token = -p_lease_token AND i.cancel_requested_at IS NOT NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._bury(p_queue, p_item_id, 'cancelled', p_error, p_error_code);
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._cancel_end(text, bigint, bigint, text, text)
    IS 'Buries a cancel-requested item whose bot gave it back (fail or release); false if the lease is not current';

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

-- Why a queued item waits (flow control, 45_flow.sql): NULL when nothing
-- holds it back.  Runs as the owner: it counts leases and claims of the
-- item's key and looks for a worker with the labels the item requires.
CREATE FUNCTION queue._flow_waiting(p_queue text, p_group_wait boolean, p_limited boolean,
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

CREATE VIEW queue.items WITH (security_barrier) AS
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
               dedup_key text, correlation_id text, replayed_as bigint,
               cancel_requested_at timestamptz, cancel_requested_by text, cancel_reason text)
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(item.queue_name);
BEGIN
    IF item.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    -- the state the items view gives (a group member waiting behind its
    -- head is queued, or scheduled while its own run_at is ahead)
    RETURN QUERY
    SELECT CASE WHEN i.group_wait AND NOT i.on_hold
                THEN CASE WHEN i.run_at > now() THEN 'scheduled' ELSE 'queued' END
                ELSE queue._live_state(i.on_hold, i.lease_token, i.lease_expires_at, i.visible_at)
           END,
           i.base_priority, i.attempt, i.max_attempts, i.payload,
           i.progress, NULL::jsonb, i.worker, i.enqueued_at, i.run_at,
           CASE WHEN i.lease_token IS NOT NULL THEN i.lease_expires_at END,
           NULL::timestamptz, i.last_error, i.error_code, NULL::text, i.dedup_key,
           i.correlation_id, NULL::bigint,
           i.cancel_requested_at, i.cancel_requested_by, i.cancel_reason
      FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.item_id = item.item_id;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 'processed'::text, NULL::int, d.attempts, NULL::int,
           d.payload, d.progress, d.result, d.worker, d.enqueued_at, NULL::timestamptz,
           NULL::timestamptz, d.completed_at, NULL::text, NULL::text, NULL::text,
           d.dedup_key, d.correlation_id, NULL::bigint,
           NULL::timestamptz, NULL::text, NULL::text
      FROM queue.item_done d
     WHERE d.queue_name = v_name AND d.item_id = item.item_id;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 'dead'::text, x.priority, x.attempts, x.max_attempts,
           x.payload, x.progress, NULL::jsonb, x.worker, x.enqueued_at, NULL::timestamptz,
           NULL::timestamptz, x.dead_at, x.last_error, x.error_code, x.reason,
           x.dedup_key, x.correlation_id, x.replayed_as,
           x.cancel_requested_at, x.cancel_requested_by, x.cancel_reason
      FROM queue.dead_letters x
     WHERE x.queue_name = v_name AND x.item_id = item.item_id;
END
$$;
COMMENT ON FUNCTION queue.item(text, bigint)
    IS 'One item wherever it is now: a live state, processed, or dead; no row if unknown or purged';
