-- Counted totals equal the rows: snapshot_metrics counts up to the start of
-- the oldest transaction still open, so a completion that straddles a
-- snapshot is counted by the next one.

-- The totals at the last snapshot, so that each snapshot's processed and
-- failed count its interval even when retention counted and removed rows
-- in between.
ALTER TABLE queue.metrics_totals ADD COLUMN IF NOT EXISTS snap_processed bigint;
ALTER TABLE queue.metrics_totals ADD COLUMN IF NOT EXISTS snap_failed bigint;

-- Dead letters of a queue by reason in a time range, as {"reason": n}.
-- The range is [after, until), as for completions and failed attempts: a
-- dead letter is stamped with its transaction's start (dead_at), which may
-- be the very bound a snapshot counted up to (the oldest open
-- transaction's start), so the next count must include that instant.
CREATE OR REPLACE FUNCTION queue._dead_by_reason(p_queue text, p_after timestamptz, p_until timestamptz)
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

-- Advances a queue's running totals to p_bound: the first time everything
-- stamped before it, then what was stamped since counted_until.
-- snapshot_metrics calls it for every queue, and retention before it
-- removes rows the totals may not have counted yet, so that the counters
-- never fall back, whether or not snapshot_metrics runs.  NB: counted
-- before the write, as values: under Citus a query in an INSERT or UPDATE
-- of a distributed table would run inside the shard's statement, where it
-- may not.
CREATE OR REPLACE FUNCTION queue._count_totals(p_queue text, p_bound timestamptz)
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

CREATE OR REPLACE FUNCTION queue.snapshot_metrics()
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
REVOKE ALL ON FUNCTION queue._count_totals(text, timestamptz) FROM PUBLIC;
