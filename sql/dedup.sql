-- Dedup: live items, dedup_window, dead letters, enqueue_batch repeated keys.
\set VERBOSITY terse

SELECT queue.create_queue('q_dedup');

-- case: a key held by a queued item returns that item's id and inserts nothing
SELECT queue.enqueue('q_dedup', '{"v": "first"}', dedup_key => 'k1') AS k1 \gset
SELECT queue.enqueue('q_dedup', '{"v": "second"}', dedup_key => 'k1') = :k1 AS same_id;
SELECT count(*), min(payload->>'v') AS kept_payload FROM queue.items WHERE queue_name = 'q_dedup';

-- case: ... also while the item is on hold
SELECT queue.hold('q_dedup', :k1);
SELECT queue.enqueue('q_dedup', '{"v": "third"}', dedup_key => 'k1') = :k1 AS same_id_on_hold;
SELECT queue.unhold('q_dedup', :k1);

-- case: ... and while it is processing
SELECT lease_token AS t1 FROM queue.dequeue('q_dedup', 'w1') \gset
SELECT queue.enqueue('q_dedup', '{"v": "fourth"}', dedup_key => 'k1') = :k1 AS same_id_processing;
SELECT count(*) FROM queue.items WHERE queue_name = 'q_dedup';

-- case: ... and while it waits for a retry
SELECT queue.fail('q_dedup', :k1, :t1, 'retry later');
SELECT queue.enqueue('q_dedup', '{"v": "fifth"}', dedup_key => 'k1') = :k1 AS same_id_scheduled;

-- case: NULL keys never deduplicate; other queues have their own keys
SELECT queue.enqueue('q_dedup', '{"v": "n1"}') <> queue.enqueue('q_dedup', '{"v": "n2"}') AS distinct_ids;
SELECT queue.create_queue('q_dedup_other');
SELECT queue.enqueue('q_dedup_other', '{"v": "other"}', dedup_key => 'k1') IS NOT NULL AS inserted;
SELECT count(*) FROM queue.items WHERE queue_name = 'q_dedup_other' AND dedup_key = 'k1';

-- case: without dedup_window a completed item frees its key
SELECT queue.enqueue('q_dedup', '{"v": "c"}', dedup_key => 'kc', priority => 0) AS kc \gset
SELECT item_id = :kc AS got_kc, lease_token AS tc FROM queue.dequeue('q_dedup', 'w1') \gset
SELECT :'got_kc' AS got_kc;
SELECT queue.complete('q_dedup', :kc, :tc);
SELECT queue.enqueue('q_dedup', '{"v": "c again"}', dedup_key => 'kc') <> :kc AS new_item;
SELECT count(*) FROM queue.items WHERE queue_name = 'q_dedup' AND dedup_key = 'kc';

-- case: a dead letter frees its key
SELECT queue.enqueue('q_dedup', '{"v": "d"}', dedup_key => 'kd') AS kd \gset
SELECT queue.cancel('q_dedup', :kd);
SELECT queue.enqueue('q_dedup', '{"v": "d again"}', dedup_key => 'kd') <> :kd AS new_item;

-- case: enqueue_batch: a key repeated inside one batch yields the first one's id twice
SELECT array_agg(id ORDER BY ord) AS b
  FROM queue.enqueue_batch('q_dedup', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}', '{"b": 4}']::jsonb[],
       dedup_keys => ARRAY['x', 'y', 'x', NULL]) WITH ORDINALITY AS t(id, ord) \gset
SELECT b[1] = b[3] AS first_id_twice, b[1] <> b[2] AND b[2] <> b[4] AND b[1] <> b[4] AS others_distinct
  FROM (SELECT :'b'::bigint[] AS b) s;
SELECT payload, dedup_key FROM queue.items
 WHERE queue_name = 'q_dedup' AND item_id = ANY (:'b'::bigint[]) ORDER BY item_id;

-- case: enqueue_batch returns the id of a live item holding the key
SELECT array_agg(id ORDER BY ord) AS b2
  FROM queue.enqueue_batch('q_dedup', ARRAY['{"b": 5}', '{"b": 6}']::jsonb[],
       dedup_keys => ARRAY['x', 'z']) WITH ORDINALITY AS t(id, ord) \gset
SELECT (:'b2'::bigint[])[1] = (:'b'::bigint[])[1] AS live_id_returned;
SELECT count(*) FROM queue.items WHERE queue_name = 'q_dedup' AND dedup_key IN ('x', 'z');

-- case: dedup_keys must have the same length as payloads (22023), nothing inserted
SELECT count(*) AS before FROM queue.items WHERE queue_name = 'q_dedup';
SELECT queue.enqueue_batch('q_dedup', ARRAY['{"b": 7}', '{"b": 8}']::jsonb[], dedup_keys => ARRAY['only-one']);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS after FROM queue.items WHERE queue_name = 'q_dedup';

-- case: with dedup_window a completed item keeps its key; a dead letter does not
SELECT queue.create_queue('q_window', dedup_window => '1 h', retention => '1 s');
SELECT queue.enqueue('q_window', '{"w": 1}', dedup_key => 'w1') AS w1 \gset
SELECT lease_token AS tw FROM queue.dequeue('q_window', 'w1') \gset
SELECT queue.complete('q_window', :w1, :tw);
SELECT queue.enqueue('q_window', '{"w": "1 again"}', dedup_key => 'w1') = :w1 AS completed_id_returned;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_window';
SELECT queue.enqueue('q_window', '{"w": 2}', dedup_key => 'w2') AS w2 \gset
SELECT queue.cancel('q_window', :w2);
SELECT queue.enqueue('q_window', '{"w": "2 again"}', dedup_key => 'w2') <> :w2 AS dead_letter_ignored;

-- case: the window is measured from completion
SELECT queue.create_queue('q_short_window', dedup_window => '1 s');
SELECT queue.enqueue('q_short_window', '{"s": 1}', dedup_key => 's1') AS s1 \gset
SELECT lease_token AS ts FROM queue.dequeue('q_short_window', 'w1') \gset
SELECT queue.complete('q_short_window', :s1, :ts);
SELECT queue.enqueue('q_short_window', '{"s": "1 again"}', dedup_key => 's1') = :s1 AS inside_window;

SELECT pg_sleep(1.1);

SELECT queue.enqueue('q_short_window', '{"s": "1 later"}', dedup_key => 's1') <> :s1 AS after_window;

-- case: the window holds even after retention has purged the history row
-- (history is kept for at least the hour stats() counts: age it past that)
UPDATE queue.item_done SET completed_at = completed_at - interval '2 h' WHERE queue_name = 'q_window';
SELECT purged >= 1 AS purged FROM queue.sweep() WHERE queue_name = 'q_window';
SELECT count(*) AS history FROM queue.history WHERE queue_name = 'q_window' AND item_id = :w1;
SELECT queue.enqueue('q_window', '{"w": "1 after purge"}', dedup_key => 'w1') = :w1 AS still_deduplicated;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_window' AND dedup_key = 'w1';

-- case: with dedup_window, items without a key go in as usual, alone and in a batch
SELECT queue.enqueue('q_window', '{"w": "no key"}') > 0 AS keyless_in;
SELECT count(*) AS keyless_batch FROM queue.enqueue_batch('q_window', ARRAY['{"w": "a"}', '{"w": "b"}']::jsonb[]);
SELECT count(*) AS mixed_batch
  FROM queue.enqueue_batch('q_window', ARRAY['{"w": "c"}', '{"w": "d"}']::jsonb[], dedup_keys => ARRAY[NULL, 'w-new']);

-- case: a dedup_window set later covers the items completed within it
-- before it was set: their keys are taken from the history, the newest
-- completion of a key wins, and keys completed before the window are free
SELECT queue.create_queue('q_late_window');
SELECT queue.enqueue('q_late_window', '{"l": "a"}', dedup_key => 'a') AS la \gset
SELECT queue.complete('q_late_window', item_id, lease_token) FROM queue.dequeue('q_late_window', 'w1');
SELECT queue.enqueue('q_late_window', '{"l": "b"}', dedup_key => 'b') AS lb \gset
SELECT queue.complete('q_late_window', item_id, lease_token) FROM queue.dequeue('q_late_window', 'w1');
SELECT queue.enqueue('q_late_window', '{"l": "d1"}', dedup_key => 'd') AS ld1 \gset
SELECT queue.complete('q_late_window', item_id, lease_token) FROM queue.dequeue('q_late_window', 'w1');
SELECT queue.enqueue('q_late_window', '{"l": "d2"}', dedup_key => 'd') AS ld2 \gset
SELECT queue.complete('q_late_window', item_id, lease_token) FROM queue.dequeue('q_late_window', 'w1');
UPDATE queue.item_done SET completed_at = completed_at - interval '2 h'
 WHERE queue_name = 'q_late_window' AND item_id = :lb;
UPDATE queue.item_done SET completed_at = completed_at - interval '10 min'
 WHERE queue_name = 'q_late_window' AND item_id = :ld1;
SELECT queue.alter_queue('q_late_window', dedup_window => '1 h');
SELECT queue.enqueue('q_late_window', '{"l": "a again"}', dedup_key => 'a') = :la AS completed_before_window;
SELECT queue.enqueue('q_late_window', '{"l": "d again"}', dedup_key => 'd') = :ld2 AS newest_completion;
SELECT queue.enqueue('q_late_window', '{"l": "b again"}', dedup_key => 'b') <> :lb AS before_window_free;
SELECT dedup_key, item_id = ANY (ARRAY[:la, :ld2]) AS kept_id FROM queue.dedup_done
 WHERE queue_name = 'q_late_window' ORDER BY dedup_key;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_late_window';

-- case: lengthening the window brings back the keys that sweep dropped as
-- past the shorter one, while the history still has them
SELECT queue.create_queue('q_longer_window', dedup_window => '1 h');
SELECT queue.enqueue('q_longer_window', '{"l": "e"}', dedup_key => 'e') AS le \gset
SELECT queue.complete('q_longer_window', item_id, lease_token) FROM queue.dequeue('q_longer_window', 'w1');
UPDATE queue.item_done SET completed_at = completed_at - interval '90 min'
 WHERE queue_name = 'q_longer_window' AND item_id = :le;
UPDATE queue.dedup_done SET completed_at = completed_at - interval '90 min'
 WHERE queue_name = 'q_longer_window' AND dedup_key = 'e';
SELECT purged = 0 AS not_retention FROM queue.sweep() WHERE queue_name = 'q_longer_window';
SELECT count(*) AS remembered FROM queue.dedup_done WHERE queue_name = 'q_longer_window';
SELECT queue.alter_queue('q_longer_window', dedup_window => '3 h');
SELECT dedup_key, item_id = :le AS completed_id FROM queue.dedup_done WHERE queue_name = 'q_longer_window';
SELECT queue.enqueue('q_longer_window', '{"l": "e again"}', dedup_key => 'e') = :le AS in_longer_window;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_longer_window';

-- case: an item past its expires_at is never handed out, so its key holds
-- nothing: enqueue, enqueue_batch and replay make it the dead letter
-- (expired) that the next dequeue or sweep would make, and add the new
-- item; a processing item past expires_at still finishes first and keeps
-- its key
SELECT queue.create_queue('q_expired_key');
SELECT queue.enqueue('q_expired_key', '{"x": 1}', dedup_key => 'one') AS x1,
       queue.enqueue('q_expired_key', '{"x": 2}', dedup_key => 'two') AS x2,
       queue.enqueue('q_expired_key', '{"x": 3}', dedup_key => 'three') AS x3,
       queue.enqueue('q_expired_key', '{"x": 4}', dedup_key => 'four', priority => 0) AS x4 \gset
SELECT queue.cancel('q_expired_key', :x3) AS cancelled;
SELECT queue.enqueue('q_expired_key', '{"x": "3 again"}', dedup_key => 'three') AS x3_holder \gset
SELECT item_id = :x4 AS claimed_x4, lease_token AS x4_token
  FROM queue.dequeue('q_expired_key', 'w1') \gset
SELECT :'claimed_x4' AS claimed_x4;
UPDATE queue.item_live SET expires_at = now() - interval '1 s'
 WHERE queue_name = 'q_expired_key' AND item_id IN (:x1, :x2, :x3_holder, :x4);
SELECT queue.enqueue('q_expired_key', '{"x": "1 again"}', dedup_key => 'one') AS x1_new \gset
SELECT :x1_new <> :x1 AS enqueue_new_item;
SELECT array_agg(id) AS batch_ids FROM queue.enqueue_batch('q_expired_key',
       ARRAY['{"x": "2 again"}', '{"x": "2 twice"}']::jsonb[], dedup_keys => ARRAY['two', 'two']) id \gset
SELECT (:'batch_ids'::bigint[])[1] <> :x2 AS batch_new_item,
       (:'batch_ids'::bigint[])[1] = (:'batch_ids'::bigint[])[2] AS first_id_twice;
SELECT queue.replay('q_expired_key', :x3) AS x3_replayed \gset
SELECT :x3_replayed <> :x3_holder AS replay_new_item;
SELECT queue.enqueue('q_expired_key', '{"x": "4 again"}', dedup_key => 'four') = :x4 AS processing_keeps_key;
SELECT item_id = :x1 AS x1, item_id = :x2 AS x2, item_id = :x3_holder AS x3_holder, reason
  FROM queue.dead_letters WHERE queue_name = 'q_expired_key' AND reason = 'expired' ORDER BY item_id;
SELECT dedup_key, count(*) AS live FROM queue.items WHERE queue_name = 'q_expired_key'
 GROUP BY dedup_key ORDER BY dedup_key;
SELECT queue.complete('q_expired_key', :x4, :x4_token) AS late_complete_of_processing;

-- case: a live item holding the key wins over a completion within the
-- dedup window: enqueue and enqueue_batch return the live item's id (a key
-- completed before the window was set, or replayed within it, is held
-- again by a live item); once the live holder is past its expires_at it
-- holds nothing and the completion stands
SELECT queue.create_queue('q_live_wins');
SELECT queue.enqueue('q_live_wins', '{"v": "done"}', dedup_key => 'k') AS lw_done \gset
SELECT queue.complete('q_live_wins', item_id, lease_token) FROM queue.dequeue('q_live_wins', 'w1');
SELECT queue.enqueue('q_live_wins', '{"v": "live"}', dedup_key => 'k') AS lw_live \gset
SELECT :lw_live <> :lw_done AS new_live_item;
SELECT queue.alter_queue('q_live_wins', dedup_window => '1 h');
SELECT queue.enqueue('q_live_wins', '{"v": "again"}', dedup_key => 'k') = :lw_live AS enqueue_live_id;
SELECT array_agg(id = :lw_live) AS batch_live_ids
  FROM queue.enqueue_batch('q_live_wins', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['k', 'k']) id;
SELECT queue.create_queue('q_live_wins2', dedup_window => '1 h', max_attempts => 1);
SELECT queue.enqueue('q_live_wins2', '{"v": "dead"}', dedup_key => 'r') AS lw_dead \gset
SELECT queue.fail('q_live_wins2', item_id, lease_token, 'broken') FROM queue.dequeue('q_live_wins2', 'w1');
SELECT queue.enqueue('q_live_wins2', '{"v": "r done"}', dedup_key => 'r') AS lw_rdone \gset
SELECT queue.complete('q_live_wins2', item_id, lease_token) FROM queue.dequeue('q_live_wins2', 'w1');
SELECT queue.replay('q_live_wins2', :lw_dead) AS lw_replayed \gset
SELECT :lw_replayed NOT IN (:lw_dead, :lw_rdone) AS replay_inserted;
SELECT queue.enqueue('q_live_wins2', '{"v": "r again"}', dedup_key => 'r') = :lw_replayed AS enqueue_replay_id;
SELECT array_agg(id = :lw_replayed) AS batch_replay_ids
  FROM queue.enqueue_batch('q_live_wins2', ARRAY['{}']::jsonb[], dedup_keys => ARRAY['r']) id;
SELECT count(*) AS live FROM queue.items WHERE queue_name = 'q_live_wins2';
SELECT queue.drop_queue('q_live_wins2', force => true);
UPDATE queue.item_live SET expires_at = now() - interval '1 s'
 WHERE queue_name = 'q_live_wins' AND item_id = :lw_live;
SELECT queue.enqueue('q_live_wins', '{"v": "k after expiry"}', dedup_key => 'k') = :lw_done AS completion_stands;
SELECT reason FROM queue.dead_letters WHERE queue_name = 'q_live_wins' AND item_id = :lw_live;
SELECT dedup_key, count(*) AS live FROM queue.items WHERE queue_name = 'q_live_wins'
 GROUP BY dedup_key ORDER BY dedup_key;
SELECT queue.drop_queue('q_live_wins', force => true);

SELECT queue.drop_queue('q_longer_window', force => true);
SELECT queue.drop_queue('q_expired_key', force => true);
SELECT queue.drop_queue('q_late_window', force => true);
SELECT queue.drop_queue('q_short_window', force => true);
SELECT queue.drop_queue('q_window', force => true);
SELECT queue.drop_queue('q_dedup_other', force => true);
SELECT queue.drop_queue('q_dedup', force => true);
