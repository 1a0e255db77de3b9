-- ======================================================================
-- Recurring items: schedule, unschedule, run_schedules, the schedules view
-- ======================================================================
--
-- pg_cron is the clock, the schedules are rows of queue.schedule_config.
-- One pg_cron job per database, queue_schedules, runs run_schedules()
-- every minute; it enqueues one item for every schedule whose tick has
-- come.  The cron expressions are evaluated here, not by pg_cron, so that
--
--  * a tick knows its own time: the newest time at or before now() that
--    the expression names, whenever the job really started (a late or
--    repeated run of the 12:00 job is still the 12:00 tick);
--  * a tick enqueues once: run_schedules records the tick in the schedule's
--    row under that row's lock, in the transaction that enqueues, and the
--    item's dedup_key 'schedule:<name>:<tick time, UTC>' catches the rest
--    while the item is live.  A second run of the same tick finds it
--    recorded, even when the first tick's item is long completed and the
--    queue has no dedup_window;
--  * scheduling needs no SQL text built from its arguments: the one job's
--    command is the constant 'SELECT queue.run_schedules()';
--  * pg_cron may live in another database (cron.database_name is often
--    postgres): the job is then created there once, by hand, with
--    cron.schedule_in_database; schedule() says how.  The rows, and so the
--    schedules, are kept by pg_dump and by upgrades like every table here.
--
-- The expressions are pg_cron's five fields (minute, hour, day of month,
-- month, day of week) with its '$' for the last day of the month, read in
-- pg_cron's time zone (cron.timezone where pg_cron has it, else GMT).  A
-- tick missed while no job ran (pg_cron down, the server stopped) is made
-- up by the next run, once: only the newest missed tick of a schedule.
--
-- Every statement here is safe to run again: the upgrade from 0.1.0 runs
-- this file as it is (upgrade/0.1.0--0.2.0/75_schedules.sql links to it).

CREATE TABLE IF NOT EXISTS queue.schedule_config (
    queue_name   text        NOT NULL
                 REFERENCES queue.queue_config (queue_name) ON DELETE CASCADE,
    name         text        NOT NULL,
    cron         text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     int         NOT NULL,
    group_key    text,
    limit_key    text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    next_tick    timestamptz NOT NULL,   -- first tick not yet enqueued
    last_tick    timestamptz,            -- the newest tick that enqueued
    last_item_id bigint,                 -- the item it enqueued (or found live)
    last_run_at  timestamptz,            -- when that tick ran
    last_error   text,                   -- why the newest due tick failed, until one succeeds
    PRIMARY KEY (queue_name, name)
);
CREATE INDEX IF NOT EXISTS schedule_config_next_tick_idx ON queue.schedule_config (next_tick);

-- Cron expressions ------------------------------------------------------

-- One field of a cron expression as the sorted values it allows.  Items
-- are separated by commas: '*', a value, a range 'a-b', each optionally
-- with a step '/n' ('5/15' runs from 5 to the field's end); names index
-- p_names from p_low.  In the day of month, '$' is the last day (32).
-- The patterns here hold no backslash ([*], [[:space:]]): PL/pgSQL parses
-- them in the caller's session, where standard_conforming_strings may be
-- off and '\s' would read as 's'.
CREATE OR REPLACE FUNCTION queue._cron_field(p_expr text, p_field text, p_what text, p_low int,
                                  p_high int, p_names text[] DEFAULT NULL)
RETURNS int[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_item text;
    m text[];
    v_lo int;
    v_hi int;
    v_step int;
    v_out int[] := '{}';
BEGIN
    -- names are folded as ASCII (COLLATE "C"): a database's own rules may
    -- not (Turkish folds 'I' to a dotless 'ı', so 'FRI' would not be 'fri')
    FOREACH v_item IN ARRAY string_to_array(lower(p_field COLLATE "C"), ',') LOOP
        IF v_item = '$' AND p_what = 'day of month' THEN
            v_out := v_out || 32;
            CONTINUE;
        END IF;
        m := regexp_match(v_item, '^([*]|[0-9]{1,2}|[a-z]{3})(?:-([0-9]{1,2}|[a-z]{3}))?(?:/([0-9]{1,2}))?$');
        IF m IS NOT NULL THEN
            v_lo := CASE WHEN m[1] = '*' THEN p_low
                         WHEN m[1] ~ '^[0-9]' THEN m[1]::int
                         ELSE array_position(p_names, m[1]) + p_low - 1 END;
            v_hi := CASE WHEN m[1] = '*' THEN p_high
                         WHEN m[2] IS NULL AND m[3] IS NOT NULL THEN p_high
                         WHEN m[2] IS NULL THEN v_lo
                         WHEN m[2] ~ '^[0-9]' THEN m[2]::int
                         ELSE array_position(p_names, m[2]) + p_low - 1 END;
            v_step := coalesce(m[3]::int, 1);
        END IF;
        IF m IS NULL OR (m[1] = '*' AND m[2] IS NOT NULL) OR v_lo IS NULL OR v_hi IS NULL
           OR v_lo < p_low OR v_hi > p_high OR v_lo > v_hi OR v_step < 1 THEN
            RAISE EXCEPTION 'invalid cron expression "%"', p_expr
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('The %s field allows %s to %s%s; "%s" is not valid there.',
                                      p_what, p_low, p_high,
                                      CASE WHEN p_names IS NOT NULL
                                           THEN format(' or %s to %s', p_names[1], p_names[cardinality(p_names)])
                                           WHEN p_what = 'day of month' THEN ', or $ for the last day'
                                           ELSE '' END,
                                      v_item),
                      HINT = 'Each field is *, a value, a range a-b, or a list of them, each optionally with a step /n (*/15); ranges run upwards.';
        END IF;
        v_out := v_out || ARRAY(SELECT generate_series(v_lo, v_hi, v_step));
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT x FROM unnest(v_out) x ORDER BY x);
END
$$;
COMMENT ON FUNCTION queue._cron_field(text, text, text, int, int, text[])
    IS 'The values one field of a cron expression allows (22023 for a malformed field)';

-- A cron expression as the values each field allows.  dom_star and
-- dow_star tell, as in Vixie cron and pg_cron, whether the day fields
-- start with '*': when neither does, a day matches either of them.
CREATE OR REPLACE FUNCTION queue._cron_parse(p_cron text,
                                  OUT minutes int[], OUT hours int[], OUT days int[],
                                  OUT months int[], OUT weekdays int[],
                                  OUT dom_star boolean, OUT dow_star boolean)
RETURNS record LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_expr text := btrim(p_cron);
    f text[];
BEGIN
    IF p_cron IS NULL THEN
        RAISE EXCEPTION 'cron must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    v_expr := CASE lower(v_expr COLLATE "C")    -- ASCII folding, as in _cron_field
                WHEN '@yearly' THEN '0 0 1 1 *'
                WHEN '@annually' THEN '0 0 1 1 *'
                WHEN '@monthly' THEN '0 0 1 * *'
                WHEN '@weekly' THEN '0 0 * * 0'
                WHEN '@daily' THEN '0 0 * * *'
                WHEN '@midnight' THEN '0 0 * * *'
                WHEN '@hourly' THEN '0 * * * *'
                ELSE v_expr END;
    f := regexp_split_to_array(v_expr, '[[:space:]]+');
    IF length(p_cron) > 200 OR cardinality(f) <> 5 THEN
        RAISE EXCEPTION 'invalid cron expression "%"', left(p_cron, 200)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A schedule has five fields: minute, hour, day of month, month, day of week; a tick happens at most once a minute.',
                  HINT = 'For example ''*/15 * * * *'' (every 15 minutes), ''0 2 * * *'' (daily at 02:00), ''0 23 $ * *'' (the last day of each month at 23:00), or @hourly, @daily, @weekly, @monthly, @yearly.';
    END IF;
    minutes := queue._cron_field(p_cron, f[1], 'minute', 0, 59);
    hours := queue._cron_field(p_cron, f[2], 'hour', 0, 23);
    days := queue._cron_field(p_cron, f[3], 'day of month', 1, 31);
    months := queue._cron_field(p_cron, f[4], 'month', 1, 12,
                                '{jan,feb,mar,apr,may,jun,jul,aug,sep,oct,nov,dec}');
    -- 0 and 7 are both Sunday
    weekdays := ARRAY(SELECT DISTINCT d % 7 FROM unnest(queue._cron_field(
                          p_cron, f[5], 'day of week', 0, 7,
                          '{sun,mon,tue,wed,thu,fri,sat}')) d ORDER BY 1);
    dom_star := f[3] LIKE '*%';
    dow_star := f[5] LIKE '*%';
END
$$;
COMMENT ON FUNCTION queue._cron_parse(text)
    IS 'Parses a five-field cron expression (or @hourly, @daily...) into the values of each field';

-- pg_cron's time zone: cron.timezone where pg_cron has the setting, else GMT.
CREATE OR REPLACE FUNCTION queue._cron_timezone() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(NULLIF(pg_catalog.current_setting('cron.timezone', true), ''), 'GMT')
$$;
COMMENT ON FUNCTION queue._cron_timezone() IS 'The time zone cron expressions are read in (pg_cron''s)';

-- The tick of a cron expression next to p_at: with p_forward the first
-- one after p_at, else the newest one at or before p_at.  NULL when there
-- is none within eight years (every weekday falls on every date, 29
-- February included, within eight years).
--
-- Daylight saving time in pg_cron's time zone, as in Vixie cron: on the
-- day clocks go back, a wall-clock time of the repeated hour names two
-- instants.  An expression whose minute or hour field is a wildcard ('*',
-- '*/n', @hourly) ticks at both, so an hour of wall-clock time repeated
-- is an hour of ticks, never an hour without; a fixed time ticks once (at
-- the instant PostgreSQL reads the wall-clock time as).  A wall-clock time
-- the clocks skip when they go forward is read as PostgreSQL reads it
-- (02:30 as 03:30 of the new offset).
CREATE OR REPLACE FUNCTION queue._cron_tick(p_cron text, p_at timestamptz, p_forward boolean)
RETURNS timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    c record := queue._cron_parse(p_cron);
    v_tz text := queue._cron_timezone();
    v_day date := (p_at AT TIME ZONE v_tz)::date;
    v_fields text[] := regexp_split_to_array(btrim(p_cron), '[[:space:]]+');
    -- a wildcard minute or hour field (Vixie cron's MIN_STAR, HR_STAR)
    v_wild boolean := lower(btrim(p_cron) COLLATE "C") = '@hourly'
                      OR (cardinality(v_fields) = 5
                          AND (v_fields[1] LIKE '*%' OR v_fields[2] LIKE '*%'));
    d date;
    v_start timestamptz;
    v_end timestamptz;
    v_offsets interval[];
    v_tick timestamptz;
    v_dom_ok boolean;
    v_dow_ok boolean;
BEGIN
    FOR i IN 0 .. 8 * 366 LOOP
        d := CASE WHEN p_forward THEN v_day + i ELSE v_day - i END;
        CONTINUE WHEN NOT extract(month FROM d)::int = ANY (c.months);
        v_dom_ok := extract(day FROM d)::int = ANY (c.days)
                    OR (32 = ANY (c.days) AND extract(month FROM d + 1) <> extract(month FROM d));
        v_dow_ok := extract(dow FROM d)::int = ANY (c.weekdays);
        CONTINUE WHEN NOT CASE WHEN c.dom_star OR c.dow_star THEN v_dom_ok AND v_dow_ok
                               ELSE v_dom_ok OR v_dow_ok END;
        -- a day whose clocks go back: the offsets before and after, whose
        -- wall-clock times of the repeated hour are both ticks (v_wild)
        v_offsets := NULL;
        IF v_wild THEN
            v_start := d::timestamp AT TIME ZONE v_tz;
            v_end := (d + 1)::timestamp AT TIME ZONE v_tz;
            IF v_end - v_start > interval '24 hours' THEN
                v_offsets := ARRAY[(v_start AT TIME ZONE v_tz) - (v_start AT TIME ZONE 'UTC'),
                                   (v_end AT TIME ZONE v_tz) - (v_end AT TIME ZONE 'UTC')];
            END IF;
        END IF;
        IF p_forward THEN
            SELECT min(t) INTO v_tick
              FROM (SELECT (d + make_time(h, m, 0)) AT TIME ZONE v_tz AS t
                      FROM unnest(c.hours) h, unnest(c.minutes) m
                    UNION ALL
                    SELECT ((d + make_time(h, m, 0)) - o) AT TIME ZONE 'UTC'
                      FROM unnest(c.hours) h, unnest(c.minutes) m, unnest(v_offsets) o
                     WHERE (((d + make_time(h, m, 0)) - o) AT TIME ZONE 'UTC') AT TIME ZONE v_tz
                           = d + make_time(h, m, 0)) x
             WHERE t > p_at;
        ELSE
            SELECT max(t) INTO v_tick
              FROM (SELECT (d + make_time(h, m, 0)) AT TIME ZONE v_tz AS t
                      FROM unnest(c.hours) h, unnest(c.minutes) m
                    UNION ALL
                    SELECT ((d + make_time(h, m, 0)) - o) AT TIME ZONE 'UTC'
                      FROM unnest(c.hours) h, unnest(c.minutes) m, unnest(v_offsets) o
                     WHERE (((d + make_time(h, m, 0)) - o) AT TIME ZONE 'UTC') AT TIME ZONE v_tz
                           = d + make_time(h, m, 0)) x
             WHERE t <= p_at;
        END IF;
        IF v_tick IS NOT NULL THEN
            RETURN v_tick;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION queue._cron_tick(text, timestamptz, boolean)
    IS 'The first tick of a cron expression after a time (forward), or the newest at or before it';

-- The pg_cron job --------------------------------------------------------

-- Where pg_cron runs: 'here' when its extension is in this database,
-- 'elsewhere' when it is loaded but lives in another database (its job
-- for this database must then be created there).  55000 when pg_cron is
-- not loaded, or should be here and is not installed.
CREATE OR REPLACE FUNCTION queue._schedule_clock()
RETURNS text LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_db text := queue._pg_cron_database();
BEGIN
    -- NB: before the look for the extension: pg_cron installed here but
    -- not loaded (dropped from shared_preload_libraries) runs no job
    IF v_db IS NULL OR v_db = '' THEN
        RAISE EXCEPTION 'pg_cron is not loaded'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Recurring items are enqueued by a pg_cron job.',
                  HINT = 'Add pg_cron to shared_preload_libraries, restart the server, and run CREATE EXTENSION pg_cron in the database named by cron.database_name.';
    END IF;
    PERFORM 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron';
    IF FOUND THEN
        RETURN 'here';
    END IF;
    IF v_db = current_database() THEN
        RAISE EXCEPTION 'pg_cron is not installed in database "%"', current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Recurring items are enqueued by a pg_cron job; cron.database_name names this database.',
                  HINT = 'Run CREATE EXTENSION pg_cron in this database.';
    END IF;
    RETURN 'elsewhere';
END
$$;
COMMENT ON FUNCTION queue._schedule_clock()
    IS 'Whether pg_cron runs here or in another database; 55000 with a hint when it cannot run schedules';

-- Creates (or keeps) the job that runs run_schedules() every minute, or,
-- with pg_cron in another database, says how to create it there.  A job
-- of that name paused in pg_cron is made active again (pg_cron's
-- replacement of a job by name keeps it paused).
CREATE OR REPLACE FUNCTION queue._schedule_job()
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_job bigint;
BEGIN
    IF queue._schedule_clock() = 'here' THEN
        PERFORM 1 FROM cron.job j
         WHERE j.jobname = 'queue_schedules' AND j.database = current_database()
           AND j.schedule = '* * * * *' AND j.command = 'SELECT queue.run_schedules()'
           AND j.active;
        IF NOT FOUND THEN
            v_job := cron.schedule_in_database('queue_schedules', '* * * * *',
                                               'SELECT queue.run_schedules()', current_database());
            IF EXISTS (SELECT 1 FROM cron.job j WHERE j.jobid = v_job AND NOT j.active) THEN
                PERFORM cron.alter_job(v_job, active => true);
            END IF;
        END IF;
    ELSE
        RAISE NOTICE 'pg_cron runs in database "%": its job for this database must be created there',
                     current_setting('cron.database_name')
            USING DETAIL = 'Schedules tick only while a pg_cron job runs SELECT queue.run_schedules() in this database every minute.',
                  HINT = format('Unless done already, run once in database %s: SELECT cron.schedule_in_database(%L, %L, %L, %L);',
                                quote_ident(current_setting('cron.database_name')),
                                'queue_schedules_' || current_database(), '* * * * *',
                                'SELECT queue.run_schedules()', current_database());
    END IF;
END
$$;
COMMENT ON FUNCTION queue._schedule_job()
    IS 'Creates the pg_cron job queue_schedules here, or says how to create it where pg_cron runs';

-- API ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION queue.schedule(queue_name text, name text, cron text, payload jsonb,
                               priority int DEFAULT 2, group_key text DEFAULT NULL,
                               limit_key text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(schedule.queue_name);
    v_next timestamptz;
    v_old queue.schedule_config;
    v_try int;
BEGIN
    IF schedule.name IS NULL THEN
        RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF schedule.name !~ '^[a-z0-9][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid schedule name "%"', left(schedule.name, 100)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Schedule names are 1 to 63 lower-case letters, digits, _ and -, starting with a letter or digit.';
    END IF;
    IF schedule.priority IS NULL THEN
        RAISE EXCEPTION 'priority must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- as enqueue says it: the ticks are enqueue's items
    IF schedule.priority NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'priority % is out of range', schedule.priority
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Priorities run from 0 (most urgent) to 1000.';
    END IF;
    IF schedule.group_key = '' OR schedule.limit_key = '' THEN
        RAISE EXCEPTION '% must not be empty',
                        CASE WHEN schedule.group_key = '' THEN 'group_key' ELSE 'limit_key' END
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL for items without one.';
    END IF;
    PERFORM queue._check_key(schedule.group_key, 'group_key');
    PERFORM queue._check_key(schedule.limit_key, 'limit_key');
    PERFORM queue._check_payload(schedule.payload);
    v_next := queue._cron_tick(schedule.cron, now(), true);
    IF v_next IS NULL THEN
        RAISE EXCEPTION 'cron expression "%" never fires', schedule.cron
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Check the day of month against the month (30 February does not exist).';
    END IF;
    PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = v_name FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', v_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Create it with queue.create_queue(%L).', v_name);
    END IF;
    PERFORM queue._schedule_job();

    -- NB: a schedule of the name that another transaction is creating is
    -- waited for by the INSERT, then found and replaced on the next turn
    -- (never a unique violation); one unscheduled meanwhile is made anew
    FOR v_try IN 1..3 LOOP
        SELECT * INTO v_old FROM queue.schedule_config s
         WHERE s.queue_name = v_name AND s.name = schedule.name FOR UPDATE;
        IF FOUND THEN
            -- the same expression again (a deploy script re-run) keeps its
            -- pending tick; a new one starts from now
            UPDATE queue.schedule_config s
               SET cron = schedule.cron, payload = schedule.payload, priority = schedule.priority,
                   group_key = schedule.group_key, limit_key = schedule.limit_key,
                   updated_at = now(), last_error = NULL,
                   next_tick = CASE WHEN s.cron = schedule.cron THEN s.next_tick ELSE v_next END
             WHERE s.queue_name = v_name AND s.name = schedule.name;
            EXIT;
        END IF;
        INSERT INTO queue.schedule_config AS s (queue_name, name, cron, payload, priority,
                                                group_key, limit_key, next_tick)
        VALUES (v_name, schedule.name, schedule.cron, schedule.payload, schedule.priority,
                schedule.group_key, schedule.limit_key, v_next)
        ON CONFLICT (queue_name, name) DO NOTHING;
        EXIT WHEN FOUND;
        IF v_try = 3 THEN
            RAISE EXCEPTION 'could not set schedule "%" of queue "%"', schedule.name, v_name
                USING ERRCODE = 'serialization_failure',
                      DETAIL = 'Other transactions kept creating and removing a schedule of that name.',
                      HINT = 'Retry the transaction.';
        END IF;
    END LOOP;
    PERFORM queue._event(v_name, NULL, 'schedule_set', NULL, NULL,
                         jsonb_build_object('name', schedule.name, 'cron', schedule.cron,
                                            'replaced', v_old.name IS NOT NULL,
                                            'by', session_user));
END
$$;
COMMENT ON FUNCTION queue.schedule(text, text, text, jsonb, int, text, text)
    IS 'Enqueues payload into the queue at every tick of a cron expression (pg_cron); replaces a schedule of the same name';

CREATE OR REPLACE FUNCTION queue.unschedule(queue_name text, name text)
RETURNS boolean LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(unschedule.queue_name);
    v_cron text;
BEGIN
    IF unschedule.name IS NULL THEN
        RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM queue._check_access(v_name, 'reader');
    DELETE FROM queue.schedule_config s
     WHERE s.queue_name = v_name AND s.name = unschedule.name
    RETURNING s.cron INTO v_cron;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM queue._event(v_name, NULL, 'schedule_removed', NULL, NULL,
                         jsonb_build_object('name', unschedule.name, 'cron', v_cron,
                                            'by', session_user));
    RETURN true;
END
$$;
COMMENT ON FUNCTION queue.unschedule(text, text)
    IS 'Removes a schedule; false if the queue has no schedule of that name';

-- One tick of one schedule, in the caller's subtransaction: the newest due
-- tick is enqueued and recorded under the row's lock, or nothing happens
-- when it is recorded already.  Returns the item id, NULL if nothing was due.
CREATE OR REPLACE FUNCTION queue._schedule_fire(p_queue text, p_name text)
RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    s queue.schedule_config;
    v_tick timestamptz;
    v_key text;
    v_id bigint;
BEGIN
    -- the queue before the schedule's row, in drop_queue's order (its
    -- queue lock, then the rows it removes): holding the row while waiting
    -- for a drop that waits for the row would deadlock it; after the drop
    -- the row is gone
    PERFORM queue._lock_queue(p_queue, false);
    -- NB: a second run of the same tick waits here, then finds next_tick
    -- moved past it
    SELECT * INTO s FROM queue.schedule_config c
     WHERE c.queue_name = p_queue AND c.name = p_name AND c.next_tick <= now()
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_tick := queue._cron_tick(s.cron, now(), false);
    IF v_tick IS NULL OR v_tick < s.next_tick THEN
        -- nothing new is due (the time zone moved under the schedule)
        UPDATE queue.schedule_config c SET next_tick = queue._cron_tick(s.cron, now(), true)
         WHERE c.queue_name = p_queue AND c.name = p_name;
        RETURN NULL;
    END IF;
    v_key := format('schedule:%s:%s', s.name,
                    to_char(v_tick AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"'));
    v_id := queue.enqueue(p_queue, s.payload, s.priority, dedup_key => v_key,
                          group_key => s.group_key, limit_key => s.limit_key);
    UPDATE queue.schedule_config c
       SET last_tick = v_tick, last_item_id = v_id, last_run_at = now(), last_error = NULL,
           next_tick = queue._cron_tick(s.cron, now(), true)
     WHERE c.queue_name = p_queue AND c.name = p_name;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION queue._schedule_fire(text, text)
    IS 'Enqueues the newest due tick of one schedule unless it is recorded already';

CREATE OR REPLACE FUNCTION queue.run_schedules()
RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r record;
    v_n int := 0;
    v_err text;
BEGIN
    FOR r IN
        SELECT s.queue_name, s.name FROM queue.schedule_config s
         WHERE s.next_tick <= now() ORDER BY s.next_tick, s.queue_name, s.name
    LOOP
        -- one broken schedule (a queue closed to the job's role, a payload
        -- over a lowered max_payload_bytes) never stops the others
        BEGIN
            IF queue._schedule_fire(r.queue_name, r.name) IS NOT NULL THEN
                v_n := v_n + 1;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_err = MESSAGE_TEXT;
            -- NB: never waits for the row: what failed may be the wait for
            -- it (a lock_timeout while an administrator's transaction
            -- replaces or removes the schedule), and an error here would
            -- end the run; a schedule() replacing it clears last_error
            UPDATE queue.schedule_config s SET last_error = left(v_err, 1000)
             WHERE (s.queue_name, s.name) IN
                   (SELECT x.queue_name, x.name FROM queue.schedule_config x
                     WHERE x.queue_name = r.queue_name AND x.name = r.name
                       FOR UPDATE SKIP LOCKED);
            RAISE WARNING 'schedule "%" of queue "%" could not enqueue: %', r.name, r.queue_name, v_err;
        END;
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION queue.run_schedules()
    IS 'Enqueues the due tick of every schedule and returns how many it handled; run every minute by the pg_cron job queue_schedules';

CREATE OR REPLACE VIEW queue.schedules WITH (security_barrier) AS
SELECT s.queue_name, s.name, s.cron, s.payload, s.priority, s.group_key, s.limit_key,
       s.last_tick, s.last_item_id, s.last_run_at, s.next_tick, s.last_error,
       s.created_at, s.updated_at
  FROM queue.schedule_config s
 WHERE queue._can_read(s.queue_name);
COMMENT ON VIEW queue.schedules
    IS 'Recurring items: each schedule with its last tick, the item it produced, and the next tick';
