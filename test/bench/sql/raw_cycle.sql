-- raw floor, full cycle: produce (txn 1) + claim 1 (txn 2) + ack (txn 3); one pgbench transaction = one message
\set prio random(0, 3)
INSERT INTO rq (queue, priority, payload) VALUES ('q1', :prio, '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
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
DELETE FROM rq WHERE id = :id;
