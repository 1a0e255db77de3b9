-- ======================================================================
-- Maintenance: sweep, snapshot_metrics, enable_cron, disable_cron
-- ======================================================================
--
-- sweep() loops over the queues and runs the per-queue work in
-- queue._sweep_queue(), each queue in its own subtransaction so that one
-- broken queue never stops the maintenance of the others, all in one
-- transaction.  The pg_cron job runs the procedure run_sweep() instead,
-- which sweeps each queue with sweep(queue_name) in a transaction of its
-- own, so nothing a queue's sweep locked waits for the other queues.  A queue is swept
-- under the queue's private sweep lock, tried with queue._try_lock_sweep:
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

-- The lock that serialises sweeps of one queue: a private lock tag
-- (src/config.c) that no role can take from SQL, unlike an advisory key.
CREATE FUNCTION queue._try_lock_sweep(queue_name text) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_try_lock_sweep_sql';
COMMENT ON FUNCTION queue._try_lock_sweep(text) IS 'Tries the queue''s sweep lock for the transaction; false while another session sweeps it';

-- A duration in whole seconds as HH:MM:SS (hours may pass 24), the same
-- under every IntervalStyle: alert messages and health reasons use it.
CREATE FUNCTION queue._say_duration(p interval) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_char(make_interval(secs => floor(extract(epoch FROM p))), 'HH24:MI:SS')
$$;
COMMENT ON FUNCTION queue._say_duration(interval) IS 'A duration as HH:MM:SS, independent of IntervalStyle';

-- A run time or a wait (stalled leases, the oldest queued age against the
-- sla) as people say it: seconds with their fraction under a minute
-- (0.2 s, 2.9 s, 45 s; to the millisecond below one second), HH:MM:SS above.
CREATE FUNCTION queue._say_run_time(p interval) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p < interval '1 min'
                THEN trim_scale(round(extract(epoch FROM p),
                                      CASE WHEN p < interval '1 s' THEN 3 ELSE 1 END))::text || ' s'
                ELSE queue._say_duration(p)
           END
$$;
COMMENT ON FUNCTION queue._say_run_time(interval) IS 'A run time as 0.2 s, 2.9 s or HH:MM:SS';

-- The worker_offline check of each queue reads only the workers that
-- could have gone offline since its previous check: those whose last sign
-- of life fell between that check's cutoff and this one's (the index on
-- last_seen), and those its alert named then (by primary key), never
-- every worker ever seen.  checked_until is where the next check's range
-- starts: the cutoff, or the start of the oldest transaction still open
-- when that is earlier, since an open transaction may still write a
-- last_seen of its start time.  workers are the offline workers the check
-- found, read again by the next check (back online, forgotten, or past
-- the day their items count).
CREATE INDEX worker_registry_last_seen_idx ON queue.worker_registry (last_seen);
CREATE TABLE queue.offline_check (
    queue_name    text        NOT NULL PRIMARY KEY,
    checked_until timestamptz NOT NULL,
    workers       text[]      NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE queue.offline_check
    IS 'Per queue: where the next worker_offline check starts, and the offline workers the last one found';

-- The start of the oldest transaction open in this database (but the
-- caller's and autovacuum's), or now() when none is older: rows stamped
-- with now() before it are all visible, none stamped earlier can come.
CREATE FUNCTION queue._open_since()
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT least(now(), min(a.xact_start))
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname OPERATOR(pg_catalog.=) current_database()
       AND a.pid OPERATOR(pg_catalog.<>) pg_backend_pid()
       AND a.xact_start IS NOT NULL
       AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')
$$;
COMMENT ON FUNCTION queue._open_since() IS 'Start of the oldest other transaction open in this database, or now()';

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
    v_kinds text[];
    v_rule record;
    v_cutoff timestamptz := now() - make_interval(secs => queue._worker_offline_after());
    v_checked_until timestamptz;
    v_offline text[];
    v_message text;
    v_details jsonb;
    v_p95 interval;
BEGIN
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO s FROM queue._stats(p_queue) x;

    -- sla_critical replaces sla_warning (and the other way round); the
    -- oldest queued item may be a group member in line (_sla_wait)
    IF c.sla IS NOT NULL THEN
        v_age := queue._sla_wait(p_queue, s.oldest_queued_age);
    END IF;
    IF c.sla IS NOT NULL AND v_age > c.sla * 0.85 THEN
        PERFORM queue._clear_alert(p_queue, 'sla_warning');
        PERFORM queue._raise_alert(p_queue, 'sla_critical',
            format('queue %s: oldest queued item has waited %s, over 85%% of the %s sla',
                   p_queue, queue._say_run_time(v_age), queue._say_interval(c.sla)),
            jsonb_build_object('oldest_queued_age', extract(epoch FROM v_age),
                               'sla', extract(epoch FROM c.sla), 'queued', s.queued));
    ELSIF c.sla IS NOT NULL AND v_age > c.sla * 0.5 THEN
        PERFORM queue._clear_alert(p_queue, 'sla_critical');
        PERFORM queue._raise_alert(p_queue, 'sla_warning',
            format('queue %s: oldest queued item has waited %s, over half the %s sla',
                   p_queue, queue._say_run_time(v_age), queue._say_interval(c.sla)),
            jsonb_build_object('oldest_queued_age', extract(epoch FROM v_age),
                               'sla', extract(epoch FROM c.sla), 'queued', s.queued));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'sla_critical');
        PERFORM queue._clear_alert(p_queue, 'sla_warning');
    END IF;

    -- breaker_open: raised by the breaker itself; closed by probe or resume
    IF c.breaker_state <> 'closed' THEN
        PERFORM queue._raise_alert(p_queue, 'breaker_open',
                                   coalesce(c.breaker_reason, 'circuit breaker open'),
                                   jsonb_build_object('opened_at', c.breaker_opened_at));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'breaker_open');
    END IF;

    -- worker_offline: an offline worker held one of the queue's items in
    -- the last day (holds one now, or failed or lost one since).  Read:
    -- the workers offline at the previous check, and those whose last
    -- sign of life fell after its range (see offline_check above); a
    -- worker that held nothing of the queue when it went offline cannot
    -- come to hold anything later.
    SELECT o.checked_until, o.workers INTO v_checked_until, v_offline
      FROM queue.offline_check o WHERE o.queue_name = p_queue;
    SELECT array_agg(w.worker ORDER BY w.worker) INTO v_workers
      FROM (SELECT x.worker, x.last_seen FROM queue.worker_registry x
             WHERE x.worker = ANY (v_offline)
            UNION
            SELECT x.worker, x.last_seen FROM queue.worker_registry x
             WHERE x.last_seen >= coalesce(v_checked_until, '-infinity')
               AND x.last_seen < v_cutoff) w
     WHERE w.last_seen < v_cutoff
       AND (EXISTS (SELECT 1 FROM queue.item_live i
                     WHERE i.queue_name = p_queue AND i.worker = w.worker)
            OR EXISTS (SELECT 1 FROM queue.failure_log f
                        WHERE f.queue_name = p_queue AND f.at > now() - interval '1 day'
                          AND f.worker = w.worker));
    INSERT INTO queue.offline_check AS o (queue_name, checked_until, workers)
    VALUES (p_queue, least(v_cutoff, queue._open_since()), coalesce(v_workers, '{}'))
    ON CONFLICT ON CONSTRAINT offline_check_pkey DO UPDATE
       SET checked_until = EXCLUDED.checked_until, workers = EXCLUDED.workers;
    IF v_workers IS NOT NULL THEN
        -- a scale-down may take hundreds of bots offline at once: the
        -- message names ten, the details a hundred, and both say how many
        v_message := queue._excerpt(
            format('queue %s: offline worker%s %s%s held its items', p_queue,
                   CASE WHEN cardinality(v_workers) > 1 THEN 's' ELSE '' END,
                   array_to_string(v_workers[1:10], ', '),
                   CASE WHEN cardinality(v_workers) > 10
                        THEN format(' and %s more', cardinality(v_workers) - 10) ELSE '' END),
            1000);
        v_details := jsonb_build_object('workers', to_jsonb(v_workers[1:100]),
                                        'offline', cardinality(v_workers));
        -- an open alert names the workers offline now (one open alert per
        -- kind: the update sends no new NOTIFY)
        IF NOT queue._raise_alert(p_queue, 'worker_offline', v_message, v_details) THEN
            UPDATE queue.alerts a SET message = v_message, details = v_details
             WHERE a.queue_name = p_queue AND a.kind = 'worker_offline' AND a.cleared_at IS NULL
               AND (a.message IS DISTINCT FROM v_message OR a.details IS DISTINCT FROM v_details);
        END IF;
    ELSE
        PERFORM queue._clear_alert(p_queue, 'worker_offline');
    END IF;

    -- stalled_lease: a current lease held past 3x the p95 run time (the
    -- newest completions' when none completed in the last hour)
    v_n := 0;
    v_p95 := queue._stall_run_p95(p_queue, s.run_p95);
    IF v_p95 IS NOT NULL THEN
        SELECT count(*) INTO v_n FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_expires_at > now()
           AND i.claimed_at < now() - v_p95 * 3;
    END IF;
    IF v_n > 0 THEN
        PERFORM queue._raise_alert(p_queue, 'stalled_lease',
            format('queue %s: %s lease%s held longer than 3x the p95 run time (%s)', p_queue, v_n,
                   CASE WHEN v_n > 1 THEN 's' ELSE '' END, queue._say_run_time(v_p95)),
            jsonb_build_object('leases', v_n, 'run_p95', extract(epoch FROM v_p95)));
    ELSE
        PERFORM queue._clear_alert(p_queue, 'stalled_lease');
    END IF;

    -- capacity_short and workers_idle: bots busy or bots idle; unroutable:
    -- items no active bot has the labels for (45_flow.sql)
    v_kinds := '{}';
    FOR v_rule IN
        SELECT r.kind, r.reason, r.details
          FROM queue._capacity_rules(p_queue, s.queued, s.oldest_queued_age, s.processed_1h) r
        UNION ALL
        SELECT f.kind, f.reason, f.details FROM queue._flow_rules(p_queue) f
    LOOP
        PERFORM queue._raise_alert(p_queue, v_rule.kind, format('queue %s: %s', p_queue, v_rule.reason),
                                   v_rule.details);
        v_kinds := v_kinds || v_rule.kind;
    END LOOP;
    PERFORM queue._clear_alert(p_queue, k.kind)
       FROM unnest(ARRAY['capacity_short', 'workers_idle', 'unroutable']) AS k(kind)
      WHERE k.kind <> ALL (v_kinds);

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

-- Retention of one queue: removes at most p_batch rows of each kind that
-- the queue no longer keeps.  purged is how many rows went of the kinds
-- kept for the queue's retention (the history, reviewed dead letters,
-- events and metrics snapshots: sweep() reports it), removed how many went
-- in all, the failed attempts behind failed_1h and the breaker and the
-- cleared alerts too (0 when nothing is due).  The one place that knows what retention removes and how long
-- each kind is kept; the partitions of the history, the events and the
-- failure log go whole (maintain_history), so only what lies outside them
-- is deleted here.
CREATE FUNCTION queue._retention(p_queue text, p_batch int,
                                  OUT purged bigint, OUT removed bigint)
RETURNS record LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    v_now timestamptz := now();
    v_n bigint;
    v_purged bigint := 0;
    v_failures bigint;
    v_alerts bigint;
    v_keep_outcomes interval;
    v_oldest_kept timestamptz;
    v_counted timestamptz;
BEGIN
    purged := 0;
    removed := 0;
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    -- What goes stays counted: prometheus()'s counters are running totals
    -- that must never fall back.  Every row removed below is stamped
    -- before now() - retention; when the totals have not counted that far
    -- (no snapshot since), they count up to now first.  They count only
    -- up to the start of the oldest transaction still open, though (see
    -- snapshot_metrics): completions, failed attempts and dead letters
    -- stamped from there on stay until a later call has counted them,
    -- however old they are, so a report or an idle session holding a
    -- transaction open past the retention delays retention, never the
    -- counters.
    SELECT t.counted_until INTO v_counted FROM queue.metrics_totals t
     WHERE t.queue_name = p_queue;
    IF v_counted IS NULL OR v_counted < v_now - c.retention THEN
        PERFORM queue._count_totals(p_queue, queue._open_since());
        SELECT t.counted_until INTO v_counted FROM queue.metrics_totals t
         WHERE t.queue_name = p_queue;
    END IF;
    v_counted := coalesce(v_counted, '-infinity');

    -- Each batch is the oldest rows by the queue's time index: a plain
    -- LIMIT may scan the table from its start, past the dead rows of the
    -- batches before it, and slow down batch after batch.
    -- Outcomes (completions in the history, failed attempts) are kept for
    -- the retention, and with a breaker at least its window, which the
    -- breaker and health's failure rate count (a short retention never
    -- makes the breaker trip on successes it forgot).  stats' hourly
    -- figures and the workers view's 24 h counts see at most this much.
    v_keep_outcomes := CASE WHEN c.breaker_threshold IS NOT NULL
                            THEN greatest(c.retention, c.breaker_window)
                            ELSE c.retention END;

    -- processed history:
    -- (p_now such that the cut is the older of now() - keep and v_counted)
    v_purged := v_purged + queue._history_delete('item_done', p_queue, v_keep_outcomes,
                                                 least(v_now, v_counted + v_keep_outcomes),
                                                 p_batch);

    -- resolved or rejected dead letters, kept for retention after review:
    WITH d AS (
        DELETE FROM queue.dead_letters d
         WHERE d.queue_name = p_queue
           AND d.item_id = ANY (ARRAY(SELECT x.item_id FROM queue.dead_letters x
                              WHERE x.queue_name = p_queue
                                AND x.review_status IN ('resolved', 'rejected')
                                AND coalesce(x.reviewed_at, x.dead_at) < v_now - c.retention
                                AND x.dead_at < v_counted
                              LIMIT p_batch))
           -- again on the row itself: checked anew on a letter re-opened by
           -- a review that committed while this statement waited for it
           AND d.review_status IN ('resolved', 'rejected')
           AND coalesce(d.reviewed_at, d.dead_at) < v_now - c.retention
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    v_purged := v_purged + v_n;

    -- events and failed attempts:
    v_purged := v_purged + queue._history_delete('events', p_queue, c.retention,
                                                 v_now, p_batch);
    -- (failed attempts are no rows users read: not in purged)
    v_failures := queue._history_delete('failure_log', p_queue, v_keep_outcomes,
                                        least(v_now, v_counted + v_keep_outcomes), p_batch);

    -- cleared alerts (tidied away, not one of the kinds purged counts):
    WITH d AS (
        DELETE FROM queue.alerts a
         WHERE a.queue_name = p_queue
           AND a.alert_id = ANY (ARRAY(SELECT x.alert_id FROM queue.alerts x
                               WHERE x.queue_name = p_queue
                                 AND x.cleared_at < v_now - c.retention
                               LIMIT p_batch))
        RETURNING 1)
    SELECT count(*) INTO v_alerts FROM d;

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
                               LIMIT p_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    v_purged := v_purged + v_n;

    purged := v_purged;
    removed := v_purged + v_failures + v_alerts;
END
$$;
COMMENT ON FUNCTION queue._retention(text, int)
    IS 'Removes at most p_batch rows of each kind past a queue''s retention; returns how many of the retention kinds went (purged) and how many rows in all';

-- Dedup keys of completed items past the queue's dedup window (all of them
-- when the queue has none), at most p_batch; returns how many.  Not
-- retention: sweep() does not count them in purged.
CREATE FUNCTION queue._forget_dedup_keys(p_queue text, p_batch int)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_window interval;
    v_n bigint;
BEGIN
    SELECT c.dedup_window INTO v_window FROM queue.queue_config c WHERE c.queue_name = p_queue;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH d AS (
        DELETE FROM queue.dedup_done k
         WHERE k.queue_name = p_queue
           AND k.dedup_key = ANY (ARRAY(SELECT x.dedup_key FROM queue.dedup_done x
                                WHERE x.queue_name = p_queue
                                  AND x.completed_at < now() - coalesce(v_window, interval '0')
                                ORDER BY x.completed_at LIMIT p_batch))
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue._forget_dedup_keys(text, int)
    IS 'Forgets at most p_batch dedup keys of completions past a queue''s dedup window; returns how many';

-- Retention for one queue, one batch of each kind (queue._sweep_batch()
-- rows); returns how many rows went, 0 when nothing more is due.
CREATE FUNCTION queue.apply_retention(queue_name text)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(apply_retention.queue_name);
BEGIN
    PERFORM queue._lock_queue(v_name, false);
    PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = v_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Create it with queue.create_queue(%L).', v_name);
    END IF;
    RETURN (SELECT r.removed FROM queue._retention(v_name, queue._sweep_batch()) r)
           + queue._forget_dedup_keys(v_name, queue._sweep_batch());
END
$$;
COMMENT ON FUNCTION queue.apply_retention(text)
    IS 'Removes one batch of each kind of row past the queue''s retention; returns how many, 0 when nothing is due';

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
BEGIN
    swept := false;
    recovered := 0;
    dead_lettered := 0;
    expired := 0;
    aged := 0;
    purged := 0;
    IF NOT queue._try_lock_sweep(p_queue) THEN
        RETURN;
    END IF;
    -- the queue stays until this transaction ends (drop_queue waits)
    PERFORM queue._lock_queue(p_queue, false);
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    swept := true;

    -- Offline workers: their leases are released at once (orphan recovery);
    -- those on the last attempt, or of cancel-requested items, are buried.
    SELECT o.recovered, o.dead_lettered INTO recovered, dead_lettered
      FROM queue._recover_offline(p_queue) o;

    -- Lost leases count once as failed outcomes (failed_1h, health, the
    -- breaker below) as soon as sweep meets them, and are reported as
    -- recovered; the items stay claimable.  An item past its expires_at is
    -- not claimable again: the expiry below buries it and counts its lost
    -- lease there (queue._bury), as a dequeue that meets it does.  A
    -- cancel-requested item's lease is no outcome: it is buried below.
    FOR v_id IN
        SELECT i.item_id FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_token IS NOT NULL AND i.lease_expires_at <= v_now
           AND i.attempt < i.max_attempts AND NOT i.lost_counted
           AND i.cancel_requested_at IS NULL
           AND NOT (i.expires_at IS NOT NULL AND i.expires_at <= v_now)
         ORDER BY i.item_id
         LIMIT v_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        IF queue._lease_lost(p_queue, v_id) THEN
            recovered := recovered + 1;
        END IF;
    END LOOP;

    -- Lost leases on the last attempt, and of cancel-requested items,
    -- become dead letters.  Leased rows keep worker set until they are
    -- claimed again: the worker index finds them without reading the backlog.
    FOR v_id IN
        SELECT i.item_id FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.worker IS NOT NULL
           AND i.lease_token IS NOT NULL AND i.lease_expires_at <= v_now
           AND (i.attempt >= i.max_attempts OR i.cancel_requested_at IS NOT NULL)
           AND NOT i.on_hold
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
               -- (a limited key's items keep their band, 45_flow.sql)
               AND i.priority % 100000 <> greatest(0, i.base_priority
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

    -- Retention: one batch of each kind (run_sweep() goes on until done).
    SELECT r.purged INTO purged FROM queue._retention(p_queue, v_batch) r;
    PERFORM queue._forget_dedup_keys(p_queue, v_batch);

    -- Breaker: an open breaker pauses the queue; a closed one may trip on
    -- failures that arrived without a fail() call (lost leases).  Its
    -- buckets older than the window go.
    PERFORM queue._breaker_prune(p_queue);
    PERFORM queue._breaker_check(p_queue);

    PERFORM queue._sweep_alerts(p_queue);
END
$$;
COMMENT ON FUNCTION queue._sweep_queue(text) IS 'The per-queue work of sweep(), under the queue''s sweep lock';

-- Rows of queues that do not exist: left by a caller that raced a
-- drop_queue under a transaction snapshot (it fails with 40001 when it
-- waited, but an older snapshot may not have seen the drop coming), or by
-- a release before the queue lock.  Each table with per-queue rows is
-- walked by its index led by queue_name, one probe per distinct queue (a
-- loose index scan); the rows of an unknown name are removed under its
-- queue lock.  A dropped queue's queue_dropped event is kept for 7 days
-- (the default retention).  Returns how many rows went.
-- The queue names that have rows in the per-queue tables sweep_dropped()
-- clears: on a plain server one index probe per name and table; under
-- Citus, which refuses a recursive CTE over the distributed tables without
-- a queue filter, a DISTINCT over each table on every node.
CREATE FUNCTION queue._queues_with_rows() RETURNS SETOF text
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    IF queue.distributed() THEN
        RETURN QUERY
        SELECT t.queue_name FROM queue.item_live t UNION SELECT t.queue_name FROM queue.item_done t
        UNION SELECT t.queue_name FROM queue.dead_letters t UNION SELECT t.queue_name FROM queue.events t
        UNION SELECT t.queue_name FROM queue.dedup_done t UNION SELECT t.queue_name FROM queue.failure_log t
        UNION SELECT t.queue_name FROM queue.alerts t UNION SELECT t.queue_name FROM queue.metrics_history t
        UNION SELECT t.queue_name FROM queue.queue_grant t;
        RETURN;
    END IF;
    RETURN QUERY
        WITH RECURSIVE
        l(q) AS (SELECT min(t.queue_name) FROM queue.item_live t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.item_live t WHERE t.queue_name > l.q)
                   FROM l WHERE l.q IS NOT NULL),
        h(q) AS (SELECT min(t.queue_name) FROM queue.item_done t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.item_done t WHERE t.queue_name > h.q)
                   FROM h WHERE h.q IS NOT NULL),
        x(q) AS (SELECT min(t.queue_name) FROM queue.dead_letters t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.dead_letters t WHERE t.queue_name > x.q)
                   FROM x WHERE x.q IS NOT NULL),
        e(q) AS (SELECT min(t.queue_name) FROM queue.events t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.events t WHERE t.queue_name > e.q)
                   FROM e WHERE e.q IS NOT NULL),
        k(q) AS (SELECT min(t.queue_name) FROM queue.dedup_done t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.dedup_done t WHERE t.queue_name > k.q)
                   FROM k WHERE k.q IS NOT NULL),
        f(q) AS (SELECT min(t.queue_name) FROM queue.failure_log t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.failure_log t WHERE t.queue_name > f.q)
                   FROM f WHERE f.q IS NOT NULL),
        a(q) AS (SELECT min(t.queue_name) FROM queue.alerts t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.alerts t WHERE t.queue_name > a.q)
                   FROM a WHERE a.q IS NOT NULL),
        m(q) AS (SELECT min(t.queue_name) FROM queue.metrics_history t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.metrics_history t WHERE t.queue_name > m.q)
                   FROM m WHERE m.q IS NOT NULL),
        g(q) AS (SELECT min(t.queue_name) FROM queue.queue_grant t UNION ALL
                 SELECT (SELECT min(t.queue_name) FROM queue.queue_grant t WHERE t.queue_name > g.q)
                   FROM g WHERE g.q IS NOT NULL)
        SELECT DISTINCT u.q
          FROM (SELECT q FROM l UNION ALL SELECT q FROM h UNION ALL SELECT q FROM x
                UNION ALL SELECT q FROM e UNION ALL SELECT q FROM k UNION ALL SELECT q FROM f
                UNION ALL SELECT q FROM a UNION ALL SELECT q FROM m UNION ALL SELECT q FROM g) u
         WHERE u.q IS NOT NULL;
END
$$;
COMMENT ON FUNCTION queue._queues_with_rows()
    IS 'The queue names that have rows in the per-queue tables (sweep_dropped)';

CREATE FUNCTION queue.sweep_dropped()
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text;
    v_counts jsonb;
    v_n bigint := 0;
    v_busy text[];
    v_role oid;
BEGIN
    FOR v_name IN
        SELECT n.q FROM queue._queues_with_rows() n(q)
         WHERE NOT EXISTS (SELECT 1 FROM queue.queue_config c WHERE c.queue_name = n.q)
         ORDER BY 1
    LOOP
        CONTINUE WHEN v_name !~ '^[a-z][a-z0-9_]{0,46}$';   -- no queue can have it
        -- NB: the name's sweep lock first, tried: a concurrent sweep
        -- removing the same leftovers (every sweep meets a queue_dropped
        -- event for 7 days) holds it until its transaction ends; this one
        -- skips the name instead of waiting for it (sweeps never wait for
        -- each other), and the next call does it
        CONTINUE WHEN NOT queue._try_lock_sweep(v_name);
        PERFORM queue._lock_queue(v_name, true);
        CONTINUE WHEN EXISTS (SELECT 1 FROM queue.queue_config c WHERE c.queue_name = v_name);
        v_counts := queue._forget_queue(v_name, true);
        SELECT v_n + coalesce(sum(c.value::bigint), 0) INTO v_n FROM jsonb_each_text(v_counts) c;
        DELETE FROM queue.events e
         WHERE e.queue_name = v_name AND e.kind = 'queue_dropped' AND e.at < now() - interval '7 days';
    END LOOP;
    -- totals of dropped queues: snapshot_metrics removes them

    -- A worker name whose registering role was dropped belongs to the
    -- admins (as it did in effect: no caller is that role any more); its
    -- old OID, dumped as a bare number, would name whichever role has it
    -- in the cluster a restore goes to.
    -- The roles are looked up here, one by one, in this node's catalog:
    -- under Citus the registry is a reference table, whose UPDATE may not
    -- call a function on its rows, and whose rows a worker node would judge
    -- against its own role OIDs.
    FOR v_role IN SELECT DISTINCT w.registered_by::oid FROM queue.worker_registry w
                   WHERE w.registered_by IS NOT NULL LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = v_role);
        UPDATE queue.worker_registry w SET registered_by = 'queue_admin'::regrole
         WHERE w.registered_by = v_role::regrole;
    END LOOP;

    -- Workers gone for longer than the longest retention of any queue
    -- (at least a day), holding nothing, not draining and with no
    -- maintenance window now or ahead: random or one-off worker names never
    -- pile up, and the fleet checks never walk every worker ever seen.  An
    -- operator's drain or window of a worker not seen yet (last_seen
    -- -infinity) stays until the worker comes.
    IF queue.distributed() THEN
        -- Citus refuses a write of a reference table (worker_registry)
        -- that reads a distributed one: the workers holding items first.
        -- The queues too, in a statement of their own: a statement over
        -- every shard that joins a reference table is refused once this
        -- transaction wrote a node's placements over more than one
        -- connection, as Citus does when a node answers slowly.
        v_busy := ARRAY(SELECT c.queue_name FROM queue.queue_config c);
        v_busy := ARRAY(SELECT DISTINCT i.worker FROM queue.item_live i
                         WHERE i.queue_name = ANY (v_busy) AND i.worker IS NOT NULL);
        WITH gone AS (
            DELETE FROM queue.worker_registry w
             WHERE w.last_seen < now() - greatest(interval '1 day',
                                                  (SELECT max(c.retention) FROM queue.queue_config c))
               AND NOT w.draining
               AND NOT EXISTS (SELECT 1 FROM queue.maintenance_window m
                                WHERE m.worker = w.worker AND m.ends_at > now())
               AND w.worker <> ALL (v_busy)
            RETURNING w.worker),
        windows AS (
            DELETE FROM queue.maintenance_window m WHERE m.worker IN (SELECT g.worker FROM gone g)
            RETURNING 1)
        SELECT v_n + (SELECT count(*) FROM gone) + (SELECT count(*) FROM windows) INTO v_n;
        RETURN v_n;
    END IF;
    -- NB: SKIP LOCKED: a worker another sweep is forgetting at the same
    -- time is its to remove; this one never waits for that transaction
    WITH gone AS (
        DELETE FROM queue.worker_registry w
         WHERE w.worker IN (
               SELECT x.worker FROM queue.worker_registry x
                WHERE x.last_seen < now() - greatest(interval '1 day',
                                                     (SELECT max(c.retention) FROM queue.queue_config c))
                  AND NOT x.draining
                  AND NOT EXISTS (SELECT 1 FROM queue.maintenance_window m
                                   WHERE m.worker = x.worker AND m.ends_at > now())
                  AND NOT EXISTS (SELECT 1 FROM queue.queue_config c
                                    JOIN queue.item_live i ON i.queue_name = c.queue_name
                                                          AND i.worker = x.worker)
                  FOR UPDATE SKIP LOCKED)
        RETURNING w.worker),
    windows AS (
        DELETE FROM queue.maintenance_window m WHERE m.worker IN (SELECT g.worker FROM gone g)
        RETURNING 1)
    SELECT v_n + (SELECT count(*) FROM gone) + (SELECT count(*) FROM windows) INTO v_n;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue.sweep_dropped()
    IS 'Removes what is gone: rows of queues that do not exist (the queue_dropped event after 7 days) and workers offline past the longest retention; returns how many rows';

-- A row of sweep(queue_name); sweep() returns the same columns.
CREATE TYPE queue.queue_sweep AS (queue_name text, recovered bigint, dead_lettered bigint,
                                  expired bigint, aged bigint, purged bigint);
COMMENT ON TYPE queue.queue_sweep IS 'A row of queue.sweep(queue_name)';

-- One queue's sweep as a row; a failure is a warning and no row, its work
-- rolled back, so that one broken queue never stops the others.
CREATE FUNCTION queue._sweep_guarded(p_queue text)
RETURNS SETOF queue.queue_sweep LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    BEGIN
        SELECT * INTO r FROM queue._sweep_queue(p_queue) s;
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'sweep of queue "%" failed: %', p_queue, SQLERRM
            USING DETAIL = format('SQLSTATE %s; the queue''s work of this call was rolled back.', SQLSTATE);
        RETURN;
    END;
    RETURN NEXT ROW(p_queue, r.recovered, r.dead_lettered, r.expired, r.aged, r.purged)::queue.queue_sweep;
END
$$;
COMMENT ON FUNCTION queue._sweep_guarded(text) IS 'One queue''s sweep as a row; a failure is a warning and no row';

CREATE FUNCTION queue.sweep()
RETURNS TABLE (queue_name text, recovered bigint, dead_lettered bigint, expired bigint,
               aged bigint, purged bigint)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text;
BEGIN
    FOR v_name IN SELECT c.queue_name FROM queue.queue_config c ORDER BY c.queue_name
    LOOP
        RETURN QUERY SELECT * FROM queue._sweep_guarded(v_name);
    END LOOP;
    PERFORM queue.sweep_dropped();
    -- last: a partition's DROP locks the table until this transaction ends
    PERFORM queue.maintain_history();
END
$$;
COMMENT ON FUNCTION queue.sweep()
    IS 'Maintenance of every queue in one transaction: offline recovery, spent leases, expiry, aging, retention, breaker and alerts, then the history''s partitions; one row per queue';

CREATE FUNCTION queue.sweep(queue_name text)
RETURNS SETOF queue.queue_sweep
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(sweep.queue_name);
BEGIN
    PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = v_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Create it with queue.create_queue(%L).', v_name);
    END IF;
    RETURN QUERY SELECT * FROM queue._sweep_guarded(v_name);
END
$$;
COMMENT ON FUNCTION queue.sweep(text)
    IS 'The maintenance sweep() does, of one queue; one row';

-- The scheduled sweep: every queue in a transaction of its own, then the
-- leftovers of dropped queues.  A procedure, so that it can commit between
-- queues: what it locked in one queue (items it recovered or buried, the
-- queue's lock and settings row) is free again while it sweeps the next.
-- It runs as its caller (a procedure that commits may not be SECURITY
-- DEFINER, nor pin search_path); what it calls is.  So that it runs only
-- the extension's code whatever the caller's search_path, its functions
-- and operators are named with their schema.  CALL it outside a
-- transaction block.
CREATE PROCEDURE queue.run_sweep()
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_n bigint;
BEGIN
    -- NB: a queue whose maintenance fails (a lock_timeout while an
    -- administrator's transaction holds the queue, a deadlock with a bot)
    -- is a WARNING in the job's log, its work of this run rolled back, and
    -- never stops the other queues, the partitions or the leftovers of
    -- dropped queues: the next run tries it again
    FOR v_name IN SELECT q.queue_name FROM queue.queues q ORDER BY q.queue_name
    LOOP
        BEGIN
            PERFORM queue.sweep(v_name);
        EXCEPTION WHEN undefined_object THEN
            NULL;   -- dropped since the loop began
        END;
        COMMIT;
    END LOOP;
    -- the partitions of the history: created ahead, dropped past retention
    BEGIN
        PERFORM queue.maintain_history();
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'maintenance of the history partitions failed: %', SQLERRM
            USING DETAIL = pg_catalog.format('SQLSTATE %s; the next run tries again.', SQLSTATE);
    END;
    COMMIT;
    -- then retention until nothing is due, a batch per transaction, so
    -- that it keeps up with any rate the queues complete at
    FOR v_name IN SELECT q.queue_name FROM queue.queues q ORDER BY q.queue_name
    LOOP
        LOOP
            BEGIN
                v_n := queue.apply_retention(v_name);
            EXCEPTION
                WHEN undefined_object THEN
                    v_n := 0;   -- dropped since the loop began
                WHEN OTHERS THEN
                    RAISE WARNING 'retention of queue "%" failed: %', v_name, SQLERRM
                        USING DETAIL = pg_catalog.format('SQLSTATE %s; the batch was rolled back, the next run tries again.', SQLSTATE);
                    v_n := 0;
            END;
            COMMIT;
            EXIT WHEN v_n OPERATOR(pg_catalog.=) 0;
        END LOOP;
    END LOOP;
    BEGIN
        PERFORM queue.sweep_dropped();
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'removing what dropped queues left failed: %', SQLERRM
            USING DETAIL = pg_catalog.format('SQLSTATE %s; the next run tries again.', SQLSTATE);
    END;
    COMMIT;
END
$$;
COMMENT ON PROCEDURE queue.run_sweep()
    IS 'sweep() committing after each queue, then the leftovers of dropped queues; what the pg_cron job runs';

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
    counted_until timestamptz NOT NULL,
    snap_processed bigint,                  -- processed and failed at the last snapshot
    snap_failed   bigint
);
COMMENT ON TABLE queue.metrics_totals IS 'Cumulative processed, failed and dead counts per queue, kept by snapshot_metrics()';

-- Dead letters of a queue by reason in a time range, as {"reason": n}.
-- The range is [after, until), as for completions and failed attempts: a
-- dead letter is stamped with its transaction's start (dead_at), which may
-- be the very bound a snapshot counted up to (the oldest open
-- transaction's start), so the next count must include that instant.
CREATE FUNCTION queue._dead_by_reason(p_queue text, p_after timestamptz, p_until timestamptz)
RETURNS jsonb LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v jsonb;
BEGIN
    SELECT coalesce(jsonb_object_agg(x.reason, x.n), '{}') INTO v
      FROM (SELECT d.reason, count(*) AS n FROM queue.dead_letters d
             WHERE d.queue_name = p_queue AND d.dead_at >= p_after AND d.dead_at < p_until
             GROUP BY d.reason) x;
    RETURN v;
END
$$;
COMMENT ON FUNCTION queue._dead_by_reason(text, timestamptz, timestamptz) IS 'Dead letters of a queue by reason, dead in [after, until)';

-- Adds two {"reason": n} objects.
CREATE FUNCTION queue._add_counts(a jsonb, b jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(k, n), '{}')
      FROM (SELECT e.key AS k, sum(e.value::bigint) AS n
              FROM (SELECT * FROM jsonb_each_text(a) UNION ALL SELECT * FROM jsonb_each_text(b)) e
             GROUP BY e.key) x
$$;
COMMENT ON FUNCTION queue._add_counts(jsonb, jsonb) IS 'Sums two objects of counts by key';

-- Advances a queue's running totals to p_bound: the first time everything
-- stamped before it, then what was stamped since counted_until.
-- snapshot_metrics calls it for every queue, and retention before it
-- removes rows the totals may not have counted yet, so that the counters
-- never fall back, whether or not snapshot_metrics runs.  NB: counted
-- before the write, as values: under Citus a query in an INSERT or UPDATE
-- of a distributed table would run inside the shard's statement, where it
-- may not.
CREATE FUNCTION queue._count_totals(p_queue text, p_bound timestamptz)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_until timestamptz;
    v_processed bigint;
    v_failed bigint;
    v_dead jsonb;
BEGIN
    SELECT t.counted_until INTO v_until FROM queue.metrics_totals t
     WHERE t.queue_name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        SELECT count(*) INTO v_processed FROM queue.item_done d
         WHERE d.queue_name = p_queue AND d.completed_at < p_bound;
        SELECT count(*) INTO v_failed FROM queue.failure_log f
         WHERE f.queue_name = p_queue AND f.at < p_bound;
        v_dead := queue._dead_by_reason(p_queue, '-infinity', p_bound);
        INSERT INTO queue.metrics_totals AS t (queue_name, processed, failed, dead, counted_until)
        VALUES (p_queue, v_processed, v_failed, v_dead, p_bound)
        ON CONFLICT ON CONSTRAINT metrics_totals_pkey DO NOTHING;
    ELSIF v_until < p_bound THEN
        SELECT count(*) INTO v_processed FROM queue.item_done d
         WHERE d.queue_name = p_queue AND d.completed_at >= v_until AND d.completed_at < p_bound;
        SELECT count(*) INTO v_failed FROM queue.failure_log f
         WHERE f.queue_name = p_queue AND f.at >= v_until AND f.at < p_bound;
        v_dead := queue._dead_by_reason(p_queue, v_until, p_bound);
        UPDATE queue.metrics_totals t
           SET processed = t.processed + v_processed,
               failed = t.failed + v_failed,
               dead = queue._add_counts(t.dead, v_dead),
               counted_until = p_bound
         WHERE t.queue_name = p_queue;
    END IF;
END
$$;
COMMENT ON FUNCTION queue._count_totals(text, timestamptz)
    IS 'Advances a queue''s running totals (processed, failed, dead by reason) to a bound';

CREATE FUNCTION queue.snapshot_metrics()
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text;
    v_prev timestamptz;
    v_now timestamptz := now();
    v_bound timestamptz;
    v_processed bigint;
    v_failed bigint;
    v_rows int := 0;
    v_counted boolean;
    t record;
    s record;
BEGIN
    -- Counted totals must equal the rows.  History and failure rows are
    -- stamped inside their own transaction, at or after its start, so a
    -- row stamped before the oldest transaction still open is visible now
    -- and no row with such a stamp can come later: the totals count the
    -- rows stamped before this bound (queue._count_totals).  A completion
    -- that straddles a snapshot is counted by the next one.
    SELECT least(v_now, min(a.xact_start)) INTO v_bound
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
       AND a.xact_start IS NOT NULL
       AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher');
    v_bound := coalesce(v_bound, v_now);
    FOR v_name IN SELECT c.queue_name FROM queue.queue_config c ORDER BY c.queue_name
    LOOP
        -- one queue whose snapshot fails (a lock_timeout) is a WARNING and no
        -- row, never the end of the other queues' rows
        BEGIN
            -- the queue before its rows, in drop_queue's order: a snapshot that
            -- meets a drop waits for it, then finds the queue gone and writes
            -- no row for it
            PERFORM queue._lock_queue(v_name, false);
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM queue.queue_config c WHERE c.queue_name = v_name);
            SELECT m.taken_at INTO v_prev FROM queue.metrics_history m
             WHERE m.queue_name = v_name ORDER BY m.taken_at DESC LIMIT 1;
            -- the totals at the previous snapshot (snap_*), or before this
            -- count when a row predates them; retention may have counted rows
            -- since, and removed them
            SELECT x.processed, x.failed, x.snap_processed, x.snap_failed INTO t
              FROM queue.metrics_totals x WHERE x.queue_name = v_name FOR UPDATE;
            v_counted := FOUND;
            IF v_counted THEN
                v_processed := coalesce(t.snap_processed, t.processed);
                v_failed := coalesce(t.snap_failed, t.failed);
            END IF;
            PERFORM queue._count_totals(v_name, v_bound);
            SELECT x.processed, x.failed INTO t FROM queue.metrics_totals x WHERE x.queue_name = v_name;
            IF v_prev IS NULL OR NOT v_counted THEN
                -- a queue's first row has nothing to count from
                v_processed := NULL;
                v_failed := NULL;
            ELSE
                v_processed := t.processed - v_processed;
                v_failed := t.failed - v_failed;
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
            IF NOT FOUND THEN
                CONTINUE;   -- this transaction took the snapshot already
            END IF;
            v_rows := v_rows + 1;
            -- the next snapshot counts from here
            UPDATE queue.metrics_totals x
               SET snap_processed = t.processed, snap_failed = t.failed
             WHERE x.queue_name = v_name;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'snapshot of queue "%" failed: %', v_name, SQLERRM
                USING DETAIL = format('SQLSTATE %s; the queue has no row in this snapshot, the next one counts what it missed.', SQLSTATE);
        END;
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

-- The database pg_cron runs its jobs from, or NULL when pg_cron is not
-- loaded (not in shared_preload_libraries).  Read from pg_settings: with
-- pg_cron not loaded, a cron.database_name line of postgresql.conf is a
-- mere placeholder, which current_setting() returns all the same.  Called
-- by SECURITY DEFINER functions, whose owner may see the setting.
CREATE FUNCTION queue._pg_cron_database()
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.setting FROM pg_catalog.pg_settings s
     WHERE s.name OPERATOR(pg_catalog.=) 'cron.database_name'
$$;
COMMENT ON FUNCTION queue._pg_cron_database()
    IS 'The database pg_cron runs in (cron.database_name), NULL when pg_cron is not loaded';

CREATE FUNCTION queue._require_pg_cron()
RETURNS void LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF queue._pg_cron_database() IS NULL THEN
        RAISE EXCEPTION 'pg_cron is not loaded'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'pg_cron runs jobs only when shared_preload_libraries names it.',
                  HINT = 'Add pg_cron to shared_preload_libraries, restart the server, and run CREATE EXTENSION pg_cron in the database named by cron.database_name; or schedule CALL queue.run_sweep() and SELECT queue.snapshot_metrics() with another scheduler.';
    END IF;
    PERFORM 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pg_cron is not installed in database "%"', current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('pg_cron runs its jobs from the database named by cron.database_name (now %s).',
                                  quote_literal(queue._pg_cron_database())),
                  HINT = 'Add pg_cron to shared_preload_libraries, restart the server, and run CREATE EXTENSION pg_cron in that database; or schedule CALL queue.run_sweep() and SELECT queue.snapshot_metrics() with another scheduler.';
    END IF;
END
$$;
COMMENT ON FUNCTION queue._require_pg_cron() IS 'Fails with a hint (55000) unless pg_cron is loaded and installed in this database';

-- pg_cron can only be created in the database cron.database_name names,
-- and keeps every job there: enable_cron() and disable_cron() called in
-- another database cannot reach it, so they fail (55000) naming that
-- database, with a hint that is the exact calls to run there.
CREATE FUNCTION queue.enable_cron(sweep_schedule text DEFAULT '* * * * *',
                                  metrics_schedule text DEFAULT '* * * * *')
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_db text := queue._pg_cron_database();
    r record;
    v_job bigint;
BEGIN
    IF enable_cron.sweep_schedule IS NULL OR enable_cron.metrics_schedule IS NULL THEN
        RAISE EXCEPTION '% must not be null',
                        CASE WHEN enable_cron.sweep_schedule IS NULL THEN 'sweep_schedule'
                             ELSE 'metrics_schedule' END
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Leave the argument out for every minute (''* * * * *''), or use disable_cron() to stop the jobs.';
    END IF;
    IF v_db IS NOT NULL AND v_db <> '' AND v_db <> current_database()
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron') THEN
        RAISE EXCEPTION 'pg_cron runs in database "%", not in "%"', v_db, current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'pg_cron keeps its jobs in the database named by cron.database_name; the jobs of this database must be created there.',
                  HINT = format('Run once in database %s: SELECT cron.schedule_in_database(%L, %L, %L, %L); SELECT cron.schedule_in_database(%L, %L, %L, %L);',
                                quote_ident(v_db),
                                'queue_sweep_' || current_database(), enable_cron.sweep_schedule,
                                'CALL queue.run_sweep()', current_database(),
                                'queue_snapshot_metrics_' || current_database(), enable_cron.metrics_schedule,
                                'SELECT queue.snapshot_metrics()', current_database());
    END IF;
    PERFORM queue._require_pg_cron();
    -- scheduling by name replaces a job of the same name: enabling twice
    -- changes the schedules, never adds jobs.  pg_cron judges the schedule
    -- text (its forms vary with its version); a refusal names the argument,
    -- and the statement's error leaves both jobs as they were.  NB: the
    -- replacement keeps a job paused in pg_cron (active false) paused, so
    -- such a job is made active again: enabled means they run.
    FOR r IN SELECT j.job, j.schedule, j.command, j.arg
               FROM (VALUES ('queue_sweep', enable_cron.sweep_schedule,
                             'CALL queue.run_sweep()', 'sweep_schedule'),
                            ('queue_snapshot_metrics', enable_cron.metrics_schedule,
                             'SELECT queue.snapshot_metrics()', 'metrics_schedule'))
                    AS j(job, schedule, command, arg) LOOP
        BEGIN
            v_job := cron.schedule_in_database(r.job, r.schedule, r.command, current_database());
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION 'invalid % "%"', r.arg, left(r.schedule, 200)
                USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM,
                      HINT = 'Give a pg_cron schedule: five cron fields such as ''*/5 * * * *'' (every 5 minutes), or @hourly, @daily.';
        END;
        IF EXISTS (SELECT 1 FROM cron.job j WHERE j.jobid = v_job AND NOT j.active) THEN
            PERFORM cron.alter_job(v_job, active => true);
        END IF;
    END LOOP;
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
    v_db text := queue._pg_cron_database();
BEGIN
    IF v_db IS NOT NULL AND v_db <> '' AND v_db <> current_database()
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron') THEN
        RAISE EXCEPTION 'pg_cron runs in database "%", not in "%"', v_db, current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'pg_cron keeps its jobs in the database named by cron.database_name; the jobs of this database must be removed there.',
                  HINT = format('Run in database %s: SELECT cron.unschedule(jobid) FROM cron.job WHERE database = %L AND jobname IN (%L, %L);',
                                quote_ident(v_db), current_database(),
                                'queue_sweep_' || current_database(),
                                'queue_snapshot_metrics_' || current_database());
    END IF;
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
