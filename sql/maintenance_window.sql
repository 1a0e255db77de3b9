-- Maintenance windows: a worker gets nothing new inside one of its
-- windows, and only then, however many windows it has.
\set VERBOSITY terse

SELECT queue.create_queue('q_mw');
SELECT queue.register_worker('mw_bot');
SELECT queue.register_worker('mw_busy');

-- case: twenty nightly windows scheduled ahead do not stop the worker now
SELECT count(*) AS windows
  FROM generate_series(1, 20) AS d,
       LATERAL queue.add_maintenance('mw_bot', date_trunc('day', now()) + d * interval '1 day' + interval '2 h',
                                     date_trunc('day', now()) + d * interval '1 day' + interval '4 h',
                                     'nightly') AS w;
SELECT queue.enqueue('q_mw', '{"n": 1}') AS n1 \gset
SELECT item_id = :n1 AS claimed FROM queue.dequeue('q_mw', 'mw_bot');
SELECT status FROM queue.workers WHERE worker = 'mw_bot';

-- case: inside a window the worker gets nothing, even with many more ahead
SELECT count(*) AS windows
  FROM generate_series(1, 20) AS d,
       LATERAL queue.add_maintenance('mw_busy', now() + d * interval '1 day',
                                     now() + d * interval '1 day' + interval '1 h') AS w;
SELECT queue.add_maintenance('mw_busy', now() - interval '1 min', now() + interval '1 h', 'patching') > 0 AS added;
SELECT queue.enqueue('q_mw', '{"n": 2}') AS n2 \gset
SELECT count(*) AS claimed FROM queue.dequeue('q_mw', 'mw_busy');
SELECT status FROM queue.workers WHERE worker = 'mw_busy';
SELECT item_id = :n2 AS other_bot_claims FROM queue.dequeue('q_mw', 'mw_bot');

-- case: a window that starts while the worker polls stops it at its start,
-- and one that ends lets it claim again, without any other change
SELECT queue.register_worker('mw_soon');
SELECT queue.add_maintenance('mw_soon', now() + interval '2 s', now() + interval '4 s') > 0 AS added;
SELECT queue.enqueue('q_mw', '{"n": 3}') AS n3 \gset
SELECT queue.enqueue('q_mw', '{"n": 4}') AS n4 \gset
SELECT item_id = :n3 AS claimed_before FROM queue.dequeue('q_mw', 'mw_soon');
SELECT pg_sleep(2.2);
SELECT count(*) AS claimed_inside FROM queue.dequeue('q_mw', 'mw_soon');
SELECT pg_sleep(2.0);
SELECT item_id = :n4 AS claimed_after FROM queue.dequeue('q_mw', 'mw_soon');

-- case: overlapping windows gate until the last of them ends
SELECT queue.register_worker('mw_overlap');
SELECT queue.add_maintenance('mw_overlap', now() - interval '1 min', now() + interval '1 s') > 0 AS added;
SELECT queue.add_maintenance('mw_overlap', now() - interval '1 min', now() + interval '1 h') > 0 AS added;
SELECT count(*) AS claimed FROM queue.dequeue('q_mw', 'mw_overlap');
SELECT pg_sleep(1.2);
SELECT count(*) AS claimed FROM queue.dequeue('q_mw', 'mw_overlap');

SELECT queue.drop_queue('q_mw', force => true);
