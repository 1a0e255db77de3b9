-- queue: enqueue_batch of 100,000 keyed items (the cap), into an empty
-- queue and then with one of its keys held by a live item; prints both
-- times in ms.  Each batch is rolled back, so both start from the same table.
SELECT queue.create_queue('bc') \g /dev/null
SELECT queue.enqueue('bc', '{}', dedup_key => 'held') \g /dev/null
BEGIN;
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM queue.enqueue_batch('bc', array_fill('{}'::jsonb, ARRAY[100000]),
       dedup_keys => ARRAY(SELECT 'k' || g FROM generate_series(1, 100000) g)) \g /dev/null
SELECT round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000) AS plain_ms \gset
ROLLBACK;
BEGIN;
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM queue.enqueue_batch('bc', array_fill('{}'::jsonb, ARRAY[100000]),
       dedup_keys => ARRAY(SELECT 'k' || g FROM generate_series(1, 99999) g) || 'held'::text) \g /dev/null
SELECT round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000) AS held_ms \gset
ROLLBACK;
SELECT queue.drop_queue('bc', force => true) \g /dev/null
SELECT :plain_ms, :held_ms;
