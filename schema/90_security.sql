-- ======================================================================
-- Security: group roles, privileges, row-level security, per-queue
-- grants, and what pg_dump keeps.  Runs last, after every object exists.
-- ======================================================================
--
-- Who may call what is decided twice: EXECUTE / SELECT privileges of the
-- four group roles below decide which functions and relations a role may
-- use at all; per-queue grants (grant_queue) then close one access kind of
-- one queue to the roles granted it (src/access.c).  The tables belong to
-- the extension owner, a superuser: nobody else may write them, the
-- SECURITY DEFINER functions do it for them with search_path pinned to
-- pg_catalog, pg_temp, and no argument is ever spliced into SQL text.

-- Group roles ---------------------------------------------------------------

-- Roles are cluster-wide: a second database reuses them and DROP EXTENSION
-- leaves them.  Create only what is missing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_admin') THEN
        CREATE ROLE queue_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_producer') THEN
        CREATE ROLE queue_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_worker') THEN
        CREATE ROLE queue_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'queue_reader') THEN
        CREATE ROLE queue_reader NOLOGIN;
    END IF;
END
$$;

-- Per-queue grants --------------------------------------------------------

-- The checks grant_queue and revoke_queue share: a valid name of an
-- existing queue (its row locked, so the restrict_* flags stay in step with
-- queue_grant), an access kind, and an existing role.
CREATE FUNCTION queue._grant_target(p_queue text, p_role name, p_access text,
                                    OUT queue_name text, OUT grantee oid)
RETURNS record LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    queue_name := queue._check_name(p_queue);
    IF p_role IS NULL THEN
        RAISE EXCEPTION 'role must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_access IS NULL THEN
        RAISE EXCEPTION 'access must not be null' USING ERRCODE = 'null_value_not_allowed',
            HINT = 'Valid access kinds are ''producer'', ''worker'' and ''reader''.';
    END IF;
    IF p_access NOT IN ('producer', 'worker', 'reader') THEN
        RAISE EXCEPTION 'invalid access "%"', p_access
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid access kinds are ''producer'', ''worker'' and ''reader''.';
    END IF;
    PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = _grant_target.queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', _grant_target.queue_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Create it with queue.create_queue(%L).', _grant_target.queue_name);
    END IF;
    SELECT r.oid INTO grantee FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
    IF grantee IS NULL THEN
        RAISE EXCEPTION 'role "%" does not exist', p_role
            USING ERRCODE = 'undefined_object',
                  HINT = 'Grant queue access to an existing login or group role.';
    END IF;
END
$$;
COMMENT ON FUNCTION queue._grant_target(text, name, text)
    IS 'Validates the arguments of grant_queue / revoke_queue and locks the queue''s settings row';

-- A kind of access is closed on a queue while any grant of that kind exists.
CREATE FUNCTION queue._grant_flags(p_queue text)
RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    UPDATE queue.queue_config c
       SET restrict_reader = EXISTS (SELECT 1 FROM queue.queue_grant g
                                      WHERE g.queue_name = p_queue AND g.access = 'reader'),
           restrict_producer = EXISTS (SELECT 1 FROM queue.queue_grant g
                                        WHERE g.queue_name = p_queue AND g.access = 'producer'),
           restrict_worker = EXISTS (SELECT 1 FROM queue.queue_grant g
                                      WHERE g.queue_name = p_queue AND g.access = 'worker')
     WHERE c.queue_name = p_queue;
END
$$;
COMMENT ON FUNCTION queue._grant_flags(text)
    IS 'Recomputes a queue''s restrict_* flags from its grants';

CREATE FUNCTION queue.grant_queue(queue_name text, role name, access text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    t record;
BEGIN
    t := queue._grant_target(grant_queue.queue_name, grant_queue.role, grant_queue.access);
    INSERT INTO queue.queue_grant (queue_name, grantee, access)
    VALUES (t.queue_name, t.grantee, grant_queue.access)
    ON CONFLICT ON CONSTRAINT queue_grant_pkey DO NOTHING;
    IF FOUND THEN
        PERFORM queue._grant_flags(t.queue_name);
        PERFORM queue._event(t.queue_name, NULL, 'access_granted', NULL, NULL,
                             jsonb_build_object('role', grant_queue.role,
                                                'access', grant_queue.access,
                                                'by', session_user));
    END IF;
END
$$;
COMMENT ON FUNCTION queue.grant_queue(text, name, text)
    IS 'Gives a role producer, worker or reader access to one queue; the queue then admits only granted roles for that access';

CREATE FUNCTION queue.revoke_queue(queue_name text, role name, access text)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    t record;
BEGIN
    t := queue._grant_target(revoke_queue.queue_name, revoke_queue.role, revoke_queue.access);
    DELETE FROM queue.queue_grant g
     WHERE g.queue_name = t.queue_name AND g.access = revoke_queue.access
       AND g.grantee = t.grantee;
    IF FOUND THEN
        PERFORM queue._grant_flags(t.queue_name);
        PERFORM queue._event(t.queue_name, NULL, 'access_revoked', NULL, NULL,
                             jsonb_build_object('role', revoke_queue.role,
                                                'access', revoke_queue.access,
                                                'by', session_user));
    END IF;
END
$$;
COMMENT ON FUNCTION queue.revoke_queue(text, name, text)
    IS 'Takes back a per-queue grant; when the last grant of a kind goes, that access is open to its group role again';

-- queue._can_read runs inside the views and the row-level security
-- policies, that is as the reader, and reads queue_config and queue_grant,
-- which readers may not select.  It runs as the owner instead, still
-- judging the outer user (GetOuterUserId).
ALTER FUNCTION queue._can_read(text) SECURITY DEFINER;
ALTER FUNCTION queue._can_read(text) SET search_path = pg_catalog, pg_temp;

-- Privileges --------------------------------------------------------------

-- Nothing for PUBLIC: functions are executable by PUBLIC by default.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA queue FROM PUBLIC;
REVOKE ALL ON SCHEMA queue FROM PUBLIC;

-- The group roles see the schema; none may create in it or write a table.
GRANT USAGE ON SCHEMA queue TO queue_admin, queue_producer, queue_worker, queue_reader;

-- Reading: the views (which filter by queue._can_read) and the
-- observability tables (filtered by the policies below), for every role.
GRANT SELECT ON queue.queues, queue.items, queue.history, queue.dead_letters,
                queue.events, queue.alerts, queue.metrics_history, queue.schedules,
                queue.limits
   TO queue_reader, queue_producer, queue_worker, queue_admin;

-- Functions by role, by exact signature.  Objects defined by later topic
-- files of a development tree may be missing: the permissions regression
-- test checks the whole list, so a gap fails there, not at install time.
DO $$
DECLARE
    r record;
    v_fn regprocedure;
    v_reader text[] := ARRAY[
        -- look at items and numbers
        'item(text, bigint)',
        'stats(text)',
        'health(text)',
        'prometheus()',
        'desired_workers(text, integer)',
        'alert_channel(text)'];
    v_producer text[] := ARRAY[
        -- add work
        'enqueue(text, jsonb, integer, timestamp with time zone, text, timestamp with time zone, integer, text, text, text, text[])',
        'enqueue_batch(text, jsonb[], integer, timestamp with time zone, text[], timestamp with time zone, integer, text[], text[], text[])'];
    v_worker text[] := ARRAY[
        -- the bot's loop
        'dequeue(text, text, integer, interval)',
        'complete(text, bigint, bigint, jsonb)',
        'complete_batch(text, bigint[], bigint[], jsonb)',
        'fail(text, bigint, bigint, text, text, boolean, interval)',
        'release(text, bigint, bigint, timestamp with time zone)',
        'extend_lease(text, bigint, bigint, interval)',
        'checkpoint(text, bigint, bigint, jsonb)',
        'heartbeat(text)',
        'register_worker(text, text[], integer, jsonb, text[], boolean)'];
BEGIN
    FOR r IN
        SELECT g.rolname, g.sig
          FROM (SELECT 'queue_reader' AS rolname, unnest(v_reader) AS sig
                UNION ALL SELECT 'queue_producer', unnest(v_reader || v_producer)
                UNION ALL SELECT 'queue_worker', unnest(v_reader || v_worker)) g
    LOOP
        v_fn := pg_catalog.to_regprocedure('queue.' || r.sig);
        IF v_fn IS NOT NULL THEN
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', v_fn, r.rolname);
        END IF;
    END LOOP;

    -- queue_admin may do everything: every API function of the schema
    -- (the names without a leading underscore), queue DDL, operator
    -- actions, worker control, maintenance, cron and per-queue grants.
    FOR v_fn IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'queue'::regnamespace
           AND p.proname !~ '^_'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO queue_admin', v_fn);
    END LOOP;

    -- Views read by every role may call helper functions of the schema
    -- (queue._can_read, queue._live_state...): those run as the caller.
    FOR v_fn IN
        SELECT DISTINCT d.refobjid::regprocedure
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_rewrite w ON w.oid = d.objid
          JOIN pg_catalog.pg_class v ON v.oid = w.ev_class
          JOIN pg_catalog.pg_proc p ON p.oid = d.refobjid
         WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass
           AND d.refclassid = 'pg_catalog.pg_proc'::regclass
           AND v.relnamespace = 'queue'::regnamespace
           AND p.pronamespace = 'queue'::regnamespace
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION %s TO queue_reader, queue_producer, queue_worker, queue_admin', v_fn);
    END LOOP;

    -- The fleet view, when defined, is read like the others.
    IF pg_catalog.to_regclass('queue.workers') IS NOT NULL THEN
        GRANT SELECT ON queue.workers TO queue_reader, queue_producer, queue_worker, queue_admin;
    END IF;
END
$$;

-- queue._can_read is also called by the row-level security policies.
GRANT EXECUTE ON FUNCTION queue._can_read(text)
   TO queue_reader, queue_producer, queue_worker, queue_admin;

-- Row-level security -------------------------------------------------------

-- The observability tables are read directly; a caller sees only the rows
-- of the queues it may read.  The SECURITY DEFINER functions run as the
-- owner, a superuser, and are not filtered.
ALTER TABLE queue.dead_letters ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue.alerts ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue.metrics_history ENABLE ROW LEVEL SECURITY;

CREATE POLICY dead_letters_read ON queue.dead_letters FOR SELECT
    USING (queue._can_read(queue_name));
-- A queue_dropped event tells of a queue that is gone, also once a queue of
-- that name exists again (create_queue keeps it on record): admins only.
CREATE POLICY events_read ON queue.events FOR SELECT
    USING (queue._can_read(queue_name)
           AND (kind OPERATOR(pg_catalog.<>) 'queue_dropped'
                OR pg_catalog.pg_has_role(queue._caller(), 'queue_admin', 'MEMBER')));
CREATE POLICY alerts_read ON queue.alerts FOR SELECT
    USING (queue._can_read(queue_name));
CREATE POLICY metrics_history_read ON queue.metrics_history FOR SELECT
    USING (queue._can_read(queue_name));

-- pg_dump -----------------------------------------------------------------

-- The data of the extension's tables and the positions of its sequences
-- belong to the database, not to the extension: pg_dump keeps them.
DO $$
DECLARE
    v_rel regclass;
BEGIN
    FOR v_rel IN
        SELECT c.oid::regclass
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = 'queue'::regnamespace
           AND c.relkind IN ('r', 'S')
         ORDER BY c.relkind, c.relname
    LOOP
        PERFORM pg_catalog.pg_extension_config_dump(v_rel, '');
    END LOOP;
END
$$;

-- A grant whose role was dropped names the role by its old OID, which
-- another cluster (or this one, once OIDs wrap around) may give to any
-- role: pg_dump leaves such rows out.  The queue's restrict_* flag, dumped
-- with its settings, keeps that access kind closed in the restored copy.
-- (A regrole of a dropped role reads as its bare OID, all digits; any
-- other role's name is quoted when it is all digits.  No catalog join, so
-- that the filter runs wherever the table's rows are, Citus included.)
SELECT pg_catalog.pg_extension_config_dump('queue.queue_grant',
    'WHERE grantee::pg_catalog.text OPERATOR(pg_catalog.!~) ''^[0-9]+$''');
