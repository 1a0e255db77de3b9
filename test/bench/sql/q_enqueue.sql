-- queue: one enqueue per transaction
SELECT queue.enqueue('bq', '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
