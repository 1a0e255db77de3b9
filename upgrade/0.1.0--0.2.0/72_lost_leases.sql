-- Lost leases as outcomes: sweep counts an expired lease once as a failed
-- attempt (lost_counted), dequeue counts the ones it re-claims unless sweep
-- did.  After 70_sweep.sql, which also defines _sweep_queue.

ALTER TABLE queue.item_live ADD COLUMN IF NOT EXISTS lost_counted boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION queue._leases_lost(p_queue text, p_item_ids bigint[])
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

CREATE OR REPLACE FUNCTION queue._lease_lost(p_queue text, p_item_id bigint)
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

CREATE OR REPLACE FUNCTION queue._sweep_queue(p_queue text,
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


REVOKE ALL ON FUNCTION queue._lease_lost(text, bigint) FROM PUBLIC;

-- from schema/30_queues.sql: purge counts the lost leases it removes, and
-- buries those on their last attempt or with their cancel requested
CREATE OR REPLACE FUNCTION queue.purge(queue_name text)
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

