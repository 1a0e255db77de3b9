-- Locks no outsider can take: the sweep lock and the max_in_flight stripes
-- use private lock tags (src/config.c) instead of advisory keys that any
-- role could hold.

DROP FUNCTION IF EXISTS queue._sweep_lock_key();

CREATE OR REPLACE FUNCTION queue._try_lock_sweep(queue_name text) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'queue_try_lock_sweep_sql';
COMMENT ON FUNCTION queue._try_lock_sweep(text) IS 'Tries the queue''s sweep lock for the transaction; false while another session sweeps it';

REVOKE ALL ON FUNCTION queue._try_lock_sweep(text) FROM PUBLIC;
