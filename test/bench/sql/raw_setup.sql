-- Raw SQL floor: plain table queue. Recreated by run.sh before every run.
SET client_min_messages = warning;
DROP TABLE IF EXISTS rq;
CREATE TABLE rq (
  id        bigserial PRIMARY KEY,
  queue     text        NOT NULL,
  priority  int         NOT NULL DEFAULT 0,
  vt        timestamptz NOT NULL DEFAULT now(),
  payload   jsonb,
  attempts  int         NOT NULL DEFAULT 0
);
-- claim index: equality on queue, ordered by (priority, id); vt is filtered
-- from the heap (keeps the claim UPDATE HOT-eligible since vt is not indexed).
CREATE INDEX rq_claim_idx ON rq (queue, priority, id);
