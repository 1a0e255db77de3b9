-- queue, one session, many calls: enqueue + dequeue + complete (3 calls) per loop.
-- pgbench -c 1 -D n=0 -D warm=W -D total=T -D pause=S: the session sleeps S seconds
-- after loop W and after loop T, so that run.sh can read its memory.
\set n :n + 1
SELECT queue.enqueue('bq', '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
SELECT coalesce(max(item_id), 0) AS item_id, coalesce(max(lease_token), 0) AS lease_token, max(payload::text) AS payload
  FROM queue.dequeue('bq', 'mem')
\gset
\if :item_id > 0
SELECT queue.complete('bq', :item_id, :lease_token);
\endif
\if :n = :warm
SELECT pg_sleep(:pause);
\endif
\if :n = :total
SELECT pg_sleep(:pause);
\endif
