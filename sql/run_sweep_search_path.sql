-- The scheduled sweep, queue.run_sweep(), is a procedure that commits
-- between queues, so it runs as its caller and cannot pin search_path like
-- the SECURITY DEFINER functions do: it names every function and operator
-- with its schema instead, so that whatever search_path the admin or the
-- pg_cron job has, it runs only the extension's code.
\set VERBOSITY terse

CREATE SCHEMA regress_rs_evil;
CREATE TABLE regress_rs_evil.hits (what text);
CREATE FUNCTION regress_rs_evil.hit(w text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO regress_rs_evil.hits VALUES (w) $$;
CREATE FUNCTION regress_rs_evil.eq_int8_int4(bigint, integer) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_rs_evil.hit('= bigint integer'); RETURN true; END $$;
CREATE OPERATOR regress_rs_evil.= (LEFTARG = bigint, RIGHTARG = integer,
                                    FUNCTION = regress_rs_evil.eq_int8_int4);
CREATE FUNCTION regress_rs_evil.eq_int8(bigint, bigint) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_rs_evil.hit('= bigint'); RETURN true; END $$;
CREATE OPERATOR regress_rs_evil.= (LEFTARG = bigint, RIGHTARG = bigint,
                                    FUNCTION = regress_rs_evil.eq_int8);
CREATE FUNCTION regress_rs_evil.eq_text(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM regress_rs_evil.hit('= text'); RETURN true; END $$;
CREATE OPERATOR regress_rs_evil.= (LEFTARG = text, RIGHTARG = text,
                                    FUNCTION = regress_rs_evil.eq_text);

SELECT queue.create_queue('rs_q');
SELECT queue.create_queue('rs_r');
SELECT count(*) FROM queue.enqueue_batch('rs_q', array_fill('{}'::jsonb, ARRAY[3]));

-- case: the sweep under a search_path that puts look-alikes before pg_catalog
SET search_path = regress_rs_evil, public, pg_catalog;
CALL queue.run_sweep();
RESET search_path;
SELECT what, count(*) FROM regress_rs_evil.hits GROUP BY what ORDER BY what;

-- case: the sweep did its work
SELECT queue_name, queued FROM queue.stats() WHERE queue_name LIKE 'rs\_%' ORDER BY 1;

SELECT queue.drop_queue('rs_q', force => true);
SELECT queue.drop_queue('rs_r', force => true);
DROP SCHEMA regress_rs_evil CASCADE;
