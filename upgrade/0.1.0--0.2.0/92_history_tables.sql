-- The history, the events and the failure log become range partitioned
-- by time (10_tables.sql, 72_history.sql).  Each table of 0.1.0 is kept
-- with its rows and indexes, renamed to <table>_upgraded, and attached as
-- the partition from MINVALUE to the end of the current slot of
-- queue.history_partition_width; maintain_history() creates the
-- partitions after it and drops it once its newest row is past every
-- queue's retention.  No row is copied; the ATTACH reads each old table
-- once to check its bound.  The old table leaves the extension, like every
-- partition made at run time, so that pg_dump writes it with its rows.
-- The views on the old tables are defined again on the new ones.  Does
-- nothing when the tables are partitioned already.

DO $$
DECLARE
    v_width interval := make_interval(secs => queue._history_partition_width());
    v_bound timestamptz := date_bin(v_width, clock_timestamp(), '2000-01-03 00:00:00+00') + v_width;
    v_table record;
    v_index record;
    v_view record;
    v_views jsonb;
BEGIN
    IF (SELECT c.relkind FROM pg_catalog.pg_class c
         WHERE c.oid = pg_catalog.to_regclass('queue.item_done')) IS DISTINCT FROM 'r' THEN
        RETURN;
    END IF;

    -- the views that read the old tables, as defined now
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'name', v.relname,
               'options', coalesce(array_to_string(v.reloptions, ', '), ''),
               'definition', pg_catalog.pg_get_viewdef(v.oid))), '[]')
      INTO v_views
      FROM pg_catalog.pg_class v
     WHERE v.relnamespace = 'queue'::regnamespace AND v.relkind = 'v'
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                     JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
                    WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass
                      AND r.ev_class = v.oid
                      AND d.refclassid = 'pg_catalog.pg_class'::regclass
                      AND d.refobjid IN ('queue.item_done'::regclass, 'queue.events'::regclass,
                                         'queue.failure_log'::regclass));

    FOR v_table IN SELECT * FROM queue._history_tables() LOOP
        EXECUTE format('ALTER TABLE queue.%I RENAME TO %I',
                       v_table.table_name, v_table.table_name || '_upgraded');
        FOR v_index IN
            SELECT c.relname FROM pg_catalog.pg_index i
              JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid = pg_catalog.to_regclass('queue.' || v_table.table_name || '_upgraded')
        LOOP
            EXECUTE format('ALTER INDEX queue.%I RENAME TO %I', v_index.relname,
                           v_table.table_name || '_upgraded'
                           || substr(v_index.relname, length(v_table.table_name) + 1));
        END LOOP;
        EXECUTE format('ALTER EXTENSION queue DROP TABLE queue.%I', v_table.table_name || '_upgraded');
        -- read through the parent only, like every partition
        EXECUTE format('REVOKE ALL ON queue.%I FROM queue_reader, queue_producer, queue_worker, queue_admin',
                       v_table.table_name || '_upgraded');
    END LOOP;
    DROP POLICY events_read ON queue.events_upgraded;
    ALTER TABLE queue.events_upgraded DISABLE ROW LEVEL SECURITY;

    -- the tables as 10_tables.sql defines them: the columns, defaults and
    -- checks of 0.1.0, partitioned, with a DEFAULT partition that carries
    -- the keys and indexes
    CREATE TABLE queue.item_done (LIKE queue.item_done_upgraded INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (completed_at);
    CREATE TABLE queue.item_done_default PARTITION OF queue.item_done DEFAULT;
    ALTER TABLE queue.item_done_default ADD PRIMARY KEY (queue_name, item_id);
    CREATE INDEX item_done_default_queue_completed_idx ON queue.item_done_default (queue_name, completed_at);
    CREATE INDEX item_done_default_worker_idx ON queue.item_done_default (worker, completed_at);

    CREATE TABLE queue.failure_log (LIKE queue.failure_log_upgraded INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (at);
    CREATE TABLE queue.failure_log_default PARTITION OF queue.failure_log DEFAULT;
    ALTER TABLE queue.failure_log_default ADD PRIMARY KEY (queue_name, failure_id);
    CREATE INDEX failure_log_default_at_idx ON queue.failure_log_default (queue_name, at);
    CREATE INDEX failure_log_default_worker_idx ON queue.failure_log_default (worker, at);

    -- events in the contract's column order (event_id first); the old
    -- table keeps its order as a partition, which maps columns by name
    CREATE TABLE queue.events (
        event_id   bigint      NOT NULL DEFAULT nextval('queue.event_id_seq'),
        queue_name text        NOT NULL,
        item_id    bigint,
        at         timestamptz NOT NULL DEFAULT now(),
        kind       text        NOT NULL,
        worker     text,
        attempt    int,
        details    jsonb       NOT NULL DEFAULT '{}'
    ) PARTITION BY RANGE (at);
    CREATE TABLE queue.events_default PARTITION OF queue.events DEFAULT;
    ALTER TABLE queue.events_default ADD PRIMARY KEY (queue_name, event_id);
    CREATE INDEX events_default_at_idx ON queue.events_default (queue_name, at);
    CREATE INDEX events_default_item_idx ON queue.events_default (queue_name, item_id) WHERE item_id IS NOT NULL;

    FOR v_table IN SELECT * FROM queue._history_tables() LOOP
        EXECUTE format('ALTER TABLE queue.%I ATTACH PARTITION queue.%I FOR VALUES FROM (MINVALUE) TO (%L)',
                       v_table.table_name, v_table.table_name || '_upgraded',
                       to_char(v_bound AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS+00'));
    END LOOP;

    FOR v_view IN SELECT * FROM jsonb_to_recordset(v_views) AS x(name text, options text, definition text) LOOP
        EXECUTE format('CREATE OR REPLACE VIEW queue.%I%s AS %s', v_view.name,
                       CASE WHEN v_view.options <> '' THEN ' WITH (' || v_view.options || ')' ELSE '' END,
                       rtrim(v_view.definition, ';'));
    END LOOP;

    -- privileges, row-level security and pg_dump, as 90_security.sql
    GRANT SELECT ON queue.events TO queue_reader, queue_producer, queue_worker, queue_admin;
    ALTER TABLE queue.events ENABLE ROW LEVEL SECURITY;
    CREATE POLICY events_read ON queue.events FOR SELECT
        USING (queue._can_read(queue_name)
               AND (kind OPERATOR(pg_catalog.<>) 'queue_dropped'
                    OR pg_catalog.pg_has_role(queue._caller(), 'queue_admin', 'MEMBER')));
    PERFORM pg_catalog.pg_extension_config_dump('queue.item_done_default', '');
    PERFORM pg_catalog.pg_extension_config_dump('queue.events_default', '');
    PERFORM pg_catalog.pg_extension_config_dump('queue.failure_log_default', '');
END
$$;

-- privileges as 90_security.sql leaves them
REVOKE ALL ON queue.item_done, queue.item_done_default, queue.events, queue.events_default,
              queue.failure_log, queue.failure_log_default FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._history_partition_width(), queue._history_tables(),
              queue._history_partitions(text), queue._history_keep(text),
              queue._history_extend(text, text, timestamptz), queue._history_drop(text, timestamptz),
              queue._history_delete(text, text, interval, timestamptz, int),
              queue.maintain_history() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue.maintain_history() TO queue_admin;
