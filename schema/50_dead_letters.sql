-- ======================================================================
-- Dead letters: replay, replay_all, review
-- ======================================================================

CREATE FUNCTION queue.replay(queue_name text, item_id bigint, payload jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(replay.queue_name);
    x queue.dead_letters;
    c queue.queue_config;
    v_payload jsonb;
    v_new bigint;
    v_held boolean := false;
    v_keeps_place boolean;
    v_try int;
BEGIN
    IF replay.item_id IS NULL THEN
        RAISE EXCEPTION 'item_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    SELECT * INTO c FROM queue.queue_config q WHERE q.queue_name = v_name;
    SELECT * INTO x FROM queue.dead_letters d
     WHERE d.queue_name = v_name AND d.item_id = replay.item_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF x.replayed_as IS NOT NULL THEN
        RAISE EXCEPTION 'dead letter % of queue "%" was already replayed as item %',
                        x.item_id, v_name, x.replayed_as
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = format('Follow item %s instead.', x.replayed_as);
    END IF;
    v_payload := coalesce(replay.payload, x.payload);
    PERFORM queue._check_payload(v_payload);

    -- a group's line is in id order: the replay (a new item) joins the
    -- back, except the replay of the dead head that blocks its group
    -- (group_on_dead = 'block'), which keeps that head's place (group_pos)
    -- and so becomes the head
    -- NB: a live item holding the key stands for the replay; if it ends
    -- (completes, dies) between the INSERT and the lookup, the key is free
    -- and the INSERT is tried again.  A holder past its expires_at (not
    -- under a current lease) is never handed out: it becomes the dead
    -- letter (expired) that dequeue or sweep would make, and the INSERT is
    -- tried again.
    -- (looked up before the INSERT: Citus takes no subquery in its VALUES)
    v_keeps_place := c.group_on_dead = 'block' AND x.group_key IS NOT NULL
                     AND EXISTS (SELECT 1 FROM queue.flow_group f
                                  WHERE f.queue_name = v_name AND f.group_key = x.group_key
                                    AND f.blocked_by = x.item_id);
    FOR v_try IN 1..3 LOOP
        INSERT INTO queue.item_live AS i (queue_name, priority, visible_at, base_priority, run_at,
                                          max_attempts, expires_at, dedup_key, correlation_id,
                                          payload, progress, group_key, group_pos, limit_key, requires)
        VALUES (v_name, x.priority, now(), x.priority, now(),
                coalesce(x.max_attempts, c.max_attempts), now() + c.item_ttl,
                x.dedup_key, x.correlation_id, v_payload, x.progress,
                x.group_key,
                CASE WHEN v_keeps_place THEN x.group_pos END,
                x.limit_key, x.requires)
        ON CONFLICT (queue_name, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
        RETURNING i.item_id INTO v_new;
        EXIT WHEN v_new IS NOT NULL;
        SELECT i.item_id INTO v_new FROM queue.item_live i
         WHERE i.queue_name = v_name AND i.dedup_key = x.dedup_key
           AND i.expires_at <= statement_timestamp()
           AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > statement_timestamp())
           FOR UPDATE;
        IF v_new IS NOT NULL THEN
            PERFORM queue._bury(v_name, v_new, 'expired', NULL, NULL);
            v_new := NULL;
            CONTINUE;
        END IF;
        SELECT i.item_id INTO v_new FROM queue.item_live i
         WHERE i.queue_name = v_name AND i.dedup_key = x.dedup_key;
        IF v_new IS NOT NULL THEN
            v_held := true;
            EXIT;
        END IF;
    END LOOP;
    IF v_new IS NULL THEN
        RAISE EXCEPTION 'could not settle dedup_key conflict on queue "%"', v_name
            USING ERRCODE = 'serialization_failure', HINT = 'Retry the transaction.';
    END IF;
    IF NOT v_held AND c.notify THEN
        PERFORM pg_notify('queue_' || v_name, '');
    END IF;

    UPDATE queue.dead_letters d
       SET review_status = 'resolved', replayed_as = v_new, reviewed_at = now()
     WHERE d.queue_name = v_name AND d.item_id = x.item_id;
    PERFORM queue._event(v_name, x.item_id, 'replayed', NULL, NULL,
                         jsonb_build_object('replayed_as', v_new,
                                            'payload_changed', replay.payload IS NOT NULL,
                                            'by', queue._caller()::regrole::text));
    -- the new item is enqueued like any other (recorded under audit 'all')
    IF NOT v_held THEN
        PERFORM queue._event(v_name, v_new, 'enqueued', NULL, 0,
                             jsonb_build_object('replay_of', x.item_id));
    END IF;
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION queue.replay(text, bigint, jsonb)
    IS 'Re-enqueues a dead letter with attempts reset and its progress kept; returns the new item id';

CREATE FUNCTION queue.replay_all(queue_name text, error_code text DEFAULT NULL,
                                 since timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(replay_all.queue_name);
    v_ids bigint[] := '{}';
    v_id bigint;
    v_n bigint := 0;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    -- Every letter to replay is locked first, in one order, before any is
    -- replayed.  A letter another session holds (a review, a replay) is
    -- waited for, and its row is then judged again as that session left
    -- it: one it resolved, rejected or replayed is left out, one it left
    -- new or in review (or whose change rolled back) is replayed.  Nothing
    -- is inserted before the last lock is taken, so a replay of another
    -- session never waits for this one's new items while this one waits
    -- for its letter, and two replay_all calls lock in the same order.
    -- (a plain locking statement of one queue, which Citus routes)
    FOR v_id IN
        SELECT d.item_id FROM queue.dead_letters d
         WHERE d.queue_name = v_name
           AND d.review_status IN ('new', 'in_review')
           AND d.replayed_as IS NULL
           AND (replay_all.error_code IS NULL OR d.error_code = replay_all.error_code)
           AND (replay_all.since IS NULL OR d.dead_at >= replay_all.since)
         ORDER BY d.dead_at, d.item_id
           FOR UPDATE
    LOOP
        v_ids := v_ids || v_id;
    END LOOP;
    FOREACH v_id IN ARRAY v_ids LOOP
        PERFORM queue.replay(v_name, v_id);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue.replay_all(text, text, timestamptz)
    IS 'Replays every dead letter still new or in review, optionally of one error_code or dead since a time';

CREATE FUNCTION queue.review(queue_name text, item_id bigint, review_status text,
                             note text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(review.queue_name);
    v_from text;
    v_replayed_as bigint;
    v_reason text;
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
    SELECT d.review_status, d.replayed_as, d.reason INTO v_from, v_replayed_as, v_reason
      FROM queue.dead_letters d
     WHERE d.queue_name = v_name AND d.item_id = review.item_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- a replayed letter is resolved by its replay for good
    IF v_replayed_as IS NOT NULL AND review.review_status <> 'resolved' THEN
        RAISE EXCEPTION 'dead letter % of queue "%" was replayed as item % and stays resolved',
                        review.item_id, v_name, v_replayed_as
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = format('Review item %s instead.', v_replayed_as);
    END IF;
    UPDATE queue.dead_letters d
       SET review_status = review.review_status,
           review_note = coalesce(review.note, d.review_note),
           reviewed_at = now()
     WHERE d.queue_name = v_name AND d.item_id = review.item_id;
    PERFORM queue._event(v_name, review.item_id, 'reviewed', NULL, NULL,
                         jsonb_build_object('review_status', review.review_status, 'from', v_from,
                                            'note', review.note,
                                            'by', queue._caller()::regrole::text));
    -- back to new: the dead_letters alert is open while a letter is new,
    -- so the review raises it at once, as the call that made the letter
    -- did (sweep clears it once none is new)
    IF review.review_status = 'new' AND v_from <> 'new' THEN
        PERFORM queue._raise_alert(v_name, 'dead_letters',
                                   format('queue %s has new dead letters', v_name),
                                   jsonb_build_object('first_item_id', review.item_id,
                                                      'reason', v_reason));
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.review(text, bigint, text, text)
    IS 'Sets a dead letter''s review status (new, in_review, resolved, rejected); false if unknown';
