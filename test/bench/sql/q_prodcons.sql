-- queue, producers + batch consumers: every client enqueues one item per loop;
-- clients with client_id < :consumers also dequeue up to :batch (txn) and complete_batch them (txn).
-- pgbench -D batch=100 -D consumers=1   (mirrors pgq_cycle.sql: every client produces, client 0 consumes)
SELECT queue.enqueue('bq', '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
\if :client_id < :consumers
SELECT coalesce(array_agg(item_id), '{}') AS ids, coalesce(array_agg(lease_token), '{}') AS tokens, count(payload) AS n
  FROM queue.dequeue('bq', 'c' || :client_id, :batch)
\gset
\if :n > 0
SELECT queue.complete_batch('bq', :ids::bigint[], :tokens::bigint[]);
\endif
\endif
