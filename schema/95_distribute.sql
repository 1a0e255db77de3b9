-- ======================================================================
-- Scale-out on Citus: queue.distribute() and queue.distributed().
-- Every statement is replayable: the upgrade part of the same name is a
-- link to this file.
-- ======================================================================
--
-- On a Citus coordinator, distribute() spreads the queues over the worker
-- nodes: every table with a queue_name column (items, history, dead
-- letters, events, failures, dedup window, alerts, metrics...) becomes a
-- hash-distributed table on queue_name, all colocated with item_live, so
-- that everything of one queue lives in one shard group on one node; the
-- small tables every call reads (settings, per-queue grants, the worker
-- registry and its maintenance windows) become reference tables, copied to
-- every node.  The API functions that take a queue name first and touch
-- only that queue are then delegated: the coordinator sends the whole call
-- to the node that holds the queue, in one round trip.
--
-- Not delegated, on purpose: enqueue, enqueue_batch and replay wake
-- LISTENing bots with NOTIFY, which only reaches listeners of the server
-- that sends it, so they run on the coordinator (their statements are still
-- routed to the queue's one node).  Queue DDL, pause, grants and the
-- cross-queue functions (sweep, stats, health, prometheus) run on the
-- coordinator too.
--
-- The settings tables carry the statement triggers that make every backend
-- drop its cached settings (queue._invalidate_cache).  Citus refuses
-- reference tables with triggers unless citus.enable_unsafe_triggers is on
-- while they are created; the triggers are then copied to every node's
-- placement and fire there on each write, so a pause or alter_queue written
-- through the coordinator invalidates the caches of the node that runs the
-- calls.  distribute() turns the setting on for its own transaction only.

CREATE OR REPLACE FUNCTION queue.distributed() RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_yes boolean;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;
    END IF;
    -- planned only here, where the Citus catalog exists
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p
                    WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'queue.item_live'::pg_catalog.regclass)
      INTO v_yes;
    RETURN v_yes;
END
$$;
COMMENT ON FUNCTION queue.distributed() IS
    'Whether the queue tables are distributed over a Citus cluster (see queue.distribute())';

-- The API functions delegated to the node holding their queue: they take
-- the queue name first and touch that queue's rows only.
CREATE OR REPLACE FUNCTION queue._delegated_functions() RETURNS SETOF pg_catalog.regprocedure
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT f::pg_catalog.regprocedure
      FROM pg_catalog.unnest(ARRAY[
        'queue.dequeue(text, text, integer, interval)',
        'queue.complete(text, bigint, bigint, jsonb)',
        'queue.complete_batch(text, bigint[], bigint[], jsonb)',
        'queue.fail(text, bigint, bigint, text, text, boolean, interval)',
        'queue.release(text, bigint, bigint, timestamp with time zone)',
        'queue.extend_lease(text, bigint, bigint, interval)',
        'queue.checkpoint(text, bigint, bigint, jsonb)',
        'queue.hold(text, bigint, text)',
        'queue.unhold(text, bigint)',
        'queue.cancel(text, bigint, text)',
        'queue.item(text, bigint)',
        'queue.review(text, bigint, text, text)']) AS f
     WHERE pg_catalog.to_regprocedure(f) IS NOT NULL
$$;
COMMENT ON FUNCTION queue._delegated_functions() IS
    'API functions queue.distribute() delegates to the node holding the queue';

-- What each node needs of its own, run on every node by distribute():
--
-- Sequences (item ids, lease tokens, event and failure ids) are local to
-- each node: a call delegated to a worker draws from that worker's copy.
-- Each node draws from its own range, its Citus group id times 2^48, so
-- ids and lease tokens never repeat across nodes and still grow.  A
-- sequence is raised into its range, never lowered.
--
-- queue._can_read runs inside the shard queries of the views and of the
-- row-level security policies, and reads the settings and grants there:
-- Citus refuses such nested queries unless
-- citus.allow_nested_distributed_execution is on.  They only read
-- reference tables, whose every node holds a full copy, so the answer is
-- the same as on the coordinator: the setting is attached to that function.
-- The functions the views read under Citus (queue._workers_rows here, the
-- others made by distribute()) carry it too: a statement that reads such
-- a view together with a distributed table of one queue is routed whole
-- to that queue's node, the view's function with it, which then reads
-- the queues of every node from there.  The same holds for an API call
-- in a statement over a distributed table of one queue (SELECT
-- queue.replay(q, item_id) FROM queue.dead_letters WHERE queue_name = q):
-- Citus routes it whole to the queue's node, where the call's own
-- queries, on that queue's shards, run there.
CREATE OR REPLACE FUNCTION queue._prepare_node() RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_group bigint;
    v_start bigint;
    v_last bigint;
    v_moved int := 0;
    r record;
BEGIN
    ALTER FUNCTION queue._can_read(text) SET citus.allow_nested_distributed_execution = on;
    ALTER FUNCTION queue._workers_rows() SET citus.allow_nested_distributed_execution = on;
    -- the API calls run on the coordinator that a statement over a
    -- queue's tables may call (distribute() sets the delegated ones)
    FOR r IN
        SELECT p.oid::pg_catalog.regprocedure AS f FROM pg_catalog.pg_proc p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'queue'::pg_catalog.regnamespace
           AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['enqueue', 'enqueue_batch', 'replay'])
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET citus.allow_nested_distributed_execution = on', r.f);
    END LOOP;
    SELECT g.groupid INTO v_group FROM pg_catalog.pg_dist_local_group g;
    IF coalesce(v_group, 0) OPERATOR(pg_catalog.=) 0 THEN
        RETURN 0;
    END IF;
    v_start := v_group OPERATOR(pg_catalog.<<) 48;
    FOR r IN
        SELECT s.seqrelid::regclass AS seq
          FROM pg_catalog.pg_sequence s
          JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) s.seqrelid
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'queue'::regnamespace
           AND s.seqtypid OPERATOR(pg_catalog.=) 'pg_catalog.int8'::regtype
    LOOP
        SELECT q.last_value INTO v_last FROM pg_catalog.pg_sequences q
         WHERE q.schemaname OPERATOR(pg_catalog.=) 'queue'
           AND (q.schemaname || '.' || q.sequencename) OPERATOR(pg_catalog.=) r.seq::text;
        IF coalesce(v_last, 0) OPERATOR(pg_catalog.<) v_start THEN
            PERFORM pg_catalog.setval(r.seq, v_start);
            v_moved := v_moved OPERATOR(pg_catalog.+) 1;
        END IF;
    END LOOP;
    RETURN v_moved;
END
$$;
COMMENT ON FUNCTION queue._prepare_node() IS
    'Readies this node for distributed queues: its own sequence range, nested reads of the settings';

-- The live items of the queues the caller may read, for the items view
-- under Citus (see distribute()): the view's query then holds no
-- distributed table itself, so it runs on the coordinator, where the
-- functions it calls per row (queue._flow_waiting) may read the queue's
-- tables; in a query on a shard they could not.
CREATE OR REPLACE FUNCTION queue._readable_item_live() RETURNS SETOF queue.item_live
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_queues text[] := ARRAY(SELECT c.queue_name FROM queue.queue_config c
                              WHERE queue._can_read(c.queue_name));
BEGIN
    RETURN QUERY SELECT i.* FROM queue.item_live i
                  WHERE i.queue_name OPERATOR(pg_catalog.=) ANY (v_queues);
END
$$;
COMMENT ON FUNCTION queue._readable_item_live() IS
    'The live items of the queues the caller may read (the items view under Citus)';

-- The workers view under Citus (see distribute()): the plain view counts
-- each worker's leases and 24 h results in lateral subqueries over every
-- queue's tables, a join across nodes that Citus cannot plan.  Here each
-- of the three is one statement grouped by worker, over the queues the
-- caller may read, then joined to the registry; run as the owner, as
-- Citus checks the caller's own rights on the shards.  Same columns and
-- rows as the plain view.
CREATE OR REPLACE FUNCTION queue._workers_rows()
RETURNS TABLE (worker text, status text, last_seen timestamptz, in_flight bigint,
               completed_24h bigint, failed_24h bigint, mean_run_time interval,
               success_rate numeric, capacity int, draining boolean, queues text[],
               info jsonb, registered_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_caller oid := queue._caller();
    v_admin boolean := pg_catalog.pg_has_role(v_caller, 'queue_admin', 'MEMBER');
    v_open boolean := EXISTS (SELECT 1 FROM queue.queue_config o
                               WHERE NOT o.restrict_reader AND NOT o.restrict_worker);
    v_queues text[] := ARRAY(SELECT c.queue_name FROM queue.queue_config c
                              WHERE v_admin OR queue._can_read(c.queue_name));
    v_online timestamptz := now() - make_interval(secs => queue._worker_offline_after());
BEGIN
    RETURN QUERY
    WITH f AS MATERIALIZED (
            SELECT i.worker, count(*) AS in_flight
              FROM queue.item_live i
             WHERE i.queue_name = ANY (v_queues) AND i.worker IS NOT NULL
               AND i.lease_token IS NOT NULL AND i.lease_expires_at > now()
             GROUP BY i.worker),
         d AS MATERIALIZED (
            SELECT h.worker, count(*) AS completed_24h,
                   avg(h.completed_at - h.claimed_at) AS mean_run_time
              FROM queue.item_done h
             WHERE (v_admin OR h.queue_name = ANY (v_queues)) AND h.worker IS NOT NULL
               AND h.completed_at > now() - interval '24 hours'
             GROUP BY h.worker),
         fl AS MATERIALIZED (
            SELECT x.worker, count(*) AS failed_24h
              FROM queue.failure_log x
             WHERE (v_admin OR x.queue_name = ANY (v_queues)) AND x.worker IS NOT NULL
               AND x.at > now() - interval '24 hours'
             GROUP BY x.worker)
    SELECT w.worker,
           CASE
             WHEN w.last_seen < v_online THEN 'offline'
             WHEN w.draining THEN 'draining'
             WHEN EXISTS (SELECT 1 FROM queue.maintenance_window m
                           WHERE m.worker = w.worker AND m.starts_at <= now() AND m.ends_at > now())
               THEN 'maintenance'
             WHEN coalesce(f.in_flight, 0) > 0 THEN 'active'
             ELSE 'idle'
           END,
           w.last_seen, coalesce(f.in_flight, 0), coalesce(d.completed_24h, 0),
           coalesce(fl.failed_24h, 0), d.mean_run_time,
           CASE WHEN coalesce(d.completed_24h, 0) + coalesce(fl.failed_24h, 0) > 0
                THEN round(coalesce(d.completed_24h, 0)::numeric
                           / (coalesce(d.completed_24h, 0) + coalesce(fl.failed_24h, 0)), 4) END,
           w.capacity, w.draining,
           CASE WHEN v_admin OR w.queues IS NULL THEN w.queues
                ELSE ARRAY(SELECT u.q FROM unnest(w.queues) AS u(q) WHERE u.q = ANY (v_queues)) END,
           w.info, w.registered_at
      FROM queue.worker_registry w
      LEFT JOIN f ON f.worker = w.worker
      LEFT JOIN d ON d.worker = w.worker
      LEFT JOIN fl ON fl.worker = w.worker
     WHERE v_admin
        OR pg_catalog.pg_has_role(v_caller, coalesce(w.registered_by::oid, 0::oid), 'MEMBER')
        OR EXISTS (SELECT 1 FROM unnest(w.queues) AS u(q) WHERE u.q = ANY (v_queues))
        OR (w.queues IS NULL AND v_open)
        OR f.in_flight > 0 OR d.completed_24h > 0 OR fl.failed_24h > 0;
END
$$;
COMMENT ON FUNCTION queue._workers_rows() IS
    'The rows of the workers view the caller may see (the workers view under Citus)';

CREATE OR REPLACE FUNCTION queue.distribute(shard_count int DEFAULT NULL)
RETURNS TABLE (object text, action text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_anchor constant regclass := 'queue.item_live'::regclass;
    v_reference constant text[] := ARRAY['queue_config', 'queue_grant',
                                         'worker_registry', 'maintenance_window'];
    r record;
    v_done boolean;
    v_moved int := 0;
    v_fk boolean := false;
    v_messages text;
    v_def text;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RAISE EXCEPTION 'Citus is not installed in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Add citus to shared_preload_libraries on every node, run CREATE EXTENSION citus, '
                         'add the worker nodes, then call queue.distribute() on the coordinator.';
    END IF;
    IF shard_count IS NOT NULL AND (shard_count < 1 OR shard_count > 64000) THEN
        RAISE EXCEPTION 'shard_count % is out of range', shard_count
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use 1 to 64000 shards; several per node lets queues spread and move.';
    END IF;
    v_done := pg_catalog.citus_is_coordinator();
    IF NOT v_done THEN
        RAISE EXCEPTION 'queue.distribute() must run on the Citus coordinator'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Connect to the coordinator, or register it with citus_set_coordinator_host().';
    END IF;
    -- One distribute() at a time.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('queue.distribute'), 0);

    PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    -- a foreign key to a reference table wants one connection per node
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);
    IF shard_count IS NOT NULL THEN
        PERFORM pg_catalog.set_config('citus.shard_count', shard_count::text, true);
    END IF;

    -- The foreign key of the schedules to the settings is dropped while the
    -- tables are distributed and made again after: Citus would turn every
    -- table of a foreign-key graph with a local table into a Citus local
    -- table, recreating the extension's views over them, which it cannot.
    IF pg_catalog.to_regclass('queue.schedule_config') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p
                        WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'queue.schedule_config'::pg_catalog.regclass)
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                    WHERE k.conrelid OPERATOR(pg_catalog.=) 'queue.schedule_config'::pg_catalog.regclass
                      AND k.conname OPERATOR(pg_catalog.=) 'schedule_config_queue_name_fkey') THEN
        ALTER TABLE queue.schedule_config DROP CONSTRAINT schedule_config_queue_name_fkey;
        -- and the workers' own copies, made by CREATE EXTENSION there
        PERFORM pg_catalog.run_command_on_workers(
            'ALTER TABLE queue.schedule_config DROP CONSTRAINT IF EXISTS schedule_config_queue_name_fkey');
        v_fk := true;
    END IF;

    -- Reference tables: the settings every call reads, and the tables keyed
    -- by something else than a queue.
    FOR r IN
        SELECT c.oid::regclass AS rel, c.relname
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'queue'::regnamespace
           AND c.relkind OPERATOR(pg_catalog.=) 'r' AND NOT c.relispartition
           AND (c.relname OPERATOR(pg_catalog.=) ANY (v_reference)
                OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                                WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid
                                  AND a.attname OPERATOR(pg_catalog.=) 'queue_name'
                                  AND NOT a.attisdropped))
         ORDER BY c.relname
    LOOP
        v_done := EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p
                           WHERE p.logicalrelid OPERATOR(pg_catalog.=) r.rel);
        CONTINUE WHEN v_done;
        PERFORM pg_catalog.create_reference_table(r.rel);
        PERFORM pg_catalog.truncate_local_data_after_distributing_table(r.rel);
        object := r.rel::text;
        action := 'reference table';
        RETURN NEXT;
    END LOOP;

    -- Per-queue tables: distributed by queue_name, colocated with item_live.
    FOR r IN
        SELECT c.oid::regclass AS rel
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'queue'::regnamespace
           -- a partitioned table (the history, events, failure log) with
           -- its partitions, and those attached later when they are attached
           AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::"char"[]) AND NOT c.relispartition
           AND NOT (c.relname OPERATOR(pg_catalog.=) ANY (v_reference))
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid
                          AND a.attname OPERATOR(pg_catalog.=) 'queue_name'
                          AND NOT a.attisdropped)
         ORDER BY c.oid OPERATOR(pg_catalog.<>) v_anchor, c.relname
    LOOP
        v_done := EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p
                           WHERE p.logicalrelid OPERATOR(pg_catalog.=) r.rel);
        CONTINUE WHEN v_done;
        IF r.rel OPERATOR(pg_catalog.=) v_anchor THEN
            PERFORM pg_catalog.create_distributed_table(r.rel, 'queue_name');
        ELSE
            PERFORM pg_catalog.create_distributed_table(r.rel, 'queue_name',
                                                        colocate_with => v_anchor::text);
        END IF;
        PERFORM pg_catalog.truncate_local_data_after_distributing_table(r.rel);
        object := r.rel::text;
        action := 'distributed by queue_name';
        RETURN NEXT;
    END LOOP;

    IF v_fk THEN
        ALTER TABLE queue.schedule_config ADD CONSTRAINT schedule_config_queue_name_fkey
            FOREIGN KEY (queue_name) REFERENCES queue.queue_config (queue_name) ON DELETE CASCADE;
    END IF;

    -- Delegate the per-queue API calls to the node holding the queue.
    FOR r IN SELECT f FROM queue._delegated_functions() f
    LOOP
        v_done := EXISTS (SELECT 1 FROM pg_catalog.pg_dist_object o
                           WHERE o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                             AND o.objid OPERATOR(pg_catalog.=) r.f::pg_catalog.oid
                             AND o.distribution_argument_index IS NOT NULL);
        CONTINUE WHEN v_done;
        PERFORM pg_catalog.create_distributed_function(r.f, 'queue_name',
                                                       colocate_with => v_anchor::text);
        object := r.f::text;
        action := 'delegated by queue_name';
        RETURN NEXT;
    END LOOP;

    -- A delegated call may also run inside a statement Citus routes to
    -- the queue's node (a call per row of dead_letters): its queries may
    -- then run from there (the setting reaches every node's copy).
    FOR r IN SELECT f FROM queue._delegated_functions() f
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET citus.allow_nested_distributed_execution = on', r.f);
    END LOOP;

    -- The views of the reader role read as the owner.  Citus checks the
    -- caller's own privileges on the shards a view's query reaches, which
    -- only the owner has; so each view's query is kept as an owner-only
    -- view, read by a SECURITY DEFINER function that keeps the rows of the
    -- queues the caller may read (judged here, on the coordinator, from
    -- the settings; on a worker the caller would be the owner), and the
    -- view reads the function.  A plain server keeps the plain views.
    -- (Citus notes that it leaves the workers' extension members alone)
    v_messages := pg_catalog.current_setting('client_min_messages');
    PERFORM pg_catalog.set_config('client_min_messages', 'warning', true);
    FOR r IN SELECT v FROM pg_catalog.unnest(ARRAY['queues', 'items', 'history', 'limits', 'schedules']) v
    LOOP
        CONTINUE WHEN pg_catalog.to_regclass('queue.' || r.v) IS NULL
                   OR pg_catalog.strpos(pg_catalog.pg_get_viewdef(('queue.' || r.v)::pg_catalog.regclass),
                                        '_' || r.v || '_rows()') OPERATOR(pg_catalog.>) 0;
        -- an update of the extension made the view plain again: the copy
        -- of its query may be stale
        IF pg_catalog.to_regclass('queue._' || r.v || '_all') IS NOT NULL THEN
            IF pg_catalog.to_regprocedure('queue._' || r.v || '_rows()') IS NOT NULL THEN
                EXECUTE pg_catalog.format('ALTER EXTENSION queue DROP FUNCTION queue.%I()', '_' || r.v || '_rows');
                EXECUTE pg_catalog.format('DROP FUNCTION queue.%I()', '_' || r.v || '_rows');
            END IF;
            EXECUTE pg_catalog.format('ALTER EXTENSION queue DROP VIEW queue.%I', '_' || r.v || '_all');
            EXECUTE pg_catalog.format('DROP VIEW queue.%I', '_' || r.v || '_all');
        END IF;
        v_def := pg_catalog.pg_get_viewdef(('queue.' || r.v)::pg_catalog.regclass);
        IF r.v OPERATOR(pg_catalog.=) 'items' THEN
            v_def := pg_catalog.replace(v_def, 'FROM queue.item_live i',
                                        'FROM queue._readable_item_live() i');
        END IF;
        EXECUTE pg_catalog.format('CREATE VIEW queue.%I WITH (security_barrier) AS %s',
                                  '_' || r.v || '_all', v_def);
        EXECUTE pg_catalog.format($f$
            CREATE FUNCTION queue.%1$I() RETURNS SETOF queue.%2$I
            LANGUAGE plpgsql STABLE SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp SET jit = off AS $b$
            DECLARE
                v_queues text[] := ARRAY(SELECT c.queue_name FROM queue.queue_config c
                                          WHERE queue._can_read(c.queue_name));
            BEGIN
                RETURN QUERY SELECT v.* FROM queue.%2$I v
                              WHERE v.queue_name OPERATOR(pg_catalog.=) ANY (v_queues);
            END
            $b$
        $f$, '_' || r.v || '_rows', '_' || r.v || '_all');
        EXECUTE pg_catalog.format('CREATE OR REPLACE VIEW queue.%I WITH (security_barrier) AS SELECT * FROM queue.%I()',
                                  r.v, '_' || r.v || '_rows');
        EXECUTE pg_catalog.format('ALTER EXTENSION queue ADD VIEW queue.%I', '_' || r.v || '_all');
        EXECUTE pg_catalog.format('ALTER EXTENSION queue ADD FUNCTION queue.%I()', '_' || r.v || '_rows');
        EXECUTE pg_catalog.format('REVOKE ALL ON queue.%I FROM PUBLIC', '_' || r.v || '_all');
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION queue.%I() FROM PUBLIC', '_' || r.v || '_rows');
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION queue.%I() TO queue_admin, queue_reader, queue_producer, queue_worker',
                                  '_' || r.v || '_rows');
        object := 'queue.' || r.v;
        action := 'read as the owner';
        RETURN NEXT;
    END LOOP;
    -- The workers view reads queue._workers_rows(), the same rows counted
    -- in statements Citus can plan.
    IF pg_catalog.strpos(pg_catalog.pg_get_viewdef('queue.workers'::pg_catalog.regclass),
                         '_workers_rows()') OPERATOR(pg_catalog.=) 0 THEN
        CREATE OR REPLACE VIEW queue.workers WITH (security_barrier) AS
            SELECT * FROM queue._workers_rows();
        object := 'queue.workers';
        action := 'read as the owner';
        RETURN NEXT;
    END IF;
    -- Those functions read from the node a statement is routed to, when
    -- one reads a view with a distributed table of one queue (the
    -- setting reaches every node's copy of the function).
    FOR r IN SELECT v FROM pg_catalog.unnest(ARRAY['queues', 'items', 'history', 'limits', 'schedules']) v
    LOOP
        CONTINUE WHEN pg_catalog.to_regprocedure('queue._' || r.v || '_rows()') IS NULL;
        EXECUTE pg_catalog.format('ALTER FUNCTION queue.%I() SET citus.allow_nested_distributed_execution = on',
                                  '_' || r.v || '_rows');
    END LOOP;
    PERFORM pg_catalog.set_config('client_min_messages', v_messages, true);

    -- Each node's own settings (workers first, then this one).
    FOR r IN SELECT w.nodename, w.nodeport, w.success, w.result
               FROM pg_catalog.run_command_on_workers('SELECT queue._prepare_node()') w
    LOOP
        IF NOT r.success THEN
            RAISE EXCEPTION 'could not prepare node %:% for distributed queues', r.nodename, r.nodeport
                USING ERRCODE = 'object_not_in_prerequisite_state', DETAIL = r.result,
                      HINT = 'Check that the queue extension is installed on every node, then call queue.distribute() again.';
        END IF;
        v_moved := v_moved OPERATOR(pg_catalog.+) (r.result::int OPERATOR(pg_catalog.>) 0)::int;
    END LOOP;
    PERFORM queue._prepare_node();
    IF v_moved OPERATOR(pg_catalog.>) 0 THEN
        object := 'sequences';
        action := 'spread over ' || v_moved || ' nodes';
        RETURN NEXT;
    END IF;
END
$$;
COMMENT ON FUNCTION queue.distribute(int) IS
    'Distributes the queue tables over a Citus cluster by queue name and delegates the per-queue calls (idempotent)';

REVOKE ALL ON FUNCTION queue.distribute(int) FROM PUBLIC;
REVOKE ALL ON FUNCTION queue.distributed() FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._delegated_functions() FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._prepare_node() FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._readable_item_live() FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._workers_rows() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue._workers_rows() TO queue_admin, queue_reader, queue_producer, queue_worker;
GRANT EXECUTE ON FUNCTION queue.distribute(int) TO queue_admin;
GRANT EXECUTE ON FUNCTION queue.distributed() TO queue_admin, queue_reader, queue_producer, queue_worker;
