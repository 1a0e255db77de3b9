-- Worker names are at most 255 bytes (54000 beyond), checked in C for the
-- SQL functions too; sweep_dropped() (70_sweep.sql) forgets long-gone workers.

CREATE OR REPLACE FUNCTION queue._check_worker(p_worker text) RETURNS text
    LANGUAGE c IMMUTABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'queue_check_worker_sql';
COMMENT ON FUNCTION queue._check_worker(text) IS 'Validates a worker name (22004, 22023, 54000 over 255 bytes) and returns it';

