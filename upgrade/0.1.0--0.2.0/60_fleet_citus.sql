-- pause() computes its reason before the UPDATE: Citus refuses
-- non-immutable calls inside an UPDATE's COALESCE on a reference table.

CREATE OR REPLACE FUNCTION queue.pause(queue_name text, reason text DEFAULT NULL)
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
