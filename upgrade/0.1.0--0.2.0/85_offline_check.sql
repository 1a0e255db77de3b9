-- The worker_offline check reads only the workers that could have gone
-- offline since the queue's previous check (schema/70_maintenance.sql).

-- The worker_offline check of each queue reads only the workers that
-- could have gone offline since its previous check: those whose last sign
-- of life fell between that check's cutoff and this one's (the index on
-- last_seen), and those its alert named then (by primary key), never
-- every worker ever seen.  checked_until is where the next check's range
-- starts: the cutoff, or the start of the oldest transaction still open
-- when that is earlier, since an open transaction may still write a
-- last_seen of its start time.  workers are the offline workers the check
-- found, read again by the next check (back online, forgotten, or past
-- the day their items count).
CREATE INDEX IF NOT EXISTS worker_registry_last_seen_idx ON queue.worker_registry (last_seen);
CREATE TABLE IF NOT EXISTS queue.offline_check (
    queue_name    text        NOT NULL PRIMARY KEY,
    checked_until timestamptz NOT NULL,
    workers       text[]      NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE queue.offline_check
    IS 'Per queue: where the next worker_offline check starts, and the offline workers the last one found';

-- The start of the oldest transaction open in this database (but the
-- caller's and autovacuum's), or now() when none is older: rows stamped
-- with now() before it are all visible, none stamped earlier can come.
CREATE OR REPLACE FUNCTION queue._open_since()
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT least(now(), min(a.xact_start))
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname OPERATOR(pg_catalog.=) current_database()
       AND a.pid OPERATOR(pg_catalog.<>) pg_backend_pid()
       AND a.xact_start IS NOT NULL
       AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')
$$;
COMMENT ON FUNCTION queue._open_since() IS 'Start of the oldest other transaction open in this database, or now()';

-- the table's rows are the database's: pg_dump keeps them
SELECT pg_catalog.pg_extension_config_dump('queue.offline_check', '');
REVOKE ALL ON queue.offline_check FROM PUBLIC;
REVOKE ALL ON FUNCTION queue._open_since() FROM PUBLIC;
