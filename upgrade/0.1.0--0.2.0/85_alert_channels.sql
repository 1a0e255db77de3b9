-- Each queue's own alert channel, told to its readers (schema/80_observability.sql).

-- Each queue's own alert channel: queue_alerts carries every queue's
-- alerts, and LISTEN is open to every role on every channel name, so a
-- tenant's alerts are kept from other tenants by a channel name they
-- cannot know: 'queue_alerts_' and 32 random hex digits, made on the first
-- alert_channel() call and told only to roles that may read the queue.
-- _raise_alert notifies it besides queue_alerts; drop_queue forgets it, so
-- a queue created again under the name gets a new one.
CREATE TABLE IF NOT EXISTS queue.alert_channels (
    queue_name text NOT NULL PRIMARY KEY,
    channel    text NOT NULL
);
COMMENT ON TABLE queue.alert_channels IS 'Per queue: the secret channel its alerts are also sent on';

CREATE OR REPLACE FUNCTION queue.alert_channel(queue_name text)
RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_name text := queue._check_name(alert_channel.queue_name);
    v_channel text;
BEGIN
    PERFORM queue._check_access(v_name, 'reader');
    -- NB: a look first: a channel made before is told in a read-only
    -- transaction too (a hot standby, default_transaction_read_only)
    SELECT a.channel INTO v_channel FROM queue.alert_channels a WHERE a.queue_name = v_name;
    IF v_channel IS NULL THEN
        IF current_setting('transaction_read_only')::boolean THEN
            RAISE EXCEPTION 'queue "%" has no alert channel yet', v_name
                USING ERRCODE = 'read_only_sql_transaction',
                      DETAIL = 'The first alert_channel() call of a queue makes its channel, a write.',
                      HINT = 'Call alert_channel() once in a read-write transaction (on the primary).';
        END IF;
        INSERT INTO queue.alert_channels AS a (queue_name, channel)
        VALUES (v_name, 'queue_alerts_' || replace(gen_random_uuid()::text, '-', ''))
        ON CONFLICT ON CONSTRAINT alert_channels_pkey DO NOTHING;
        SELECT a.channel INTO v_channel FROM queue.alert_channels a WHERE a.queue_name = v_name;
    END IF;
    RETURN v_channel;
END
$$;
COMMENT ON FUNCTION queue.alert_channel(text)
    IS 'The channel to LISTEN on for one queue''s alerts (rows as JSON, like queue_alerts), for roles that may read the queue';

-- the table's rows are the database's: pg_dump keeps them
SELECT pg_catalog.pg_extension_config_dump('queue.alert_channels', '');
REVOKE ALL ON queue.alert_channels FROM PUBLIC;
REVOKE ALL ON FUNCTION queue.alert_channel(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queue.alert_channel(text)
   TO queue_reader, queue_producer, queue_worker, queue_admin;
