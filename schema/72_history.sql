-- ======================================================================
-- History partitions: maintain_history and the helpers of retention
-- ======================================================================
--
-- Written to be run again: this file is also the upgrade's part
-- (upgrade/0.1.0--0.2.0/72_history.sql), which converts the tables of
-- 0.1.0 in upgrade/0.1.0--0.2.0/92_history_tables.sql.
--
-- item_done, events and failure_log are range partitioned by their time
-- (10_tables.sql).  maintain_history() keeps, for each of them:
--
--  * partitions ahead: up to the end of the second slot of
--    queue.history_partition_width after the one that holds now(), slots
--    aligned to that width (whole days in UTC by default), so that an
--    insert finds its partition whatever the sweep's schedule.  A row no
--    partition covers (the sweep has not run since the install, or not for
--    longer than the partitions ahead last, or a row stamped in the
--    future) lands in the DEFAULT partition; creating the partition that
--    covers it moves it there first.  Partitions start where the newest one
--    ends, and never cover the present moment: once that end has passed,
--    the next one starts with the next slot, and the rows of the gap stay
--    in the DEFAULT partition, where the per-queue retention deletes them.
--    (A row that an insert routed to the DEFAULT partition just before a
--    partition for its time was attached would fail the DEFAULT
--    partition's new constraint.)
--  * retention by partition: a partition goes as a whole (DROP TABLE,
--    nothing left for vacuum) once its newest possible row is past the
--    longest keep window of every queue (queue._history_keep).  Rows in
--    a partition stay up to one width past their queue's window; a queue
--    whose own window is shorter than the longest one has its rows past
--    it deleted in batches by queue._retention, and so do rows of the
--    DEFAULT partition.  With one retention for all queues no row is ever
--    deleted.
--
-- Partitions are created as tables of their own (LIKE the DEFAULT
-- partition, which gives them its keys and indexes) and then attached: an
-- ATTACH takes only a SHARE UPDATE EXCLUSIVE lock on the parent, so inserts
-- and reads go on, and the DEFAULT partition (locked while rows move out of
-- it) is normally empty.  A DROP waits for the transactions using the
-- table, briefly: every lock is tried under lock_timeout, and a table whose
-- lock is busy is done by the next call.  Created at run time, partitions
-- are not members of the extension: pg_dump writes them with their data.

CREATE OR REPLACE FUNCTION queue._history_partition_width() RETURNS int
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_history_partition_width_seconds';
COMMENT ON FUNCTION queue._history_partition_width() IS 'queue.history_partition_width in seconds';

-- The partitioned tables and their time columns.
CREATE OR REPLACE FUNCTION queue._history_tables(OUT table_name text, OUT time_column text)
RETURNS SETOF record LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    VALUES ('item_done', 'completed_at'), ('events', 'at'), ('failure_log', 'at')
$$;
COMMENT ON FUNCTION queue._history_tables() IS 'The tables partitioned by time, with their time columns';

-- The range partitions of one of them, oldest first; lo is NULL for a
-- partition from MINVALUE (the table an upgrade from 0.1.0 converted).
-- The pattern holds no backslash ([(], not \(): PL/pgSQL parses it in the
-- caller's session, where standard_conforming_strings may be off.
CREATE OR REPLACE FUNCTION queue._history_partitions(p_table text)
RETURNS TABLE (partition_name text, lo timestamptz, hi timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off SET datestyle = 'ISO, YMD' AS $$
BEGIN
    RETURN QUERY
    SELECT c.relname::text,
           CASE WHEN b[1] <> 'MINVALUE' THEN pg_catalog.btrim(b[1], '''')::timestamptz END,
           CASE WHEN b[2] <> 'MAXVALUE' THEN pg_catalog.btrim(b[2], '''')::timestamptz END
      FROM pg_catalog.pg_inherits i
      JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                                                '^FOR VALUES FROM [(](.+)[)] TO [(](.+)[)]$') b
     WHERE i.inhparent = pg_catalog.to_regclass('queue.' || pg_catalog.quote_ident(p_table))
       AND b IS NOT NULL   -- not the DEFAULT partition
     ORDER BY 2 NULLS FIRST;
END
$$;
COMMENT ON FUNCTION queue._history_partitions(text) IS 'The range partitions of a history table with their bounds, oldest first';

-- How long every row of the table must be kept: the longest keep window
-- of any queue (queue._retention keeps each kind for its window).
CREATE OR REPLACE FUNCTION queue._history_keep(p_table text)
RETURNS interval LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v interval;
BEGIN
    IF p_table = 'events' THEN
        -- without queues only the queue_dropped events are left (7 days)
        SELECT coalesce(max(c.retention), interval '7 days') INTO v FROM queue.queue_config c;
    ELSE
        SELECT coalesce(max(CASE WHEN c.breaker_threshold IS NOT NULL
                                 THEN greatest(c.retention, c.breaker_window)
                                 ELSE c.retention END), interval '1 hour') INTO v
          FROM queue.queue_config c;
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION queue._history_keep(text) IS 'The longest time any queue keeps the rows of a history table';

-- Creates the partitions of one table from its newest partition's end (or
-- the next slot, when that end has passed) up to the end of the second slot
-- after the current one; returns how many.
CREATE OR REPLACE FUNCTION queue._history_extend(p_table text, p_column text, p_now timestamptz)
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_width interval := make_interval(secs => queue._history_partition_width());
    v_origin constant timestamptz := '2000-01-03 00:00:00+00';   -- a Monday, UTC midnight
    v_slot timestamptz := date_bin(v_width, p_now, v_origin);
    v_until timestamptz := v_slot + v_width * 3;
    v_default text := p_table || '_default';
    v_lo timestamptz;
    v_hi timestamptz;
    v_name text;
    v_grantee oid;
    v_n int := 0;
BEGIN
    SELECT max(p.hi) INTO v_lo FROM queue._history_partitions(p_table) p;
    IF v_lo IS NULL OR v_lo <= p_now THEN
        -- NB: never a partition that covers the present: an insert that
        -- routed its row to the DEFAULT partition meanwhile would fail on
        -- that partition's narrowed constraint once it gets its lock
        v_lo := v_slot + v_width;
    END IF;
    WHILE v_lo < v_until LOOP
        v_hi := date_bin(v_width, v_lo, v_origin) + v_width;
        v_name := p_table || '_p' || to_char(v_lo AT TIME ZONE 'UTC', 'YYYYMMDD')
                  || CASE WHEN (v_lo AT TIME ZONE 'UTC')::time <> '00:00'
                          THEN to_char(v_lo AT TIME ZONE 'UTC', '_HH24MISS') ELSE '' END;
        -- NB: rows of the new range in the DEFAULT partition move first, under
        -- its lock, or the ATTACH would fail on them
        EXECUTE format('LOCK TABLE queue.%I IN ACCESS EXCLUSIVE MODE', v_default);
        EXECUTE format('CREATE TABLE queue.%I (LIKE queue.%I INCLUDING ALL)', v_name, v_default);
        -- the default privileges of the role making it (ALTER DEFAULT
        -- PRIVILEGES) may grant it to others: a partition is read through
        -- its parent only, whose policies filter the rows
        FOR v_grantee IN
            SELECT DISTINCT a.grantee
              FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.oid = pg_catalog.to_regclass('queue.' || pg_catalog.quote_ident(v_name))
               AND a.grantee <> c.relowner
             ORDER BY 1
        LOOP
            EXECUTE format('REVOKE ALL ON TABLE queue.%I FROM %s', v_name,
                           CASE WHEN v_grantee = 0 THEN 'PUBLIC' ELSE v_grantee::regrole::text END);
        END LOOP;
        EXECUTE format('WITH m AS (DELETE FROM queue.%I d WHERE d.%I >= $1 AND d.%I < $2 RETURNING d.*) '
                       'INSERT INTO queue.%I SELECT * FROM m', v_default, p_column, p_column, v_name)
            USING v_lo, v_hi;
        EXECUTE format('ALTER TABLE queue.%I ATTACH PARTITION queue.%I FOR VALUES FROM (%L) TO (%L)',
                       p_table, v_name,
                       to_char(v_lo AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS+00'),
                       to_char(v_hi AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS+00'));
        v_n := v_n + 1;
        v_lo := v_hi;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue._history_extend(text, text, timestamptz)
    IS 'Creates the partitions of a history table up to two slots ahead; returns how many';

-- Drops the partitions of one table whose every row is past the longest
-- keep window; returns how many.  A partition of events that holds the
-- queue_dropped event of a queue dropped less than 7 days ago stays
-- (sweep_dropped keeps that event for 7 days).  The rows of a partition
-- of the history or the failure log that the running totals of their
-- queue have not counted yet (stamped after its counted_until, see
-- _retention and snapshot_metrics) are added to them as it goes, so
-- prometheus()'s counters never fall back.
CREATE OR REPLACE FUNCTION queue._history_drop(p_table text, p_now timestamptz)
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_cut timestamptz := p_now - queue._history_keep(p_table);
    v_part record;
    v_busy boolean;
    v_n int := 0;
    v_queue text;
    v_counted timestamptz;
    v_rows bigint;
BEGIN
    FOR v_part IN
        SELECT p.partition_name, p.hi FROM queue._history_partitions(p_table) p
         WHERE p.hi <= v_cut ORDER BY p.hi
    LOOP
        IF p_table = 'events' AND v_part.hi > p_now - interval '7 days' THEN
            -- the queues of the partition, one probe each (a loose index scan)
            EXECUTE format(
                'WITH RECURSIVE l(q) AS ('
                '    SELECT min(e.queue_name) FROM queue.%1$I e UNION ALL'
                '    SELECT (SELECT min(e.queue_name) FROM queue.%1$I e WHERE e.queue_name > l.q)'
                '      FROM l WHERE l.q IS NOT NULL) '
                'SELECT EXISTS (SELECT 1 FROM l WHERE l.q IS NOT NULL'
                '   AND NOT EXISTS (SELECT 1 FROM queue.queue_config c WHERE c.queue_name = l.q)'
                '   AND EXISTS (SELECT 1 FROM queue.%1$I e WHERE e.queue_name = l.q'
                '                  AND e.kind = ''queue_dropped'' AND e.at > $1))',
                v_part.partition_name)
                INTO v_busy USING p_now - interval '7 days';
            CONTINUE WHEN v_busy;
        END IF;
        IF p_table IN ('item_done', 'failure_log') THEN
            -- no row can come or go while the totals take what they lack
            EXECUTE format('LOCK TABLE queue.%I IN ACCESS EXCLUSIVE MODE', v_part.partition_name);
            -- one statement per queue (on Citus the totals are distributed)
            FOR v_queue IN SELECT c.queue_name FROM queue.queue_config c ORDER BY c.queue_name LOOP
                SELECT t.counted_until INTO v_counted FROM queue.metrics_totals t
                 WHERE t.queue_name = v_queue FOR UPDATE;
                IF NOT FOUND THEN
                    PERFORM queue._count_totals(v_queue, queue._open_since());
                    SELECT t.counted_until INTO v_counted FROM queue.metrics_totals t
                     WHERE t.queue_name = v_queue FOR UPDATE;
                END IF;
                EXECUTE format('SELECT count(*) FROM queue.%I x WHERE x.queue_name = $1 AND x.%I >= $2',
                               v_part.partition_name,
                               CASE p_table WHEN 'item_done' THEN 'completed_at' ELSE 'at' END)
                   INTO v_rows USING v_queue, v_counted;
                IF v_rows > 0 AND p_table = 'item_done' THEN
                    UPDATE queue.metrics_totals t SET processed = t.processed + v_rows
                     WHERE t.queue_name = v_queue;
                ELSIF v_rows > 0 THEN
                    UPDATE queue.metrics_totals t SET failed = t.failed + v_rows
                     WHERE t.queue_name = v_queue;
                END IF;
            END LOOP;
        END IF;
        EXECUTE format('DROP TABLE queue.%I', v_part.partition_name);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue._history_drop(text, timestamptz)
    IS 'Drops the partitions of a history table past every queue''s keep window; returns how many';

CREATE OR REPLACE FUNCTION queue.maintain_history()
RETURNS TABLE (table_name text, created int, dropped int)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off SET lock_timeout = '500ms' AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
    v_table record;
BEGIN
    FOR v_table IN SELECT * FROM queue._history_tables() LOOP
        table_name := v_table.table_name;
        created := 0;
        dropped := 0;
        BEGIN
            created := queue._history_extend(v_table.table_name, v_table.time_column, v_now);
            dropped := queue._history_drop(v_table.table_name, v_now);
        EXCEPTION
            WHEN lock_not_available THEN
                NULL;   -- the table is busy: the next call does it
            WHEN OTHERS THEN
                RAISE WARNING 'maintenance of the partitions of queue.% failed: %', v_table.table_name, SQLERRM
                    USING DETAIL = format('SQLSTATE %s; the next call tries again.', SQLSTATE);
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION queue.maintain_history()
    IS 'Creates the partitions of the history, the events and the failure log ahead and drops those past every queue''s retention; one row per table';

-- One batch of a queue's rows of a history table (item_done, events,
-- failure_log) older than p_keep: in the DEFAULT partition only when no
-- queue keeps the table longer (its range partitions then go whole, by
-- maintain_history), in every partition when another queue does.  Each
-- batch is the oldest rows by the queue's time index: a plain LIMIT may
-- scan from the table's start, past the dead rows of the batches before.
CREATE OR REPLACE FUNCTION queue._history_delete(p_table text, p_queue text, p_keep interval,
                                                 p_now timestamptz, p_batch int)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_cut timestamptz := p_now - p_keep;
    v_all boolean := p_keep < queue._history_keep(p_table);
    v_n bigint;
BEGIN
    IF p_table = 'item_done' AND v_all THEN
        WITH d AS (DELETE FROM queue.item_done d
                    WHERE d.queue_name = p_queue AND d.completed_at < v_cut
                      AND d.item_id = ANY (ARRAY(SELECT x.item_id FROM queue.item_done x
                                                  WHERE x.queue_name = p_queue AND x.completed_at < v_cut
                                                  ORDER BY x.completed_at LIMIT p_batch))
                   RETURNING 1)
        SELECT count(*) INTO v_n FROM d;
    ELSIF p_table = 'item_done' THEN
        WITH d AS (DELETE FROM queue.item_done_default d
                    WHERE d.queue_name = p_queue
                      AND d.item_id = ANY (ARRAY(SELECT x.item_id FROM queue.item_done_default x
                                                  WHERE x.queue_name = p_queue AND x.completed_at < v_cut
                                                  ORDER BY x.completed_at LIMIT p_batch))
                   RETURNING 1)
        SELECT count(*) INTO v_n FROM d;
    ELSIF p_table = 'events' AND v_all THEN
        WITH d AS (DELETE FROM queue.events d
                    WHERE d.queue_name = p_queue AND d.at < v_cut
                      AND d.event_id = ANY (ARRAY(SELECT x.event_id FROM queue.events x
                                                   WHERE x.queue_name = p_queue AND x.at < v_cut
                                                   ORDER BY x.at LIMIT p_batch))
                   RETURNING 1)
        SELECT count(*) INTO v_n FROM d;
    ELSIF p_table = 'events' THEN
        WITH d AS (DELETE FROM queue.events_default d
                    WHERE d.queue_name = p_queue
                      AND d.event_id = ANY (ARRAY(SELECT x.event_id FROM queue.events_default x
                                                   WHERE x.queue_name = p_queue AND x.at < v_cut
                                                   ORDER BY x.at LIMIT p_batch))
                   RETURNING 1)
        SELECT count(*) INTO v_n FROM d;
    ELSIF p_table = 'failure_log' AND v_all THEN
        WITH d AS (DELETE FROM queue.failure_log d
                    WHERE d.queue_name = p_queue AND d.at < v_cut
                      AND d.failure_id = ANY (ARRAY(SELECT x.failure_id FROM queue.failure_log x
                                                     WHERE x.queue_name = p_queue AND x.at < v_cut
                                                     ORDER BY x.at LIMIT p_batch))
                   RETURNING 1)
        SELECT count(*) INTO v_n FROM d;
    ELSE
        WITH d AS (DELETE FROM queue.failure_log_default d
                    WHERE d.queue_name = p_queue
                      AND d.failure_id = ANY (ARRAY(SELECT x.failure_id FROM queue.failure_log_default x
                                                     WHERE x.queue_name = p_queue AND x.at < v_cut
                                                     ORDER BY x.at LIMIT p_batch))
                   RETURNING 1)
        SELECT count(*) INTO v_n FROM d;
    END IF;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue._history_delete(text, text, interval, timestamptz, int)
    IS 'Deletes one batch of a queue''s rows of a history table older than p_keep; returns how many';
