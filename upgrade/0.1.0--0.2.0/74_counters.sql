-- Counted totals equal the rows: snapshot_metrics counts up to the start of
-- the oldest transaction still open, so a completion that straddles a
-- snapshot is counted by the next one.

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
    v_until timestamptz;
    v_dead jsonb;
    s record;
BEGIN
    -- Counted totals must equal the rows.  History and failure rows are
    -- stamped inside their own transaction, at or after its start, so a
    -- row stamped before the oldest transaction still open is visible now
    -- and no row with such a stamp can come later: each snapshot counts the
    -- rows stamped in [previous bound, this bound).  A completion that
    -- straddles a snapshot is counted by the next one.
    SELECT least(v_now, min(a.xact_start)) INTO v_bound
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
       AND a.xact_start IS NOT NULL
       AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher');
    v_bound := coalesce(v_bound, v_now);
    FOR v_name IN SELECT c.queue_name FROM queue.queue_config c ORDER BY c.queue_name
    LOOP
        SELECT m.taken_at INTO v_prev FROM queue.metrics_history m
         WHERE m.queue_name = v_name ORDER BY m.taken_at DESC LIMIT 1;
        -- what the previous snapshot counted up to
        SELECT t.counted_until INTO v_until FROM queue.metrics_totals t
         WHERE t.queue_name = v_name FOR UPDATE;
        IF v_prev IS NULL OR v_until IS NULL THEN
            -- a queue's first row has nothing to count from
            v_processed := NULL;
            v_failed := NULL;
        ELSE
            SELECT count(*) INTO v_processed FROM queue.item_done d
             WHERE d.queue_name = v_name AND d.completed_at >= v_until AND d.completed_at < v_bound;
            SELECT count(*) INTO v_failed FROM queue.failure_log f
             WHERE f.queue_name = v_name AND f.at >= v_until AND f.at < v_bound;
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

        -- running totals: everything retained the first time, then what
        -- was counted above.  NB: counted before the write, as values:
        -- under Citus a query in an INSERT or UPDATE of a distributed table
        -- would run inside the shard's statement, where it may not.
        IF v_until IS NULL THEN
            SELECT count(*) INTO v_processed FROM queue.item_done d
             WHERE d.queue_name = v_name AND d.completed_at < v_bound;
            SELECT count(*) INTO v_failed FROM queue.failure_log f
             WHERE f.queue_name = v_name AND f.at < v_bound;
            v_dead := queue._dead_by_reason(v_name, '-infinity', v_bound);
            INSERT INTO queue.metrics_totals AS t (queue_name, processed, failed, dead, counted_until)
            VALUES (v_name, v_processed, v_failed, v_dead, v_bound)
            ON CONFLICT ON CONSTRAINT metrics_totals_pkey DO NOTHING;
        ELSIF v_until < v_bound THEN
            v_dead := queue._dead_by_reason(v_name, v_until, v_bound);
            UPDATE queue.metrics_totals t
               SET processed = t.processed + coalesce(v_processed, 0),
                   failed = t.failed + coalesce(v_failed, 0),
                   dead = queue._add_counts(t.dead, v_dead),
                   counted_until = v_bound
             WHERE t.queue_name = v_name;
        END IF;
    END LOOP;
    -- totals of dropped queues
    DELETE FROM queue.metrics_totals t
     WHERE NOT EXISTS (SELECT 1 FROM queue.queue_config c WHERE c.queue_name = t.queue_name);
    RETURN v_rows;
END
$$;
COMMENT ON FUNCTION queue.snapshot_metrics()
    IS 'Writes one metrics_history row per queue (the stats columns, processed and failed since the previous row) and advances the running totals';


