-- queue, consumer: dequeue(:batch) (txn 1), complete_batch (txn 2)
-- pgbench -D batch=100
SELECT coalesce(array_agg(item_id), '{}') AS ids, coalesce(array_agg(lease_token), '{}') AS tokens, count(payload) AS n
  FROM queue.dequeue('bq', 'w' || :client_id, :batch)
\gset
\if :n > 0
SELECT queue.complete_batch('bq', :ids::bigint[], :tokens::bigint[]);
\endif
