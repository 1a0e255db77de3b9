-- A grant whose role was dropped names the role by its old OID, which
-- another cluster (or this one, once OIDs wrap around) may give to any
-- role: pg_dump leaves such rows out.  The queue's restrict_* flag, dumped
-- with its settings, keeps that access kind closed in the restored copy.
-- (A regrole of a dropped role reads as its bare OID, all digits; any
-- other role's name is quoted when it is all digits.  No catalog join, so
-- that the filter runs wherever the table's rows are, Citus included.)
SELECT pg_catalog.pg_extension_config_dump('queue.queue_grant',
    'WHERE grantee::pg_catalog.text OPERATOR(pg_catalog.!~) ''^[0-9]+$''');
