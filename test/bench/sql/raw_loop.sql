-- raw floor, worker loop: produce (txn 1); ack the previous message and claim the next (txn 2)
-- pgbench -D id=0
\set prio random(0, 3)
INSERT INTO rq (queue, priority, payload) VALUES ('q1', :prio, '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
BEGIN;
DELETE FROM rq WHERE id = :id;
WITH c AS (
  UPDATE rq SET vt = now() + interval '30 seconds', attempts = attempts + 1
   WHERE id IN (SELECT id FROM rq
                 WHERE queue = 'q1' AND vt <= now()
                 ORDER BY priority, id
                 FOR UPDATE SKIP LOCKED
                 LIMIT 1)
  RETURNING id, payload, attempts)
SELECT coalesce(max(id), 0) AS id, max(payload::text) AS payload FROM c
\gset
COMMIT;
