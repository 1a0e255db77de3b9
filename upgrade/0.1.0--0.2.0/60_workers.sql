-- Workers: labels, ownership of a name, restart, heartbeats that renew
-- only tracked leases, signs of life (src/worker.c), one failure recorder.

ALTER TABLE queue.worker_registry ADD COLUMN IF NOT EXISTS labels text[];
ALTER TABLE queue.worker_registry ADD COLUMN IF NOT EXISTS registered_by regrole;
ALTER TABLE queue.worker_registry ADD COLUMN IF NOT EXISTS session bigint;
ALTER TABLE queue.worker_registry ADD COLUMN IF NOT EXISTS restarted_at timestamptz;
ALTER TABLE queue.item_live ADD COLUMN IF NOT EXISTS lease_session bigint;

-- A new worker row is no news for the caches.
DROP TRIGGER IF EXISTS worker_registry_invalidate ON queue.worker_registry;
CREATE TRIGGER worker_registry_invalidate
    AFTER DELETE OR TRUNCATE ON queue.worker_registry
    FOR EACH STATEMENT EXECUTE FUNCTION queue._invalidate_cache();

CREATE OR REPLACE FUNCTION queue._may_access(queue_name text, access text) RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'queue_may_access_sql';
COMMENT ON FUNCTION queue._may_access(text, text) IS 'Whether the caller has the access to the queue (false if it does not exist)';

CREATE OR REPLACE FUNCTION queue._session_key() RETURNS bigint
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_session_key_sql';
COMMENT ON FUNCTION queue._session_key() IS 'The calling connection, as a number no other live connection shares';
CREATE OR REPLACE FUNCTION queue._session_alive(session bigint) RETURNS boolean
    LANGUAGE c VOLATILE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_session_alive';
COMMENT ON FUNCTION queue._session_alive(bigint) IS 'Whether the connection with this key (queue._session_key) is still open';

CREATE OR REPLACE FUNCTION queue._record_failure(p_queue text, p_item_id bigint, p_attempt int,
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

CREATE OR REPLACE FUNCTION queue._bury(p_queue text, p_item_id bigint, p_reason text,
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

CREATE OR REPLACE FUNCTION queue._end_lease(p_queue text, p_item_id bigint, p_kind text,
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
-- restart take a worker's items so, since a call that locks them in
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

-- returns two counts since 0.2.0 (a bigint before)
DROP FUNCTION IF EXISTS queue._recover_offline(text);
CREATE FUNCTION queue._recover_offline(p_queue text, OUT recovered bigint,
                                       OUT dead_lettered bigint)
RETURNS record LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := now();
    v_cutoff timestamptz := now() - make_interval(secs => queue._worker_offline_after());
    r record;
    v_workers text[] := '{}';
    v_named text[];
BEGIN
    recovered := 0;
    dead_lettered := 0;
    FOR r IN
        SELECT i.item_id, i.worker,
               (i.expires_at IS NOT NULL AND i.expires_at <= v_now) AS expiring
          FROM queue.item_live i
          JOIN queue.worker_registry w ON w.worker = i.worker
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL AND i.lease_token IS NOT NULL
           AND w.last_seen < v_cutoff
         ORDER BY i.item_id
         LIMIT 10000
           FOR UPDATE OF i SKIP LOCKED
    LOOP
        CASE queue._end_lease(p_queue, r.item_id, 'offline', 'worker offline', 'worker_offline')
            WHEN 'recovered' THEN
                -- an item past its expires_at is not claimable again: the
                -- sweep buries it next and counts it once, as expired
                IF NOT r.expiring THEN
                    recovered := recovered + 1;
                END IF;
            WHEN 'dead' THEN
                dead_lettered := dead_lettered + 1;
            ELSE
                NULL;
        END CASE;
        IF r.worker <> ALL (v_workers) THEN
            v_workers := v_workers || r.worker;
        END IF;
    END LOOP;
    -- when their leases were ended, once per worker.  NB: SKIP LOCKED: a
    -- sweep of another queue ending the same worker's leases at the same
    -- time stamps it; this one never waits for that transaction (under
    -- Citus, where the registry is a reference table, it is stamped as is)
    IF cardinality(v_workers) > 0 AND queue.distributed() THEN
        UPDATE queue.worker_registry w SET offline_handled_at = now()
         WHERE w.worker = ANY (v_workers);
    ELSIF cardinality(v_workers) > 0 THEN
        UPDATE queue.worker_registry w SET offline_handled_at = now()
         WHERE w.worker IN (SELECT x.worker FROM queue.worker_registry x
                             WHERE x.worker = ANY (v_workers)
                               FOR UPDATE SKIP LOCKED);
    END IF;
    -- the alert's check reads these workers whatever their last_seen.
    -- NB: merged before the write, as a value: under Citus a query in an
    -- UPDATE of a distributed table would run inside the shard's statement.
    IF cardinality(v_workers) > 0 THEN
        SELECT o.workers INTO v_named FROM queue.offline_check o
         WHERE o.queue_name = p_queue;     -- (only sweeps, under the sweep lock, write it)
        IF FOUND THEN
            v_named := ARRAY(SELECT DISTINCT u.w FROM unnest(v_named || v_workers) AS u(w)
                              ORDER BY u.w);
            UPDATE queue.offline_check o SET workers = v_named
             WHERE o.queue_name = p_queue;
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION queue._recover_offline(text)
    IS 'Ends the leases of offline workers on a queue; returns how many items are claimable again and how many became dead letters';

-- The max_in_flight stripes' locks that a heartbeat's revivals of expired
-- leases wait for, in one order (src/dequeue.c); charged is each lease's
-- coalesce(cap_stripe, item_id).
CREATE FUNCTION queue._lock_revival_stripes(queue_name text, charged bigint[]) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_revival_stripes_sql';
COMMENT ON FUNCTION queue._lock_revival_stripes(text, bigint[])
    IS 'Waits, in ascending order, for the max_in_flight stripe locks the revivals of these leases count against, until the end of the transaction';
REVOKE ALL ON FUNCTION queue._lock_revival_stripes(text, bigint[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue.heartbeat(worker text)
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text := queue._check_worker(heartbeat.worker);
    v_session bigint := queue._session_key();
    v_prev bigint;
    q record;
    r record;
    v_n int;
    v_total int := 0;
    v_now timestamptz;
    v_start timestamptz := greatest(statement_timestamp(), transaction_timestamp());
    v_restarted timestamptz;
    v_prev_gone boolean;
    v_ids bigint[];
    v_held bigint[];
BEGIN
    SELECT w.session, w.restarted_at INTO v_prev, v_restarted
      FROM queue.worker_registry w WHERE w.worker = v_worker;
    v_prev_gone := coalesce(v_prev <> v_session AND NOT queue._session_alive(v_prev), false);
    -- NB: items before the worker row, the order offline recovery takes them in
    FOR q IN SELECT c.queue_name, c.lease_timeout, c.breaker_state, c.probe_item_id
               FROM queue.queue_config c ORDER BY 1 LOOP
        CONTINUE WHEN NOT queue._may_access(q.queue_name, 'worker');
        -- a claim the process replaced by the last restart was still making
        -- when the restart ran, committed after it (a bot killed in the
        -- middle of a dequeue): its lease ends now, as the restart's did
        IF v_restarted IS NOT NULL THEN
            PERFORM queue._end_restarted_leases(q.queue_name, v_worker, v_restarted);
        END IF;
        -- the leases are locked first: whether one is unexpired is judged
        -- once it is held (after any wait for its lock), see extend_lease.
        -- All at once, never waiting for one while holding another
        -- (_lock_items; after ten rounds that each found one busy, those
        -- free then); the statement after it finds them held, and takes
        -- a lease claimed since only if it is free: that claim (the bot's
        -- work connection claiming while its heartbeat runs) is a moment
        -- old, and waiting for it while holding the others would deadlock
        -- with a call that holds it and waits for one of them (an
        -- enqueue_batch naming their keys in the other order).  The leases
        -- of the worker's previous connection, if it has gone away, too,
        -- and all of them (_lock_items waits until it holds them all):
        -- they are marked below.  Under Citus it locks them in id order
        -- (those _lock_items took are held already).  What follows touches
        -- only the leases held here.  (The ids first: see _lock_items.)
        v_ids := ARRAY(
            SELECT i.item_id FROM queue.item_live i
             WHERE i.queue_name = q.queue_name AND i.worker = v_worker
               AND i.lease_token IS NOT NULL
               AND ((i.lease_session IS DISTINCT FROM 0 AND i.cancel_requested_at IS NULL)
                    OR (v_prev_gone AND i.lease_session = v_prev)));
        PERFORM queue._lock_items(q.queue_name, v_ids, v_prev_gone);
        IF queue.distributed() THEN
            PERFORM FROM queue.item_live i
             WHERE i.queue_name = q.queue_name AND i.worker = v_worker
               AND i.lease_token IS NOT NULL
               AND ((i.lease_session IS DISTINCT FROM 0 AND i.cancel_requested_at IS NULL)
                    OR (v_prev_gone AND i.lease_session = v_prev))
             ORDER BY i.item_id
               FOR UPDATE;
            v_held := ARRAY(
                SELECT i.item_id FROM queue.item_live i
                 WHERE i.queue_name = q.queue_name AND i.worker = v_worker
                   AND i.lease_token IS NOT NULL
                   AND ((i.lease_session IS DISTINCT FROM 0 AND i.cancel_requested_at IS NULL)
                        OR (v_prev_gone AND i.lease_session = v_prev)));
        ELSE
            SELECT coalesce(array_agg(s.item_id), '{}') INTO v_held
              FROM (SELECT i.item_id FROM queue.item_live i
                     WHERE i.queue_name = q.queue_name AND i.worker = v_worker
                       AND i.lease_token IS NOT NULL
                       AND ((i.lease_session IS DISTINCT FROM 0 AND i.cancel_requested_at IS NULL)
                            OR (v_prev_gone AND i.lease_session = v_prev))
                     ORDER BY i.item_id
                       FOR UPDATE SKIP LOCKED) s;
        END IF;
        -- the leases of the worker's previous connection, if it has gone
        -- away: a claim whose reply may have been lost with it
        IF v_prev_gone THEN
            UPDATE queue.item_live i SET lease_session = 0
             WHERE i.queue_name = q.queue_name AND i.worker = v_worker
               AND i.lease_token IS NOT NULL AND i.lease_session = v_prev
               AND i.item_id = ANY (v_held);
        END IF;
        v_now := clock_timestamp();
        -- a lease runs from this statement, not from the transaction's start
        -- (nor from a procedure's CALL, see src/statement_scope.c)
        UPDATE queue.item_live i
           SET lease_expires_at = v_start + q.lease_timeout,
               visible_at = v_start + q.lease_timeout
         WHERE i.queue_name = q.queue_name AND i.worker = v_worker
           AND i.lease_token IS NOT NULL AND i.lease_session IS DISTINCT FROM 0
           AND i.cancel_requested_at IS NULL
           AND i.item_id = ANY (v_held)
           AND i.lease_expires_at > v_now;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_total := v_total + v_n;
        -- the half-open probe lasts as long as its lease (src/breaker.c);
        -- the settings row is taken without waiting, as there
        IF v_n > 0 AND q.breaker_state = 'probing' AND q.probe_item_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM queue.item_live i
                        WHERE i.queue_name = q.queue_name AND i.item_id = q.probe_item_id
                          AND i.worker = v_worker AND i.lease_expires_at = v_start + q.lease_timeout) THEN
            WITH c AS (SELECT c0.queue_name FROM queue.queue_config c0
                        WHERE c0.queue_name = q.queue_name AND c0.breaker_state = 'probing'
                          AND c0.probe_item_id = q.probe_item_id
                          FOR UPDATE SKIP LOCKED)
            UPDATE queue.queue_config c1 SET probe_expires_at = v_start + q.lease_timeout
              FROM c WHERE c1.queue_name = c.queue_name;
        END IF;
        -- caps stay exact: an expired lease nobody re-claimed is revived
        -- like a claim, by extend_lease, which refuses it where a cap is full.
        -- Each revival waits for the lock of the share of max_in_flight its
        -- lease is charged to: those locks are taken first, all of them in
        -- one order (src/dequeue.c), never one after another in item order,
        -- which would deadlock with another worker's heartbeat
        PERFORM queue._lock_revival_stripes(q.queue_name, ARRAY(
            SELECT coalesce(i.cap_stripe::bigint, i.item_id) FROM queue.item_live i
             WHERE i.queue_name = q.queue_name AND i.worker = v_worker
               AND i.lease_token IS NOT NULL AND i.lease_session IS DISTINCT FROM 0
               AND i.cancel_requested_at IS NULL
               AND i.item_id = ANY (v_held)
               AND i.lease_expires_at <= v_now));
        FOR r IN
            SELECT i.item_id, i.lease_token FROM queue.item_live i
             WHERE i.queue_name = q.queue_name AND i.worker = v_worker
               AND i.lease_token IS NOT NULL AND i.lease_session IS DISTINCT FROM 0
               AND i.cancel_requested_at IS NULL
               AND i.item_id = ANY (v_held)
               AND i.lease_expires_at <= v_now
             ORDER BY i.item_id
        LOOP
            IF queue.extend_lease(q.queue_name, r.item_id, r.lease_token, q.lease_timeout) IS NOT NULL THEN
                v_total := v_total + 1;
            END IF;
        END LOOP;
    END LOOP;
    INSERT INTO queue.worker_registry AS w (worker, registered_by, session)
    VALUES (v_worker, queue._caller()::regrole, v_session)
    ON CONFLICT (worker) DO UPDATE
       SET last_seen = greatest(w.last_seen, EXCLUDED.last_seen), offline_handled_at = NULL,
           session = EXCLUDED.session;
    RETURN v_total;
END
$$;
COMMENT ON FUNCTION queue.heartbeat(text)
    IS 'Marks the worker alive and renews the leases a live process of it tracks (not those of cancel-requested items), in queues the caller may work; returns how many';


DROP FUNCTION IF EXISTS queue.register_worker(text, text[], int, jsonb);
CREATE FUNCTION queue.register_worker(worker text, queues text[] DEFAULT NULL,
                                      capacity int DEFAULT NULL, info jsonb DEFAULT '{}',
                                      labels text[] DEFAULT NULL, restart boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_worker text := queue._check_worker(register_worker.worker);
    v_caller regrole := queue._caller()::regrole;
    -- a value, not a call, in the upsert's WHERE below: Citus refuses
    -- functions that are not immutable there
    v_admin boolean := pg_has_role(v_caller, 'queue_admin', 'MEMBER');
    v_owner regrole;
    v_q text;
BEGIN
    IF register_worker.capacity IS NOT NULL AND register_worker.capacity < 1 THEN
        RAISE EXCEPTION 'capacity must be at least 1, not %', register_worker.capacity
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL for a worker without a limit.';
    END IF;
    -- lists, as enqueue's requires: a two-dimensional array is a mistake
    v_q := CASE WHEN array_ndims(register_worker.queues) > 1 THEN 'queues'
                WHEN array_ndims(register_worker.labels) > 1 THEN 'labels' END;
    IF v_q IS NOT NULL THEN
        RAISE EXCEPTION '% must be a one-dimensional array', v_q
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- a NULL element is named as such: the call has no queue_name argument
    IF array_position(register_worker.queues, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'queues[%] must not be null',
                        array_position(register_worker.queues, NULL)
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'List the names of the queues the worker serves, without NULL elements.';
    END IF;
    FOREACH v_q IN ARRAY coalesce(register_worker.queues, '{}') LOOP
        PERFORM queue._check_name(v_q);
    END LOOP;
    -- well-formed names of queues that exist (42704 as anywhere else)
    FOREACH v_q IN ARRAY coalesce(register_worker.queues, '{}') LOOP
        PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = v_q;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'queue "%" does not exist', v_q
                USING ERRCODE = 'undefined_object',
                      HINT = 'Create it with queue.create_queue(), or leave it out of queues.';
        END IF;
    END LOOP;
    IF register_worker.restart IS NULL THEN
        RAISE EXCEPTION 'restart must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF array_position(register_worker.labels, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'labels must not contain NULL labels' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF array_position(register_worker.labels, '') IS NOT NULL THEN
        RAISE EXCEPTION 'labels must not contain empty labels'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- each list as a whole, counted as the bytes of its texts
    PERFORM queue._check_text(array_to_string(register_worker.labels, ''), 'labels');
    PERFORM queue._check_text(array_to_string(register_worker.queues, ''), 'queues');
    PERFORM queue._check_jsonb(register_worker.info, 'info');
    -- a worker name belongs to the role that registered it (or an admin)
    SELECT w.registered_by INTO v_owner FROM queue.worker_registry w WHERE w.worker = v_worker;
    IF v_owner IS NOT NULL AND v_owner <> v_caller AND NOT v_admin THEN
        RAISE EXCEPTION 'worker "%" belongs to role %', v_worker, v_owner
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'A queue_worker may register only a new worker name or one it registered itself.',
                  HINT = 'Choose another worker name, or ask a queue_admin.';
    END IF;

    -- restart: every lease still held under the name ends now as a lost
    -- lease, in the queues the caller may work (as heartbeat renews only
    -- those): names are global, and another tenant's bot may claim under
    -- a name this role registered.  NB: items before the worker row, the
    -- order offline recovery and heartbeat take them in.
    IF coalesce(register_worker.restart, false) THEN
        FOR v_q IN SELECT c.queue_name FROM queue.queue_config c ORDER BY 1 LOOP
            CONTINUE WHEN NOT queue._may_access(v_q, 'worker');
            PERFORM queue._end_restarted_leases(v_q, v_worker, NULL);
        END LOOP;
    END IF;

    -- restarted_at: a claim under the name from a statement that started
    -- before this one is the replaced process's, also one that commits
    -- after this restart (its connection was still claiming when the
    -- process died); heartbeat ends such a lease (see there)
    INSERT INTO queue.worker_registry AS w (worker, queues, capacity, info, labels, last_seen,
                                            registered_by, session, restarted_at)
    VALUES (v_worker, register_worker.queues, register_worker.capacity,
            coalesce(register_worker.info, '{}'), register_worker.labels, now(),
            v_caller, queue._session_key(),
            CASE WHEN register_worker.restart THEN statement_timestamp() END)
    ON CONFLICT (worker) DO UPDATE
       SET queues = EXCLUDED.queues, capacity = EXCLUDED.capacity, info = EXCLUDED.info,
           labels = EXCLUDED.labels, last_seen = greatest(w.last_seen, EXCLUDED.last_seen),
           offline_handled_at = NULL, session = EXCLUDED.session,
           registered_by = coalesce(w.registered_by, EXCLUDED.registered_by),
           restarted_at = coalesce(EXCLUDED.restarted_at, w.restarted_at)
     WHERE w.registered_by IS NULL OR w.registered_by = EXCLUDED.registered_by OR v_admin;
    -- another role registered the name after the check above, in a
    -- transaction this one waited for: the name is that role's
    IF NOT FOUND THEN
        SELECT w.registered_by INTO v_owner FROM queue.worker_registry w WHERE w.worker = v_worker;
        RAISE EXCEPTION 'worker "%" belongs to role %', v_worker, v_owner
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'A queue_worker may register only a new worker name or one it registered itself.',
                  HINT = 'Choose another worker name, or ask a queue_admin.';
    END IF;
END
$$;
COMMENT ON FUNCTION queue.register_worker(text, text[], int, jsonb, text[], boolean)
    IS 'Registers a worker with its queues, capacity, info and labels; restart ends the leases still held under the name';


REVOKE ALL ON FUNCTION queue._may_access(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._session_key() FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._session_alive(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._record_failure(text, bigint, int, text, text, text, text, timestamptz, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._end_lease(text, bigint, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._end_restarted_leases(text, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._lock_items(text, bigint[], boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._end_lease_probe(text, bigint, timestamptz, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._recover_offline(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue.register_worker(text, text[], int, jsonb, text[], boolean) FROM PUBLIC;
-- the bot's loop
GRANT EXECUTE ON FUNCTION queue.register_worker(text, text[], int, jsonb, text[], boolean)
   TO queue_worker, queue_admin;
