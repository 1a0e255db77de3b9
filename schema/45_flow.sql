-- ======================================================================
-- Flow control and routing: ordered groups, per-key limits, requires
-- ======================================================================
--
-- This file owns the state of flow control; src/flow.c owns the claim-time
-- decisions.  It is written as idempotent DDL so that the upgrade from
-- 0.1.0 replays it unchanged (upgrade/0.1.0--0.2.0/45_flow.sql links here).
-- Its columns on the item, dead-letter, settings and worker tables are
-- declared with those tables (10_tables.sql).
--
-- Ordered groups.  Only a group's head is ever in the claim range of the
-- claim index: every other item of the group waits *parked* (group_wait,
-- visible_at = queue._flow_parked(), a fixed instant after every real
-- run_at and before 'infinity', which stays the mark of on-hold rows).
-- A claim therefore never sees, let alone walks past, a blocked group's
-- items.  A group gets a new head in queue._group_settle(), which runs
-- under the lock of the group's row in flow_group, from deferred
-- constraint triggers at commit: after an insert of a grouped item and
-- after the head left item_live (completed, dead, cancelled, purged).
-- Running at commit keeps the group lock short and lets a dead-lettering
-- (delete, then insert into dead_letters) be seen whole.  The first settle
-- of a commit locks every group the transaction settles, in
-- (queue_name, group_key) order (queue._flow_lock_touched(), src/flow.c,
-- from notes taken as the rows were written), so two commits that touched
-- the same groups in other orders wait for each other instead of
-- deadlocking.
--
-- Per-key limits.  Items whose limit_key has a row in flow_limit live in
-- a priority band of their own (priority + queue._flow_band(); the band
-- survives every reset of priority through a trigger), so the ordinary
-- claim, bounded to priorities below the band, never sees them.  They are
-- claimed lane by lane (src/flow.c): a dequeue locks the keys whose
-- ready_at has come (FOR UPDATE SKIP LOCKED), counts each key's current
-- leases and its claims in the last `per` (flow_claim) under that lock,
-- claims at most what is left, and sets ready_at to when the key can next
-- give something: the end of the rate window, the first lease expiry of a
-- full key, the next due item, or 'infinity'.  Commit-time triggers wake a
-- key (ready_at = now) when one of its leases ends or an item of it
-- becomes due.
--
-- Routing.  requires is checked by the claim itself against the worker's
-- labels (worker_registry.labels); items without requires cost nothing.

CREATE TABLE IF NOT EXISTS queue.flow_group (
    queue_name  text    NOT NULL,
    group_key   text    NOT NULL,
    head_id     bigint,             -- the item the group is waiting on
    blocked_by  bigint,             -- dead head holding the group (group_on_dead = 'block')
    PRIMARY KEY (queue_name, group_key)
);

CREATE TABLE IF NOT EXISTS queue.flow_limit (
    queue_name    text        NOT NULL,
    limit_key     text        NOT NULL,   -- '' = the whole queue (a rate only)
    max_in_flight int,
    rate          int,
    per           interval    NOT NULL DEFAULT '1 s',
    ready_at      timestamptz NOT NULL DEFAULT '-infinity',   -- next worth a look
    PRIMARY KEY (queue_name, limit_key)
);
CREATE INDEX IF NOT EXISTS flow_limit_ready_idx ON queue.flow_limit (queue_name, ready_at);

-- claims of rate-limited keys: the sliding window
CREATE TABLE IF NOT EXISTS queue.flow_claim (
    queue_name text        NOT NULL,
    limit_key  text        NOT NULL,
    at         timestamptz NOT NULL,
    item_id    bigint      NOT NULL,
    PRIMARY KEY (queue_name, limit_key, at, item_id)
);

-- waiting members of a group, in line: who is next
CREATE INDEX IF NOT EXISTS item_live_group_wait_idx
    ON queue.item_live (queue_name, group_key, group_pos, item_id) WHERE group_wait;
-- waiting members whose own run_at is ahead: scheduled in stats
CREATE INDEX IF NOT EXISTS item_live_group_wait_run_idx
    ON queue.item_live (queue_name, run_at) WHERE group_wait AND NOT on_hold;
-- a limited key's claim order (its band), and set_limit's re-banding
CREATE INDEX IF NOT EXISTS item_live_limit_claim_idx
    ON queue.item_live (queue_name, limit_key, priority, visible_at, item_id)
    WHERE limit_key IS NOT NULL;
-- items that need labels: the unroutable rule
CREATE INDEX IF NOT EXISTS item_live_requires_idx
    ON queue.item_live (queue_name, run_at) WHERE requires IS NOT NULL;
-- a key's leases: in-flight counts and the first lease to end
CREATE INDEX IF NOT EXISTS item_live_limit_lease_idx
    ON queue.item_live (queue_name, limit_key, lease_expires_at)
    WHERE limit_key IS NOT NULL AND worker IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('queue.flow_group', '');
SELECT pg_catalog.pg_extension_config_dump('queue.flow_limit', '');
SELECT pg_catalog.pg_extension_config_dump('queue.flow_claim', '');

-- Constants shared with src/flow.c (FLOW_PARKED, FLOW_BAND).
CREATE OR REPLACE FUNCTION queue._flow_parked() RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT '294276-12-31 00:00:00+00'::pg_catalog.timestamptz$$;
COMMENT ON FUNCTION queue._flow_parked() IS 'visible_at of a group member waiting behind its head';
CREATE OR REPLACE FUNCTION queue._flow_band() RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT 100000$$;
COMMENT ON FUNCTION queue._flow_band() IS 'Added to the priority of items of a limited key';

-- Groups ------------------------------------------------------------------

-- One lock order for the groups and keys of a commit.  Every row whose
-- deferred trigger will settle a group or wake a limited key notes the
-- group or key as it is written (queue._group_touched(),
-- queue._key_touched(), AFTER ROW; a subtransaction's notes go with its
-- rollback); the first deferred trigger of the commit locks all noted
-- groups (queue._group_lock), then all noted keys that are parked, each in
-- (queue_name, name) byte order, and forgets the notes, so later triggers
-- only take locks the transaction holds.
--
-- A group's row comes and goes (a settle forgets a group nobody waits in),
-- so the lock is only taken once the row is held: where the row was
-- deleted by the commit this one waited for, it is made anew and locked,
-- in its turn.  Going on without it would leave the group to be locked
-- later, out of order, by the settle (on the row another commit made
-- meanwhile, while that commit waits for a group this one holds).
CREATE OR REPLACE FUNCTION queue._group_lock(p_queue text, p_group text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    LOOP
        IF NOT EXISTS (SELECT 1 FROM queue.queue_config c WHERE c.queue_name = p_queue) THEN
            RETURN;     -- the queue was dropped
        END IF;
        INSERT INTO queue.flow_group (queue_name, group_key) VALUES (p_queue, p_group)
        ON CONFLICT (queue_name, group_key) DO NOTHING;
        PERFORM 1 FROM queue.flow_group f
          WHERE f.queue_name = p_queue AND f.group_key = p_group FOR UPDATE;
        EXIT WHEN FOUND;
        -- deleted by the commit waited for: the group is made anew
    END LOOP;
END
$$;
COMMENT ON FUNCTION queue._group_lock(text, text)
    IS 'Takes the lock of a group''s row, making the row if the group has none';

CREATE OR REPLACE FUNCTION queue._flow_lock_touched() RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_flow_lock_touched';
COMMENT ON FUNCTION queue._flow_lock_touched()
    IS 'Locks the groups and parked keys the transaction will touch at commit, in one order';

CREATE OR REPLACE FUNCTION queue._group_touched() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'queue_group_touched';
COMMENT ON FUNCTION queue._group_touched()
    IS 'Notes a group that the transaction will settle at commit';

CREATE OR REPLACE FUNCTION queue._key_touched() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'queue_key_touched';
COMMENT ON FUNCTION queue._key_touched()
    IS 'Notes a limited key that the transaction may wake at commit';

-- Give a group its next head unless it has one or a dead head blocks it.
-- p_left: the head that just left item_live (NULL: none).  p_new: an item
-- inserted claimable, as the presumed head of a group that had no row (the
-- common case of a group's first item, which then costs no second write);
-- it is parked here if the group turns out to have a head.  Takes the
-- group's row lock; called at commit (see the triggers below), by review
-- and by sweep, after the groups of the commit are locked in their order
-- (queue._group_settle).
CREATE OR REPLACE FUNCTION queue._group_settle_locked(p_queue text, p_group text, p_left bigint,
                                                      p_new bigint DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    g queue.flow_group;
    v_head bigint;
    v_first_id bigint;
    v_first_pos bigint;
    v_new_id bigint;
    v_new_pos bigint;
    v_promoted bigint;
BEGIN
    PERFORM queue._group_lock(p_queue, p_group);    -- held already after _flow_lock_touched
    SELECT * INTO g FROM queue.flow_group f
     WHERE f.queue_name = p_queue AND f.group_key = p_group FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;     -- the queue was dropped
    END IF;
    -- a dequeue of this transaction that dead-lettered the head made the
    -- next member the head already (queue._group_move_on)
    v_promoted := queue._group_promoted(p_queue, p_group);
    IF v_promoted IS NOT NULL AND v_promoted IS DISTINCT FROM p_left
       AND EXISTS (SELECT 1 FROM queue.item_live i
                    WHERE i.queue_name = p_queue AND i.item_id = v_promoted
                      AND NOT i.group_wait) THEN
        IF p_new IS DISTINCT FROM v_promoted THEN
            PERFORM queue._group_park(p_queue, p_new);
        END IF;
        UPDATE queue.flow_group f SET head_id = v_promoted, blocked_by = NULL
         WHERE f.queue_name = p_queue AND f.group_key = p_group;
        RETURN;
    END IF;
    -- a head that died blocks its group where the queue says so
    IF p_left IS NOT NULL
       AND EXISTS (SELECT 1 FROM queue.queue_config c
                    WHERE c.queue_name = p_queue AND c.group_on_dead = 'block')
       AND EXISTS (SELECT 1 FROM queue.dead_letters d
                    WHERE d.queue_name = p_queue AND d.item_id = p_left) THEN
        g.blocked_by := p_left;
    END IF;
    IF g.blocked_by IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM queue.dead_letters d
                    WHERE d.queue_name = p_queue AND d.item_id = g.blocked_by
                      AND d.review_status IN ('new', 'in_review')) THEN
            PERFORM queue._group_park(p_queue, p_new);
            UPDATE queue.flow_group f SET blocked_by = g.blocked_by, head_id = NULL
             WHERE f.queue_name = p_queue AND f.group_key = p_group;
            RETURN;
        END IF;
        g.blocked_by := NULL;   -- replayed, resolved or rejected
    END IF;
    IF g.head_id IS NOT NULL AND g.head_id IS DISTINCT FROM p_left
       AND g.head_id IS DISTINCT FROM p_new
       AND EXISTS (SELECT 1 FROM queue.item_live i
                    WHERE i.queue_name = p_queue AND i.item_id = g.head_id
                      AND NOT i.group_wait) THEN
        -- enqueue_batch writes its keyed rows in key order, not in line, so
        -- the presumed heads of a group it adds settle out of line: one
        -- before the head that a row of the same write became (same xmin:
        -- written by this transaction, so nobody else has claimed it) takes
        -- that head's place, and the head waits behind it.  Not on Citus,
        -- which cannot route a statement that reads xmin (README, Limits
        -- found); the IFs are nested so that the statement is not even
        -- planned there.
        IF p_new IS NOT NULL AND NOT queue.distributed() THEN
            IF EXISTS (SELECT 1 FROM queue.item_live h, queue.item_live n
                        WHERE h.queue_name = p_queue AND h.item_id = g.head_id
                          AND n.queue_name = p_queue AND n.item_id = p_new
                          AND NOT n.group_wait AND n.lease_token IS NULL
                          AND h.lease_token IS NULL AND h.xmin OPERATOR(pg_catalog.=) n.xmin
                          AND (n.group_pos, n.item_id) < (h.group_pos, h.item_id)) THEN
                PERFORM queue._group_park(p_queue, g.head_id);
                UPDATE queue.flow_group f SET head_id = p_new, blocked_by = NULL
                 WHERE f.queue_name = p_queue AND f.group_key = p_group;
                RETURN;
            END IF;
        END IF;
        PERFORM queue._group_park(p_queue, p_new);
        RETURN;
    END IF;
    IF p_new IS NOT NULL THEN
        SELECT i.item_id, i.group_pos INTO v_new_id, v_new_pos FROM queue.item_live i
         WHERE i.queue_name = p_queue AND i.item_id = p_new AND NOT i.group_wait;
    END IF;
    -- no head: the first in line becomes it, claimable from when it was due.
    -- A waiting member leaves without the group's lock (cancel, purge,
    -- expiry): one that left after it was read here is passed over for the
    -- next in line (each statement reads what has committed by then).
    LOOP
        SELECT w.item_id, w.group_pos INTO v_first_id, v_first_pos FROM queue.item_live w
         WHERE w.queue_name = p_queue AND w.group_key = p_group AND w.group_wait
         ORDER BY w.group_pos, w.item_id LIMIT 1;
        IF v_new_id IS NOT NULL
           AND (v_first_id IS NULL OR (v_new_pos, v_new_id) < (v_first_pos, v_first_id)) THEN
            v_head := v_new_id;     -- claimable already
        ELSIF v_first_id IS NOT NULL THEN
            UPDATE queue.item_live i
               SET group_wait = false,
                   visible_at = CASE WHEN i.on_hold THEN 'infinity'::timestamptz
                                     ELSE greatest(i.run_at, i.enqueued_at) END
             WHERE i.queue_name = p_queue AND i.item_id = v_first_id;
            CONTINUE WHEN NOT FOUND;
            v_head := v_first_id;
            PERFORM queue._group_park(p_queue, v_new_id);
        END IF;
        EXIT;
    END LOOP;
    IF v_head IS NULL THEN
        -- nobody waits: forget the group (an enqueue brings it back)
        DELETE FROM queue.flow_group f WHERE f.queue_name = p_queue AND f.group_key = p_group;
    ELSE
        UPDATE queue.flow_group f SET head_id = v_head, blocked_by = NULL
         WHERE f.queue_name = p_queue AND f.group_key = p_group;
    END IF;
END
$$;
COMMENT ON FUNCTION queue._group_settle_locked(text, text, bigint, bigint)
    IS 'Promotes the next item of a group to its head unless it has one or a dead head blocks it';

-- The same, after every group and key of this commit is locked, in one
-- order (see above).
DROP FUNCTION IF EXISTS queue._group_settle(text, text, bigint);
CREATE OR REPLACE FUNCTION queue._group_settle(p_queue text, p_group text, p_left bigint,
                                               p_new bigint DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    PERFORM queue._flow_lock_touched();
    PERFORM queue._group_settle_locked(p_queue, p_group, p_left, p_new);
END
$$;
COMMENT ON FUNCTION queue._group_settle(text, text, bigint, bigint)
    IS 'Locks the groups of the commit in their order, then promotes the next item of a group to its head';

-- The members a dequeue promoted without the group's lock (src/flow.c).
CREATE OR REPLACE FUNCTION queue._group_promoted_note(p_queue text, p_group text, p_item bigint)
RETURNS void LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_group_promoted_note';
COMMENT ON FUNCTION queue._group_promoted_note(text, text, bigint)
    IS 'Notes a member this transaction made its group''s head without the group''s lock';
CREATE OR REPLACE FUNCTION queue._group_promoted(p_queue text, p_group text)
RETURNS bigint LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_group_promoted';
COMMENT ON FUNCTION queue._group_promoted(text, text)
    IS 'The member this transaction last made the group''s head without its lock, if any';

-- A dequeue dead-letters the items it meets that must not be handed out
-- (expired, or a lost lease on its last attempt).  Where such an item was
-- a group's head, the next member in line becomes the head right away,
-- so that the same dequeue hands it out (the lowest-id live item is the
-- head now), as it hands out the next ungrouped item.  Under
-- group_on_dead = 'block' the dead head holds its group instead, which
-- the commit records.  p_item_ids: the items the dequeue dead-lettered;
-- those of no group, or not their group's head, are passed over.
--
-- Never waits, and takes no group lock before the commit (that would
-- break the one order in which commits lock groups): the member is
-- promoted under its own row lock, taken with SKIP LOCKED (a member
-- another transaction holds is left to the commit, as before), and noted
-- (queue._group_promoted_note) for the group's settle at commit, which
-- takes it as the head under the group's lock.  Until this transaction
-- commits, every other settle of the group sees the dead head still live
-- and leaves the group alone.  Returns how many members it promoted.
CREATE OR REPLACE FUNCTION queue._group_move_on(p_queue text, p_item_ids bigint[])
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    d record;
    v_first bigint;
    v_got bigint;
    n int := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM queue.queue_config c
                WHERE c.queue_name = p_queue AND c.group_on_dead = 'block') THEN
        RETURN 0;
    END IF;
    FOR d IN
        SELECT dl.item_id, dl.group_key FROM queue.dead_letters dl
         WHERE dl.queue_name = p_queue AND dl.item_id = ANY (p_item_ids)
           AND dl.group_key IS NOT NULL
         ORDER BY dl.item_id
    LOOP
        -- the group's head, or the member this transaction made its head
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM queue.flow_group f
                                   WHERE f.queue_name = p_queue AND f.group_key = d.group_key
                                     AND f.head_id = d.item_id AND f.blocked_by IS NULL)
                  AND queue._group_promoted(p_queue, d.group_key) IS DISTINCT FROM d.item_id;
        LOOP
            SELECT w.item_id INTO v_first FROM queue.item_live w
             WHERE w.queue_name = p_queue AND w.group_key = d.group_key AND w.group_wait
             ORDER BY w.group_pos, w.item_id LIMIT 1;
            EXIT WHEN v_first IS NULL;
            SELECT i.item_id INTO v_got FROM queue.item_live i
             WHERE i.queue_name = p_queue AND i.item_id = v_first AND i.group_wait
               FOR UPDATE SKIP LOCKED;
            IF v_got IS NULL THEN
                -- held by another transaction: the commit settles the group
                EXIT WHEN EXISTS (SELECT 1 FROM queue.item_live i
                                   WHERE i.queue_name = p_queue AND i.item_id = v_first);
                CONTINUE;   -- it left meanwhile: the next in line
            END IF;
            UPDATE queue.item_live i
               SET group_wait = false,
                   visible_at = CASE WHEN i.on_hold THEN 'infinity'::timestamptz
                                     ELSE greatest(i.run_at, i.enqueued_at) END
             WHERE i.queue_name = p_queue AND i.item_id = v_got;
            PERFORM queue._group_promoted_note(p_queue, d.group_key, v_got);
            n := n + 1;
            EXIT;
        END LOOP;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION queue._group_move_on(text, bigint[])
    IS 'Makes the next members the heads of the groups whose heads a dequeue dead-lettered, where they are free';

-- Park an item that was inserted as a presumed head after all.  One
-- claimed by its own enqueuing transaction cannot wait any more: that
-- transaction fails (40001) rather than two items of the group run.
CREATE OR REPLACE FUNCTION queue._group_park(p_queue text, p_item bigint)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    IF p_item IS NULL THEN
        RETURN;
    END IF;
    UPDATE queue.item_live i
       SET group_wait = true,
           visible_at = CASE WHEN i.on_hold THEN 'infinity'::timestamptz ELSE queue._flow_parked() END
     WHERE i.queue_name = p_queue AND i.item_id = p_item AND NOT i.group_wait
       AND i.lease_token IS NULL;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM queue.item_live i
                              WHERE i.queue_name = p_queue AND i.item_id = p_item
                                AND NOT i.group_wait) THEN
        RAISE EXCEPTION 'item % was claimed in the transaction that enqueued it, while its group has a head', p_item
            USING ERRCODE = 'serialization_failure',
                  HINT = 'Retry the transaction; enqueue and claim group members in separate transactions.';
    END IF;
END
$$;
COMMENT ON FUNCTION queue._group_park(text, bigint) IS 'Parks a presumed group head behind the group''s real head';

-- Limits: keep the band ---------------------------------------------------

-- New items: park group members, band items of limited keys.
CREATE OR REPLACE FUNCTION queue._flow_on_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    -- a group without a row has no live item: the new one presumes to be
    -- its head (confirmed, or parked, at commit by queue._group_settle).
    -- The row naming this very item as its head is a restore (pg_dump
    -- loads flow_group before item_live): the head keeps its state.
    IF NEW.group_key IS NOT NULL THEN
        NEW.group_pos := coalesce(NEW.group_pos, NEW.item_id);
        IF EXISTS (SELECT 1 FROM queue.flow_group f
                    WHERE f.queue_name = NEW.queue_name AND f.group_key = NEW.group_key
                      AND f.head_id IS DISTINCT FROM NEW.item_id) THEN
            NEW.group_wait := true;
            IF NOT NEW.on_hold THEN
                NEW.visible_at := queue._flow_parked();
            END IF;
        END IF;
    END IF;
    IF NEW.limit_key IS NOT NULL AND NEW.priority < queue._flow_band()
       AND EXISTS (SELECT 1 FROM queue.flow_limit l
                    WHERE l.queue_name = NEW.queue_name AND l.limit_key = NEW.limit_key) THEN
        NEW.priority := NEW.priority + queue._flow_band();
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION queue._flow_on_insert()
    IS 'Parks a new group member behind its head and bands an item of a limited key';

-- Every reset of priority (retry, release, recovery, aging) keeps the band
-- while the key is limited.
CREATE OR REPLACE FUNCTION queue._flow_keep_band() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM queue.flow_limit l
                WHERE l.queue_name = NEW.queue_name AND l.limit_key = NEW.limit_key) THEN
        NEW.priority := NEW.priority + queue._flow_band();
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION queue._flow_keep_band() IS 'Keeps an item of a limited key in its priority band';

-- At commit: settle groups whose head left or who got a member, wake keys
-- whose lease ended or whose item became due.  Deferred triggers fire at
-- commit, after the API function that wrote the row has returned, as the
-- calling role: SECURITY DEFINER, like the API, so that producers and
-- workers need no rights on the bookkeeping.
CREATE OR REPLACE FUNCTION queue._flow_on_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_queue text;
    v_group text;
    v_key text;
    v_left bigint;
    v_new bigint;
    v_wake timestamptz;
BEGIN
    -- every group and key of this commit first, in one order (see above)
    PERFORM queue._flow_lock_touched();
    IF TG_OP = 'DELETE' THEN
        v_queue := OLD.queue_name;
        v_key := OLD.limit_key;
        IF OLD.group_key IS NOT NULL AND NOT OLD.group_wait THEN
            v_group := OLD.group_key;
            v_left := OLD.item_id;
        END IF;
        IF OLD.priority >= queue._flow_band() AND OLD.worker IS NOT NULL THEN
            v_wake := now();
        END IF;
    ELSE
        v_queue := NEW.queue_name;
        v_key := NEW.limit_key;
        IF TG_OP = 'INSERT' THEN
            v_group := NEW.group_key;
            v_new := CASE WHEN NOT NEW.group_wait THEN NEW.item_id END;
        END IF;
        IF NEW.priority >= queue._flow_band() THEN
            v_wake := CASE WHEN TG_OP = 'UPDATE' AND OLD.worker IS NOT NULL AND NEW.worker IS NULL
                           THEN now() ELSE NEW.visible_at END;
        END IF;
    END IF;
    IF v_group IS NOT NULL THEN
        PERFORM queue._group_settle(v_queue, v_group, v_left, v_new);
    END IF;
    -- only a parked key (ready_at after now) is woken: its row is among
    -- those locked above
    IF v_wake IS NOT NULL AND v_wake < queue._flow_parked() THEN
        UPDATE queue.flow_limit l SET ready_at = v_wake
         WHERE l.queue_name = v_queue AND l.limit_key = v_key
           AND l.ready_at > greatest(v_wake, now());
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION queue._flow_on_commit()
    IS 'At commit: gives groups their next head and wakes limited keys';

CREATE OR REPLACE TRIGGER item_live_flow_insert
    BEFORE INSERT ON queue.item_live FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL OR NEW.limit_key IS NOT NULL)
    EXECUTE FUNCTION queue._flow_on_insert();
CREATE OR REPLACE TRIGGER item_live_flow_band
    BEFORE UPDATE OF priority ON queue.item_live FOR EACH ROW
    WHEN (OLD.priority >= 100000 AND NEW.priority < 100000)
    EXECUTE FUNCTION queue._flow_keep_band();

-- Caps stay exact: reviving an expired lease nobody took over (extend_lease,
-- heartbeat) counts against its key's max_in_flight like a claim, under the
-- key's lock; where the key is full the revival is refused (the row is left
-- alone: extend_lease returns NULL, heartbeat skips it).  Expiry is judged
-- by the clock when the row is written, not by the transaction's start: a
-- call that began before the lease ran out, or waited for the row's lock
-- past it, revives it as well.
CREATE OR REPLACE FUNCTION queue._flow_revival() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_cap int;
BEGIN
    SELECT l.max_in_flight INTO v_cap FROM queue.flow_limit l
     WHERE l.queue_name = NEW.queue_name AND l.limit_key = NEW.limit_key
       FOR UPDATE;
    IF v_cap IS NOT NULL
       AND (SELECT count(*) FROM queue.item_live i
             WHERE i.queue_name = NEW.queue_name AND i.limit_key = NEW.limit_key
               AND i.worker IS NOT NULL AND i.lease_expires_at > clock_timestamp()
               AND i.item_id <> NEW.item_id) >= v_cap THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION queue._flow_revival()
    IS 'Refuses to revive an expired lease of a limited key that is full';

CREATE OR REPLACE TRIGGER item_live_flow_revival
    BEFORE UPDATE OF lease_expires_at ON queue.item_live FOR EACH ROW
    WHEN (OLD.priority >= 100000 AND NEW.lease_token = OLD.lease_token
          AND OLD.lease_expires_at <= clock_timestamp() AND NEW.lease_expires_at > clock_timestamp())
    EXECUTE FUNCTION queue._flow_revival();

DO $$
BEGIN
    -- constraint triggers have no OR REPLACE
    DROP TRIGGER IF EXISTS item_live_flow_inserted ON queue.item_live;
    DROP TRIGGER IF EXISTS item_live_flow_updated ON queue.item_live;
    DROP TRIGGER IF EXISTS item_live_flow_deleted ON queue.item_live;
END
$$;
CREATE CONSTRAINT TRIGGER item_live_flow_inserted
    AFTER INSERT ON queue.item_live DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL OR NEW.priority >= 100000)
    EXECUTE FUNCTION queue._flow_on_commit();
CREATE CONSTRAINT TRIGGER item_live_flow_updated
    AFTER UPDATE ON queue.item_live DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.priority >= 100000
          AND ((OLD.worker IS NOT NULL AND NEW.worker IS NULL) OR NEW.visible_at < OLD.visible_at))
    EXECUTE FUNCTION queue._flow_on_commit();
CREATE CONSTRAINT TRIGGER item_live_flow_deleted
    AFTER DELETE ON queue.item_live DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.group_key IS NOT NULL AND NOT OLD.group_wait)
          OR (OLD.priority >= 100000 AND OLD.worker IS NOT NULL))
    EXECUTE FUNCTION queue._flow_on_commit();

-- the notes of the groups and keys these triggers lock (queue._flow_lock_touched)
CREATE OR REPLACE TRIGGER item_live_group_joined
    AFTER INSERT ON queue.item_live FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL)
    EXECUTE FUNCTION queue._group_touched();
CREATE OR REPLACE TRIGGER item_live_group_left
    AFTER DELETE ON queue.item_live FOR EACH ROW
    WHEN (OLD.group_key IS NOT NULL AND NOT OLD.group_wait)
    EXECUTE FUNCTION queue._group_touched();
-- the same WHENs as the limited-key parts of the triggers above
CREATE OR REPLACE TRIGGER item_live_key_joined
    AFTER INSERT ON queue.item_live FOR EACH ROW
    WHEN (NEW.priority >= 100000)
    EXECUTE FUNCTION queue._key_touched();
CREATE OR REPLACE TRIGGER item_live_key_freed
    AFTER UPDATE ON queue.item_live FOR EACH ROW
    WHEN (OLD.priority >= 100000 AND NEW.priority >= 100000
          AND ((OLD.worker IS NOT NULL AND NEW.worker IS NULL) OR NEW.visible_at < OLD.visible_at))
    EXECUTE FUNCTION queue._key_touched();
CREATE OR REPLACE TRIGGER item_live_key_left
    AFTER DELETE ON queue.item_live FOR EACH ROW
    WHEN (OLD.priority >= 100000 AND OLD.worker IS NOT NULL)
    EXECUTE FUNCTION queue._key_touched();

-- Limits: the API -----------------------------------------------------------

-- Mark on the queue whether it has limits, for the hot path's cache.
-- PL/pgSQL, and the two flags read before the UPDATE: Citus plans neither
-- a parameterised LANGUAGE sql statement nor an UPDATE of the reference
-- table queue_config whose SET reads the distributed flow_limit.
CREATE OR REPLACE FUNCTION queue._flow_mark(p_queue text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_limits boolean;
    v_rate boolean;
BEGIN
    SELECT coalesce(bool_or(l.limit_key <> ''), false), coalesce(bool_or(l.limit_key = ''), false)
      INTO v_limits, v_rate
      FROM queue.flow_limit l
     WHERE l.queue_name = p_queue;
    UPDATE queue.queue_config c
       SET flow_limits = v_limits, flow_rate = v_rate
     WHERE c.queue_name = p_queue;
END
$$;
COMMENT ON FUNCTION queue._flow_mark(text) IS 'Records on the queue''s settings whether it has per-key limits or a rate';

CREATE OR REPLACE FUNCTION queue.set_limit(queue_name text, limit_key text,
                                           max_in_flight int DEFAULT NULL, rate int DEFAULT NULL,
                                           per interval DEFAULT '1 s')
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(set_limit.queue_name);
    v_key text := coalesce(set_limit.limit_key, '');
BEGIN
    -- first, wait for the transactions using the queue (each holds its
    -- queue lock shared): an enqueue in flight has committed its items by
    -- then, so the UPDATE below bands them too, and one that comes later
    -- waits for this change and sees the limit when it inserts.  Taken
    -- before anything here takes it shared, so two changes never deadlock.
    PERFORM queue._lock_queue(v_name, true);
    PERFORM queue._check_access(v_name, 'reader');
    IF set_limit.limit_key = '' THEN
        RAISE EXCEPTION 'limit_key must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL to limit the whole queue.';
    END IF;
    IF set_limit.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be at least 1, not %', set_limit.max_in_flight
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Leave it out (NULL) for no cap on the key''s leases, or drop the limit with queue.drop_limit.';
    END IF;
    IF set_limit.rate < 1 THEN
        RAISE EXCEPTION 'rate must be at least 1, not %', set_limit.rate
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Leave it out (NULL) for no rate, or drop the limit with queue.drop_limit.';
    END IF;
    IF set_limit.max_in_flight IS NULL AND set_limit.rate IS NULL THEN
        RAISE EXCEPTION 'set_limit needs max_in_flight or rate'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'To remove a limit use queue.drop_limit.';
    END IF;
    IF set_limit.rate IS NOT NULL AND set_limit.rate > 100000 THEN
        RAISE EXCEPTION 'rate must be at most 100000, not %', set_limit.rate
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use a shorter per for a finer rate.';
    END IF;
    PERFORM queue._check_key(set_limit.limit_key, 'limit_key');
    IF set_limit.per IS NULL THEN
        RAISE EXCEPTION 'per must not be null' USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Leave it out for the default of 1 s.';
    END IF;
    IF set_limit.per <= interval '0' THEN
        RAISE EXCEPTION 'per must be positive, not "%"', set_limit.per
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'rate counts the claims in any window of length per, for example ''1 s'' or ''1 min''.';
    END IF;
    IF set_limit.per > interval '1000 years' THEN
        RAISE EXCEPTION 'per must be at most 1000 years, not "%"', set_limit.per
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Durations are bounded so that every time computed from them is a valid timestamp.';
    END IF;
    IF v_key = '' AND set_limit.max_in_flight IS NOT NULL THEN
        RAISE EXCEPTION 'the whole queue takes a rate only'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Cap the whole queue with queue.alter_queue(max_in_flight => ...).';
    END IF;
    -- the queue-wide row is never a lane: its ready_at stays 'infinity'
    INSERT INTO queue.flow_limit AS l (queue_name, limit_key, max_in_flight, rate, per, ready_at)
    VALUES (v_name, v_key, set_limit.max_in_flight, set_limit.rate, set_limit.per,
            CASE WHEN v_key = '' THEN 'infinity'::timestamptz ELSE '-infinity' END)
    ON CONFLICT (queue_name, limit_key) DO UPDATE
       SET max_in_flight = EXCLUDED.max_in_flight, rate = EXCLUDED.rate, per = EXCLUDED.per,
           ready_at = '-infinity';
    IF v_key <> '' THEN
        -- the key's live items move into the band (the band trigger leaves them alone)
        UPDATE queue.item_live i SET priority = i.priority + queue._flow_band()
         WHERE i.queue_name = v_name AND i.limit_key = v_key
           AND i.priority < queue._flow_band();
    END IF;
    PERFORM queue._flow_mark(v_name);
END
$$;
COMMENT ON FUNCTION queue.set_limit(text, text, int, int, interval)
    IS 'Limits the items of a limit_key (NULL: the whole queue) to max_in_flight leases and rate claims per interval';

CREATE OR REPLACE FUNCTION queue.drop_limit(queue_name text, limit_key text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(drop_limit.queue_name);
    v_key text := coalesce(drop_limit.limit_key, '');
BEGIN
    -- as set_limit: an item of the key enqueued in flight is banded by
    -- then and taken out of the band below; a later one sees no limit
    PERFORM queue._lock_queue(v_name, true);
    PERFORM queue._check_access(v_name, 'reader');
    -- '' is how the queue-wide rate is stored, never a key: refused as
    -- set_limit refuses it, so that it cannot drop the queue's rate
    IF drop_limit.limit_key = '' THEN
        RAISE EXCEPTION 'limit_key must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL to drop the rate of the whole queue.';
    END IF;
    DELETE FROM queue.flow_limit l WHERE l.queue_name = v_name AND l.limit_key = v_key;
    DELETE FROM queue.flow_claim l WHERE l.queue_name = v_name AND l.limit_key = v_key;
    IF v_key <> '' THEN
        UPDATE queue.item_live i SET priority = i.priority - queue._flow_band()
         WHERE i.queue_name = v_name AND i.limit_key = v_key
           AND i.priority >= queue._flow_band();
    END IF;
    PERFORM queue._flow_mark(v_name);
END
$$;
COMMENT ON FUNCTION queue.drop_limit(text, text)
    IS 'Removes the limit of a limit_key (NULL: the queue-wide rate); its items become unlimited';

CREATE OR REPLACE VIEW queue.limits WITH (security_barrier) AS
SELECT l.queue_name, nullif(l.limit_key, '') AS limit_key, l.max_in_flight, l.rate, l.per,
       (SELECT count(*) FROM queue.item_live i
         WHERE i.queue_name = l.queue_name AND i.worker IS NOT NULL
           AND i.lease_expires_at > now()
           AND (l.limit_key = '' OR i.limit_key = l.limit_key)) AS in_flight,
       (SELECT count(*) FROM queue.flow_claim f
         WHERE f.queue_name = l.queue_name AND f.limit_key = l.limit_key
           AND f.at > clock_timestamp() - l.per) AS claims_in_window,
       l.ready_at
  FROM queue.flow_limit l
 WHERE queue._can_read(l.queue_name);
COMMENT ON VIEW queue.limits IS 'Per-key caps and rates (limit_key NULL: the queue-wide rate) with their use now';

-- A dequeue that parks a key (sets its ready_at later: full, nothing due)
-- judged it from what had committed when it looked.  A lease of the key
-- that ends, or an item that arrives, in a transaction that commits while
-- that dequeue is still open wakes nothing: its commit sees the key awake
-- (the park is not committed yet).  So the parking transaction looks again
-- at its own commit, under the key's lock it holds, with what has
-- committed by then, and brings ready_at forward to when the key may next
-- give something: the first lease end of a full key, the next due item,
-- the end of a used-up rate window, whichever is latest.  SECURITY DEFINER
-- for the same reason as _flow_on_commit.
CREATE OR REPLACE FUNCTION queue._flow_recheck_park() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    l queue.flow_limit;
    v_now timestamptz := clock_timestamp();
    v_ready timestamptz := clock_timestamp();
    v_n bigint;
    v_at timestamptz;
BEGIN
    SELECT * INTO l FROM queue.flow_limit f
     WHERE f.queue_name = NEW.queue_name AND f.limit_key = NEW.limit_key;
    IF NOT FOUND OR l.ready_at <= v_now THEN
        RETURN NULL;
    END IF;
    IF l.max_in_flight IS NOT NULL THEN
        SELECT count(*), min(i.lease_expires_at) INTO v_n, v_at FROM queue.item_live i
         WHERE i.queue_name = l.queue_name AND i.limit_key = l.limit_key
           AND i.worker IS NOT NULL AND i.lease_expires_at > v_now;
    END IF;
    IF l.max_in_flight IS NOT NULL AND v_n >= l.max_in_flight THEN
        v_ready := greatest(v_ready, v_at);     -- full: until its first lease ends
    ELSIF NOT EXISTS (SELECT 1 FROM queue.item_live i
                       WHERE i.queue_name = l.queue_name AND i.limit_key = l.limit_key
                         AND i.priority >= queue._flow_band() AND i.visible_at <= v_now) THEN
        -- nothing claimable now: until the next item is due
        SELECT coalesce(min(i.visible_at), 'infinity') INTO v_at FROM queue.item_live i
         WHERE i.queue_name = l.queue_name AND i.limit_key = l.limit_key
           AND i.priority >= queue._flow_band() AND i.visible_at < queue._flow_parked();
        v_ready := greatest(v_ready, v_at);
    END IF;
    IF l.rate IS NOT NULL THEN
        SELECT count(*), min(w.at) INTO v_n, v_at FROM (
            SELECT c.at FROM queue.flow_claim c
             WHERE c.queue_name = l.queue_name AND c.limit_key = l.limit_key
               AND c.at > v_now - l.per
             ORDER BY c.at DESC LIMIT l.rate) w;
        IF v_n >= l.rate THEN
            v_ready := greatest(v_ready, v_at + l.per);
        END IF;
    END IF;
    IF v_ready < l.ready_at THEN
        UPDATE queue.flow_limit f SET ready_at = v_ready
         WHERE f.queue_name = l.queue_name AND f.limit_key = l.limit_key;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION queue._flow_recheck_park()
    IS 'At the commit of a dequeue that parked a limited key: brings its ready_at forward for what committed meanwhile';

DROP TRIGGER IF EXISTS flow_limit_parked ON queue.flow_limit;
CREATE CONSTRAINT TRIGGER flow_limit_parked
    AFTER UPDATE OF ready_at ON queue.flow_limit DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.limit_key <> '' AND NEW.ready_at > OLD.ready_at AND NEW.ready_at > clock_timestamp())
    EXECUTE FUNCTION queue._flow_recheck_park();

-- A dead head that blocked its group let go (replayed, resolved, rejected).
-- SECURITY DEFINER for the same reason as _flow_on_commit.
CREATE OR REPLACE FUNCTION queue._flow_on_review() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
    PERFORM queue._group_settle(NEW.queue_name, NEW.group_key, NULL, NULL);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION queue._flow_on_review() IS 'At commit: lets a group move on once its dead head is reviewed';

DROP TRIGGER IF EXISTS dead_letters_flow_reviewed ON queue.dead_letters;
CREATE CONSTRAINT TRIGGER dead_letters_flow_reviewed
    AFTER UPDATE OF review_status ON queue.dead_letters DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL AND NEW.review_status IN ('resolved', 'rejected'))
    EXECUTE FUNCTION queue._flow_on_review();
CREATE OR REPLACE TRIGGER dead_letters_group_reviewed
    AFTER UPDATE OF review_status ON queue.dead_letters FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL AND NEW.review_status IN ('resolved', 'rejected'))
    EXECUTE FUNCTION queue._group_touched();

-- A dropped queue takes its groups, limits and rate records along.
-- A dropped queue's flow-control state goes with its other per-queue rows
-- (queue._forget_queue); this trigger on queue_config did it before, and
-- under Citus a trigger on a reference table may not write the
-- distributed tables.
DROP TRIGGER IF EXISTS queue_config_flow_forget ON queue.queue_config;
DROP FUNCTION IF EXISTS queue._flow_forget();

-- Routing in health and alerts: items that need labels no active bot has
-- (not draining, not in a maintenance window, seen within
-- queue.worker_offline_after), waiting past the
-- queue's sla, or 5 minutes without one, counted from when each became
-- claimable (the claimable time of stats and the sla rule).
CREATE OR REPLACE FUNCTION queue._flow_rules(p_queue text,
                                             OUT kind text, OUT reason text, OUT details jsonb)
RETURNS SETOF record LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_after interval;
    v_online timestamptz := now() - make_interval(secs => queue._worker_offline_after());
    v_n bigint;
    v_labels text[];
BEGIN
    SELECT coalesce(c.sla, interval '5 min') INTO v_after
      FROM queue.queue_config c WHERE c.queue_name = p_queue;
    SELECT count(*), (SELECT array_agg(DISTINCT l ORDER BY l)
                        FROM unnest(array_agg(i.requires)) AS l)
      INTO v_n, v_labels
      FROM (SELECT i.requires FROM queue.item_live i
             WHERE i.queue_name = p_queue AND i.requires IS NOT NULL
               AND i.run_at < now() - v_after
               -- waiting since it became claimable, not since a backdated
               -- run_at (a lost lease: since the lease's end; a member in
               -- line behind its group's head: since it was due).  A
               -- claimable row's visible_at is never before its run_at,
               -- so the run_at bound above (the index's) loses nothing.
               AND CASE WHEN i.group_wait THEN greatest(i.run_at, i.enqueued_at)
                        ELSE i.visible_at END < now() - v_after
               AND NOT i.on_hold
               AND NOT (i.lease_token IS NOT NULL AND i.lease_expires_at > now())
               -- past its expires_at it is never handed out: it waits for
               -- nobody, whatever its labels
               AND (i.expires_at IS NULL OR i.expires_at > now())
               AND NOT EXISTS (SELECT 1 FROM queue.worker_registry w
                                WHERE i.requires <@ w.labels AND NOT w.draining
                                  AND w.last_seen > v_online
                                  AND NOT EXISTS (SELECT 1 FROM queue.maintenance_window m
                                                   WHERE m.worker = w.worker
                                                     AND m.starts_at <= now() AND m.ends_at > now()))
             LIMIT 10000) i;
    IF v_n > 0 THEN
        kind := 'unroutable';
        reason := format('unroutable: %s item%s waiting over %s need%s labels no active worker has (%s)',
                         v_n, CASE WHEN v_n > 1 THEN 's' ELSE '' END,
                         queue._say_interval(v_after), CASE WHEN v_n > 1 THEN '' ELSE 's' END,
                         array_to_string(v_labels, ', '));
        details := jsonb_build_object('items', v_n, 'labels', to_jsonb(v_labels));
        RETURN NEXT;
    END IF;
END
$$;
COMMENT ON FUNCTION queue._flow_rules(text)
    IS 'The unroutable rule of one queue when it holds, with reason and details';
