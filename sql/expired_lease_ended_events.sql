-- An item past its expires_at is never handed out.  When offline recovery
-- or a restart ends its lease, the lost lease is one failed attempt and the
-- item becomes an expired dead letter: its trail is failed, then expired,
-- as for a lease that ran out past expires_at, with no retrying or
-- recovered event (the item never came back).  An item not past its
-- expires_at still comes back: failed, retrying, recovered.
\set VERBOSITY terse
CREATE ROLE regress_elee_bot LOGIN IN ROLE queue_worker;

SELECT queue.create_queue('q_elee', audit => 'all');
SELECT queue.enqueue('q_elee', '{"n": "off"}', expires_at => now() + interval '2 s') AS off \gset
SELECT queue.enqueue('q_elee', '{"n": "restart"}', expires_at => now() + interval '2 s') AS rst \gset
SELECT queue.enqueue('q_elee', '{"n": "live"}') AS live \gset
SET ROLE regress_elee_bot;
SELECT item_id = :off AS off FROM queue.dequeue('q_elee', 'w-off', lease_timeout => '1 h');
SELECT item_id = :rst AS rst FROM queue.dequeue('q_elee', 'w-rst', lease_timeout => '1 h');
SELECT item_id = :live AS live FROM queue.dequeue('q_elee', 'w-off', lease_timeout => '1 h');
RESET ROLE;
SELECT pg_sleep(2.1);

-- case: the worker holding "off" and "live" goes offline
UPDATE queue.worker_registry SET last_seen = now() - interval '1 h' WHERE worker = 'w-off';
SELECT recovered, expired FROM queue.sweep('q_elee');

-- case: the worker holding "restart" restarts; the next sweep buries it
SET ROLE regress_elee_bot;
SELECT queue.register_worker('w-rst', restart => true);
RESET ROLE;
SELECT recovered, expired FROM queue.sweep('q_elee');

SELECT CASE d.item_id WHEN :off THEN 'off' WHEN :rst THEN 'restart' END AS item,
       d.reason, d.attempts, d.last_error
  FROM queue.dead_letters d WHERE d.queue_name = 'q_elee' ORDER BY d.item_id;
SELECT CASE e.item_id WHEN :off THEN 'off' WHEN :rst THEN 'restart' WHEN :live THEN 'live' END AS item,
       string_agg(e.kind, ',' ORDER BY e.event_id) AS events
  FROM queue.events e WHERE e.queue_name = 'q_elee' AND e.item_id IS NOT NULL
 GROUP BY e.item_id ORDER BY e.item_id;

SELECT queue.drop_queue('q_elee', force => true);

-- case: hold, cancel and purge count the lost lease of an item past its
-- expires_at (failed) without saying it came back; the held one becomes
-- an expired dead letter at the next sweep
SELECT queue.create_queue('q_elee2', audit => 'all');
SELECT queue.create_queue('q_elee3', audit => 'all');
SELECT queue.enqueue('q_elee2', '{"n": "hold"}', expires_at => now() + interval '2 s') AS h \gset
SELECT queue.enqueue('q_elee2', '{"n": "cancel"}', expires_at => now() + interval '2 s') AS c \gset
SELECT queue.enqueue('q_elee3', '{"n": "purge"}', expires_at => now() + interval '2 s') AS p \gset
SET ROLE regress_elee_bot;
SELECT count(*) FROM queue.dequeue('q_elee2', 'w-gone', 2, lease_timeout => '0.5 s');
SELECT count(*) FROM queue.dequeue('q_elee3', 'w-gone', 1, lease_timeout => '0.5 s');
RESET ROLE;
SELECT pg_sleep(2.1);
SELECT queue.hold('q_elee2', :h);
SELECT queue.cancel('q_elee2', :c);
SELECT queue.purge('q_elee3');
SELECT recovered, expired FROM queue.sweep('q_elee2');
SELECT CASE d.item_id WHEN :h THEN 'hold' WHEN :c THEN 'cancel' END AS item, d.reason
  FROM queue.dead_letters d WHERE d.queue_name = 'q_elee2' ORDER BY d.item_id;
SELECT CASE e.item_id WHEN :h THEN 'hold' WHEN :c THEN 'cancel' WHEN :p THEN 'purge' END AS item,
       string_agg(e.kind, ',' ORDER BY e.event_id) AS events
  FROM queue.events e WHERE e.queue_name IN ('q_elee2', 'q_elee3') AND e.item_id IS NOT NULL
 GROUP BY e.item_id ORDER BY e.item_id;
SELECT queue.drop_queue('q_elee2', force => true);
SELECT queue.drop_queue('q_elee3', force => true);
DROP ROLE regress_elee_bot;
