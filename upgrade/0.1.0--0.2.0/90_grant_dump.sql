-- A grant whose role was dropped names the role by its old OID, which
-- another cluster (or this one, once OIDs wrap around) may give to any
-- role: pg_dump leaves such rows out.  The queue's restrict_* flag, dumped
-- with its settings, keeps that access kind closed in the restored copy.
SELECT pg_catalog.pg_extension_config_dump('queue.queue_grant',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) grantee::pg_catalog.oid)');
