-- Messages say a whole number of seconds without a decimal (30 s), and a
-- p95 run time with its fraction of a second (0.2 s).

-- An interval the way people say it: '10 min', '1 h', '30 s'.
CREATE OR REPLACE FUNCTION queue._say_interval(p interval) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    s numeric := extract(epoch FROM p);
BEGIN
    RETURN CASE
             WHEN s >= 86400 AND s % 86400 = 0 THEN (s / 86400)::bigint || ' d'
             WHEN s >= 3600 AND s % 3600 = 0 THEN (s / 3600)::bigint || ' h'
             WHEN s >= 60 AND s % 60 = 0 THEN (s / 60)::bigint || ' min'
             ELSE trim_scale(round(s, 1))::text || ' s'
           END;
END
$$;
COMMENT ON FUNCTION queue._say_interval(interval) IS 'An interval as people say it: 10 min, 1 h, 30 s';

-- A run time or a wait (stalled leases, the oldest queued age against the
-- sla) as people say it: seconds with their fraction under a minute
-- (0.2 s, 2.9 s, 45 s; to the millisecond below one second), HH:MM:SS above.
CREATE OR REPLACE FUNCTION queue._say_run_time(p interval) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p < interval '1 min'
                THEN trim_scale(round(extract(epoch FROM p),
                                      CASE WHEN p < interval '1 s' THEN 3 ELSE 1 END))::text || ' s'
                ELSE queue._say_duration(p)
           END
$$;
COMMENT ON FUNCTION queue._say_run_time(interval) IS 'A run time as 0.2 s, 2.9 s or HH:MM:SS';
