-- Interval bounds: a queue setting or a call's duration that no timestamp
-- could hold is refused with 22023 and changes nothing, so that no queue
-- can make sweep(), health() or stats() fail for every queue.  Up to
-- 1000 years every setting works.
\set VERBOSITY terse

-- case: create_queue refuses each interval setting past 1000 years
SELECT queue.create_queue('q_ib', lease_timeout => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', backoff_base => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', backoff_max => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', item_ttl => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', dedup_window => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', priority_aging => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', retention => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', sla => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', breaker_threshold => 0.5, breaker_window => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.create_queue('q_ib', breaker_threshold => 0.5, breaker_cooldown => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS created FROM queue.queues WHERE queue_name = 'q_ib';

-- case: at 1000 years every setting is accepted and every call works
SELECT queue.create_queue('q_ib', lease_timeout => '1000 years', backoff_base => '1000 years',
                          backoff_max => '1000 years', item_ttl => '1000 years',
                          dedup_window => '1000 years', priority_aging => '1000 years',
                          retention => '1000 years', sla => '1000 years',
                          breaker_threshold => 0.5, breaker_window => '1000 years',
                          breaker_cooldown => '1000 years', backoff_jitter => 0);
SELECT queue.enqueue('q_ib', '{"n": 1}', dedup_key => 'k1') IS NOT NULL AS enqueued;
SELECT queue.enqueue('q_ib', '{"n": 2}') IS NOT NULL AS enqueued;
SELECT item_id AS i1, lease_token AS t1 FROM queue.dequeue('q_ib', 'ib_bot') \gset
SELECT queue.fail('q_ib', :i1, :t1, 'boom');
SELECT item_id AS i2, lease_token AS t2 FROM queue.dequeue('q_ib', 'ib_bot') \gset
SELECT queue.extend_lease('q_ib', :i2, :t2) IS NOT NULL AS extended;
SELECT queue.heartbeat('ib_bot');
SELECT queue.complete('q_ib', :i2, :t2);
SELECT queue.enqueue('q_ib', '{"n": 3}', dedup_key => 'k1') = :i1 AS deduped;
SELECT queued, scheduled FROM queue.stats('q_ib');
SELECT status FROM queue.health('q_ib');
SELECT recovered, dead_lettered, expired, purged FROM queue.sweep() WHERE queue_name = 'q_ib';
SELECT queue.snapshot_metrics() > 0 AS snapshot;

-- case: alter_queue refuses the same, and the queue keeps its settings
SELECT queue.alter_queue('q_ib', retention => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.alter_queue('q_ib', sla => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.alter_queue('q_ib', dedup_window => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.alter_queue('q_ib', lease_timeout => '1 month 1000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT retention, sla, dedup_window, lease_timeout FROM queue.queues WHERE queue_name = 'q_ib';

-- case: a call's own duration is bounded the same way
SELECT queue.alter_queue('q_ib', lease_timeout => '5 min', backoff_base => '5 s', backoff_max => '1 h');
SELECT queue.enqueue('q_ib', '{"n": 4}') AS i4 \gset
SELECT count(*) FROM queue.dequeue('q_ib', 'ib_bot', lease_timeout => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT item_id AS i4, lease_token AS t4 FROM queue.dequeue('q_ib', 'ib_bot', lease_timeout => '1000 years') \gset
SELECT lease_expires_at > now() + interval '999 years' AS long_lease FROM queue.items WHERE item_id = :i4;
SELECT queue.extend_lease('q_ib', :i4, :t4, '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.fail('q_ib', :i4, :t4, 'boom', retry_in => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT state, attempt FROM queue.items WHERE item_id = :i4;
SELECT queue.fail('q_ib', :i4, :t4, 'boom', retry_in => '1000 years');
SELECT state FROM queue.items WHERE item_id = :i4;

-- case: set_limit's per likewise
SELECT queue.set_limit('q_ib', 'k', rate => 1, per => '10000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.set_limit('q_ib', 'k', rate => 1, per => '1000 years');
SELECT queue.enqueue('q_ib', '{"n": 5}', limit_key => 'k') AS i5 \gset
SELECT queue.enqueue('q_ib', '{"n": 6}', limit_key => 'k') IS NOT NULL AS enqueued;
SELECT item_id = :i5 AS first_of_key FROM queue.dequeue('q_ib', 'ib_bot', batch_size => 5);
SELECT limit_key, rate, per, claims_in_window FROM queue.limits WHERE queue_name = 'q_ib';

-- the other queues' numbers stay readable
SELECT count(*) > 0 AS stats_ok FROM queue.stats();
SELECT count(*) > 0 AS health_ok FROM queue.health();
SELECT queue.drop_queue('q_ib', force => true);
