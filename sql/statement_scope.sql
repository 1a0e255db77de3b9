-- The setting the extension's own statements run in (src/statement_scope.c):
-- pg_catalog as the whole search path and no JIT, set in C rather than by
-- SET clauses on the hot-path functions, and gone again when a call ends,
-- returns or fails.
\set VERBOSITY terse
SET client_min_messages = warning;
SELECT queue.create_queue('scope_q', max_attempts => 3);
SELECT count(*) AS enqueued FROM queue.enqueue_batch('scope_q', ARRAY['{}', '{}', '{}', '{}']::jsonb[]);

-- case: the statements of the hot path never compile with JIT, however low
-- the caller sets its thresholds.  SERIALIZABLE takes the claim and the
-- complete through statements rather than the direct paths; a JIT
-- compilation would print its DEBUG lines here.  (The calling statements
-- themselves cost less than 1 and are not compiled either.)
SET jit = on;
SET jit_above_cost = 1;
SET jit_inline_above_cost = 1;
SET jit_optimize_above_cost = 1;
-- the same calls once, undone, so that the caches they fill print no
-- DEBUG lines of their own below (a catalog cache that grows says so)
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT item_id AS i1, lease_token AS t1 FROM queue.dequeue('scope_q', 'scope_bot') \gset
SELECT queue.complete('scope_q', :i1, :t1);
SELECT item_id AS i2, lease_token AS t2 FROM queue.dequeue('scope_q', 'scope_bot') \gset
SELECT queue.fail('scope_q', :i2, :t2, 'transient');
SELECT queue.enqueue('scope_q', '{}', dedup_key => 'scope-k') > 0 AS enqueued;
SELECT count(*) AS claimed FROM queue.dequeue('scope_q', 'scope_bot', 2);
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SET LOCAL client_min_messages = debug1;
SELECT item_id AS i1, lease_token AS t1 FROM queue.dequeue('scope_q', 'scope_bot') \gset
SELECT queue.complete('scope_q', :i1, :t1);
SELECT item_id AS i2, lease_token AS t2 FROM queue.dequeue('scope_q', 'scope_bot') \gset
SELECT queue.fail('scope_q', :i2, :t2, 'transient');
SELECT queue.enqueue('scope_q', '{}', dedup_key => 'scope-k') > 0 AS enqueued;
SELECT count(*) AS claimed FROM queue.dequeue('scope_q', 'scope_bot', 2);
COMMIT;
RESET jit_above_cost;
RESET jit_inline_above_cost;
RESET jit_optimize_above_cost;
RESET jit;

-- case: the caller's search path is the same after a call, after a call
-- that returned rows, and after a call that failed inside its statements
-- and was caught
CREATE SCHEMA scope_s;
SET search_path = scope_s, public;
SELECT pg_catalog.current_schemas(false) AS path_before;
SELECT count(*) AS claimed FROM queue.dequeue('scope_q', 'scope_bot');
SELECT queue.enqueue('scope_q', '{}') > 0 AS enqueued;
SELECT pg_catalog.current_schemas(false) AS path_after_calls;
CREATE FUNCTION scope_s.fail_inside() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        -- fails after the call opened its statement scope: the queue is
        -- closed to this role
        PERFORM queue.dequeue('scope_closed', 'scope_bot');
    EXCEPTION WHEN insufficient_privilege THEN
        RETURN pg_catalog.array_to_string(pg_catalog.current_schemas(false), ',');
    END;
    RETURN 'no error';
END $$;
SELECT queue.create_queue('scope_closed');
CREATE ROLE regress_scope_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_scope_bot LOGIN IN ROLE queue_worker;
GRANT USAGE ON SCHEMA scope_s TO regress_scope_bot;
SET SESSION AUTHORIZATION regress_scope_admin;
SELECT queue.grant_queue('scope_closed', 'regress_scope_admin', 'worker');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_scope_bot;
SET search_path = scope_s, public;
SELECT scope_s.fail_inside() AS path_in_handler;
SELECT pg_catalog.current_schemas(false) AS path_after_caught_error;
SELECT count(*) FROM queue.dequeue('scope_closed', 'scope_bot');
SELECT pg_catalog.current_schemas(false) AS path_after_error;
RESET SESSION AUTHORIZATION;
SET search_path = scope_s, public;
SELECT pg_catalog.current_schemas(false) AS path_at_end;
RESET search_path;

DROP FUNCTION scope_s.fail_inside();
DROP SCHEMA scope_s;
SELECT queue.drop_queue('scope_closed', force => true);
SELECT queue.drop_queue('scope_q', force => true);
DROP OWNED BY regress_scope_admin, regress_scope_bot;
DROP ROLE regress_scope_admin, regress_scope_bot;
