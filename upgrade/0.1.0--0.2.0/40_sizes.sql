-- Sizes: texts stored with an item are bounded at 64 kB (54000 beyond):
-- the SQL face of the check, and the operator functions that store texts.

CREATE OR REPLACE FUNCTION queue._check_text(value text, argname text) RETURNS void
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_text_sql';
COMMENT ON FUNCTION queue._check_text(text, text) IS 'Rejects a text longer than 64 kB (54000) naming the argument, NULL passes';
REVOKE ALL ON FUNCTION queue._check_text(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue._check_jsonb(value jsonb, argname text) RETURNS void
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_jsonb_sql';
COMMENT ON FUNCTION queue._check_jsonb(jsonb, text) IS 'Rejects a jsonb value larger than queue.max_payload_bytes (54000) naming the argument, NULL passes';
REVOKE ALL ON FUNCTION queue._check_jsonb(jsonb, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue._check_key(value text, argname text) RETURNS void
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_key_sql';
COMMENT ON FUNCTION queue._check_key(text, text) IS 'Rejects a key longer than 64 kB or too long for an index entry once compressed (54000) naming the argument, NULL passes';
REVOKE ALL ON FUNCTION queue._check_key(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue.hold(queue_name text, item_id bigint, reason text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(hold.queue_name);
    r record;
BEGIN
    IF hold.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_text(hold.reason, 'reason');
    PERFORM queue._check_access(v_name, 'reader');
    -- a lease that ran out and nobody re-claimed is settled first, as sweep
    -- or dequeue would: counted once as a lost lease, and a dead letter when
    -- it was the last attempt or its cancel was requested (nothing to hold)
    SELECT i.attempt >= i.max_attempts OR i.cancel_requested_at IS NOT NULL AS spent,
           i.lost_counted
      INTO r FROM queue.item_live i
     WHERE i.queue_name = v_name AND i.item_id = hold.item_id AND NOT i.on_hold
       AND i.lease_token IS NOT NULL AND i.lease_expires_at <= statement_timestamp()
       FOR UPDATE;
    IF FOUND THEN
        IF r.spent THEN
            PERFORM queue._bury(v_name, hold.item_id, 'lease_expired', NULL, NULL);
            RETURN false;
        ELSIF NOT r.lost_counted THEN
            PERFORM queue._lease_lost(v_name, hold.item_id);
            -- a failure like any other: the breaker judges it at once
            PERFORM queue._breaker_check(v_name);
        END IF;
    END IF;
    UPDATE queue.item_live i
       SET on_hold = true, hold_reason = hold.reason, visible_at = 'infinity',
           lease_token = NULL, lease_expires_at = NULL, worker = NULL
     WHERE i.queue_name = v_name AND i.item_id = hold.item_id AND NOT i.on_hold
       AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > statement_timestamp())
       AND i.cancel_requested_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._event(v_name, hold.item_id, 'held', NULL, NULL,
                         jsonb_build_object('reason', hold.reason, 'by', session_user));
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.hold(text, bigint, text) IS 'Puts a queued item on hold; false for other states';

CREATE OR REPLACE FUNCTION queue.review(queue_name text, item_id bigint, review_status text,
                             note text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(review.queue_name);
BEGIN
    IF review.item_id IS NULL OR review.review_status IS NULL THEN
        RAISE EXCEPTION '% must not be null',
                        CASE WHEN review.item_id IS NULL THEN 'item_id' ELSE 'review_status' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF review.review_status NOT IN ('new', 'in_review', 'resolved', 'rejected') THEN
        RAISE EXCEPTION 'invalid review_status "%"', review.review_status
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid statuses are ''new'', ''in_review'', ''resolved'' and ''rejected''.';
    END IF;
    PERFORM queue._check_text(review.note, 'note');
    PERFORM queue._check_access(v_name, 'reader');
    UPDATE queue.dead_letters d
       SET review_status = review.review_status,
           review_note = coalesce(review.note, d.review_note),
           reviewed_at = now()
     WHERE d.queue_name = v_name AND d.item_id = review.item_id;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION queue.review(text, bigint, text, text)
    IS 'Sets a dead letter''s review status (new, in_review, resolved, rejected); false if unknown';
