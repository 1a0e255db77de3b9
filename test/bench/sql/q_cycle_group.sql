-- queue, full cycle with ordered groups: every item in one of :groups groups
\set g random(1, :groups)
SELECT queue.enqueue('bq', '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb,
                     group_key => 'g' || :g);
SELECT coalesce(max(item_id), 0) AS item_id, coalesce(max(lease_token), 0) AS lease_token, max(payload::text) AS payload
  FROM queue.dequeue('bq', 'w' || :client_id)
\gset
\if :item_id > 0
SELECT queue.complete('bq', :item_id, :lease_token);
\endif
