-- Column order: dead_letters and alerts list the columns the contract
-- names first, in its order (item_id, alert_id before queue_name), as
-- schema/10_tables.sql declares them; events gets its order when it becomes
-- partitioned (92_history_tables.sql).  PostgreSQL cannot move a column, so
-- each table of 0.1.0 is rebuilt with its rows, keys, index, privileges,
-- policy and pg_dump registration (the columns added by later parts follow,
-- as in a fresh install; the triggers come with 45_flow.sql).  Does nothing
-- when a table already has the new order.

DO $$
BEGIN
    IF (SELECT a.attnum FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = 'queue.dead_letters'::regclass AND a.attname = 'queue_name') = 1 THEN
        ALTER EXTENSION queue DROP TABLE queue.dead_letters;
        ALTER TABLE queue.dead_letters RENAME TO dead_letters_reordered;
        ALTER INDEX queue.dead_letters_pkey RENAME TO dead_letters_reordered_pkey;
        ALTER INDEX queue.dead_letters_open_idx RENAME TO dead_letters_reordered_open_idx;
        ALTER TABLE queue.dead_letters_reordered
            RENAME CONSTRAINT dead_letters_reason_check TO dead_letters_reordered_reason_check;
        ALTER TABLE queue.dead_letters_reordered
            RENAME CONSTRAINT dead_letters_review_status_check TO dead_letters_reordered_review_status_check;

        CREATE TABLE queue.dead_letters (
            item_id        bigint      NOT NULL,
            queue_name     text        NOT NULL,
            payload        jsonb       NOT NULL,
            progress       jsonb,
            attempts       int         NOT NULL,
            reason         text        NOT NULL
                           CHECK (reason IN ('max_attempts', 'permanent', 'expired',
                                             'lease_expired', 'cancelled')),
            last_error     text,
            error_code     text,
            errors         jsonb       NOT NULL DEFAULT '[]',
            dead_at        timestamptz NOT NULL DEFAULT now(),
            review_status  text        NOT NULL DEFAULT 'new'
                           CHECK (review_status IN ('new', 'in_review', 'resolved', 'rejected')),
            replayed_as    bigint,
            dedup_key      text,
            correlation_id text,
            enqueued_at    timestamptz NOT NULL,
            review_note    text,
            reviewed_at    timestamptz,
            priority       int         NOT NULL DEFAULT 2,
            max_attempts   int,
            worker         text,
            PRIMARY KEY (queue_name, item_id)
        );
        INSERT INTO queue.dead_letters
               (item_id, queue_name, payload, progress, attempts, reason, last_error, error_code,
                errors, dead_at, review_status, replayed_as, dedup_key, correlation_id,
                enqueued_at, review_note, reviewed_at, priority, max_attempts, worker)
        SELECT item_id, queue_name, payload, progress, attempts, reason, last_error, error_code,
               errors, dead_at, review_status, replayed_as, dedup_key, correlation_id,
               enqueued_at, review_note, reviewed_at, priority, max_attempts, worker
          FROM queue.dead_letters_reordered;
        DROP TABLE queue.dead_letters_reordered;
        CREATE INDEX dead_letters_open_idx
            ON queue.dead_letters (queue_name, dead_at)
            WHERE review_status IN ('new', 'in_review');

        REVOKE ALL ON queue.dead_letters FROM PUBLIC;
        GRANT SELECT ON queue.dead_letters TO queue_reader, queue_producer, queue_worker, queue_admin;
        ALTER TABLE queue.dead_letters ENABLE ROW LEVEL SECURITY;
        CREATE POLICY dead_letters_read ON queue.dead_letters FOR SELECT
            USING (queue._can_read(queue_name));
        PERFORM pg_catalog.pg_extension_config_dump('queue.dead_letters', '');
    END IF;

    IF (SELECT a.attnum FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = 'queue.alerts'::regclass AND a.attname = 'queue_name') = 1 THEN
        ALTER EXTENSION queue DROP TABLE queue.alerts;
        ALTER TABLE queue.alerts RENAME TO alerts_reordered;
        ALTER INDEX queue.alerts_pkey RENAME TO alerts_reordered_pkey;
        ALTER INDEX queue.alerts_open_idx RENAME TO alerts_reordered_open_idx;

        CREATE TABLE queue.alerts (
            alert_id   bigint      NOT NULL DEFAULT nextval('queue.alert_id_seq'),
            queue_name text        NOT NULL,
            kind       text        NOT NULL,
            message    text        NOT NULL,
            details    jsonb       NOT NULL DEFAULT '{}',
            raised_at  timestamptz NOT NULL DEFAULT now(),
            cleared_at timestamptz,
            PRIMARY KEY (queue_name, alert_id)
        );
        INSERT INTO queue.alerts (alert_id, queue_name, kind, message, details, raised_at, cleared_at)
        SELECT alert_id, queue_name, kind, message, details, raised_at, cleared_at
          FROM queue.alerts_reordered;
        DROP TABLE queue.alerts_reordered;
        CREATE UNIQUE INDEX alerts_open_idx
            ON queue.alerts (queue_name, kind) WHERE cleared_at IS NULL;

        REVOKE ALL ON queue.alerts FROM PUBLIC;
        GRANT SELECT ON queue.alerts TO queue_reader, queue_producer, queue_worker, queue_admin;
        ALTER TABLE queue.alerts ENABLE ROW LEVEL SECURITY;
        CREATE POLICY alerts_read ON queue.alerts FOR SELECT
            USING (queue._can_read(queue_name));
        PERFORM pg_catalog.pg_extension_config_dump('queue.alerts', '');
    END IF;
END
$$;
