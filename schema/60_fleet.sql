-- ======================================================================
-- Fleet control: pause and resume
-- ======================================================================

CREATE FUNCTION queue.pause(queue_name text, reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(pause.queue_name);
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.queue_config c
       SET paused = true, pause_reason = coalesce(pause.reason, 'paused by ' || session_user),
           paused_at = now()
     WHERE c.queue_name = v_name;
    PERFORM queue._event(v_name, NULL, 'paused', NULL, NULL,
                         jsonb_build_object('reason', pause.reason, 'by', session_user));
END
$$;
COMMENT ON FUNCTION queue.pause(text, text) IS 'Stops handing out items of a queue; in-flight items finish normally';

CREATE FUNCTION queue.resume(queue_name text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(resume.queue_name);
    v_state text;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    SELECT c.breaker_state INTO v_state FROM queue.queue_config c
     WHERE c.queue_name = v_name FOR UPDATE;
    -- a manual resume closes the breaker and forgets earlier outcomes
    UPDATE queue.queue_config c
       SET paused = false, pause_reason = NULL, paused_at = NULL,
           breaker_state = 'closed', breaker_opened_at = NULL, breaker_since = now(),
           probe_item_id = NULL, probe_expires_at = NULL
     WHERE c.queue_name = v_name;
    IF v_state <> 'closed' THEN
        PERFORM queue._event(v_name, NULL, 'breaker_closed', NULL, NULL,
                             jsonb_build_object('by', session_user));
        PERFORM queue._clear_alert(v_name, 'breaker_open');
    END IF;
    PERFORM queue._event(v_name, NULL, 'resumed', NULL, NULL,
                         jsonb_build_object('by', session_user));
END
$$;
COMMENT ON FUNCTION queue.resume(text) IS 'Resumes a paused queue; closes an open circuit breaker';
