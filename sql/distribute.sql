--
-- distribute: without Citus, queue.distributed() says so and
-- queue.distribute() refuses with a hint (the Citus side runs in
-- test/citus/run.sh, `make test-citus`).
--
\set SHOW_CONTEXT never
SELECT queue.distributed();
SELECT * FROM queue.distribute();
SELECT * FROM queue.distribute(shard_count => 8);
DO $$
BEGIN
    PERFORM queue.distribute();
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'SQLSTATE %', SQLSTATE;
END
$$;

-- who may call them: distribute() is the administrator's, distributed()
-- everyone's who uses queues
SELECT r.rolname,
       has_function_privilege(r.rolname, 'queue.distribute(int)', 'EXECUTE') AS distribute,
       has_function_privilege(r.rolname, 'queue.distributed()', 'EXECUTE') AS distributed
  FROM pg_roles r
 WHERE r.rolname IN ('queue_admin', 'queue_producer', 'queue_worker', 'queue_reader')
 ORDER BY 1;
SELECT has_function_privilege('public', 'queue.distribute(int)', 'EXECUTE') AS public_may_distribute;
