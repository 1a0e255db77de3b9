-- raw floor, consumer: claim 1 (txn 1), then ack = DELETE by id (txn 2)
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
