-- raw floor, consumer: claim :batch at once (txn 1), ack them with one DELETE (txn 2)
-- pgbench -D batch=100
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
DELETE FROM rq WHERE id = ANY (:ids::bigint[]);
