-- Internal functions: the SQL face of the C checks, audit events, alerts
-- and dead-lettering (the circuit breaker's are in 25_breaker.sql).  Not granted to
-- anyone; the API functions call them.

CREATE FUNCTION queue._check_name(queue_name text) RETURNS text
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_name_sql';
COMMENT ON FUNCTION queue._check_name(text) IS 'Validates a queue name (22023 / 22004) and returns it';

CREATE FUNCTION queue._check_payload(payload jsonb) RETURNS void
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_payload_sql';
COMMENT ON FUNCTION queue._check_payload(jsonb) IS 'Rejects a NULL or oversized payload';

CREATE FUNCTION queue._check_text(value text, argname text) RETURNS void
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_text_sql';
COMMENT ON FUNCTION queue._check_text(text, text) IS 'Rejects a text longer than 64 kB (54000) naming the argument, NULL passes';

CREATE FUNCTION queue._check_jsonb(value jsonb, argname text) RETURNS void
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_jsonb_sql';
COMMENT ON FUNCTION queue._check_jsonb(jsonb, text) IS 'Rejects a jsonb value larger than queue.max_payload_bytes (54000) naming the argument, NULL passes';

CREATE FUNCTION queue._check_key(value text, argname text) RETURNS void
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_key_sql';
COMMENT ON FUNCTION queue._check_key(text, text) IS 'Rejects a key longer than 64 kB or too long for an index entry once compressed (54000) naming the argument, NULL passes';

CREATE FUNCTION queue._check_access(queue_name text, access text) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'queue_check_access_sql';
COMMENT ON FUNCTION queue._check_access(text, text) IS 'Fails unless the queue exists (42704) and the caller has the access (42501)';

CREATE FUNCTION queue._lock_queue(queue_name text, exclusive boolean) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_queue_sql';
COMMENT ON FUNCTION queue._lock_queue(text, boolean) IS 'Takes the queue lock until the transaction ends: shared by every call using the queue, exclusive to drop it';

CREATE FUNCTION queue._can_read(queue_name text) RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_can_read_sql';
COMMENT ON FUNCTION queue._can_read(text) IS 'Whether the caller may see the rows of a queue';

CREATE FUNCTION queue._caller() RETURNS oid
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_caller';
COMMENT ON FUNCTION queue._caller() IS 'The role calling into the extension (outside SECURITY DEFINER)';

CREATE FUNCTION queue._may_access(queue_name text, access text) RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'queue_may_access_sql';
COMMENT ON FUNCTION queue._may_access(text, text) IS 'Whether the caller has the access to the queue (false if it does not exist)';

CREATE FUNCTION queue._session_key() RETURNS bigint
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_session_key_sql';
COMMENT ON FUNCTION queue._session_key() IS 'The calling connection, as a number no other live connection shares';
CREATE FUNCTION queue._session_alive(session bigint) RETURNS boolean
    LANGUAGE c VOLATILE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_session_alive';
COMMENT ON FUNCTION queue._session_alive(bigint) IS 'Whether the connection with this key (queue._session_key) is still open';

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
-- A new worker is no news (unknown workers are never cached), and neither
-- is last_seen moving forward, a heartbeat or a sign of life: only a
-- changed gate, a removed worker or last_seen moving back (an operator or
-- a test ageing a worker) make every backend drop its caches.
CREATE TRIGGER worker_registry_invalidate
    AFTER DELETE OR TRUNCATE ON queue.worker_registry
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

-- What alerts and pause reasons quote of a text that came from a caller
-- (an error text may be a 64 kB stack trace): whitespace runs folded into
-- one space, cut to p_max characters.  Its literals hold no backslash
-- ([[:space:]], not \s): a SQL function's body is parsed in the caller's
-- session, where standard_conforming_strings may be off.
CREATE FUNCTION queue._excerpt(p text, p_max int DEFAULT 200) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pg_catalog.length(s) OPERATOR(pg_catalog.<=) p_max THEN s
                ELSE pg_catalog.left(s, p_max OPERATOR(pg_catalog.-) 3) OPERATOR(pg_catalog.||) '...' END
      FROM (SELECT pg_catalog.btrim(pg_catalog.regexp_replace(
                       pg_catalog.left(p, 4 OPERATOR(pg_catalog.*) p_max), '[[:space:]]+', ' ', 'g')) AS s) x
$$;
COMMENT ON FUNCTION queue._excerpt(text, int) IS 'A caller''s text as alerts quote it: whitespace folded, at most p_max characters';

CREATE FUNCTION queue._try_lock_alert(queue_name text, kind text) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_try_lock_alert_sql';
COMMENT ON FUNCTION queue._try_lock_alert(text, text) IS 'Tries the lock under which an alert of this kind is raised for the queue; false while another transaction raises it';

-- Raise an alert unless one of that kind is open.  A new alert sends
-- NOTIFY queue_alerts with its row as JSON; the message is already cut to
-- 1,000 characters, and details that would take the payload past 7,000
-- bytes are left out of it (NOTIFY refuses 8,000 bytes or more, and must
-- never fail the caller): listeners read them from the row.
CREATE FUNCTION queue._raise_alert(p_queue text, p_kind text, p_message text,
                                   p_details jsonb DEFAULT '{}')
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_row queue.alerts;
    v_payload text;
    v_channel text;
BEGIN
    -- An alert of this kind that another transaction is raising (its row
    -- inserted, not yet committed) is the one open alert: the caller, a
    -- dequeue or fail that made a dead letter or tripped the breaker, does
    -- not wait for that transaction (a bot's, perhaps held open), it goes
    -- on without raising.  Should that transaction roll back, sweep raises
    -- the alert for what is still there.  Every raise of a kind holds its
    -- lock until its transaction ends, so the insert below never waits for
    -- another one's outcome.
    IF NOT queue._try_lock_alert(p_queue, p_kind) THEN
        RETURN false;
    END IF;
    INSERT INTO queue.alerts (queue_name, kind, message, details)
    VALUES (p_queue, p_kind, queue._excerpt(p_message, 1000), coalesce(p_details, '{}'))
    ON CONFLICT (queue_name, kind) WHERE cleared_at IS NULL DO NOTHING
    RETURNING * INTO v_row;
    IF v_row.alert_id IS NULL THEN
        RETURN false;
    END IF;
    v_payload := pg_catalog.row_to_json(v_row)::text;
    IF pg_catalog.octet_length(v_payload) OPERATOR(pg_catalog.>) 7000 THEN
        v_row.details := pg_catalog.jsonb_build_object('truncated', true);
        v_row.message := queue._excerpt(v_row.message, 200);
        v_payload := pg_catalog.row_to_json(v_row)::text;
    END IF;
    PERFORM pg_notify('queue_alerts', v_payload);
    -- and on the queue's own channel, once a reader asked for it
    -- (alert_channel, 80_observability.sql)
    SELECT a.channel INTO v_channel FROM queue.alert_channels a WHERE a.queue_name = p_queue;
    IF v_channel IS NOT NULL THEN
        PERFORM pg_notify(v_channel, v_payload);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._raise_alert(text, text, text, jsonb) IS 'Raises an alert unless one of its kind is open; NOTIFY queue_alerts and the queue''s own channel with its row as JSON, bounded';

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
             ELSE trim_scale(round(s, 1))::text || ' s'
           END;
END
$$;
COMMENT ON FUNCTION queue._say_interval(interval) IS 'An interval as people say it: 10 min, 1 h, 30 s';

-- The one failure recorder: a failed attempt of an item (fail(), a lost
-- lease, offline recovery, a restart) as a failure_log row (failed_1h, the
-- breaker, health, worker stats) and a 'failed' event under the queue's
-- audit rule.  Returns the entry the caller appends to the item's errors.
CREATE FUNCTION queue._record_failure(p_queue text, p_item_id bigint, p_attempt int,
                                      p_worker text, p_kind text, p_error text,
                                      p_error_code text, p_at timestamptz DEFAULT NULL,
                                      p_details jsonb DEFAULT '{}')
RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_at timestamptz := coalesce(p_at, greatest(statement_timestamp(), transaction_timestamp()));
BEGIN
    -- counted at the call's time, not its transaction's start, as the
    -- history stamps a completion (and the breaker buckets both)
    INSERT INTO queue.failure_log (queue_name, item_id, attempt, worker, kind, error_code, error, at)
    VALUES (p_queue, p_item_id, p_attempt, p_worker, p_kind, p_error_code, p_error,
            greatest(statement_timestamp(), transaction_timestamp()));
    IF EXISTS (SELECT 1 FROM queue.queue_config c
                WHERE c.queue_name = p_queue AND c.breaker_threshold IS NOT NULL) THEN
        PERFORM queue._breaker_count(p_queue, 0, 1);
    END IF;
    PERFORM queue._event(p_queue, p_item_id, 'failed', p_worker, p_attempt,
                         jsonb_build_object('error', p_error, 'error_code', p_error_code)
                         || coalesce(p_details, '{}'));
    RETURN jsonb_build_object('attempt', p_attempt, 'at', v_at, 'worker', p_worker,
                              'error', p_error, 'error_code', p_error_code);
END
$$;
COMMENT ON FUNCTION queue._record_failure(text, bigint, int, text, text, text, text, timestamptz, jsonb)
    IS 'Records a failed attempt (failure_log and event); returns its entry for the item''s errors';

-- Move a live item to the dead letters.  p_error is the failure that
-- killed it (NULL for expiry, cancel and a lost last lease).  An item
-- whose cancel was requested while it was processing ends as cancelled,
-- whatever ended its lease (fail, release, expiry, offline recovery), and
-- is no failed outcome; the bot's own error report, if any, joins errors.
CREATE FUNCTION queue._bury(p_queue text, p_item_id bigint, p_reason text,
                            p_error text, p_error_code text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r queue.item_live;
    v_lost boolean := false;
BEGIN
    DELETE FROM queue.item_live
     WHERE queue_name = p_queue AND item_id = p_item_id
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- (the clock: the statement's start, or the transaction's when later,
    -- as in a procedure that commits, see _lease_lost)
    IF r.cancel_requested_at IS NOT NULL THEN
        p_reason := 'cancelled';
    ELSIF p_reason = 'expired' AND r.lease_token IS NOT NULL AND r.attempt >= r.max_attempts
          AND r.lease_expires_at <= greatest(statement_timestamp(), transaction_timestamp()) THEN
        -- a lost lease on the last attempt is a lease_expired dead letter
        -- whoever meets it first (sweep buries those before expiring items)
        p_reason := 'lease_expired';
    END IF;

    IF p_reason IN ('permanent', 'max_attempts') THEN
        r.errors := r.errors || jsonb_build_array(jsonb_build_object(
            'attempt', r.attempt, 'at', now(), 'worker', r.worker,
            'error', p_error, 'error_code', p_error_code));
        r.last_error := p_error;
        r.error_code := p_error_code;
    ELSIF p_reason = 'lease_expired' AND NOT (p_error IS NULL AND r.lost_counted) THEN
        -- a lease that ran out (unless sweep counted it already), or one
        -- ended early (p_error says why)
        r.last_error := coalesce(p_error, 'lease expired');
        r.error_code := coalesce(p_error_code, 'lease_expired');
        r.errors := r.errors || jsonb_build_array(queue._record_failure(
            p_queue, p_item_id, r.attempt, r.worker, 'lease_expired', r.last_error, r.error_code,
            CASE WHEN p_error IS NULL THEN r.lease_expires_at END));
    ELSIF p_reason = 'expired' THEN
        -- an expired item whose lease ran out and that nobody counted yet
        -- (a dequeue or an enqueue met it before sweep did): its lost lease
        -- is a failed attempt, counted once, as sweep counts it first
        IF r.lease_token IS NOT NULL AND NOT r.lost_counted
           AND r.lease_expires_at <= greatest(statement_timestamp(), transaction_timestamp()) THEN
            r.last_error := 'lease expired';
            r.error_code := 'lease_expired';
            r.errors := r.errors || jsonb_build_array(queue._record_failure(
                p_queue, p_item_id, r.attempt, r.worker, 'lease_expired', r.last_error,
                r.error_code, r.lease_expires_at));
            v_lost := true;
        END IF;
        r.last_error := coalesce(r.last_error, 'expired');
    ELSIF p_reason = 'cancelled' THEN
        IF p_error IS NOT NULL THEN
            r.errors := r.errors || jsonb_build_array(jsonb_build_object(
                'attempt', r.attempt, 'at', now(), 'worker', r.worker,
                'error', p_error, 'error_code', p_error_code));
        END IF;
        -- the cancel is what ended it: no error code of an earlier
        -- failure (replay_all of that code is for the items it killed)
        r.last_error := coalesce(r.cancel_reason, 'cancelled');
        r.error_code := NULL;
    END IF;

    INSERT INTO queue.dead_letters (queue_name, item_id, payload, progress, attempts, reason,
                                    last_error, error_code, errors, dedup_key, correlation_id,
                                    enqueued_at, priority, max_attempts, worker,
                                    group_key, group_pos, limit_key, requires,
                                    cancel_requested_at, cancel_requested_by, cancel_reason)
    VALUES (p_queue, p_item_id, r.payload, r.progress, r.attempt, p_reason,
            r.last_error, r.error_code, r.errors, r.dedup_key, r.correlation_id,
            r.enqueued_at, r.base_priority, r.max_attempts, r.worker,
            r.group_key, r.group_pos, r.limit_key, r.requires,
            r.cancel_requested_at, r.cancel_requested_by, r.cancel_reason);

    PERFORM queue._event(p_queue, p_item_id,
                         CASE p_reason WHEN 'expired' THEN 'expired'
                                       WHEN 'cancelled' THEN 'cancelled'
                                       ELSE 'dead_lettered' END,
                         r.worker, r.attempt,
                         jsonb_build_object('reason', p_reason, 'error', r.last_error,
                                            'error_code', r.error_code)
                         || CASE WHEN r.cancel_requested_at IS NULL THEN '{}'::jsonb
                                 ELSE jsonb_build_object('by', r.cancel_requested_by,
                                                         'requested_at', r.cancel_requested_at) END);
    PERFORM queue._raise_alert(p_queue, 'dead_letters',
                               format('queue %s has new dead letters', p_queue),
                               jsonb_build_object('first_item_id', p_item_id, 'reason', p_reason));
    IF p_reason = 'lease_expired' OR v_lost THEN
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
        PERFORM queue._record_failure(p_queue, r.item_id, r.attempt, r.worker, 'lease_expired',
                                      'lease expired', 'lease_expired');
        -- per failure, failed then retrying: claimable again at once
        PERFORM queue._event(p_queue, r.item_id, 'retrying', r.worker, r.attempt,
                             jsonb_build_object('retry_in_seconds', 0.000, 'reason', 'lease_expired'));
        PERFORM queue._event(p_queue, r.item_id, 'recovered', r.worker, r.attempt,
                             jsonb_build_object('reason', 'lease_expired'));
    END LOOP;
    PERFORM queue._breaker_check(p_queue);
END
$$;
COMMENT ON FUNCTION queue._leases_lost(text, bigint[]) IS 'Records re-claimed expired leases as failed attempts';

-- Lost leases as outcomes: an expired lease nobody re-claimed yet counts
-- once as a failed attempt, with a recovered event, when sweep meets it
-- (dequeue counts the ones it re-claims itself, _leases_lost).  The lease stays as it is: the item is
-- claimable, and a late complete by its holder still succeeds while nobody
-- else claimed it.  Returns whether it was counted now.
CREATE FUNCTION queue._lease_lost(p_queue text, p_item_id bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text;
    v_attempt int;
    v_expires timestamptz;
    v_item_expires timestamptz;
    v_entry jsonb;
BEGIN
    -- lock the row, then judge the clock and record the failure outside
    -- the UPDATE: Citus refuses a volatile function in an UPDATE of a
    -- distributed table, and a clock in its WHERE
    SELECT i.worker, i.attempt, i.lease_expires_at, i.expires_at
      INTO v_worker, v_attempt, v_expires, v_item_expires
      FROM queue.item_live i
     WHERE i.queue_name = p_queue AND i.item_id = p_item_id
       AND i.lease_token IS NOT NULL AND NOT i.lost_counted
       FOR UPDATE;
    -- judged by the statement's start, or by the transaction's when that
    -- is later: in a procedure that commits (CALL queue.run_sweep(), one
    -- transaction per queue) statement_timestamp() stays at the CALL, and
    -- a lease that ran out since would not be counted
    IF NOT FOUND OR v_expires > greatest(statement_timestamp(), transaction_timestamp()) THEN
        RETURN false;
    END IF;
    v_entry := jsonb_build_array(queue._record_failure(
        p_queue, p_item_id, v_attempt, v_worker, 'lease_expired', 'lease expired',
        'lease_expired', v_expires));
    UPDATE queue.item_live i
       SET lost_counted = true, last_error = 'lease expired', error_code = 'lease_expired',
           errors = i.errors || v_entry
     WHERE i.queue_name = p_queue AND i.item_id = p_item_id;
    -- per failure, failed then retrying: the item has been claimable since
    -- the lease's end; not one past its expires_at (hold, cancel or purge
    -- met it), which is never handed out: failed, then expired or what the
    -- caller makes of it
    IF v_item_expires IS NULL
       OR v_item_expires > greatest(statement_timestamp(), transaction_timestamp()) THEN
        PERFORM queue._event(p_queue, p_item_id, 'retrying', v_worker, v_attempt,
                             jsonb_build_object('retry_in_seconds', 0.000, 'reason', 'lease_expired'));
        PERFORM queue._event(p_queue, p_item_id, 'recovered', v_worker, v_attempt,
                             jsonb_build_object('reason', 'lease_expired'));
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._lease_lost(text, bigint) IS 'Counts an expired lease nobody re-claimed as a failed attempt, once';

-- The half-open probe's lease ended early by offline recovery or a restart
-- (src/breaker.c settles the other ends): a failed probe, so the breaker
-- opens again for another cooldown from now; a cancel-requested probe is
-- no outcome, as when it is released: the next dequeue probes again.  A
-- lease that had run out is a lost probe already, whose next probe comes
-- one cooldown after that lease's end.  The settings row is taken without
-- waiting, as to trip the breaker (the caller holds the item, and
-- alter_queue or drop_queue may hold the row while they wait for items):
-- when it is held, the probe counts as lost at the end its lease had.
CREATE FUNCTION queue._end_lease_probe(p_queue text, p_item_id bigint,
                                       p_lease_expires_at timestamptz, p_cancelled boolean)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    IF p_lease_expires_at <= now()
       OR NOT EXISTS (SELECT 1 FROM queue.queue_config c
                       WHERE c.queue_name = p_queue AND c.breaker_state = 'probing'
                         AND c.probe_item_id = p_item_id) THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = p_queue FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN;
    END;
    IF p_cancelled THEN
        PERFORM queue._breaker_probe_back(p_queue, p_item_id);
    ELSE
        PERFORM queue._breaker_probe_done(p_queue, p_item_id, false);
    END IF;
END
$$;
COMMENT ON FUNCTION queue._end_lease_probe(text, bigint, timestamptz, boolean)
    IS 'Settles the half-open probe whose lease offline recovery or a restart ended early';

-- End an item's current lease early as a lost lease (offline recovery, a
-- restart): the attempt counts, with p_error; the item is claimable at
-- once, or a dead letter when that was its last attempt or its cancel was
-- requested (then cancelled, queue._bury).  A lease that ran out and was
-- counted as lost already (sweep or dequeue met it) only ends: the attempt
-- counts once.  An item past its expires_at does not come back: it is
-- never handed out, and the next sweep or dequeue makes it an expired dead
-- letter, so it gets no retrying or recovered event (its trail is failed,
-- then expired, as for a lease that ran out past expires_at).  The caller
-- has locked the item.  Returns 'recovered', 'dead' or 'ended' (the counted
-- lost lease ended), NULL when it has no lease.
CREATE FUNCTION queue._end_lease(p_queue text, p_item_id bigint, p_kind text,
                                 p_error text, p_error_code text)
RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r record;
    v_entry jsonb;
    v_now timestamptz;
BEGIN
    SELECT i.attempt, i.max_attempts, i.worker, i.cancel_requested_at, i.lost_counted,
           i.lease_expires_at, i.expires_at INTO r
      FROM queue.item_live i
     WHERE i.queue_name = p_queue AND i.item_id = p_item_id AND i.lease_token IS NOT NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.attempt >= r.max_attempts OR r.cancel_requested_at IS NOT NULL THEN
        -- a lease that ran out and was counted already adds no second failure
        PERFORM queue._bury(p_queue, p_item_id, 'lease_expired',
                            CASE WHEN NOT r.lost_counted THEN p_error END,
                            CASE WHEN NOT r.lost_counted THEN p_error_code END);
        PERFORM queue._end_lease_probe(p_queue, p_item_id, r.lease_expires_at,
                                       r.cancel_requested_at IS NOT NULL);
        RETURN 'dead';
    END IF;
    IF r.lost_counted THEN
        -- the lease ran out and sweep or dequeue counted it as lost (the
        -- item has been claimable since): it only ends, counted once
        UPDATE queue.item_live i
           SET lease_token = NULL, lease_expires_at = NULL, worker = NULL, lost_counted = false
         WHERE i.queue_name = p_queue AND i.item_id = p_item_id;
        RETURN 'ended';
    END IF;
    v_entry := queue._record_failure(p_queue, p_item_id, r.attempt, r.worker, p_kind,
                                     p_error, p_error_code);
    -- claimable from now, or, when the lease had run out already, from its
    -- end as before: the item keeps its place in the claim order (and the
    -- wait that priority aging measures from there).  NB: now() as a
    -- value, Citus refuses it next to a column in a write.
    v_now := now();
    UPDATE queue.item_live i
       SET lease_token = NULL, lease_expires_at = NULL, worker = NULL,
           visible_at = least(i.lease_expires_at, v_now), run_at = least(i.lease_expires_at, v_now),
           priority = CASE WHEN i.lease_expires_at <= v_now THEN i.priority
                           ELSE i.base_priority END,
           last_error = p_error, error_code = p_error_code,
           errors = i.errors || jsonb_build_array(v_entry)
     WHERE i.queue_name = p_queue AND i.item_id = p_item_id;
    -- per failure, failed then retrying: claimable again at once (an item
    -- past its expires_at is not: failed, then expired when it is buried)
    IF r.expires_at IS NULL OR r.expires_at > v_now THEN
        PERFORM queue._event(p_queue, p_item_id, 'retrying', r.worker, r.attempt,
                             jsonb_build_object('retry_in_seconds', 0.000, 'reason', p_error_code));
        PERFORM queue._event(p_queue, p_item_id, 'recovered', r.worker, r.attempt,
                             jsonb_build_object('reason', p_error_code, 'worker', r.worker));
    END IF;
    PERFORM queue._end_lease_probe(p_queue, p_item_id, r.lease_expires_at, false);
    RETURN 'recovered';
END
$$;
COMMENT ON FUNCTION queue._end_lease(text, bigint, text, text, text)
    IS 'Ends an item''s lease early as a lost lease (offline recovery, restart)';

-- Locks the items of p_queue with the given ids all at once, and never
-- waits for one while it holds another: when another transaction holds
-- one, those taken are let go again (the block's subtransaction is rolled
-- back), the busy one is waited for alone and let go at once, and it
-- starts over until it holds them all; with p_wait_all false it gives up
-- after ten rounds and takes none (heartbeat, which goes on with the items
-- free then and leaves the busy ones for its next call).  Each round waits
-- for a transaction that holds an item, so it ends once they let go; it
-- never waits in item id order while holding some.  heartbeat and
-- restart take a worker's items so, and purge a queue's keyed items (as
-- complete_batch does in C, complete_direct.c), since a call that locks them in
-- another order (enqueue_batch, which locks the holders of its keys in key
-- order) would otherwise wait for the one they hold while they wait for
-- its, and a deadlock would fail one of the two.  Items gone meanwhile are
-- left out.  (A subtransaction takes an xid only where it locks rows.)
-- Under Citus the callers lock the items in id order themselves, as
-- before: no subtransaction is rolled back over the distributed table.
CREATE FUNCTION queue._lock_items(p_queue text, p_items bigint[],
                                 p_wait_all boolean DEFAULT true)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_free bigint[];
    v_busy bigint[];
    v_round int := 0;
BEGIN
    IF coalesce(cardinality(p_items), 0) = 0 THEN
        RETURN;
    END IF;
    LOOP
        v_round := v_round + 1;
        EXIT WHEN NOT p_wait_all AND v_round > 10;
        BEGIN
            SELECT array_agg(s.item_id) INTO v_free
              FROM (SELECT i.item_id FROM queue.item_live i
                     WHERE i.queue_name = p_queue AND i.item_id = ANY (p_items)
                     ORDER BY i.item_id
                       FOR UPDATE SKIP LOCKED) s;
            SELECT array_agg(i.item_id) INTO v_busy FROM queue.item_live i
             WHERE i.queue_name = p_queue AND i.item_id = ANY (p_items)
               AND i.item_id <> ALL (coalesce(v_free, '{}'));
            IF v_busy IS NULL THEN
                RETURN;
            END IF;
            -- (a code of its own: a lock_timeout of the caller still ends
            -- the call with its error)
            RAISE EXCEPTION 'let the items go' USING ERRCODE = 'QL001';
        EXCEPTION WHEN SQLSTATE 'QL001' THEN
            BEGIN
                PERFORM FROM queue.item_live i
                 WHERE i.queue_name = p_queue
                   AND i.item_id = (SELECT min(b) FROM unnest(v_busy) b)
                   FOR UPDATE;
                RAISE EXCEPTION 'let the item go' USING ERRCODE = 'QL001';
            EXCEPTION WHEN SQLSTATE 'QL001' THEN
                NULL;
            END;
        END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION queue._lock_items(text, bigint[], boolean)
    IS 'Locks items all at once, never waiting for one while holding another';

-- The leases a restarted process of `p_worker` held in `p_queue`: those
-- claimed before `p_before` (all when NULL) end as lost leases (error `worker restarted`),
-- and the breaker judges them at once, as any failures.  register_worker
-- (restart) ends them all; heartbeat the claims that committed after the
-- restart although made before it.
CREATE FUNCTION queue._end_restarted_leases(p_queue text, p_worker text, p_before timestamptz)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r record;
    v_ended boolean := false;
    v_ids bigint[];
    v_held bigint[] := '{}';
BEGIN
    -- every lease under the name, all at once (the ids first: see _lock_items)
    v_ids := ARRAY(
        SELECT i.item_id FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker = p_worker
           AND i.lease_token IS NOT NULL AND (p_before IS NULL OR i.claimed_at < p_before));
    PERFORM queue._lock_items(p_queue, v_ids);
    -- the leases held now; one claimed since (its claim committed while
    -- the items were being taken) is taken only if it is free: waiting for
    -- it while holding the others would deadlock with a call that holds it
    -- and waits for one of them (an enqueue_batch naming their keys in the
    -- other order).  A claim the replaced process made before the restart
    -- is ended by the worker's next heartbeat (restarted_at).  Under Citus
    -- it locks them in id order (those _lock_items took are held already).
    IF queue.distributed() THEN
        FOR r IN
            SELECT i.item_id FROM queue.item_live i
             WHERE i.queue_name = p_queue AND i.worker = p_worker
               AND i.lease_token IS NOT NULL AND (p_before IS NULL OR i.claimed_at < p_before)
             ORDER BY i.item_id
               FOR UPDATE
        LOOP
            v_held := v_held || r.item_id;
        END LOOP;
    ELSE
        SELECT array_agg(s.item_id ORDER BY s.item_id) INTO v_held
          FROM (SELECT i.item_id FROM queue.item_live i
                 WHERE i.queue_name = p_queue AND i.worker = p_worker
                   AND i.lease_token IS NOT NULL AND (p_before IS NULL OR i.claimed_at < p_before)
                 ORDER BY i.item_id
                   FOR UPDATE SKIP LOCKED) s;
    END IF;
    FOR r IN SELECT u.item_id FROM unnest(v_held) AS u(item_id) ORDER BY 1
    LOOP
        PERFORM queue._end_lease(p_queue, r.item_id, 'lease_expired',
                                 'worker restarted', 'worker_restarted');
        v_ended := true;
    END LOOP;
    IF v_ended THEN
        PERFORM queue._breaker_check(p_queue);
    END IF;
END
$$;
COMMENT ON FUNCTION queue._end_restarted_leases(text, text, timestamptz)
    IS 'Ends a restarted worker''s leases claimed before a time as lost leases (register_worker restart, heartbeat)';
