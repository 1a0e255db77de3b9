-- queue, full cycle of the items of :keys capped keys o1..oN, while (run.sh) a throttled key may hold most of the backlog
\set k random(1, :keys)
SELECT queue.enqueue('bq', '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb,
                     limit_key => 'o' || :k);
SELECT coalesce(max(item_id), 0) AS item_id, coalesce(max(lease_token), 0) AS lease_token, max(payload::text) AS payload
  FROM queue.dequeue('bq', 'w' || :client_id)
\gset
\if :item_id > 0
SELECT queue.complete('bq', :item_id, :lease_token);
\endif
