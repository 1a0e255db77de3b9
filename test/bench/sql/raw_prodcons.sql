-- raw floor, producers + batch consumers: every client inserts one message per loop;
-- clients with client_id < :consumers also claim up to :batch (txn) and ack them (txn).
-- pgbench -D batch=100 -D consumers=1   (mirrors pgq_cycle.sql)
\set prio random(0, 3)
INSERT INTO rq (queue, priority, payload) VALUES ('q1', :prio, '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
\if :client_id < :consumers
WITH c AS (
  UPDATE rq SET vt = now() + interval '30 seconds', attempts = attempts + 1
   WHERE id IN (SELECT id FROM rq
                 WHERE queue = 'q1' AND vt <= now()
                 ORDER BY priority, id
                 FOR UPDATE SKIP LOCKED
                 LIMIT :batch)
  RETURNING id, payload, attempts)
SELECT coalesce(array_agg(id), '{}') AS ids, count(payload) AS n FROM c
\gset
\if :n > 0
DELETE FROM rq WHERE id = ANY (:ids::bigint[]);
\endif
\endif
