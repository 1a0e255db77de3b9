-- Looking at items: the items and history views, item(), hold and unhold.
\set VERBOSITY terse

SELECT queue.create_queue('q_views', max_attempts => 3);

SELECT queue.enqueue('q_views', '{"s": "queued"}', correlation_id => 'c-q', dedup_key => 'd-q') AS v_queued \gset
SELECT queue.enqueue('q_views', '{"s": "scheduled"}', run_at => now() + interval '1 day') AS v_sched \gset
SELECT queue.enqueue('q_views', '{"s": "held"}') AS v_held \gset
SELECT queue.enqueue('q_views', '{"s": "processing"}', priority => 0) AS v_proc \gset
SELECT queue.enqueue('q_views', '{"s": "processed"}', priority => 0, correlation_id => 'c-p', dedup_key => 'd-p') AS v_done \gset
SELECT queue.enqueue('q_views', '{"s": "dead"}', priority => 0) AS v_dead \gset

-- case: hold takes a queued item out of circulation; hold of an on-hold item,
-- unhold of a queued one and unknown ids return false
SELECT queue.hold('q_views', :v_held, 'waiting for the customer');
SELECT queue.hold('q_views', :v_held) AS hold_again;
SELECT queue.unhold('q_views', :v_queued) AS unhold_queued;
SELECT queue.hold('q_views', -1) AS hold_unknown, queue.unhold('q_views', -1) AS unhold_unknown;

-- case: claim three items, complete one, dead-letter one
SELECT array_agg(item_id ORDER BY item_id) = ARRAY[:v_proc, :v_done, :v_dead]::bigint[] AS got_three,
       (array_agg(lease_token ORDER BY item_id))[2] AS t_done,
       (array_agg(lease_token ORDER BY item_id))[3] AS t_dead
  FROM queue.dequeue('q_views', 'w1', batch_size => 3) \gset
SELECT :'got_three' AS got_three;
SELECT queue.complete('q_views', :v_done, :t_done, '{"total": 3}');
SELECT queue.fail('q_views', :v_dead, :t_dead, 'broken', permanent => true);

-- case: hold of a processing item returns false
SELECT queue.hold('q_views', :v_proc) AS hold_processing;

-- case: the items view shows each live item with its state
SELECT payload->>'s' AS s, state, priority, coalesce(attempt, 0) > 0 AS claimed, worker,
       lease_expires_at > now() AS leased, dedup_key, correlation_id
  FROM queue.items WHERE queue_name = 'q_views' ORDER BY item_id;
SELECT state, run_at > now() + interval '23 h' AS tomorrow
  FROM queue.items WHERE queue_name = 'q_views' AND item_id = :v_sched;

-- case: the history view shows processed items
SELECT item_id = :v_done AS same_item, queue_name, payload, result, attempts, worker,
       enqueued_at <= claimed_at AND claimed_at <= completed_at AS times_ordered,
       dedup_key, correlation_id
  FROM queue.history WHERE queue_name = 'q_views';

-- case: item() finds an item wherever it is now
SELECT v.s, (SELECT state FROM queue.item('q_views', v.id)) AS state
  FROM (VALUES ('queued', :v_queued), ('scheduled', :v_sched), ('held', :v_held),
               ('processing', :v_proc), ('processed', :v_done), ('dead', :v_dead)) AS v(s, id)
 ORDER BY v.id;
SELECT count(*) AS unknown_rows FROM queue.item('q_views', -1);

-- case: unhold puts a held item back in the queue
SELECT queue.unhold('q_views', :v_held);
SELECT state FROM queue.item('q_views', :v_held);
SELECT queue.unhold('q_views', :v_held) AS unhold_again;

-- case: a failed item shows its last error while it waits for a retry
SELECT queue.enqueue('q_views', '{"s": "retry"}', priority => 0) AS v_retry \gset
SELECT lease_token AS t_retry FROM queue.dequeue('q_views', 'w2') \gset
SELECT queue.fail('q_views', :v_retry, :t_retry, 'ERP down', retry_in => '1 h');
SELECT state, attempt, last_error FROM queue.items WHERE queue_name = 'q_views' AND item_id = :v_retry;
SELECT state FROM queue.item('q_views', :v_retry);

-- case: every item enqueued is in exactly one place: live, history or dead letters
-- (each read on its own: on Citus the views read through a function, which
-- does not mix with a distributed table such as dead_letters in one statement)
SELECT coalesce(array_agg(item_id), '{}') AS p_live FROM queue.items WHERE queue_name = 'q_views' \gset
SELECT coalesce(array_agg(item_id), '{}') AS p_done FROM queue.history WHERE queue_name = 'q_views' \gset
SELECT coalesce(array_agg(item_id), '{}') AS p_dead FROM queue.dead_letters WHERE queue_name = 'q_views' \gset
SELECT v.s, count(p.item_id) AS places
  FROM (VALUES ('queued', :v_queued), ('scheduled', :v_sched), ('held', :v_held), ('processing', :v_proc),
               ('processed', :v_done), ('dead', :v_dead), ('retry', :v_retry)) AS v(s, id)
  LEFT JOIN (SELECT unnest(:'p_live'::bigint[]) UNION ALL SELECT unnest(:'p_done'::bigint[])
             UNION ALL SELECT unnest(:'p_dead'::bigint[])) AS p(item_id)
    ON p.item_id = v.id
 GROUP BY v.s, v.id ORDER BY v.id;

-- case: the views list every queue's items; item() of another queue finds nothing
SELECT queue.create_queue('q_views2');
SELECT queue.enqueue('q_views2', '{"s": "other"}') AS v_other \gset
SELECT queue_name, count(*) FROM queue.items WHERE queue_name IN ('q_views', 'q_views2')
 GROUP BY 1 ORDER BY 1;
SELECT count(*) AS cross_queue FROM queue.item('q_views2', :v_queued);

-- case: hold and unhold are recorded in events (only when they did something)
SELECT kind FROM queue.events
 WHERE queue_name = 'q_views' AND item_id = :v_held AND kind IN ('held', 'unheld') ORDER BY event_id;

SELECT queue.drop_queue('q_views2', force => true);
SELECT queue.drop_queue('q_views', force => true);
