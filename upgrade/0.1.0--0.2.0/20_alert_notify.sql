-- Alerts never fail their caller: NOTIFY queue_alerts carries the alert's
-- row as JSON, bounded; alerts and the breaker's pause reason quote bounded
-- excerpts of error texts and worker lists.

CREATE OR REPLACE FUNCTION queue._excerpt(p text, p_max int DEFAULT 200) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pg_catalog.length(s) OPERATOR(pg_catalog.<=) p_max THEN s
                ELSE pg_catalog.left(s, p_max OPERATOR(pg_catalog.-) 3) OPERATOR(pg_catalog.||) '...' END
      FROM (SELECT pg_catalog.btrim(pg_catalog.regexp_replace(
                       pg_catalog.left(p, 4 OPERATOR(pg_catalog.*) p_max), '[[:space:]]+', ' ', 'g')) AS s) x
$$;
COMMENT ON FUNCTION queue._excerpt(text, int) IS 'A caller''s text as alerts quote it: whitespace folded, at most p_max characters';

REVOKE ALL ON FUNCTION queue._excerpt(text, int) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue._try_lock_alert(queue_name text, kind text) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_try_lock_alert_sql';
COMMENT ON FUNCTION queue._try_lock_alert(text, text) IS 'Tries the lock under which an alert of this kind is raised for the queue; false while another transaction raises it';

REVOKE ALL ON FUNCTION queue._try_lock_alert(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue._raise_alert(p_queue text, p_kind text, p_message text,
                                   p_details jsonb DEFAULT '{}')
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_row queue.alerts;
    v_payload text;
    v_channel text;
BEGIN
    -- An alert of this kind that another transaction is raising (its row
    -- inserted, not yet committed) is the one open alert: the caller, a
    -- dequeue or fail that made a dead letter or tripped the breaker, does
    -- not wait for that transaction (a bot's, perhaps held open), it goes
    -- on without raising.  Should that transaction roll back, sweep raises
    -- the alert for what is still there.  Every raise of a kind holds its
    -- lock until its transaction ends, so the insert below never waits for
    -- another one's outcome.
    IF NOT queue._try_lock_alert(p_queue, p_kind) THEN
        RETURN false;
    END IF;
    INSERT INTO queue.alerts (queue_name, kind, message, details)
    VALUES (p_queue, p_kind, queue._excerpt(p_message, 1000), coalesce(p_details, '{}'))
    ON CONFLICT (queue_name, kind) WHERE cleared_at IS NULL DO NOTHING
    RETURNING * INTO v_row;
    IF v_row.alert_id IS NULL THEN
        RETURN false;
    END IF;
    v_payload := pg_catalog.row_to_json(v_row)::text;
    IF pg_catalog.octet_length(v_payload) OPERATOR(pg_catalog.>) 7000 THEN
        v_row.details := pg_catalog.jsonb_build_object('truncated', true);
        v_row.message := queue._excerpt(v_row.message, 200);
        v_payload := pg_catalog.row_to_json(v_row)::text;
    END IF;
    PERFORM pg_notify('queue_alerts', v_payload);
    -- and on the queue's own channel, once a reader asked for it
    -- (alert_channel, 80_observability.sql)
    SELECT a.channel INTO v_channel FROM queue.alert_channels a WHERE a.queue_name = p_queue;
    IF v_channel IS NOT NULL THEN
        PERFORM pg_notify(v_channel, v_payload);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._raise_alert(text, text, text, jsonb) IS 'Raises an alert unless one of its kind is open; NOTIFY queue_alerts and the queue''s own channel with its row as JSON, bounded';

