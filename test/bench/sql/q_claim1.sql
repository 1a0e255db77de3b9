-- queue, consumer: dequeue 1 (txn 1), complete it (txn 2)
SELECT coalesce(max(item_id), 0) AS item_id, coalesce(max(lease_token), 0) AS lease_token, max(payload::text) AS payload
  FROM queue.dequeue('bq', 'w' || :client_id)
\gset
\if :item_id > 0
SELECT queue.complete('bq', :item_id, :lease_token);
\endif
