-- ======================================================================
-- Fleet control: pause and resume
-- ======================================================================

CREATE FUNCTION queue.pause(queue_name text, reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(pause.queue_name);
    -- computed first: Citus refuses non-immutable calls in an UPDATE's COALESCE
    v_reason text := coalesce(pause.reason, 'paused by ' || session_user);
    v_now timestamptz := now();
BEGIN
    PERFORM queue._check_text(pause.reason, 'reason');
    PERFORM queue._check_access(v_name, 'reader');
    -- A queue the operator paused already stays paused since then, with
    -- its reason unless a new one is given, and nothing is recorded when
    -- nothing changes: one paused event per pause (or change of reason).
    -- The condition is judged on the row as locked, so of two concurrent
    -- pauses one records the pause.
    UPDATE queue.queue_config c
       SET paused = true, pause_reason = v_reason,
           paused_at = CASE WHEN c.paused THEN c.paused_at ELSE v_now END
     WHERE c.queue_name = v_name
       AND NOT (c.paused AND (pause.reason IS NULL
                              OR c.pause_reason IS NOT DISTINCT FROM pause.reason));
    IF FOUND THEN
        PERFORM queue._event(v_name, NULL, 'paused', NULL, NULL,
                             jsonb_build_object('reason', pause.reason, 'by', session_user));
    END IF;
END
$$;
COMMENT ON FUNCTION queue.pause(text, text) IS 'Stops handing out items of a queue; in-flight items finish normally';

CREATE FUNCTION queue.resume(queue_name text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(resume.queue_name);
    v_paused boolean;
    v_breaker boolean;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.queue_config c
       SET paused = false, pause_reason = NULL, paused_at = NULL
     WHERE c.queue_name = v_name AND c.paused;
    v_paused := FOUND;
    -- a manual resume also closes the breaker and forgets earlier outcomes
    v_breaker := queue._breaker_close(v_name, jsonb_build_object('by', session_user));
    -- resumed only when something held the queue: a resume of a running
    -- queue records nothing
    IF v_paused OR v_breaker THEN
        PERFORM queue._event(v_name, NULL, 'resumed', NULL, NULL,
                             jsonb_build_object('by', session_user));
        -- bots that LISTEN for the queue hear that it hands out work again
        IF (SELECT c.notify FROM queue.queue_config c WHERE c.queue_name = v_name) THEN
            PERFORM pg_notify('queue_' || v_name, '');
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION queue.resume(text) IS 'Resumes a paused queue; closes an open circuit breaker';

-- ======================================================================
-- Fleet control: workers, heartbeats, draining, maintenance windows,
-- offline recovery
-- ======================================================================

-- Validate a worker name argument (src/validate.c): present, not empty, at
-- most 255 bytes.
CREATE FUNCTION queue._check_worker(p_worker text) RETURNS text
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_worker_sql';
COMMENT ON FUNCTION queue._check_worker(text) IS 'Validates a worker name (22004, 22023, 54000 over 255 bytes) and returns it';

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

-- Only leases a live process tracks are renewed (src/worker.c): a lease
-- claimed or extended on the connection the worker heartbeated on before
-- is left to expire once the heartbeats come from another connection and
-- that one has gone away, until the bot extends or checkpoints it (a claim
-- whose reply was lost with the old connection comes back within one
-- lease_timeout).  Only queues the caller may work.
CREATE FUNCTION queue.heartbeat(worker text)
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
    PERFORM queue._check_text(add_maintenance.reason, 'reason');
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
-- last, or of a cancel-requested item); the other items are claimable at
-- once.  The worker_offline alert, which names every offline worker, is
-- the sweep's (_sweep_alerts, after this): the workers whose leases end
-- here are added to those its next check reads (offline_check.workers),
-- since a worker aged by hand past the previous check's range would not be
-- read otherwise.  Returns how many items are claimable again (recovered:
-- not those past their expires_at, which the sweep buries as expired) and
-- how many became dead letters.
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

-- Filtered per queue like the other views (see the comment on the view);
-- the 24-hour counts read the indexes led by the worker on item_done and
-- failure_log, so each worker costs its own rows, not a day of history.
-- A worker registered for every queue (queues NULL, as a first dequeue
-- registers it) is shown to every caller while some queue is open to
-- every reader and every worker: it may serve that queue, so on an
-- installation without per-queue grants a reader sees the whole fleet,
-- idle and offline workers included; where every queue is closed, only
-- to the roles that registered it or whose queues it works.
CREATE VIEW queue.workers WITH (security_barrier) AS
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
       w.capacity, w.draining,
       CASE WHEN a.admin OR w.queues IS NULL THEN w.queues
            ELSE ARRAY(SELECT u.q FROM unnest(w.queues) AS u(q) WHERE queue._can_read(u.q)) END
         AS queues,
       w.info, w.registered_at
  FROM queue.worker_registry w
 CROSS JOIN LATERAL (
        SELECT pg_has_role(queue._caller(), 'queue_admin', 'MEMBER') AS admin,
               -- a queue every reader may read and every worker may work
               EXISTS (SELECT 1 FROM queue.queue_config o
                        WHERE NOT o.restrict_reader AND NOT o.restrict_worker) AS open_queue) a
 CROSS JOIN LATERAL (
        SELECT count(*) AS in_flight
          FROM queue.queue_config q
          JOIN queue.item_live i ON i.queue_name = q.queue_name AND i.worker = w.worker
         WHERE i.lease_token IS NOT NULL AND i.lease_expires_at > now()
           AND (a.admin OR queue._can_read(q.queue_name))) f
 CROSS JOIN LATERAL (
        SELECT count(*) AS completed_24h, avg(h.completed_at - h.claimed_at) AS mean_run_time
          FROM queue.item_done h
         WHERE h.worker = w.worker AND h.completed_at > now() - interval '24 hours'
           AND (a.admin OR queue._can_read(h.queue_name))) d
 CROSS JOIN LATERAL (
        SELECT count(*) AS failed_24h
          FROM queue.failure_log x
         WHERE x.worker = w.worker AND x.at > now() - interval '24 hours'
           AND (a.admin OR queue._can_read(x.queue_name))) fl
 WHERE a.admin
    OR pg_has_role(queue._caller(), coalesce(w.registered_by::oid, 0::oid), 'MEMBER')
    OR EXISTS (SELECT 1 FROM unnest(w.queues) AS u(q) WHERE queue._can_read(u.q))
    OR (w.queues IS NULL AND a.open_queue)
    OR f.in_flight > 0 OR d.completed_24h > 0 OR fl.failed_24h > 0;
COMMENT ON VIEW queue.workers
    IS 'Workers the caller may see (every worker for an admin; else those it registered, that work queues it may read, or registered for every queue while one is open to all): status, in-flight items, 24 h results in those queues';
