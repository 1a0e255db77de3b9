-- Flow control and routing: ordered groups, per-key limits and rates,
-- capability routing.
\set VERBOSITY terse

-- A helper: what a worker gets from a queue, as the items' "n".
CREATE FUNCTION take(q text, w text, n int DEFAULT 10, lease interval DEFAULT NULL)
RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(d.payload->>'n', ',' ORDER BY d.item_id), '-')
      FROM queue.dequeue(q, w, n, lease) d
$$;
-- Finish an item by its "n": complete, fail or release it.
CREATE FUNCTION finish(q text, n text, how text DEFAULT 'complete')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    SELECT item_id, lease_token INTO r FROM queue.item_live
     WHERE queue_name = q AND payload->>'n' = n AND lease_token IS NOT NULL;
    RETURN CASE how
        WHEN 'complete' THEN queue.complete(q, r.item_id, r.lease_token)::text
        WHEN 'retry' THEN queue.fail(q, r.item_id, r.lease_token, 'later', retry_in => '1 h')
        WHEN 'dead' THEN queue.fail(q, r.item_id, r.lease_token, 'bad', permanent => true)
        WHEN 'release' THEN queue.release(q, r.item_id, r.lease_token)::text
    END;
END
$$;

-- case: one item of a group at a time, in enqueue order; a batch takes at
-- most one per group and fills up from other groups and plain items
SELECT queue.create_queue('fg');
SELECT count(queue.enqueue('fg', jsonb_build_object('n', x.n), group_key => x.g)) AS enqueued
  FROM (VALUES ('a1', 'A'), ('a2', 'A'), ('b1', 'B'), ('a3', 'A'), ('p1', NULL), ('b2', 'B')) x(n, g);
SELECT take('fg', 'w1');
SELECT take('fg', 'w1');
SELECT finish('fg', 'a1');
SELECT take('fg', 'w1');
SELECT finish('fg', 'a2');
SELECT finish('fg', 'b1');
SELECT finish('fg', 'p1');
SELECT take('fg', 'w1');

-- case: priority orders groups by their head, not items within a group
SELECT queue.create_queue('fp');
SELECT count(queue.enqueue('fp', '{"n": "x1"}', priority => 5, group_key => 'X')) AS enqueued;
SELECT count(queue.enqueue('fp', '{"n": "x2"}', priority => 0, group_key => 'X')) AS enqueued;
SELECT count(queue.enqueue('fp', '{"n": "y1"}', priority => 3, group_key => 'Y')) AS enqueued;
SELECT take('fp', 'w1', 1);
SELECT take('fp', 'w1', 1);
SELECT take('fp', 'w1', 1);

-- case: a retrying head keeps its group blocked; so does a released one
-- until it is claimed again, and a head whose lease ran out is the one
-- claimed again
SELECT queue.create_queue('fr');
SELECT count(queue.enqueue('fr', jsonb_build_object('n', n), group_key => 'R')) AS enqueued
  FROM unnest(ARRAY['r1', 'r2']) n;
SELECT take('fr', 'w1');
SELECT finish('fr', 'r1', 'retry');
SELECT take('fr', 'w1');
UPDATE queue.item_live SET visible_at = now(), run_at = now()
 WHERE queue_name = 'fr' AND payload->>'n' = 'r1';
SELECT take('fr', 'w1');
SELECT finish('fr', 'r1', 'release');
SELECT take('fr', 'w1', 10, '1 ms');
SELECT pg_sleep(0.05);
SELECT take('fr', 'w2');
SELECT finish('fr', 'r1');
SELECT take('fr', 'w2');

-- case: a head on hold holds its group; a member on hold waits its turn
-- and stays parked when let go
SELECT queue.create_queue('fh');
SELECT count(queue.enqueue('fh', jsonb_build_object('n', n), group_key => 'H')) AS enqueued
  FROM unnest(ARRAY['h1', 'h2', 'h3']) n;
SELECT queue.hold('fh', (SELECT item_id FROM queue.item_live WHERE payload->>'n' = 'h1'));
SELECT take('fh', 'w1');
SELECT queue.hold('fh', (SELECT item_id FROM queue.item_live WHERE payload->>'n' = 'h2'));
SELECT queue.unhold('fh', (SELECT item_id FROM queue.item_live WHERE payload->>'n' = 'h2'));
SELECT take('fh', 'w1');
SELECT queue.unhold('fh', (SELECT item_id FROM queue.item_live WHERE payload->>'n' = 'h1'));
SELECT take('fh', 'w1');
SELECT finish('fh', 'h1');
SELECT take('fh', 'w1');
SELECT take('fh', 'w1');

-- case: a dead head lets its group move on (group_on_dead = 'continue')
SELECT queue.create_queue('fd');
SELECT count(queue.enqueue('fd', jsonb_build_object('n', n), group_key => 'D')) AS enqueued
  FROM unnest(ARRAY['d1', 'd2']) n;
SELECT take('fd', 'w1');
SELECT finish('fd', 'd1', 'dead');
SELECT take('fd', 'w1');

-- case: with group_on_dead = 'block' the group waits for its dead head;
-- the replay becomes the head
SELECT queue.create_queue('fb', group_on_dead => 'block');
SELECT count(queue.enqueue('fb', jsonb_build_object('n', n), group_key => 'B')) AS enqueued
  FROM unnest(ARRAY['b1', 'b2', 'b3']) n;
SELECT take('fb', 'w1');
SELECT finish('fb', 'b1', 'dead');
SELECT take('fb', 'w1');
SELECT group_key, blocked_by IS NOT NULL AS blocked FROM queue.flow_group WHERE queue_name = 'fb';
SELECT queue.replay('fb', (SELECT item_id FROM queue.dead_letters WHERE queue_name = 'fb')) > 0 AS replayed;
SELECT take('fb', 'w1');
SELECT finish('fb', 'b1');
SELECT take('fb', 'w1');
-- a rejected dead head lets the group go on as well
SELECT finish('fb', 'b2', 'dead');
SELECT take('fb', 'w1');
SELECT queue.review('fb', (SELECT item_id FROM queue.dead_letters
                            WHERE queue_name = 'fb' AND payload->>'n' = 'b2'), 'rejected');
SELECT take('fb', 'w1');
SELECT queue.alter_queue('fb', group_on_dead => 'sometimes');

-- case: a group's last item gone, the group is forgotten; purge settles it
SELECT count(*) AS groups_left FROM queue.flow_group WHERE queue_name IN ('fg', 'fd');
SELECT count(queue.enqueue('fd', jsonb_build_object('n', n), group_key => 'P')) AS enqueued
  FROM unnest(ARRAY['p1', 'p2']) n;
SELECT queue.purge('fd');
SELECT count(*) AS groups_left FROM queue.flow_group WHERE queue_name = 'fd';

-- case: dedup returns the live holder, in a group as elsewhere
SELECT queue.create_queue('fx');
SELECT queue.enqueue('fx', '{"n": "k1"}', dedup_key => 'k', group_key => 'K')
     = queue.enqueue('fx', '{"n": "k2"}', dedup_key => 'k', group_key => 'K') AS same_id;
SELECT take('fx', 'w1');

-- case: enqueue_batch takes one group and limit key per payload
SELECT queue.create_queue('fe');
SELECT count(*) FROM queue.enqueue_batch('fe',
    ARRAY['{"n": "e1"}', '{"n": "e2"}', '{"n": "e3"}']::jsonb[],
    group_keys => ARRAY['E', 'E', NULL], limit_keys => ARRAY[NULL, NULL, 'L'],
    requires => '{}');
SELECT take('fe', 'w1');
SELECT queue.enqueue_batch('fe', ARRAY['{}']::jsonb[], group_keys => ARRAY['a', 'b']);
SELECT count(queue.enqueue('fe', '{}', group_key => '')) AS enqueued;
SELECT count(queue.enqueue('fe', '{}', requires => ARRAY[NULL]::text[])) AS enqueued;

-- case: max_in_flight per key is exact; a completion makes room at once
SELECT queue.create_queue('fl');
SELECT queue.set_limit('fl', 'sap', max_in_flight => 2);
SELECT count(queue.enqueue('fl', jsonb_build_object('n', 's' || g), limit_key => 'sap')) AS enqueued
  FROM generate_series(1, 5) g;
SELECT count(queue.enqueue('fl', '{"n": "free"}')) AS enqueued;
SELECT count(queue.enqueue('fl', '{"n": "other"}', limit_key => 'crm')) AS enqueued;
SELECT take('fl', 'w1');
SELECT take('fl', 'w1');
SELECT limit_key, max_in_flight, rate, in_flight FROM queue.limits WHERE queue_name = 'fl';
SELECT finish('fl', 's1');
SELECT take('fl', 'w1');
SELECT finish('fl', 's2', 'retry');
SELECT take('fl', 'w1');
SELECT finish('fl', 's3', 'release');
SELECT take('fl', 'w1');
-- an expired lease of a full key is claimed again through its lane
SELECT finish('fl', 's4');
SELECT finish('fl', 's5');
SELECT take('fl', 'w1', 10, '1 ms');
SELECT pg_sleep(0.05);
SELECT take('fl', 'w2');

-- case: reviving an expired lease counts against the key's cap: refused
-- while the key is full, granted once it has room
SELECT queue.create_queue('fk');
SELECT queue.set_limit('fk', 'one', max_in_flight => 1);
SELECT count(queue.enqueue('fk', jsonb_build_object('n', n), limit_key => 'one')) AS enqueued
  FROM unnest(ARRAY['o1', 'o2']) n;
SELECT take('fk', 'w1', 1, '1 ms');
SELECT pg_sleep(0.05);
SELECT take('fk', 'w2', 1);
SELECT queue.extend_lease('fk', item_id, lease_token) IS NULL AS refused
  FROM queue.item_live WHERE queue_name = 'fk' AND payload->>'n' = 'o1';
SELECT finish('fk', 'o2');
SELECT queue.extend_lease('fk', item_id, lease_token) IS NOT NULL AS granted
  FROM queue.item_live WHERE queue_name = 'fk' AND payload->>'n' = 'o1';
SELECT take('fk', 'w2', 1);

-- case: set_limit on a key with waiting items limits them too; drop_limit frees them
SELECT queue.create_queue('fs');
SELECT count(queue.enqueue('fs', jsonb_build_object('n', 'm' || g), limit_key => 'm')) AS enqueued
  FROM generate_series(1, 4) g;
SELECT queue.set_limit('fs', 'm', max_in_flight => 1);
SELECT take('fs', 'w1');
SELECT queue.drop_limit('fs', 'm');
SELECT take('fs', 'w1');
SELECT count(*) AS banded FROM queue.item_live WHERE queue_name = 'fs' AND priority >= 100000;

-- case: priority aging ages a limited key's items within their band
SELECT queue.create_queue('fa', priority_aging => '1 s');
SELECT queue.set_limit('fa', 'ak', max_in_flight => 5);
SELECT count(queue.enqueue('fa', '{"n": "a1"}', priority => 5, limit_key => 'ak')) AS enqueued;
UPDATE queue.item_live SET enqueued_at = now() - interval '3.5 s', visible_at = now() - interval '3.5 s'
 WHERE queue_name = 'fa';
SELECT aged FROM queue.sweep('fa');
SELECT aged FROM queue.sweep('fa');
SELECT priority, effective_priority FROM queue.items WHERE queue_name = 'fa';
SELECT take('fa', 'w1');

-- case: a rate allows that many claims per window, retries included
SELECT queue.create_queue('fq');
SELECT queue.set_limit('fq', 'crm', rate => 3, per => '1 h');
SELECT count(queue.enqueue('fq', jsonb_build_object('n', 'c' || g), limit_key => 'crm')) AS enqueued
  FROM generate_series(1, 5) g;
SELECT take('fq', 'w1', 2);
SELECT take('fq', 'w1', 2);
SELECT finish('fq', 'c1', 'release');
SELECT take('fq', 'w1');
SELECT limit_key, rate, claims_in_window, ready_at > now() + interval '50 min' AS waits
  FROM queue.limits WHERE queue_name = 'fq';

-- case: a queue-wide rate counts every claim of the queue
SELECT queue.create_queue('fw');
SELECT queue.set_limit('fw', NULL, rate => 2, per => '1 h');
SELECT count(queue.enqueue('fw', jsonb_build_object('n', 'w' || g))) AS enqueued FROM generate_series(1, 3) g;
SELECT take('fw', 'w1');
SELECT take('fw', 'w1');
SELECT queue.drop_limit('fw', NULL);
SELECT take('fw', 'w1');

-- case: invalid limits
SELECT queue.set_limit('fw', 'k');
SELECT queue.set_limit('fw', 'k', max_in_flight => 0);
SELECT queue.set_limit('fw', '', rate => 1);
SELECT queue.set_limit('fw', NULL, max_in_flight => 1);
SELECT queue.set_limit('fw', 'k', rate => 1, per => '0 s');
SELECT queue.set_limit('nope', 'k', rate => 1);

-- case: a worker gets only items whose requires are all among its labels
SELECT queue.create_queue('ft');
SELECT count(queue.enqueue('ft', '{"n": "excel"}', requires => '{excel}')) AS enqueued;
SELECT count(queue.enqueue('ft', '{"n": "both"}', requires => '{excel,sap}')) AS enqueued;
SELECT count(queue.enqueue('ft', '{"n": "any"}')) AS enqueued;
SELECT take('ft', 'unlabelled');
UPDATE queue.worker_registry SET labels = '{excel}' WHERE worker = 'unlabelled';
SELECT take('ft', 'unlabelled');
INSERT INTO queue.worker_registry (worker, labels) VALUES ('bot-x', '{sap,excel,pdf}');
SELECT take('ft', 'bot-x');

-- case: items shows each item's keys and why a queued item waits; stats
-- counts a group member waiting behind its head as queued
SELECT queue.create_queue('fv');
SELECT queue.set_limit('fv', 'cap1', max_in_flight => 1);
SELECT queue.set_limit('fv', 'thr', rate => 1, per => '1 h');
SELECT count(queue.enqueue('fv', jsonb_build_object('n', x.n), group_key => x.g, limit_key => x.l,
                           requires => x.r)) AS enqueued
  FROM (VALUES ('g1', 'G', NULL, NULL), ('g2', 'G', NULL, NULL), ('c1', NULL, 'cap1', NULL),
               ('c2', NULL, 'cap1', NULL), ('t1', NULL, 'thr', NULL), ('t2', NULL, 'thr', NULL),
               ('x1', NULL, NULL, ARRAY['nobody_has_this'])) AS x(n, g, l, r);
SELECT take('fv', 'wv');
SELECT payload->>'n' AS n, state, group_key, limit_key, requires, waiting, effective_priority
  FROM queue.items WHERE queue_name = 'fv' ORDER BY item_id;
SELECT queued, scheduled, processing, on_hold FROM queue.stats('fv');
-- item() gives each item the state items gives it
SELECT i.payload->>'n' AS n, i.state AS items_state, x.state AS item_state
  FROM queue.items i, LATERAL queue.item('fv', i.item_id) x
 WHERE i.queue_name = 'fv' AND x.state IS DISTINCT FROM i.state ORDER BY i.item_id;

-- case: items that need labels no active worker has show in health and
-- raise the unroutable alert once they waited past the sla (5 min without)
SELECT queue.create_queue('fu');
SELECT count(queue.enqueue('fu', '{"n": "u1"}', requires => ARRAY['mainframe'])) AS enqueued;
SELECT status, reasons FROM queue.health('fu');
UPDATE queue.item_live SET run_at = now() - interval '6 min', enqueued_at = now() - interval '6 min',
                           visible_at = now() - interval '6 min' WHERE queue_name = 'fu';
-- (claimable for 6 min with no claim also makes the workers idle: not this case's rule)
SELECT status, array(SELECT r FROM unnest(reasons) r WHERE r NOT LIKE 'workers idle:%') AS reasons
  FROM queue.health('fu');
-- the reason names its rule, as the capacity reasons do
SELECT count(*) AS named_unroutable FROM queue.health('fu'), unnest(reasons) r WHERE r LIKE 'unroutable: %';
SELECT count(*) FROM queue.sweep('fu');
SELECT kind, message, details FROM queue.alerts
 WHERE queue_name = 'fu' AND kind <> 'workers_idle' AND cleared_at IS NULL;
INSERT INTO queue.worker_registry (worker, labels) VALUES ('mainframe-bot', ARRAY['mainframe']);
SELECT array(SELECT r FROM unnest(reasons) r WHERE r NOT LIKE 'workers idle:%') AS reasons
  FROM queue.health('fu');
SELECT count(*) FROM queue.sweep('fu');
SELECT count(*) AS open_unroutable FROM queue.alerts
 WHERE queue_name = 'fu' AND kind = 'unroutable' AND cleared_at IS NULL;

-- case: a capable worker inside a maintenance window gets nothing new, so
-- it does not make the items routable
SELECT queue.create_queue('fm');
SELECT count(queue.enqueue('fm', '{"n": "m1"}', requires => ARRAY['tape'])) AS enqueued;
UPDATE queue.item_live SET run_at = now() - interval '6 min', enqueued_at = now() - interval '6 min',
                           visible_at = now() - interval '6 min' WHERE queue_name = 'fm';
SELECT queue.register_worker('tape-bot', labels => ARRAY['tape']);
SELECT queue.add_maintenance('tape-bot', now() - interval '1 min', now() + interval '1 day') > 0 AS added;
SELECT status, array(SELECT r FROM unnest(reasons) r WHERE r NOT LIKE 'workers idle:%') AS reasons
  FROM queue.health('fm');
-- and items says why the item waits, as health does
SELECT payload->>'n' AS n, waiting FROM queue.items WHERE queue_name = 'fm';
UPDATE queue.maintenance_window SET starts_at = now() + interval '1 h', ends_at = now() + interval '2 h'
 WHERE worker = 'tape-bot';
SELECT payload->>'n' AS n, waiting AS waiting_before_the_window FROM queue.items WHERE queue_name = 'fm';
SELECT queue.drop_queue('fm', force => true);
DELETE FROM queue.maintenance_window WHERE worker = 'tape-bot';
DELETE FROM queue.worker_registry WHERE worker = 'tape-bot';

-- case: in a 'continue' queue a replayed member joins the back of its
-- group (the head is the lowest-id live item, and the replay is a new item)
SELECT queue.create_queue('fc', max_attempts => 1);
SELECT count(queue.enqueue('fc', jsonb_build_object('n', n), group_key => 'g')) AS enqueued
  FROM unnest(ARRAY['c1', 'c2', 'c3']) n;
SELECT queue.fail('fc', item_id, lease_token, 'bad', permanent => true) AS c1
  FROM queue.dequeue('fc', 'w1');
CREATE TEMP TABLE fc_head AS SELECT item_id, lease_token, payload->>'n' AS n FROM queue.dequeue('fc', 'w1');
SELECT n AS head FROM fc_head;
SELECT queue.replay('fc', item_id) > 0 AS replayed FROM queue.dead_letters WHERE queue_name = 'fc';
SELECT queue.complete('fc', item_id, lease_token) AS completed FROM fc_head;
SELECT payload->>'n' AS next FROM queue.dequeue('fc', 'w1');
SELECT payload->>'n' AS waiting FROM queue.items WHERE queue_name = 'fc' AND state = 'queued';

-- case: a queue switched from 'block' to 'continue' no longer has
-- group_on_dead = 'block', so groups a dead head blocked move on at once
-- (the dead letter stays as it is)
SELECT queue.create_queue('fo', max_attempts => 1, group_on_dead => 'block');
SELECT count(queue.enqueue('fo', jsonb_build_object('n', n), group_key => g)) AS enqueued
  FROM (VALUES ('o1', 'g1'), ('o2', 'g1'), ('p1', 'g2'), ('p2', 'g2')) v(n, g);
SELECT count(queue.fail('fo', item_id, lease_token, 'bad', permanent => true)) AS dead_heads
  FROM queue.dequeue('fo', 'w1', 2);
SELECT count(*) AS claimable_while_blocked FROM queue.dequeue('fo', 'w1', 10);
SELECT queue.alter_queue('fo', group_on_dead => 'continue');
SELECT string_agg(payload->>'n', ',' ORDER BY payload->>'n') AS moved_on FROM queue.dequeue('fo', 'w1', 10);
SELECT count(*) AS dead_letters_untouched FROM queue.dead_letters
 WHERE queue_name = 'fo' AND review_status = 'new';

-- case: limited keys whose items a worker cannot take (their requires are
-- not among its labels) do not keep it from the items of other limited
-- keys, whatever its batch size
SELECT queue.create_queue('fn');
SELECT count(queue.set_limit('fn', k, max_in_flight => 5)) AS limits
  FROM unnest(ARRAY['gpu1', 'gpu2', 'gpu3', 'plain']) k;
SELECT count(queue.enqueue('fn', jsonb_build_object('n', k), limit_key => k, requires => '{gpu}')) AS enqueued
  FROM unnest(ARRAY['gpu1', 'gpu2', 'gpu3']) k;
SELECT count(queue.enqueue('fn', '{"n": "plain"}', limit_key => 'plain')) AS enqueued;
SELECT take('fn', 'unlabelled', 1);
SELECT take('fn', 'unlabelled', 1);
INSERT INTO queue.worker_registry (worker, labels) VALUES ('gpu-bot', '{gpu}');
SELECT take('fn', 'gpu-bot', 1);
SELECT take('fn', 'gpu-bot', 10);

-- case: however many limited keys have nothing to give (set up ahead of
-- their items, or drained), a key that has an item is served
SELECT queue.create_queue('fi');
SELECT queue.set_limit('fi', 'busy', max_in_flight => 5);
SELECT count(queue.enqueue('fi', '{"n": "b1"}', limit_key => 'busy')) AS enqueued;
SELECT take('fi', 'w1');
SELECT finish('fi', 'b1');
SELECT count(queue.set_limit('fi', 'idle' || g, max_in_flight => 1)) AS idle_keys
  FROM generate_series(1, 1100) g;
SELECT count(queue.enqueue('fi', '{"n": "b2"}', limit_key => 'busy')) AS enqueued;
SELECT take('fi', 'w1');

-- case: items says why a queued item waits under the queue-wide rate too,
-- plain or keyed, and for an expired lease of a full key
SELECT queue.create_queue('fy');
SELECT queue.set_limit('fy', NULL, rate => 2, per => '1 h');
SELECT queue.set_limit('fy', 'one', max_in_flight => 1);
SELECT count(queue.enqueue('fy', jsonb_build_object('n', x.n), limit_key => x.k)) AS enqueued
  FROM (VALUES ('y1', 'one'), ('y2', 'one'), ('y3', NULL), ('y4', 'free')) x(n, k);
SELECT take('fy', 'w1', 1, '1 ms');
SELECT pg_sleep(0.05);
SELECT payload->>'n' AS n, state, waiting FROM queue.items WHERE queue_name = 'fy' ORDER BY item_id;
SELECT take('fy', 'w1', 1);
SELECT payload->>'n' AS n, state, waiting FROM queue.items WHERE queue_name = 'fy' ORDER BY item_id;

-- case: dropping a queue takes its groups and limits along
SELECT count(*) FROM (SELECT queue.drop_queue(q, force => true)
                        FROM unnest(ARRAY['fg', 'fp', 'fr', 'fh', 'fd', 'fb', 'fx', 'fe', 'fl',
                                          'fs', 'fq', 'fw', 'ft', 'fv', 'fk', 'fu', 'fa', 'fc', 'fo', 'fn', 'fi', 'fy']) q) d;
SELECT (SELECT count(*) FROM queue.flow_group) AS groups, (SELECT count(*) FROM queue.flow_limit) AS limits,
       (SELECT count(*) FROM queue.flow_claim) AS claims;
DELETE FROM queue.worker_registry WHERE worker IN ('unlabelled', 'bot-x', 'w1', 'w2', 'wv', 'mainframe-bot', 'gpu-bot');

DROP FUNCTION take(text, text, int, interval);
DROP FUNCTION finish(text, text, text);
