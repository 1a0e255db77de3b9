-- ======================================================================
-- Circuit breaker: its state machine, in one place with src/breaker.c
-- ======================================================================
--
--   closed --trip--> open --cooldown over, a dequeue--> probing
--   probing --probe completed--> closed
--   probing --probe failed, released, or its lease ran out--> open
--   any --resume() or alter_queue(breaker_threshold => 0)--> closed
--
-- The breaker keeps its own state (breaker_state, breaker_reason,
-- breaker_opened_at, breaker_since, probe_*) and never touches the
-- operator's pause (paused, pause_reason, paused_at): a queue paused with
-- pause() stays paused until resume(), whatever the breaker does; the
-- breaker still trips, records and alerts meanwhile, and a queue is
-- handed out from only while neither holds it.  src/breaker.c grants the
-- half-open probe and reports outcomes here.
--
-- Trip rules, judged after every failure (and by sweep): outcomes are
-- completions and failed attempts (transient, permanent, lost leases,
-- leases ended by offline recovery or a restart) since
-- greatest(now() - breaker_window, the last close), summed from running
-- counts per 10-second bucket (breaker_bucket below): the window is
-- counted in whole buckets, from the one holding its start.  The breaker trips
--   * when the failed fraction exceeds breaker_threshold with at least
--     breaker_min_samples outcomes (the fraction rule), or
--   * with queue.breaker_run_rule = on, also when the last
--     breaker_min_samples outcomes in the window all failed (the run rule),
--     so that a burst of earlier successes cannot dilute a sudden outage.

-- Failures of one queue judge the breaker in turn, on a private lock tag
-- (src/config.c) rather than the settings row.
CREATE FUNCTION queue._lock_breaker(queue_name text) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_lock_breaker_sql';
COMMENT ON FUNCTION queue._lock_breaker(text) IS 'Waits for the queue''s breaker lock until the end of the transaction';

-- Running counts of the outcomes the breaker and health() judge, so that
-- judging a window costs the same whatever its number of outcomes (a
-- 10-minute window at 1,000 completions a second is 600,000 rows of
-- history).  One row per queue, 10-second bucket (bucket_start, aligned
-- on the epoch) and stripe: stripe n >= 1 is what backend n (its
-- BackendId, unique among the backends alive at a time) counted in the
-- bucket, so concurrent completers never update the same row and never
-- wait for each other (src/breaker.c); stripe -1 is minus what the bucket
-- held when the breaker closed in it, so that counting starts afresh
-- there.  Counted while the queue has a breaker, in the transaction of the
-- outcome: complete, complete_batch, fail, and the failures recorded by
-- _record_failure (lost leases, offline recovery, restarts).  sweep
-- removes the buckets older than the window.
CREATE TABLE queue.breaker_bucket (
    queue_name   text        NOT NULL,
    bucket_start timestamptz NOT NULL,
    stripe       int         NOT NULL,
    succeeded    bigint      NOT NULL DEFAULT 0,
    failed       bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_name, bucket_start, stripe)
) WITH (fillfactor = 50);
COMMENT ON TABLE queue.breaker_bucket
    IS 'Outcomes (succeeded, failed) per queue, 10-second bucket and backend, summed by the circuit breaker';

CREATE FUNCTION queue._breaker_count(queue_name text, succeeded bigint, failed bigint) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_breaker_count_sql';
COMMENT ON FUNCTION queue._breaker_count(text, bigint, bigint)
    IS 'Adds outcomes to this backend''s row of the queue''s current breaker bucket';

-- The outcomes the breaker and health() judge, counted one way: the
-- buckets from the one holding p_from on (the window in whole buckets, up
-- to one bucket longer than it, so that a window shorter than a bucket
-- still sees its outcomes); when the breaker closed in that first bucket,
-- its stripe -1 takes off what came before the close.
CREATE FUNCTION queue._breaker_outcomes(p_queue text, p_from timestamptz, p_run_max int,
                                        OUT failed bigint, OUT outcomes bigint,
                                        OUT run bigint, OUT last_ok timestamptz)
RETURNS record LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_lo timestamptz := date_bin('10 s', p_from, 'epoch');
    v_next timestamptz := v_lo + interval '10 s';
    v_since timestamptz;
    v_done bigint;
    v_failed bigint;
BEGIN
    -- Counted from the breaker's last close: its bucket holds only what
    -- came after the close (its stripe -1), so every bucket from that one
    -- on is summed.  Counted from a window's start past the close: the
    -- buckets after the one holding the start are summed, and the outcomes
    -- of that one from the start on are counted from their rows (at most a
    -- bucket's, 10 seconds), so that no outcome older than the window
    -- counts, however short the window.
    SELECT c.breaker_since INTO v_since FROM queue.queue_config c WHERE c.queue_name = p_queue;
    IF v_since IS NOT NULL AND p_from <= v_since THEN
        v_next := v_lo;
    END IF;
    SELECT coalesce(sum(b.failed), 0), coalesce(sum(b.succeeded + b.failed), 0)
      INTO failed, outcomes
      FROM queue.breaker_bucket b
     WHERE b.queue_name = p_queue AND b.bucket_start >= v_next;
    IF v_next > v_lo THEN
        SELECT count(*) INTO v_done FROM queue.item_done d
         WHERE d.queue_name = p_queue AND d.completed_at >= p_from AND d.completed_at < v_next;
        SELECT count(*) INTO v_failed FROM queue.failure_log f
         WHERE f.queue_name = p_queue AND f.at >= p_from AND f.at < v_next;
        failed := failed + v_failed;
        outcomes := outcomes + v_failed + v_done;
    END IF;
    run := 0;
    IF p_run_max > 0 THEN
        -- failures since the last success, counted up to p_run_max: the
        -- newest entry of each index, then at most p_run_max rows
        SELECT d.completed_at INTO last_ok FROM queue.item_done d
         WHERE d.queue_name = p_queue AND d.completed_at > p_from
         ORDER BY d.completed_at DESC LIMIT 1;
        SELECT count(*) INTO run FROM (
            SELECT 1 FROM queue.failure_log f
             WHERE f.queue_name = p_queue AND f.at > greatest(p_from, last_ok)
             LIMIT p_run_max) x;
    END IF;
END
$$;
COMMENT ON FUNCTION queue._breaker_outcomes(text, timestamptz, int)
    IS 'Failed and total outcomes of a queue since a time (its breaker buckets, the first one counted from its rows), and the run of failures since its last success';

-- Buckets the window no longer reaches, and every bucket of a queue
-- without a breaker.  sweep calls it for each queue.
CREATE FUNCTION queue._breaker_prune(p_queue text)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_n bigint;
    v_before timestamptz;
BEGIN
    -- the cut as a value: Citus refuses now() less a column in a write
    SELECT CASE WHEN c.breaker_threshold IS NULL THEN 'infinity'::timestamptz
                ELSE now() - c.breaker_window - interval '10 s' END
      INTO v_before
      FROM queue.queue_config c WHERE c.queue_name = p_queue;
    DELETE FROM queue.breaker_bucket b
     WHERE b.queue_name = p_queue AND b.bucket_start < v_before;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue._breaker_prune(text) IS 'Removes the breaker buckets of a queue that its window no longer reaches';

-- Trip a closed breaker when a rule holds (see above).  Returns whether it tripped.
CREATE FUNCTION queue._breaker_check(p_queue text)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    c queue.queue_config;
    o record;
    v_from timestamptz;
    v_top_from timestamptz;
    v_by_run boolean;
    v_top text;
    v_top_n bigint;
    v_top_all bigint;
    v_reason text;
BEGIN
    SELECT * INTO c FROM queue.queue_config WHERE queue_name = p_queue;
    IF NOT FOUND OR c.breaker_threshold IS NULL OR c.breaker_state <> 'closed' THEN
        RETURN false;
    END IF;
    -- NB: failures of one queue judge the breaker one at a time, each
    -- seeing the failures committed before it; otherwise two concurrent
    -- failures could each miss the other and never trip it.  They take
    -- turns on the queue's private breaker lock, not on its settings row:
    -- the caller holds an item, and alter_queue or drop_queue hold the
    -- settings row while they wait for items (one lock order: items
    -- first).
    PERFORM queue._lock_breaker(p_queue);
    SELECT * INTO c FROM queue.queue_config WHERE queue_name = p_queue;
    IF NOT FOUND OR c.breaker_state <> 'closed' THEN
        RETURN false;
    END IF;
    -- the window ends at this call, not at its transaction's start: an
    -- outcome is counted at the time of the call that reported it
    v_from := greatest(greatest(statement_timestamp(), now()) - c.breaker_window, c.breaker_since);
    SELECT * INTO o FROM queue._breaker_outcomes(p_queue, v_from, c.breaker_min_samples) x;
    IF o.failed = 0 OR o.outcomes < c.breaker_min_samples THEN
        RETURN false;
    END IF;
    -- the run rule is opt-in (queue.breaker_run_rule): by default only
    -- the SPEC's fraction rule trips the breaker
    v_by_run := o.run >= c.breaker_min_samples
                AND pg_catalog.current_setting('queue.breaker_run_rule', true) = 'on';
    IF NOT v_by_run AND o.failed::float8 / o.outcomes <= c.breaker_threshold THEN
        RETURN false;
    END IF;

    -- the dominant error of the failures that tripped it (of the last
    -- 1,000 of them: an outage may have many more); an empty error_code
    -- is no code, so the error text names such failures
    v_top_from := CASE WHEN v_by_run THEN greatest(v_from, o.last_ok) ELSE v_from END;
    SELECT queue._excerpt(coalesce(nullif(f.error_code, ''), f.error)), count(*), sum(count(*)) OVER ()
      INTO v_top, v_top_n, v_top_all
      FROM (SELECT x.error_code, x.error FROM queue.failure_log x
             WHERE x.queue_name = p_queue AND x.at > v_top_from
             ORDER BY x.at DESC LIMIT 1000) f
     GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1;
    -- the settings row is taken without waiting: whoever holds it (an
    -- alter_queue, a drop) may be waiting for the caller's item; the next
    -- failure or sweep judges again
    BEGIN
        PERFORM 1 FROM queue.queue_config WHERE queue_name = p_queue FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    v_reason := format('circuit breaker: %s%% of %s outcomes failed in %s%s, mostly %s (%s%%)',
                       floor(100.0 * o.failed / o.outcomes), o.outcomes,
                       queue._say_interval(c.breaker_window),
                       CASE WHEN v_by_run AND o.failed::float8 / o.outcomes <= c.breaker_threshold
                            THEN format(', the last %s in a row', o.run) ELSE '' END,
                       v_top, floor(100.0 * v_top_n / v_top_all));
    UPDATE queue.queue_config
       SET breaker_state = 'open', breaker_opened_at = greatest(statement_timestamp(), now()),
           breaker_reason = v_reason,
           probe_item_id = NULL, probe_expires_at = NULL
     WHERE queue_name = p_queue;
    PERFORM queue._event(p_queue, NULL, 'breaker_open', NULL, NULL,
                         jsonb_build_object('reason', v_reason, 'failed', o.failed,
                                            'outcomes', o.outcomes, 'run', o.run,
                                            'top_error', v_top));
    IF NOT c.paused THEN
        PERFORM queue._event(p_queue, NULL, 'paused', NULL, NULL,
                             jsonb_build_object('reason', v_reason, 'by', 'breaker'));
    END IF;
    PERFORM queue._raise_alert(p_queue, 'breaker_open', v_reason,
                               jsonb_build_object('failed', o.failed, 'outcomes', o.outcomes,
                                                  'run', o.run, 'top_error', v_top, 'top_share',
                                                  round(1.0 * v_top_n / v_top_all, 3)));
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._breaker_check(text) IS 'Trips a closed circuit breaker when its fraction or run rule holds';

-- Close the breaker (whatever its state): by the probe's success, a
-- manual resume or the breaker being switched off.  The count of outcomes
-- starts afresh.  The operator's pause is left as it is; the caller
-- records whether the queue resumed.  Returns whether it was not closed.
CREATE FUNCTION queue._breaker_close(p_queue text, p_details jsonb)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_was text;
BEGIN
    SELECT c.breaker_state INTO v_was FROM queue.queue_config c
     WHERE c.queue_name = p_queue FOR UPDATE;
    UPDATE queue.queue_config c
       SET breaker_state = 'closed', breaker_opened_at = NULL, breaker_reason = NULL,
           breaker_since = greatest(statement_timestamp(), now()),
           probe_item_id = NULL, probe_expires_at = NULL
     WHERE c.queue_name = p_queue;
    -- the count starts afresh in the current bucket too: its stripe -1
    -- takes off what the bucket holds so far (outcomes of transactions
    -- still open may count after the close)
    INSERT INTO queue.breaker_bucket AS b (queue_name, bucket_start, stripe, succeeded, failed)
    SELECT p_queue, date_bin('10 s', greatest(statement_timestamp(), now()), 'epoch'), -1,
           -coalesce(sum(x.succeeded), 0), -coalesce(sum(x.failed), 0)
      FROM queue.breaker_bucket x
     WHERE x.queue_name = p_queue
       AND x.bucket_start = date_bin('10 s', greatest(statement_timestamp(), now()), 'epoch')
       AND x.stripe <> -1
    ON CONFLICT ON CONSTRAINT breaker_bucket_pkey DO UPDATE
       SET succeeded = EXCLUDED.succeeded, failed = EXCLUDED.failed;
    IF v_was IS NULL OR v_was = 'closed' THEN
        RETURN false;
    END IF;
    PERFORM queue._event(p_queue, NULL, 'breaker_closed', NULL, NULL, coalesce(p_details, '{}'));
    PERFORM queue._clear_alert(p_queue, 'breaker_open');
    -- bots that LISTEN for the queue hear that it hands out work again,
    -- unless the operator's pause still holds it
    IF EXISTS (SELECT 1 FROM queue.queue_config c
                WHERE c.queue_name = p_queue AND c.notify AND NOT c.paused) THEN
        PERFORM pg_notify('queue_' || p_queue, '');
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue._breaker_close(text, jsonb)
    IS 'Closes the circuit breaker and forgets earlier outcomes, leaving the operator''s pause as it is';

-- The half-open probe finished: success closes the breaker, failure
-- re-opens it for another cooldown.
CREATE FUNCTION queue._breaker_probe_done(p_queue text, p_item_id bigint, p_success boolean)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM queue.queue_config c
     WHERE c.queue_name = p_queue AND c.breaker_state = 'probing' AND c.probe_item_id = p_item_id
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_success THEN
        PERFORM queue._breaker_close(p_queue, jsonb_build_object('probe_item_id', p_item_id));
        -- operator before breaker: a manual pause holds
        IF NOT (SELECT c.paused FROM queue.queue_config c WHERE c.queue_name = p_queue) THEN
            PERFORM queue._event(p_queue, NULL, 'resumed', NULL, NULL,
                                 jsonb_build_object('by', 'breaker'));
        END IF;
    ELSE
        UPDATE queue.queue_config
           SET breaker_state = 'open', breaker_opened_at = greatest(statement_timestamp(), now()),
               probe_item_id = NULL, probe_expires_at = NULL
         WHERE queue_name = p_queue;
        PERFORM queue._event(p_queue, NULL, 'breaker_open', NULL, NULL,
                             jsonb_build_object('probe_item_id', p_item_id, 'reopened', true));
    END IF;
END
$$;
COMMENT ON FUNCTION queue._breaker_probe_done(text, bigint, boolean) IS 'Closes or re-opens the breaker after its half-open probe';

-- The probe was released (no outcome): open again with the cooldown
-- counted as over, so the next dequeue probes with another item.
CREATE FUNCTION queue._breaker_probe_back(p_queue text, p_item_id bigint)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    UPDATE queue.queue_config c
       SET breaker_state = 'open', probe_item_id = NULL, probe_expires_at = NULL,
           breaker_opened_at = least(c.breaker_opened_at, now() - c.breaker_cooldown)
     WHERE c.queue_name = p_queue AND c.breaker_state = 'probing' AND c.probe_item_id = p_item_id;
END
$$;
COMMENT ON FUNCTION queue._breaker_probe_back(text, bigint) IS 'Re-opens the breaker, cooldown over, when its probe was released';

-- How the queue's pause looks from outside: the operator's, else the breaker's.
-- Of the settings columns, not of the row: under Citus a query over
-- queue_config runs on a copy of it whose row type is another.
CREATE FUNCTION queue._pause_state(p_paused boolean, p_pause_reason text,
                                   p_paused_at timestamptz, p_breaker_state text,
                                   p_breaker_reason text, p_breaker_opened_at timestamptz,
                                   OUT paused boolean, OUT pause_reason text,
                                   OUT paused_at timestamptz, OUT paused_by text)
RETURNS record LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_paused OR p_breaker_state OPERATOR(pg_catalog.<>) 'closed',
           CASE WHEN p_paused THEN p_pause_reason ELSE p_breaker_reason END,
           CASE WHEN p_paused THEN p_paused_at ELSE p_breaker_opened_at END,
           CASE WHEN p_paused THEN 'operator'
                WHEN p_breaker_state OPERATOR(pg_catalog.<>) 'closed' THEN 'breaker' END
$$;
COMMENT ON FUNCTION queue._pause_state(boolean, text, timestamptz, text, text, timestamptz)
    IS 'Whether a queue hands out nothing, why, since when and by whom (operator before breaker), from its settings columns';

-- The same of a settings row held in a variable.
CREATE FUNCTION queue._pause_state(c queue.queue_config,
                                   OUT paused boolean, OUT pause_reason text,
                                   OUT paused_at timestamptz, OUT paused_by text)
RETURNS record LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM queue._pause_state(c.paused, c.pause_reason, c.paused_at, c.breaker_state,
                                     c.breaker_reason, c.breaker_opened_at)
$$;
COMMENT ON FUNCTION queue._pause_state(queue.queue_config)
    IS 'Whether a queue hands out nothing, why, since when and by whom (operator before breaker)';
