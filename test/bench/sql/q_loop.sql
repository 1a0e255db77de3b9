-- queue, worker loop: enqueue (txn 1); complete the previous item and dequeue the next in one transaction (txn 2)
-- pgbench -D item_id=0 -D lease_token=0   (pgbench keeps a client's variables from one loop to the next)
SELECT queue.enqueue('bq', '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
BEGIN;
\if :item_id > 0
SELECT queue.complete('bq', :item_id, :lease_token);
\endif
SELECT coalesce(max(item_id), 0) AS item_id, coalesce(max(lease_token), 0) AS lease_token, max(payload::text) AS payload
  FROM queue.dequeue('bq', 'w' || :client_id)
\gset
COMMIT;
