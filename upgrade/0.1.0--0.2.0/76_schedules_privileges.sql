-- Privileges and pg_dump registration of the recurring items, as
-- schema/90_security.sql gives them to a fresh install.

REVOKE ALL ON TABLE queue.schedule_config FROM PUBLIC;
REVOKE ALL ON TABLE queue.schedules FROM PUBLIC;
GRANT SELECT ON queue.schedules TO queue_reader, queue_producer, queue_worker, queue_admin;
REVOKE ALL ON FUNCTION
    queue._cron_field(text, text, text, int, int, text[]),
    queue._cron_parse(text),
    queue._cron_timezone(),
    queue._cron_tick(text, timestamptz, boolean),
    queue._schedule_clock(),
    queue._schedule_job(),
    queue.schedule(text, text, text, jsonb, int, text, text),
    queue.unschedule(text, text),
    queue._schedule_fire(text, text),
    queue.run_schedules()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    queue.schedule(text, text, text, jsonb, int, text, text),
    queue.unschedule(text, text),
    queue.run_schedules()
    TO queue_admin;
SELECT pg_catalog.pg_extension_config_dump('queue.schedule_config', '');
