-- ======================================================================
-- Replica mode: the triggers that keep every backend's caches of queue
-- settings and worker gates fresh also fire under
-- session_replication_role = replica, so settings written by a logical
-- replication apply worker (or any session in that mode) take effect in
-- every backend at once, as they do on the publisher.  Runs last, over
-- every trigger on queue._invalidate_cache, whichever file created it.
-- ======================================================================

DO $$
DECLARE
    v_trigger record;
BEGIN
    FOR v_trigger IN
        SELECT t.tgrelid::regclass AS rel, t.tgname
          FROM pg_catalog.pg_trigger t
         WHERE t.tgfoid OPERATOR(pg_catalog.=) 'queue._invalidate_cache()'::pg_catalog.regprocedure
           AND t.tgenabled OPERATOR(pg_catalog.<>) 'A'
         ORDER BY 1, 2
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I',
                                  v_trigger.rel, v_trigger.tgname);
    END LOOP;
END
$$;
