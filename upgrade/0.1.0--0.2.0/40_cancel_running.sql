-- Cancelling a processing item (schema/10_tables.sql, 40_items.sql): the
-- cancel request columns, cancel() and the cancel columns of item() and
-- dead_letters.  The rest is in the parts that own those objects: the
-- items view in 46_flow_changes.sql; _bury, _end_lease and heartbeat in
-- 60_workers.sql; hold in 40_sizes.sql; _sweep_queue in 70_sweep.sql.

ALTER TABLE queue.item_live ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;
ALTER TABLE queue.item_live ADD COLUMN IF NOT EXISTS cancel_requested_by text;
ALTER TABLE queue.item_live ADD COLUMN IF NOT EXISTS cancel_reason text;
ALTER TABLE queue.dead_letters ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;
ALTER TABLE queue.dead_letters ADD COLUMN IF NOT EXISTS cancel_requested_by text;
ALTER TABLE queue.dead_letters ADD COLUMN IF NOT EXISTS cancel_reason text;

CREATE OR REPLACE FUNCTION queue.cancel(queue_name text, item_id bigint, reason text DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION queue._cancel_end(p_queue text, p_item_id bigint, p_lease_token bigint,
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

REVOKE ALL ON FUNCTION queue._cancel_end(text, bigint, bigint, text, text) FROM PUBLIC;

-- item() returns three more columns: drop and create it, with its grants
DROP FUNCTION IF EXISTS queue.item(text, bigint);
CREATE FUNCTION queue.item(queue_name text, item_id bigint)
RETURNS TABLE (state text, priority int, attempt int,
               max_attempts int, payload jsonb, progress jsonb, result jsonb, worker text,
               enqueued_at timestamptz, run_at timestamptz, lease_expires_at timestamptz,
               finished_at timestamptz, last_error text, error_code text, reason text,
               dedup_key text, correlation_id text, replayed_as bigint,
               cancel_requested_at timestamptz, cancel_requested_by text, cancel_reason text)
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER ROWS 1
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

REVOKE ALL ON FUNCTION queue.item(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue.item(text, bigint)
   TO queue_reader, queue_producer, queue_worker, queue_admin;
