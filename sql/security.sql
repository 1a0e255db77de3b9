-- Security: tenant isolation through per-queue grants, SECURITY DEFINER
-- functions that a hostile search_path cannot hijack, no dynamic SQL,
-- and payload limits that change nothing when they refuse.
\set VERBOSITY terse
SET client_min_messages = warning;

-- case: every SECURITY DEFINER function in SQL or PL/pgSQL pins search_path
-- to pg_catalog, pg_temp; the C ones set pg_catalog alone where they connect
-- to SPI instead (src/statement_scope.c: a SET clause costs every call), so
-- they carry no SET clause at all.  The hostile-user cases below call them.
SELECT p.oid::regprocedure AS unpinned
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'queue'::regnamespace AND p.prosecdef AND l.lanname <> 'c'
   AND coalesce(p.proconfig, '{}') @> ARRAY['search_path=pg_catalog, pg_temp'] IS NOT TRUE;
SELECT p.proname AS set_in_c
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'queue'::regnamespace AND p.prosecdef AND l.lanname = 'c'
   AND p.proconfig IS NULL
 ORDER BY 1;
SELECT count(*) > 20 AS many_security_definer
  FROM pg_proc p WHERE p.pronamespace = 'queue'::regnamespace AND p.prosecdef;

-- case: the functions belong to a superuser and none builds SQL text:
-- no PL/pgSQL EXECUTE, no C function calls SPI_execute with a string built at run time;
-- but the DDL of the history's partitions, which names tables (its own
-- table names and partition names read from the catalog, quoted with %I),
-- and distribute()'s views under Citus (fixed names quoted with %I, each
-- view's own query read from the catalog)
SELECT p.oid::regprocedure AS not_superuser_owned
  FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
 WHERE p.pronamespace = 'queue'::regnamespace AND NOT r.rolsuper;
SELECT p.oid::regprocedure AS dynamic_sql
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'queue'::regnamespace AND l.lanname = 'plpgsql'
   AND p.prosrc ~* '\mexecute\M'
 ORDER BY p.oid::regprocedure::text;

-- Roles: two tenants' workers, a worker without grants, a producer, a
-- team whose members share a grant, and the hostile user.
CREATE ROLE regress_s_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_s_wa LOGIN IN ROLE queue_worker;
CREATE ROLE regress_s_wb LOGIN IN ROLE queue_worker;
CREATE ROLE regress_s_wc LOGIN IN ROLE queue_worker;
CREATE ROLE regress_s_pa LOGIN IN ROLE queue_producer;
CREATE ROLE regress_s_team NOLOGIN;
CREATE ROLE regress_s_wt LOGIN IN ROLE queue_worker, regress_s_team;
CREATE ROLE regress_s_evil LOGIN IN ROLE queue_worker, queue_producer, queue_reader;

SELECT queue.create_queue('tenant_a', max_attempts => 1);
SELECT queue.create_queue('tenant_b', max_attempts => 1);

-- case: grant_queue validates its arguments
SELECT queue.grant_queue('tenant_x', 'regress_s_wa', 'worker');
SELECT queue.grant_queue('Tenant A', 'regress_s_wa', 'worker');
SELECT queue.grant_queue('tenant_a', 'regress_s_nobody', 'worker');
SELECT queue.grant_queue('tenant_a', 'regress_s_wa', 'admin');
SELECT queue.grant_queue('tenant_a', 'regress_s_wa', NULL);
SELECT queue.grant_queue('tenant_a', NULL, 'worker');
SELECT queue.grant_queue(NULL, 'regress_s_wa', 'worker');
SELECT queue.revoke_queue('tenant_x', 'regress_s_wa', 'worker');
SELECT queue.revoke_queue('tenant_a', 'regress_s_nobody', 'worker');
SELECT queue.revoke_queue('tenant_a', 'regress_s_wa', 'owner');
SELECT count(*) AS grants FROM queue.queue_grant;

-- case: only an admin may grant
SET SESSION AUTHORIZATION regress_s_wa;
SELECT queue.grant_queue('tenant_a', 'regress_s_wa', 'worker');
RESET SESSION AUTHORIZATION;

-- case: tenant A's queue admits regress_s_wa and the team, tenant B's
-- admits regress_s_wb; both are closed to other readers as well
SET SESSION AUTHORIZATION regress_s_admin;
SELECT queue.grant_queue('tenant_a', 'regress_s_wa', 'worker');
SELECT queue.grant_queue('tenant_a', 'regress_s_wa', 'worker');  -- twice is fine
SELECT queue.grant_queue('tenant_a', 'regress_s_team', 'worker');
SELECT queue.grant_queue('tenant_a', 'regress_s_wa', 'reader');
SELECT queue.grant_queue('tenant_b', 'regress_s_wb', 'worker');
SELECT queue.grant_queue('tenant_b', 'regress_s_wb', 'reader');
RESET SESSION AUTHORIZATION;
SELECT queue_name, restrict_reader, restrict_producer, restrict_worker
  FROM queue.queue_config WHERE queue_name LIKE 'tenant_%' ORDER BY 1;
SELECT g.queue_name, r.rolname, g.access
  FROM queue.queue_grant g JOIN pg_roles r ON r.oid = g.grantee ORDER BY 1, 2, 3;
SELECT kind, details->>'role' AS role, details->>'access' AS access
  FROM queue.events WHERE queue_name = 'tenant_a' ORDER BY event_id;

-- Items in both tenants: two to claim each, one dead letter in B.
SELECT queue.enqueue('tenant_a', '{"t": "a1"}') AS a1 \gset
SELECT queue.enqueue('tenant_a', '{"t": "a2"}') AS a2 \gset
SELECT queue.enqueue('tenant_b', '{"t": "b1"}') AS b1 \gset
SELECT queue.enqueue('tenant_b', '{"t": "b2"}') AS b2 \gset
SELECT queue.enqueue('tenant_b', '{"t": "b3"}') AS b3 \gset

SET SESSION AUTHORIZATION regress_s_wb;
SELECT item_id = :b1 AS got_b1, lease_token AS tb1 FROM queue.dequeue('tenant_b', 'bot_b') \gset
SELECT item_id = :b2 AS got_b2, lease_token AS tb2 FROM queue.dequeue('tenant_b', 'bot_b') \gset
SELECT :'got_b1' AS got_b1, :'got_b2' AS got_b2;
SELECT queue.fail('tenant_b', :b2, :tb2, 'secret failure of b', permanent => true);
RESET SESSION AUTHORIZATION;

-- case: tenant A's worker cannot claim, complete, fail, extend, checkpoint,
-- release or look at tenant B's items, even with B's lease token
SET SESSION AUTHORIZATION regress_s_wa;
SELECT * FROM queue.dequeue('tenant_b', 'bot_a');
SELECT queue.complete('tenant_b', :b1, :tb1);
SELECT queue.complete_batch('tenant_b', ARRAY[:b1]::bigint[], ARRAY[:tb1]::bigint[]);
SELECT queue.fail('tenant_b', :b1, :tb1, 'sabotage');
SELECT queue.extend_lease('tenant_b', :b1, :tb1, '1 day');
SELECT queue.checkpoint('tenant_b', :b1, :tb1, '{"x": 1}');
SELECT queue.release('tenant_b', :b1, :tb1);
SELECT * FROM queue.item('tenant_b', :b1);
SELECT count(*) AS b_items FROM queue.items WHERE queue_name = 'tenant_b';
SELECT count(*) AS b_dead FROM queue.dead_letters WHERE queue_name = 'tenant_b';
SELECT count(*) AS b_events FROM queue.events WHERE queue_name = 'tenant_b';
SELECT count(*) AS b_alerts FROM queue.alerts WHERE queue_name = 'tenant_b';
SELECT queue_name FROM queue.queues ORDER BY 1;
-- its own queue works
SELECT item_id = :a1 AS got_a1, lease_token AS ta1 FROM queue.dequeue('tenant_a', 'bot_a') \gset
SELECT :'got_a1' AS got_a1;
SELECT queue.complete('tenant_a', :a1, :ta1);
SELECT queue_name, count(*) FROM queue.items GROUP BY 1 ORDER BY 1;
SELECT queue_name, count(*) FROM queue.history GROUP BY 1 ORDER BY 1;
RESET SESSION AUTHORIZATION;

-- case: B's items are untouched and B's worker sees all of B
SET SESSION AUTHORIZATION regress_s_wb;
SELECT CASE item_id WHEN :b1 THEN 'b1' WHEN :b3 THEN 'b3' END AS item, state, attempt, progress
  FROM queue.items WHERE queue_name = 'tenant_b' ORDER BY item_id;
SELECT count(*) AS b_dead FROM queue.dead_letters WHERE queue_name = 'tenant_b';
SELECT count(*) > 0 AS b_events FROM queue.events WHERE queue_name = 'tenant_b';
SELECT count(*) AS a_items_seen_by_b FROM queue.items WHERE queue_name = 'tenant_a';
SELECT queue.complete('tenant_b', :b1, :tb1);
RESET SESSION AUTHORIZATION;

-- case: a worker with no grant is shut out of both; a member of a granted
-- team gets in through membership
SET SESSION AUTHORIZATION regress_s_wc;
SELECT * FROM queue.dequeue('tenant_a', 'bot_c');
SELECT * FROM queue.dequeue('tenant_b', 'bot_c');
SELECT count(*) AS items_seen FROM queue.items;
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_s_wt;
SELECT item_id = :a2 AS team_got_a2, lease_token AS ta2 FROM queue.dequeue('tenant_a', 'bot_t') \gset
SELECT :'team_got_a2' AS team_got_a2;
SELECT queue.release('tenant_a', :a2, :ta2);
SELECT * FROM queue.dequeue('tenant_b', 'bot_t');
RESET SESSION AUTHORIZATION;

-- case: producer access is still open on tenant A (no producer grant), and
-- closes once a producer grant exists
SET SESSION AUTHORIZATION regress_s_pa;
SELECT queue.enqueue('tenant_a', '{"t": "a3"}') > 0 AS enqueued;
RESET SESSION AUTHORIZATION;
SELECT queue.grant_queue('tenant_a', 'regress_s_wa', 'producer');
SET SESSION AUTHORIZATION regress_s_pa;
SELECT queue.enqueue('tenant_a', '{"t": "a4"}');
SELECT queue.enqueue_batch('tenant_a', ARRAY['{"t": "a5"}'::jsonb]);
RESET SESSION AUTHORIZATION;

-- case: an admin is never shut out
SET SESSION AUTHORIZATION regress_s_admin;
SELECT count(*) AS admin_sees FROM queue.items WHERE queue_name IN ('tenant_a', 'tenant_b');
SELECT queue.hold('tenant_b', :b3);
SELECT queue.unhold('tenant_b', :b3);
RESET SESSION AUTHORIZATION;

-- case: revoking the last grant of a kind opens that access again
SELECT queue.revoke_queue('tenant_a', 'regress_s_team', 'worker');
SELECT queue.revoke_queue('tenant_a', 'regress_s_team', 'worker');  -- twice is fine
SELECT queue.revoke_queue('tenant_a', 'regress_s_wa', 'worker');
SELECT queue.revoke_queue('tenant_a', 'regress_s_wa', 'producer');
SELECT queue.revoke_queue('tenant_a', 'regress_s_wa', 'reader');
SELECT queue_name, restrict_reader, restrict_producer, restrict_worker
  FROM queue.queue_config WHERE queue_name LIKE 'tenant_%' ORDER BY 1;
SET SESSION AUTHORIZATION regress_s_wc;
SELECT count(*) AS claimed FROM queue.dequeue('tenant_a', 'bot_c');
SELECT queue_name FROM queue.queues ORDER BY 1;
RESET SESSION AUTHORIZATION;

-- ======================================================================
-- The hostile user: look-alike functions and operators in its own schema
-- and in public, first on its search_path.  Every look-alike records
-- that it ran; nothing may run it.
-- ======================================================================
CREATE SCHEMA regress_evil AUTHORIZATION regress_s_evil;
GRANT CREATE ON SCHEMA public TO regress_s_evil;
SET SESSION AUTHORIZATION regress_s_evil;
CREATE TABLE regress_evil.hits (what text, by_user name DEFAULT current_user);
GRANT INSERT, SELECT ON regress_evil.hits TO PUBLIC;
CREATE FUNCTION regress_evil.hit(what text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO regress_evil.hits (what) VALUES (what) $$;
GRANT USAGE ON SCHEMA regress_evil TO PUBLIC;
CREATE FUNCTION regress_evil.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('now'); RETURN '2000-01-01'; END $$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('public.now'); RETURN '2000-01-01'; END $$;
CREATE FUNCTION regress_evil.nextval(regclass) RETURNS bigint LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('nextval'); RETURN 1; END $$;
CREATE FUNCTION regress_evil.pg_notify(text, text) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('pg_notify'); END $$;
CREATE FUNCTION regress_evil.jsonb_build_object(text, text) RETURNS jsonb LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('jsonb_build_object'); RETURN '{}'; END $$;
CREATE FUNCTION regress_evil.format(text, text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('format'); RETURN $1; END $$;
CREATE FUNCTION regress_evil.lower(text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('lower'); RETURN $1; END $$;
CREATE FUNCTION regress_evil.pg_has_role(oid, name, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('pg_has_role'); RETURN true; END $$;
CREATE FUNCTION regress_evil.pg_has_role(oid, oid, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('pg_has_role'); RETURN true; END $$;
CREATE FUNCTION regress_evil.text_eq(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('= text'); RETURN true; END $$;
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.text_eq);
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.text_eq);
CREATE FUNCTION regress_evil.int8_eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('= bigint'); RETURN true; END $$;
CREATE OPERATOR regress_evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = regress_evil.int8_eq);
CREATE FUNCTION regress_evil.ts_gt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('> timestamptz'); RETURN true; END $$;
CREATE OPERATOR regress_evil.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = regress_evil.ts_gt);
CREATE OPERATOR regress_evil.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = regress_evil.ts_gt);
CREATE FUNCTION regress_evil.ts_pl(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('+ interval'); RETURN $1; END $$;
CREATE OPERATOR regress_evil.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = regress_evil.ts_pl);
CREATE FUNCTION regress_evil.jsonb_cat(jsonb, jsonb) RETURNS jsonb LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_evil.hit('|| jsonb'); RETURN $1; END $$;
CREATE OPERATOR regress_evil.|| (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = regress_evil.jsonb_cat);
-- look-alike tables in the temporary schema
CREATE TEMP TABLE item_live (queue_name text);
CREATE TEMP TABLE queue_config (queue_name text);
SET search_path = regress_evil, public, pg_catalog;
SELECT now() = '2000-01-01' AS hostile_path_active;
TRUNCATE regress_evil.hits;

-- case: the hostile user's own calls run only the extension's code
SELECT queue.enqueue('tenant_a', '{"e": 1}', dedup_key => 'evil-1') AS e1 \gset
SELECT count(*) AS batch FROM queue.enqueue_batch('tenant_a', ARRAY['{"e": 2}'::jsonb, '{"e": 3}'], dedup_keys => ARRAY['evil-2', NULL]);
SELECT item_id AS ec1, lease_token AS tc1 FROM queue.dequeue('tenant_a', 'bot_evil', batch_size => 1) \gset
SELECT queue.extend_lease('tenant_a', :ec1, :tc1) OPERATOR(pg_catalog.>) pg_catalog.now() AS extended;
SELECT queue.checkpoint('tenant_a', :ec1, :tc1, '{"step": 1}');
SELECT queue.fail('tenant_a', :ec1, :tc1, 'evil failure', retry_in => '0 s');
SELECT item_id AS ec2, lease_token AS tc2 FROM queue.dequeue('tenant_a', 'bot_evil') \gset
SELECT queue.release('tenant_a', :ec2, :tc2);
SELECT item_id AS ec3, lease_token AS tc3 FROM queue.dequeue('tenant_a', 'bot_evil') \gset
SELECT queue.complete('tenant_a', :ec3, :tc3, '{"ok": true}');
SELECT queue.complete('tenant_a', :ec3, :tc3 + 1);
SELECT queue.complete_batch('tenant_a', ARRAY[:ec3]::bigint[], ARRAY[:tc3]::bigint[]);
SELECT queue.register_worker('bot_evil', ARRAY['tenant_a'], 2, '{"v": 1}');
SELECT queue.heartbeat('bot_evil') >= 0 AS heartbeat;
SELECT state IS NOT NULL AS found FROM queue.item('tenant_a', :e1);
-- and it cannot reach tenant B through the look-alike operators
SELECT queue.grant_queue('tenant_b', 'regress_s_evil', 'worker');
SELECT queue.complete('tenant_b', :b3, 1);
SELECT count(*) AS hijacked_calls FROM regress_evil.hits;
RESET search_path;
RESET SESSION AUTHORIZATION;

-- case: an admin whose search_path the hostile user poisoned runs only the
-- extension's code in every SECURITY DEFINER function
SET SESSION AUTHORIZATION regress_s_admin;
SET search_path = regress_evil, public, pg_catalog;
SELECT queue.create_queue('tenant_c', dedup_window => '1 h', priority_aging => '1 min');
SELECT queue.alter_queue('tenant_c', max_attempts => 2, sla => '1 h');
SELECT queue.pause('tenant_a', 'poisoned');
SELECT queue.resume('tenant_a');
SELECT queue.enqueue('tenant_c', '{"c": 1}') AS c1 \gset
SELECT queue.hold('tenant_c', :c1, 'why not');
SELECT queue.unhold('tenant_c', :c1);
SELECT queue.cancel('tenant_c', :c1, 'no');
SELECT queue.review('tenant_c', :c1, 'in_review', 'looking');
SELECT queue.replay('tenant_c', :c1) > 0 AS replayed;
SELECT queue.replay_all('tenant_b');
SELECT queue.purge('tenant_c');
SELECT queue.drain_worker('bot_evil');
SELECT queue.undrain_worker('bot_evil');
SELECT queue.add_maintenance('bot_evil', pg_catalog.now(), pg_catalog.now() OPERATOR(pg_catalog.+) '1 h'::interval) > 0 AS window;
SELECT queue.grant_queue('tenant_c', 'regress_s_wc', 'reader');
SELECT queue.revoke_queue('tenant_c', 'regress_s_wc', 'reader');
SELECT queue.drop_queue('tenant_c', force => true);
SELECT count(*) AS security_definer_hijacks FROM regress_evil.hits;

-- case: reading the views under the poisoned search_path runs no look-alike either
SELECT bool_and(state IS NOT NULL) AS items FROM queue.items;
SELECT bool_and(status IS NOT NULL) AS workers FROM queue.workers;
SELECT bool_and(breaker_state IS NOT NULL) AS queues FROM queue.queues;
SELECT bool_and(completed_at IS NOT NULL) AS history FROM queue.history;
RESET search_path;
RESET SESSION AUTHORIZATION;
SELECT what, by_user, count(*) FROM regress_evil.hits GROUP BY 1, 2 ORDER BY 1, 2;

-- case: the look-alike temp tables were never written
SET SESSION AUTHORIZATION regress_s_evil;
SELECT (SELECT count(*) FROM pg_temp.item_live) + (SELECT count(*) FROM pg_temp.queue_config) AS temp_rows;
RESET SESSION AUTHORIZATION;

-- ======================================================================
-- Payload limits: exactly at queue.max_payload_bytes works, one byte over
-- fails with 54000 and changes nothing.
-- ======================================================================
SELECT jsonb_build_object('blob', repeat('x', 1000)) AS big \gset
SELECT pg_column_size(:'big'::jsonb) AS big_size \gset
SELECT count(*) AS items_before FROM queue.item_live \gset
SET queue.max_payload_bytes = :big_size;
-- case: at the limit
SELECT queue.enqueue('tenant_a', :'big') > 0 AS at_limit;
SELECT count(*) AS at_limit_batch FROM queue.enqueue_batch('tenant_a', ARRAY[:'big'::jsonb, '{}']);
SELECT :big_size - 1 AS limit_minus_1 \gset
SET queue.max_payload_bytes = :limit_minus_1;
-- case: one byte over
SELECT queue.enqueue('tenant_a', :'big');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.enqueue_batch('tenant_a', ARRAY['{}'::jsonb, :'big'::jsonb]);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) - :items_before AS new_items FROM queue.item_live;
RESET queue.max_payload_bytes;

-- case: replay with an oversized corrected payload fails and leaves the dead letter as it was
SET queue.max_payload_bytes = :limit_minus_1;
SELECT queue.replay('tenant_a', :ec1, :'big');
\echo :LAST_ERROR_SQLSTATE
RESET queue.max_payload_bytes;
SELECT review_status, replayed_as FROM queue.dead_letters WHERE queue_name = 'tenant_a' AND item_id = :ec1;

-- case: a non-superuser cannot raise the limit
SET SESSION AUTHORIZATION regress_s_admin;
SET queue.max_payload_bytes = 100000000;
RESET SESSION AUTHORIZATION;

-- case: a grant to a role that is dropped later keeps the queue closed
CREATE ROLE regress_s_gone;
SELECT queue.grant_queue('tenant_a', 'regress_s_gone', 'worker');
DROP ROLE regress_s_gone;
SELECT restrict_worker FROM queue.queue_config WHERE queue_name = 'tenant_a';
SET SESSION AUTHORIZATION regress_s_wc;
SELECT count(*) FROM queue.dequeue('tenant_a', 'bot_c');
RESET SESSION AUTHORIZATION;

-- Clean up.
SELECT queue.drop_queue('tenant_a', force => true);
SELECT queue.drop_queue('tenant_b', force => true);
SELECT count(*) AS grants_left FROM queue.queue_grant;
DROP TABLE pg_temp.item_live, pg_temp.queue_config;
DROP SCHEMA regress_evil CASCADE;
DROP FUNCTION public.now();
REVOKE CREATE ON SCHEMA public FROM regress_s_evil;
DELETE FROM queue.worker_registry WHERE worker LIKE 'bot_%';
DELETE FROM queue.maintenance_window WHERE worker LIKE 'bot_%';
DROP ROLE regress_s_admin, regress_s_wa, regress_s_wb, regress_s_wc, regress_s_pa,
          regress_s_wt, regress_s_team, regress_s_evil;
