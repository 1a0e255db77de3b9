-- drop_queue leaves nothing behind: the queue lock (shared by every call
-- that uses a queue, exclusive for drop_queue), one function that removes
-- a queue's rows (create_queue, which starts a new queue empty, is in
-- 46_flow_changes.sql).

CREATE OR REPLACE FUNCTION queue._lock_queue(queue_name text, exclusive boolean) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_queue_sql';
COMMENT ON FUNCTION queue._lock_queue(text, boolean) IS 'Takes the queue lock until the transaction ends: shared by every call using the queue, exclusive to drop it';

CREATE OR REPLACE FUNCTION queue._forget_queue(p_queue text, p_keep_dropped boolean)
RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_counts jsonb;
BEGIN
    WITH l AS (DELETE FROM queue.item_live i WHERE i.queue_name = p_queue RETURNING 1),
         h AS (DELETE FROM queue.item_done d WHERE d.queue_name = p_queue RETURNING 1),
         x AS (DELETE FROM queue.dead_letters d WHERE d.queue_name = p_queue RETURNING 1),
         e AS (DELETE FROM queue.events e WHERE e.queue_name = p_queue
                  AND NOT (p_keep_dropped AND e.kind = 'queue_dropped') RETURNING 1),
         k AS (DELETE FROM queue.dedup_done k WHERE k.queue_name = p_queue RETURNING 1),
         f AS (DELETE FROM queue.failure_log f WHERE f.queue_name = p_queue RETURNING 1),
         a AS (DELETE FROM queue.alerts a WHERE a.queue_name = p_queue RETURNING 1),
         m AS (DELETE FROM queue.metrics_history m WHERE m.queue_name = p_queue RETURNING 1),
         t AS (DELETE FROM queue.metrics_totals t WHERE t.queue_name = p_queue RETURNING 1),
         g AS (DELETE FROM queue.queue_grant g WHERE g.queue_name = p_queue RETURNING 1),
         fg AS (DELETE FROM queue.flow_group f WHERE f.queue_name = p_queue RETURNING 1),
         fl AS (DELETE FROM queue.flow_limit f WHERE f.queue_name = p_queue RETURNING 1),
         fc AS (DELETE FROM queue.flow_claim f WHERE f.queue_name = p_queue RETURNING 1),
         b AS (DELETE FROM queue.breaker_bucket b WHERE b.queue_name = p_queue RETURNING 1),
         o AS (DELETE FROM queue.offline_check o WHERE o.queue_name = p_queue RETURNING 1),
         n AS (DELETE FROM queue.alert_channels n WHERE n.queue_name = p_queue RETURNING 1)
    SELECT jsonb_build_object('item_live', (SELECT count(*) FROM l),
                              'item_done', (SELECT count(*) FROM h),
                              'dead_letters', (SELECT count(*) FROM x),
                              'events', (SELECT count(*) FROM e),
                              'dedup_done', (SELECT count(*) FROM k),
                              'failure_log', (SELECT count(*) FROM f),
                              'alerts', (SELECT count(*) FROM a),
                              'metrics_history', (SELECT count(*) FROM m),
                              'metrics_totals', (SELECT count(*) FROM t),
                              'queue_grant', (SELECT count(*) FROM g),
                              'flow_group', (SELECT count(*) FROM fg),
                              'flow_limit', (SELECT count(*) FROM fl),
                              'flow_claim', (SELECT count(*) FROM fc),
                              'breaker_bucket', (SELECT count(*) FROM b),
                              'offline_check', (SELECT count(*) FROM o),
                              'alert_channels', (SELECT count(*) FROM n))
      INTO v_counts;
    RETURN v_counts;
END
$$;
COMMENT ON FUNCTION queue._forget_queue(text, boolean)
    IS 'Deletes the rows of a queue from every per-queue table but the settings; returns the counts by table';

REVOKE ALL ON FUNCTION queue._lock_queue(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._forget_queue(text, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue.drop_queue(queue_name text, force boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(drop_queue.queue_name);
    v_live bigint;
    v_counts jsonb;
BEGIN
    IF drop_queue.force IS NULL THEN
        RAISE EXCEPTION 'force must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- NB: first the queue lock: the calls adding rows to the queue finish
    -- (their rows are then seen and removed below), later ones wait for
    -- this transaction and then find no queue
    PERFORM queue._lock_queue(v_name, true);
    PERFORM 1 FROM queue.queue_config q WHERE q.queue_name = v_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'queue.queues lists the queues that exist.';
    END IF;
    SELECT count(*) INTO v_live FROM queue.item_live i WHERE i.queue_name = v_name;
    IF v_live > 0 AND NOT coalesce(drop_queue.force, false) THEN
        RAISE EXCEPTION 'queue "%" has % live items', v_name, v_live
            USING ERRCODE = 'object_in_use',
                  DETAIL = 'Queued, scheduled, on-hold and processing items would be lost.',
                  HINT = 'Let the items finish, purge them, or pass force => true.';
    END IF;

    v_counts := queue._forget_queue(v_name, false);
    v_counts := jsonb_build_object('live', v_counts -> 'item_live', 'history', v_counts -> 'item_done',
                                   'dead_letters', v_counts -> 'dead_letters',
                                   'events', v_counts -> 'events');
    DELETE FROM queue.queue_config q WHERE q.queue_name = v_name;
    INSERT INTO queue.events (queue_name, kind, details)
    VALUES (v_name, 'queue_dropped', v_counts || jsonb_build_object('force', coalesce(drop_queue.force, false),
                                                                    'by', session_user));
END
$$;
COMMENT ON FUNCTION queue.drop_queue(text, boolean)
    IS 'Drops a queue; refuses while it has live items unless force, which removes its history, dead letters and events too';

