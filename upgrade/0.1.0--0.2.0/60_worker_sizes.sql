-- Values stored with a worker are bounded like those stored with an item:
-- register_worker's info by queue.max_payload_bytes, its queues and labels
-- and add_maintenance's reason at 64 kB (54000 beyond).  register_worker
-- is restated in 60_workers.sql, _check_jsonb in 40_sizes.sql.

CREATE OR REPLACE FUNCTION queue.add_maintenance(worker text, starts_at timestamptz, ends_at timestamptz,
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
