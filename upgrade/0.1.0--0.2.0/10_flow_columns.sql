-- Flow control and routing: new columns (as declared in schema/10_tables.sql).

ALTER TABLE queue.item_live
    ADD COLUMN IF NOT EXISTS group_key  text,
    ADD COLUMN IF NOT EXISTS group_pos  bigint,         -- place in the group (replays keep theirs)
    ADD COLUMN IF NOT EXISTS group_wait boolean NOT NULL DEFAULT false,   -- parked behind the head
    ADD COLUMN IF NOT EXISTS limit_key  text,
    ADD COLUMN IF NOT EXISTS requires   text[];
ALTER TABLE queue.dead_letters
    ADD COLUMN IF NOT EXISTS group_key  text,
    ADD COLUMN IF NOT EXISTS group_pos  bigint,
    ADD COLUMN IF NOT EXISTS limit_key  text,
    ADD COLUMN IF NOT EXISTS requires   text[];
ALTER TABLE queue.queue_config
    ADD COLUMN IF NOT EXISTS group_on_dead text NOT NULL DEFAULT 'continue'
        CHECK (group_on_dead IN ('continue', 'block')),
    ADD COLUMN IF NOT EXISTS flow_limits boolean NOT NULL DEFAULT false,   -- any per-key limit
    ADD COLUMN IF NOT EXISTS flow_rate   boolean NOT NULL DEFAULT false;   -- a queue-wide rate

