-- Permissions: the four group roles, what each may call and read, and that
-- no one but the owner writes the tables.  Calls are made as real login
-- roles (SET ROLE); every call in the matrix is rolled back, so each role
-- meets the same state.
\set VERBOSITY terse

CREATE ROLE regress_q_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_q_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_q_worker LOGIN IN ROLE queue_worker;
CREATE ROLE regress_q_reader LOGIN IN ROLE queue_reader;
CREATE ROLE regress_q_nobody LOGIN;

-- Runs one statement as a role and rolls it back: 'ok' or the SQLSTATE.
CREATE FUNCTION public.regress_try(p_role text, p_sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        PERFORM pg_catalog.set_config('role', p_role, true);
        EXECUTE p_sql;
        RAISE EXCEPTION USING ERRCODE = 'QZ001';
    EXCEPTION
        WHEN SQLSTATE 'QZ001' THEN RETURN 'ok';
        WHEN OTHERS THEN RETURN SQLSTATE;
    END;
END
$$;

SELECT queue.create_queue('q_perm', max_attempts => 2);
SELECT queue.create_queue('q_perm_empty');
SELECT queue.enqueue('q_perm', '{"n": 1}', priority => 0) AS p_leased \gset
SELECT queue.enqueue('q_perm', '{"n": 2}', priority => 0) AS p_dead \gset
SELECT queue.enqueue('q_perm', '{"n": 3}') AS p_queued \gset
SELECT queue.enqueue('q_perm', '{"n": 4}') AS p_held \gset
SELECT array_agg(lease_token ORDER BY item_id) AS toks
  FROM queue.dequeue('q_perm', 'regress_bot', batch_size => 2) \gset
SELECT (:'toks'::bigint[])[1] AS t_leased, (:'toks'::bigint[])[2] AS t_dead \gset
SELECT queue.fail('q_perm', :p_dead, :t_dead, 'broken', permanent => true);
SELECT queue.hold('q_perm', :p_held);
SELECT queue.register_worker('regress_bot');

-- case: the extension's group roles exist and cannot log in
SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb
  FROM pg_roles WHERE rolname IN ('queue_admin', 'queue_producer', 'queue_worker', 'queue_reader')
 ORDER BY rolname;

-- case: EXECUTE per role for every function of the public contract, by exact
-- signature (a missing function shows as "missing")
SELECT f.sig,
       CASE WHEN to_regprocedure('queue.' || f.sig) IS NULL THEN 'missing'
            ELSE concat_ws(' ',
                   CASE WHEN has_function_privilege('queue_reader', 'queue.' || f.sig, 'EXECUTE') THEN 'reader' END,
                   CASE WHEN has_function_privilege('queue_producer', 'queue.' || f.sig, 'EXECUTE') THEN 'producer' END,
                   CASE WHEN has_function_privilege('queue_worker', 'queue.' || f.sig, 'EXECUTE') THEN 'worker' END,
                   CASE WHEN has_function_privilege('queue_admin', 'queue.' || f.sig, 'EXECUTE') THEN 'admin' END)
       END AS executable_by
  FROM (VALUES
    ('item(text, bigint)'),
    ('stats(text)'),
    ('health(text)'),
    ('prometheus()'),
    ('desired_workers(text, int)'),
    ('alert_channel(text)'),
    ('enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text, text, text, text[])'),
    ('enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int, text[], text[], text[])'),
    ('dequeue(text, text, int, interval)'),
    ('complete(text, bigint, bigint, jsonb)'),
    ('complete_batch(text, bigint[], bigint[], jsonb)'),
    ('fail(text, bigint, bigint, text, text, boolean, interval)'),
    ('release(text, bigint, bigint, timestamptz)'),
    ('extend_lease(text, bigint, bigint, interval)'),
    ('checkpoint(text, bigint, bigint, jsonb)'),
    ('heartbeat(text)'),
    ('register_worker(text, text[], int, jsonb, text[], boolean)'),
    ('create_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, boolean, text)'),
    ('alter_queue(text, interval, int, interval, float8, interval, float8, interval, interval, interval, int, interval, interval, boolean, text, float8, interval, int, interval, text)'),
    ('drop_queue(text, boolean)'),
    ('purge(text)'),
    ('hold(text, bigint, text)'),
    ('unhold(text, bigint)'),
    ('cancel(text, bigint, text)'),
    ('replay(text, bigint, jsonb)'),
    ('replay_all(text, text, timestamptz)'),
    ('review(text, bigint, text, text)'),
    ('pause(text, text)'),
    ('resume(text)'),
    ('drain_worker(text)'),
    ('undrain_worker(text)'),
    ('add_maintenance(text, timestamptz, timestamptz, text)'),
    ('sweep()'),
    ('sweep(text)'),
    ('apply_retention(text)'),
    ('sweep_dropped()'),
    ('run_sweep()'),
    ('maintain_history()'),
    ('snapshot_metrics()'),
    ('enable_cron(text, text)'),
    ('disable_cron()'),
    ('grant_queue(text, name, text)'),
    ('revoke_queue(text, name, text)'),
    ('schedule(text, text, text, jsonb, int, text, text)'),
    ('unschedule(text, text)'),
    ('run_schedules()'),
    ('set_limit(text, text, int, int, interval)'),
    ('drop_limit(text, text)')) AS f(sig)
 ORDER BY f.sig;

-- case: nothing in the schema is executable by PUBLIC, and the only
-- functions outside that list any group role may run are the helpers the
-- views and row-level security policies call as the reader
SELECT count(*) AS public_functions
  FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE p.pronamespace = 'queue'::regnamespace AND a.grantee = 0;
SELECT p.proname, p.prosecdef AS security_definer
  FROM pg_proc p
 WHERE p.pronamespace = 'queue'::regnamespace AND p.proname ~ '^_'
   AND (has_function_privilege('queue_reader', p.oid, 'EXECUTE')
        OR has_function_privilege('queue_producer', p.oid, 'EXECUTE')
        OR has_function_privilege('queue_worker', p.oid, 'EXECUTE')
        OR has_function_privilege('queue_admin', p.oid, 'EXECUTE'))
 ORDER BY 1;

-- case: relations: every role may SELECT the views and observability
-- tables; nobody but the owner may write anything or read the internals
SELECT c.relname, c.relkind, c.relrowsecurity AS rls,
       string_agg(DISTINCT a.privilege_type, ',') AS granted
  FROM pg_class c
  LEFT JOIN LATERAL aclexplode(c.relacl) a ON a.grantee <> c.relowner
 WHERE c.relnamespace = 'queue'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'm', 'p')
   AND NOT (c.relispartition AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT')
 GROUP BY c.relname, c.relkind, c.relrowsecurity
 ORDER BY c.relname;
-- the history's range partitions (named by date, made by maintain_history)
-- are read through their tables only
SELECT count(*) FILTER (WHERE c.relacl IS NOT NULL) AS partitions_with_grants
  FROM pg_class c
 WHERE c.relnamespace = 'queue'::regnamespace AND c.relispartition
   AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT';
SELECT DISTINCT r.rolname, has_table_privilege(r.rolname, c.oid, 'SELECT') AS can_select
  FROM pg_class c, pg_roles r
 WHERE c.relnamespace = 'queue'::regnamespace
   AND c.relname IN ('queues', 'items', 'history', 'dead_letters', 'metrics_history',
                     'alerts', 'events', 'workers')
   AND r.rolname IN ('queue_admin', 'queue_producer', 'queue_worker', 'queue_reader')
 ORDER BY 1;
SELECT s.relname
  FROM pg_class s
 WHERE s.relnamespace = 'queue'::regnamespace AND s.relkind = 'S'
   AND (has_sequence_privilege('queue_admin', s.oid, 'USAGE, SELECT, UPDATE')
        OR has_sequence_privilege('queue_worker', s.oid, 'USAGE, SELECT, UPDATE')
        OR has_sequence_privilege('queue_producer', s.oid, 'USAGE, SELECT, UPDATE')
        OR has_sequence_privilege('queue_reader', s.oid, 'USAGE, SELECT, UPDATE'));

-- case: the call matrix: 'ok' or the SQLSTATE, for each role (42501 = not granted)
SELECT c.what,
       regress_try('regress_q_reader', c.stmt) AS reader,
       regress_try('regress_q_producer', c.stmt) AS producer,
       regress_try('regress_q_worker', c.stmt) AS worker,
       regress_try('regress_q_admin', c.stmt) AS admin,
       regress_try('regress_q_nobody', c.stmt) AS nobody
  FROM (VALUES
    -- reading
    ('select queues', 'SELECT * FROM queue.queues'),
    ('select items', 'SELECT * FROM queue.items'),
    ('select history', 'SELECT * FROM queue.history'),
    ('select dead_letters', 'SELECT * FROM queue.dead_letters'),
    ('select events', 'SELECT * FROM queue.events'),
    ('select alerts', 'SELECT * FROM queue.alerts'),
    ('select metrics_history', 'SELECT * FROM queue.metrics_history'),
    ('select workers', 'SELECT * FROM queue.workers'),
    ('item', format('SELECT * FROM queue.item(%L, %s)', 'q_perm', :p_queued)),
    ('stats', 'SELECT * FROM queue.stats()'),
    ('stats(queue)', 'SELECT * FROM queue.stats(''q_perm'')'),
    ('health', 'SELECT * FROM queue.health()'),
    ('prometheus', 'SELECT queue.prometheus()'),
    ('desired_workers', 'SELECT queue.desired_workers(''q_perm'')'),
    -- producing
    ('enqueue', 'SELECT queue.enqueue(''q_perm'', ''{}'')'),
    ('enqueue_batch', 'SELECT queue.enqueue_batch(''q_perm'', ARRAY[''{}''::jsonb, ''{}''])'),
    -- consuming
    ('dequeue', 'SELECT * FROM queue.dequeue(''q_perm'', ''regress_bot'')'),
    ('complete', format('SELECT queue.complete(%L, %s, %s)', 'q_perm', :p_leased, :t_leased)),
    ('complete_batch', format('SELECT queue.complete_batch(%L, ARRAY[%s], ARRAY[%s])', 'q_perm', :p_leased, :t_leased)),
    ('fail', format('SELECT queue.fail(%L, %s, %s, %L)', 'q_perm', :p_leased, :t_leased, 'x')),
    ('release', format('SELECT queue.release(%L, %s, %s)', 'q_perm', :p_leased, :t_leased)),
    ('extend_lease', format('SELECT queue.extend_lease(%L, %s, %s)', 'q_perm', :p_leased, :t_leased)),
    ('checkpoint', format('SELECT queue.checkpoint(%L, %s, %s, %L)', 'q_perm', :p_leased, :t_leased, '{"step": 1}')),
    ('heartbeat', 'SELECT queue.heartbeat(''regress_bot'')'),
    ('register_worker', 'SELECT queue.register_worker(''regress_bot2'')'),
    -- administering
    ('create_queue', 'SELECT queue.create_queue(''q_perm_new'')'),
    ('alter_queue', 'SELECT queue.alter_queue(''q_perm'', max_attempts => 3)'),
    ('drop_queue', 'SELECT queue.drop_queue(''q_perm_empty'')'),
    ('purge', 'SELECT queue.purge(''q_perm'')'),
    ('hold', format('SELECT queue.hold(%L, %s)', 'q_perm', :p_queued)),
    ('unhold', format('SELECT queue.unhold(%L, %s)', 'q_perm', :p_held)),
    ('cancel', format('SELECT queue.cancel(%L, %s)', 'q_perm', :p_queued)),
    ('replay', format('SELECT queue.replay(%L, %s)', 'q_perm', :p_dead)),
    ('replay_all', 'SELECT queue.replay_all(''q_perm'')'),
    ('review', format('SELECT queue.review(%L, %s, %L)', 'q_perm', :p_dead, 'in_review')),
    ('pause', 'SELECT queue.pause(''q_perm'')'),
    ('resume', 'SELECT queue.resume(''q_perm'')'),
    ('drain_worker', 'SELECT queue.drain_worker(''regress_bot'')'),
    ('undrain_worker', 'SELECT queue.undrain_worker(''regress_bot'')'),
    ('add_maintenance', 'SELECT queue.add_maintenance(''regress_bot'', now(), now() + interval ''1 h'')'),
    ('sweep', 'SELECT * FROM queue.sweep()'),
    ('snapshot_metrics', 'SELECT queue.snapshot_metrics()'),
    ('grant_queue', 'SELECT queue.grant_queue(''q_perm'', ''regress_q_reader'', ''reader'')'),
    ('revoke_queue', 'SELECT queue.revoke_queue(''q_perm'', ''regress_q_reader'', ''reader'')'),
    -- internals and direct writes: owner only
    ('internal _bury', format('SELECT queue._bury(%L, %s, %L, NULL, NULL)', 'q_perm', :p_queued, 'cancelled')),
    ('internal _event', 'SELECT queue._event(''q_perm'', NULL, ''paused'')'),
    ('internal _check_access', 'SELECT queue._check_access(''q_perm'', ''worker'')'),
    ('read queue_config', 'SELECT * FROM queue.queue_config'),
    ('read item_live', 'SELECT * FROM queue.item_live'),
    ('read queue_grant', 'SELECT * FROM queue.queue_grant'),
    ('nextval item_id_seq', 'SELECT nextval(''queue.item_id_seq'')'),
    ('insert item_live', 'INSERT INTO queue.item_live (queue_name, priority, visible_at, base_priority, run_at, max_attempts, payload) VALUES (''q_perm'', 0, now(), 0, now(), 1, ''{}'')'),
    ('update queue_config', 'UPDATE queue.queue_config SET paused = true'),
    ('update dead_letters', 'UPDATE queue.dead_letters SET review_status = ''resolved'''),
    ('delete events', 'DELETE FROM queue.events'),
    ('insert alerts', 'INSERT INTO queue.alerts (queue_name, kind, message) VALUES (''q_perm'', ''x'', ''y'')'),
    ('truncate metrics_history', 'TRUNCATE queue.metrics_history'),
    ('insert queue_grant', 'INSERT INTO queue.queue_grant VALUES (''q_perm'', 1, ''reader'')'),
    ('create in schema', 'CREATE TABLE queue.regress_t (x int)'),
    ('alter function', 'ALTER FUNCTION queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text, text, text, text[]) SECURITY INVOKER')
  ) AS c(what, stmt);

-- case: the matrix changed nothing
SELECT state, count(*) FROM queue.items WHERE queue_name = 'q_perm' GROUP BY 1 ORDER BY 1;
SELECT count(*) AS dead, min(review_status) AS review_status FROM queue.dead_letters WHERE queue_name = 'q_perm';
SELECT queue_name, paused FROM queue.queues ORDER BY 1;

-- case: the same calls made plainly under SET ROLE: a reader reads but
-- cannot enqueue, claim or pause
SET ROLE regress_q_reader;
SELECT count(*) AS items_seen FROM queue.items WHERE queue_name = 'q_perm';
SELECT state FROM queue.item('q_perm', :p_queued);
SELECT queue.enqueue('q_perm', '{}');
SELECT * FROM queue.dequeue('q_perm', 'regress_bot');
SELECT queue.pause('q_perm');
RESET ROLE;

-- case: a producer enqueues, a worker claims and completes it, an admin
-- replays a dead letter; other roles' calls fail
SET SESSION AUTHORIZATION regress_q_producer;
SELECT queue.enqueue('q_perm', '{"by": "producer"}', priority => 0) AS p_new \gset
SELECT * FROM queue.dequeue('q_perm', 'regress_bot');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_q_worker;
SELECT item_id = :p_new AS got_it, lease_token AS t_new FROM queue.dequeue('q_perm', 'regress_bot') \gset
SELECT :'got_it' AS got_it;
SELECT queue.complete('q_perm', :p_new, :t_new);
SELECT queue.enqueue('q_perm', '{}');
SELECT queue.replay('q_perm', :p_dead);
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_q_admin;
SELECT queue.replay('q_perm', :p_dead) > 0 AS replayed;
SELECT count(*) AS history FROM queue.history WHERE queue_name = 'q_perm';
RESET SESSION AUTHORIZATION;

-- case: an admin cannot write the tables either
SET ROLE regress_q_admin;
DELETE FROM queue.item_live;
UPDATE queue.queue_config SET max_attempts = 1;
RESET ROLE;

-- case: the extension's roles survive DROP EXTENSION and are reused by CREATE EXTENSION
SELECT queue.drop_queue('q_perm', force => true);
SELECT queue.drop_queue('q_perm_empty');
DROP EXTENSION queue;
SELECT count(*) AS roles_left FROM pg_roles
 WHERE rolname IN ('queue_admin', 'queue_producer', 'queue_worker', 'queue_reader');
CREATE EXTENSION queue;
SELECT count(*) AS roles_now FROM pg_roles
 WHERE rolname IN ('queue_admin', 'queue_producer', 'queue_worker', 'queue_reader');
SELECT has_function_privilege('regress_q_worker', 'queue.dequeue(text, text, int, interval)', 'EXECUTE') AS worker_dequeues;

DROP FUNCTION public.regress_try(text, text);
DROP ROLE regress_q_admin, regress_q_producer, regress_q_worker, regress_q_reader, regress_q_nobody;
