-- Sizes: every jsonb value stored with an item is bounded by
-- queue.max_payload_bytes (progress after merging), every text argument
-- stored with an item by 64 kB; over the bound is 54000 and changes nothing.
\set VERBOSITY terse

SET queue.max_payload_bytes = 1000;
SELECT queue.create_queue('q_sz', max_attempts => 3);
SELECT queue.enqueue('q_sz', '{"n": 1}') AS i1 \gset
SELECT queue.enqueue('q_sz', '{"n": 2}') AS i2 \gset
SELECT item_id AS d1, lease_token AS t1 FROM queue.dequeue('q_sz', 'sz_bot') \gset
SELECT item_id AS d2, lease_token AS t2 FROM queue.dequeue('q_sz', 'sz_bot') \gset

-- case: checkpoint bounds the merged progress, not only the new piece
SELECT queue.checkpoint('q_sz', :d1, :t1, jsonb_build_object('a', repeat('a', 600)));
SELECT queue.checkpoint('q_sz', :d1, :t1, jsonb_build_object('b', repeat('b', 600)));
SELECT progress ? 'b' AS has_b, length(progress->>'a') AS a FROM queue.items WHERE item_id = :d1;
SELECT queue.checkpoint('q_sz', :d1, :t1, jsonb_build_object('a', 'small', 'b', repeat('b', 600)));
SELECT progress ? 'b' AS has_b, progress->>'a' AS a FROM queue.items WHERE item_id = :d1;

-- case: complete's and complete_batch's result are bounded like a payload
SELECT queue.complete('q_sz', :d1, :t1, jsonb_build_object('r', repeat('r', 2000)));
SELECT queue.complete_batch('q_sz', ARRAY[:d1], ARRAY[:t1], jsonb_build_object('r', repeat('r', 2000)));
SELECT state FROM queue.items WHERE item_id = :d1;

-- case: fail's error and error_code are bounded at 64 kB; at the bound they are kept
SELECT queue.fail('q_sz', :d2, :t2, repeat('e', 65537));
SELECT queue.fail('q_sz', :d2, :t2, 'boom', error_code => repeat('c', 65537));
SELECT state, attempt FROM queue.items WHERE item_id = :d2;
SELECT queue.fail('q_sz', :d2, :t2, repeat('e', 65536), retry_in => '0 s');
SELECT length(last_error) FROM queue.items WHERE item_id = :d2;

-- case: enqueue's dedup_key and correlation_id, enqueue_batch's keys
SELECT queue.enqueue('q_sz', '{}', correlation_id => repeat('c', 65537));
SELECT queue.enqueue('q_sz', '{}', dedup_key => repeat('k', 65537));
SELECT queue.enqueue_batch('q_sz', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['k1', repeat('k', 65537)]);
SELECT queue.enqueue('q_sz', '{}', group_key => repeat('g', 65537));
SELECT queue.enqueue('q_sz', '{}', limit_key => repeat('l', 65537));
SELECT queue.enqueue('q_sz', '{}', requires => array_fill(repeat('r', 1000), ARRAY[70]));
SELECT queue.enqueue_batch('q_sz', ARRAY['{}']::jsonb[], requires => array_fill(repeat('r', 1000), ARRAY[70]));
SELECT queue.schedule('q_sz', 'big_key', '* * * * *', '{}', group_key => repeat('g', 65537));
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_sz';

-- case: operator texts stored with an item: hold's reason, review's note
SELECT queue.hold('q_sz', :i2, repeat('h', 65537));
SELECT queue.enqueue('q_sz', '{"n": 3}') AS i3 \gset
SELECT queue.cancel('q_sz', :i3);
SELECT queue.review('q_sz', :i3, 'in_review', repeat('n', 65537));
SELECT review_status FROM queue.dead_letters WHERE item_id = :i3;

-- case: values stored with a worker: register_worker's info is bounded
-- like a payload, its queues and labels (each list as a whole) and
-- add_maintenance's reason like the texts stored with an item
SELECT queue.register_worker('sz_worker', info => jsonb_build_object('i', repeat('i', 2000)));
SELECT queue.register_worker('sz_worker', queues => array_fill('q_sz'::text, ARRAY[20000]));
SELECT queue.register_worker('sz_worker', labels => array_fill(repeat('l', 1000), ARRAY[70]));
SELECT count(*) AS registered FROM queue.worker_registry WHERE worker = 'sz_worker';
SELECT queue.add_maintenance('sz_worker', now(), now() + interval '1 hour', repeat('m', 65537));
SELECT count(*) AS windows FROM queue.maintenance_window WHERE worker = 'sz_worker';
SELECT queue.register_worker('sz_worker', info => jsonb_build_object('i', repeat('i', 900)),
                             queues => ARRAY['q_sz']);
SELECT queue.add_maintenance('sz_worker', now(), now() + interval '1 hour', repeat('m', 65536)) > 0 AS added;
SELECT length(info->>'i') AS info, queues FROM queue.workers WHERE worker = 'sz_worker';

-- case: pause's reason, kept with the queue and shown by queues and
-- health(), is bounded at 64 kB like the operator texts of an item
SELECT queue.pause('q_sz', repeat('p', 65537));
SELECT paused, length(pause_reason) AS reason FROM queue.queues WHERE queue_name = 'q_sz';
SELECT queue.pause('q_sz', repeat('p', 65536));
SELECT paused, length(pause_reason) AS reason FROM queue.queues WHERE queue_name = 'q_sz';

-- case: a key is also an index entry: one that would not fit the index
-- even compressed is 54000 naming the argument, and nothing is stored; a
-- long key that compresses well is kept
CREATE TEMP TABLE big_key AS
  SELECT string_agg(md5(g::text), '') AS k FROM generate_series(1, 200) g;
SELECT queue.enqueue('q_sz', '{}', dedup_key => (SELECT k FROM big_key));
SELECT queue.enqueue('q_sz', '{}', group_key => (SELECT k FROM big_key));
SELECT queue.enqueue('q_sz', '{}', limit_key => (SELECT k FROM big_key));
SELECT queue.enqueue_batch('q_sz', ARRAY['{}']::jsonb[], dedup_keys => ARRAY[(SELECT k FROM big_key)]);
SELECT queue.enqueue_batch('q_sz', ARRAY['{}']::jsonb[], group_keys => ARRAY[(SELECT k FROM big_key)]);
SELECT queue.enqueue_batch('q_sz', ARRAY['{}']::jsonb[], limit_keys => ARRAY[(SELECT k FROM big_key)]);
SELECT queue.set_limit('q_sz', (SELECT k FROM big_key), max_in_flight => 1);
SELECT queue.schedule('q_sz', 'big_group', '* * * * *', '{}', group_key => (SELECT k FROM big_key));
SELECT queue.schedule('q_sz', 'big_limit', '* * * * *', '{}', limit_key => (SELECT k FROM big_key));
SELECT (SELECT count(*) FROM queue.items WHERE queue_name = 'q_sz') AS live,
       (SELECT count(*) FROM queue.limits WHERE queue_name = 'q_sz') AS limits,
       (SELECT count(*) FROM queue.schedules WHERE queue_name = 'q_sz') AS schedules;
SELECT queue.enqueue('q_sz', '{}', dedup_key => repeat('k', 65536), group_key => repeat('g', 65536),
                     limit_key => repeat('l', 65536)) > 0 AS enqueued;

RESET queue.max_payload_bytes;
SELECT queue.drop_queue('q_sz', force => true);
