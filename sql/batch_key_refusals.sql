-- enqueue_batch's refusal of a group_keys or limit_keys element names that
-- element, as it does for dedup_keys and payloads, and enqueues nothing.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.create_queue('q_bkr');
SELECT * FROM queue.enqueue_batch('q_bkr', ARRAY['{}', '{}']::jsonb[],
                                  group_keys => ARRAY['g', '']);
SELECT * FROM queue.enqueue_batch('q_bkr', ARRAY['{}', '{}', '{}']::jsonb[],
                                  limit_keys => ARRAY[NULL, 'k', '']);
SELECT * FROM queue.enqueue_batch('q_bkr', ARRAY['{}', '{}']::jsonb[],
                                  group_keys => ARRAY['g', repeat('x', 65537)]);
SELECT * FROM queue.enqueue_batch('q_bkr', ARRAY['{}', '{}']::jsonb[],
                                  limit_keys => ARRAY[NULL, (SELECT string_agg(md5(i::text), '')
                                                               FROM generate_series(1, 100) i)]);
-- as for dedup_keys
SELECT * FROM queue.enqueue_batch('q_bkr', ARRAY['{}', '{}']::jsonb[],
                                  dedup_keys => ARRAY['d', '']);
SELECT count(*) AS items FROM queue.items WHERE queue_name = 'q_bkr';
SELECT queue.drop_queue('q_bkr');
