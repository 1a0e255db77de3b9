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
BEGIN
    PERFORM queue._check_text(pause.reason, 'reason');
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.queue_config c
       SET paused = true, pause_reason = v_reason,
           paused_at = now()
     WHERE c.queue_name = v_name;
    PERFORM queue._event(v_name, NULL, 'paused', NULL, NULL,
                         jsonb_build_object('reason', pause.reason, 'by', session_user));
END
$$;
COMMENT ON FUNCTION queue.pause(text, text) IS 'Stops handing out items of a queue; in-flight items finish normally';
