-- Tables.
--
-- queue_config      one row per queue: settings, the operator's pause, the
--                   breaker's state
-- item_live         items that are queued, scheduled, on hold or processing
-- item_done         processed items (the history), until retention
--                   (partitioned by time, like failure_log and events:
--                   see "History partitions" below)
-- dead_letters      dead items with their error history and review status
-- dedup_done        dedup keys of completed items, for dedup_window
-- failure_log       one row per failed attempt (transient, permanent, lost
--                   lease): failed_1h, breaker window, worker success rate
-- worker_registry   bots that dequeue; maintenance_window their windows
-- queue_grant       per-queue access grants (tenant isolation)
-- events, alerts, metrics_history: audit trail and observability
--
-- Claim order lives in one btree: (queue_name, priority, visible_at,
-- item_id).  visible_at is when the item is next claimable: run_at for a
-- queued or scheduled item, the end of the backoff after a failure, the
-- lease expiry while it is leased, and 'infinity' while on hold.  A claim
-- therefore reads the head of its priority range and never walks past
-- leased, scheduled or held rows, and an expired lease is claimable the
-- moment it expires without any sweeper.
--
-- History partitions.  item_done, failure_log and events are range
-- partitioned by their time (completed_at, at), so that retention drops
-- whole partitions instead of deleting rows (queue.maintain_history in
-- 70_maintenance.sql creates them ahead and drops them).  The parents carry
-- no keys or indexes: each partition has its own, copied from the DEFAULT
-- partition, which catches rows no range partition covers.  That keeps
-- pg_dump's output restorable: it writes each partition created at run
-- time (they are not members of the extension) as CREATE TABLE, ATTACH
-- PARTITION and then its own keys and indexes, which would collide with
-- indexes a parent index had cascaded to it.  The keys of each partition
-- lead with the queue (queue_name, item_id / event_id / failure_id); an
-- item is in the history once, because complete() moves it from item_live
-- in one statement.

CREATE TABLE queue.queue_config (
    queue_name          text        NOT NULL PRIMARY KEY,
    lease_timeout       interval    NOT NULL,
    max_attempts        int         NOT NULL,
    backoff_base        interval    NOT NULL,
    backoff_factor      float8      NOT NULL,
    backoff_max         interval    NOT NULL,
    backoff_jitter      float8      NOT NULL,
    item_ttl            interval,
    dedup_window        interval,
    priority_aging      interval,
    max_in_flight       int,
    retention           interval    NOT NULL,
    sla                 interval,
    notify              boolean     NOT NULL,
    audit               text        NOT NULL,
    breaker_threshold   float8,
    breaker_window      interval    NOT NULL,
    breaker_min_samples int         NOT NULL,
    breaker_cooldown    interval    NOT NULL,
    -- the operator's pause (pause/resume); the breaker never touches it
    paused              boolean     NOT NULL DEFAULT false,
    pause_reason        text,
    paused_at           timestamptz,
    -- the circuit breaker's state (25_breaker.sql, src/breaker.c)
    breaker_state       text        NOT NULL DEFAULT 'closed'
                        CHECK (breaker_state IN ('closed', 'open', 'probing')),
    breaker_opened_at   timestamptz,
    breaker_since       timestamptz NOT NULL DEFAULT '-infinity',
    probe_item_id       bigint,
    probe_expires_at    timestamptz,
    breaker_reason      text,                   -- why it opened
    -- per-queue grants exist for this access kind (see queue_grant)
    restrict_reader     boolean     NOT NULL DEFAULT false,
    restrict_producer   boolean     NOT NULL DEFAULT false,
    restrict_worker     boolean     NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now(),
    -- flow control (45_flow.sql)
    group_on_dead       text        NOT NULL DEFAULT 'continue'
                        CHECK (group_on_dead IN ('continue', 'block')),
    flow_limits         boolean     NOT NULL DEFAULT false,   -- any per-key limit
    flow_rate           boolean     NOT NULL DEFAULT false    -- a queue-wide rate
);

CREATE TABLE queue.item_live (
    queue_name       text        NOT NULL,
    item_id          bigint      NOT NULL DEFAULT nextval('queue.item_id_seq'),
    priority         int         NOT NULL,   -- effective (aged) priority
    visible_at       timestamptz NOT NULL,   -- next claimable at (see above)
    base_priority    int         NOT NULL,   -- priority as enqueued
    run_at           timestamptz NOT NULL,   -- became (or becomes) claimable
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    attempt          int         NOT NULL DEFAULT 0,
    max_attempts     int         NOT NULL,
    lease_token      bigint,                 -- current lease; NULL if none
    lease_expires_at timestamptz,
    worker           text,                   -- holder of the lease
    claimed_at       timestamptz,
    cap_stripe       smallint,               -- max_in_flight stripe charged
    on_hold          boolean     NOT NULL DEFAULT false,
    hold_reason      text,
    expires_at       timestamptz,
    dedup_key        text,
    correlation_id   text,
    payload          jsonb       NOT NULL,
    progress         jsonb,
    last_error       text,
    error_code       text,
    errors           jsonb       NOT NULL DEFAULT '[]',
    -- the connection (queue._session_key) that claimed or last extended the
    -- lease; 0 = no live connection tracks it, so heartbeat leaves it alone
    lease_session    bigint,
    -- flow control (45_flow.sql)
    group_key        text,
    group_pos        bigint,                 -- place in its group (a replay keeps its own)
    group_wait       boolean     NOT NULL DEFAULT false,   -- parked behind the group's head
    limit_key        text,
    requires         text[],                 -- labels a worker needs to be handed it
    -- this (expired) lease was counted as a lost lease already (sweep)
    lost_counted     boolean     NOT NULL DEFAULT false,
    -- cancel() of a processing item: the lease ends as a dead letter
    -- (cancelled) unless the item completes first
    cancel_requested_at timestamptz,
    cancel_requested_by text,
    cancel_reason    text,
    PRIMARY KEY (queue_name, item_id)
) WITH (fillfactor = 90);

CREATE INDEX item_live_claim_idx
    ON queue.item_live (queue_name, priority, visible_at, item_id);
CREATE UNIQUE INDEX item_live_dedup_idx
    ON queue.item_live (queue_name, dedup_key) WHERE dedup_key IS NOT NULL;
-- leases by holder: heartbeat, offline recovery, capacity, in-flight counts
CREATE INDEX item_live_worker_idx
    ON queue.item_live (queue_name, worker) WHERE worker IS NOT NULL;
-- items with a deadline, for sweep's expiry (only items with expires_at pay for it)
CREATE INDEX item_live_expires_idx ON queue.item_live (queue_name, expires_at) WHERE expires_at IS NOT NULL;

ALTER TABLE queue.item_live SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE queue.item_done (
    queue_name     text        NOT NULL,
    item_id        bigint      NOT NULL,
    payload        jsonb       NOT NULL,
    result         jsonb,
    attempts       int         NOT NULL,
    worker         text,
    enqueued_at    timestamptz NOT NULL,
    claimed_at     timestamptz,
    completed_at   timestamptz NOT NULL,
    dedup_key      text,
    correlation_id text,
    progress       jsonb
) PARTITION BY RANGE (completed_at);
-- The safety net of the partitions (70_maintenance.sql): rows no range
-- partition covers.  Its keys and indexes are the template of every range
-- partition (queue.maintain_history copies them).
CREATE TABLE queue.item_done_default PARTITION OF queue.item_done DEFAULT;
ALTER TABLE queue.item_done_default ADD PRIMARY KEY (queue_name, item_id);
-- per-queue completions by time: stats' last hour, snapshots, breaker window, retention
CREATE INDEX item_done_default_queue_completed_idx ON queue.item_done_default (queue_name, completed_at);
-- a worker's completions by time: the workers view's 24-hour counts
CREATE INDEX item_done_default_worker_idx ON queue.item_done_default (worker, completed_at);

-- The columns the contract lists come first, in its order (what SELECT *
-- shows); the primary key still leads with the queue.
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
    group_key      text,
    group_pos      bigint,
    limit_key      text,
    requires       text[],
    -- who cancelled it, when and why (reason cancelled)
    cancel_requested_at timestamptz,
    cancel_requested_by text,
    cancel_reason  text,
    PRIMARY KEY (queue_name, item_id)
);
CREATE INDEX dead_letters_open_idx
    ON queue.dead_letters (queue_name, dead_at)
    WHERE review_status IN ('new', 'in_review');

CREATE TABLE queue.dedup_done (
    queue_name   text        NOT NULL,
    dedup_key    text        NOT NULL,
    item_id      bigint      NOT NULL,
    completed_at timestamptz NOT NULL,
    PRIMARY KEY (queue_name, dedup_key)
);
CREATE INDEX dedup_done_completed_idx ON queue.dedup_done (queue_name, completed_at);

CREATE TABLE queue.failure_log (
    queue_name  text        NOT NULL,
    failure_id  bigint      NOT NULL DEFAULT nextval('queue.failure_id_seq'),
    at          timestamptz NOT NULL DEFAULT now(),
    item_id     bigint      NOT NULL,
    attempt     int,
    worker      text,
    kind        text        NOT NULL
                CONSTRAINT failure_log_kind_check
                CHECK (kind IN ('transient', 'permanent', 'lease_expired', 'offline')),
    error_code  text,
    error       text
) PARTITION BY RANGE (at);
CREATE TABLE queue.failure_log_default PARTITION OF queue.failure_log DEFAULT;
ALTER TABLE queue.failure_log_default ADD PRIMARY KEY (queue_name, failure_id);
CREATE INDEX failure_log_default_at_idx ON queue.failure_log_default (queue_name, at);
-- a worker's failed attempts by time: the workers view's 24-hour counts
CREATE INDEX failure_log_default_worker_idx ON queue.failure_log_default (worker, at);

CREATE TABLE queue.worker_registry (
    worker        text        NOT NULL PRIMARY KEY,
    queues        text[],
    capacity      int,
    info          jsonb       NOT NULL DEFAULT '{}',
    draining      boolean     NOT NULL DEFAULT false,
    registered_at timestamptz NOT NULL DEFAULT now(),
    last_seen     timestamptz NOT NULL DEFAULT now(),
    offline_handled_at timestamptz,
    labels        text[],                   -- capabilities, for routing
    registered_by regrole,                  -- the role that registered it (dumped by name)
    session       bigint,                   -- the connection of its last heartbeat
    restarted_at  timestamptz               -- start of its last register_worker(restart)
);

CREATE TABLE queue.maintenance_window (
    worker         text        NOT NULL,
    window_id      bigint      NOT NULL DEFAULT nextval('queue.maintenance_id_seq'),
    starts_at      timestamptz NOT NULL,
    ends_at        timestamptz NOT NULL,
    reason         text,
    PRIMARY KEY (worker, window_id),
    CHECK (ends_at > starts_at)
);

CREATE TABLE queue.queue_grant (
    queue_name text NOT NULL,
    grantee    regrole NOT NULL,   -- dumped and restored by name
    access     text NOT NULL CHECK (access IN ('producer', 'worker', 'reader')),
    PRIMARY KEY (queue_name, access, grantee)
);

-- event_id and alert_id come first, as the contract lists the columns.
CREATE TABLE queue.events (
    event_id   bigint      NOT NULL DEFAULT nextval('queue.event_id_seq'),
    queue_name text        NOT NULL,
    item_id    bigint,
    at         timestamptz NOT NULL DEFAULT now(),
    kind       text        NOT NULL,
    worker     text,
    attempt    int,
    details    jsonb       NOT NULL DEFAULT '{}'
) PARTITION BY RANGE (at);
CREATE TABLE queue.events_default PARTITION OF queue.events DEFAULT;
ALTER TABLE queue.events_default ADD PRIMARY KEY (queue_name, event_id);
CREATE INDEX events_default_at_idx ON queue.events_default (queue_name, at);
CREATE INDEX events_default_item_idx ON queue.events_default (queue_name, item_id) WHERE item_id IS NOT NULL;

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
CREATE UNIQUE INDEX alerts_open_idx
    ON queue.alerts (queue_name, kind) WHERE cleared_at IS NULL;

CREATE TABLE queue.metrics_history (
    queue_name        text        NOT NULL,
    taken_at          timestamptz NOT NULL,
    queued            bigint,
    scheduled         bigint,
    processing        bigint,
    on_hold           bigint,
    dead              bigint,
    oldest_queued_age interval,
    processed_1h      bigint,
    failed_1h         bigint,
    wait_p50          interval,
    wait_p95          interval,
    run_p50           interval,
    run_p95           interval,
    paused            boolean,
    processed         bigint,
    failed            bigint,
    PRIMARY KEY (queue_name, taken_at)
);
