-- Direct writes (src/*_direct.c): a plain enqueue, a claim from the head
-- of a queue and a completion write the same rows as the statements they
-- stand for, and hand over to those statements where a trigger, a rule
-- or a case of their own needs them.
\set VERBOSITY terse

SELECT queue.create_queue('q_direct', lease_timeout => '5 min');
SELECT queue.register_worker('w_gpu', labels => ARRAY['gpu']) IS NOT NULL AS registered;

-- case: a plain item (direct) and one with a dedup key (the statement)
-- get the same columns
BEGIN;
SELECT queue.enqueue('q_direct', '{"n": 1}', priority => 3, correlation_id => 'c1') AS plain_id \gset
SELECT queue.enqueue('q_direct', '{"n": 1}', priority => 3, correlation_id => 'c1',
                     dedup_key => 'k1') AS keyed_id \gset
SELECT (to_jsonb(a) - 'item_id' - 'dedup_key') = (to_jsonb(b) - 'item_id' - 'dedup_key') AS same_row,
       a.attempt, a.errors, a.on_hold, a.enqueued_at = now() AS enqueued_now,
       a.visible_at = now() AS visible_now, a.run_at = now() AS run_now
  FROM queue.item_live a, queue.item_live b
 WHERE a.item_id = :plain_id AND b.item_id = :keyed_id;
COMMIT;
SELECT count(*) AS drained FROM queue.dequeue('q_direct', 'w0', 10) d
 WHERE queue.complete('q_direct', d.item_id, d.lease_token);

-- case: a plain batch (written directly, a thousand rows at a time) and a
-- keyed one (the statement) get the same columns, ids in input order
BEGIN;
CREATE TEMP TABLE batch_ids AS
SELECT 'plain' AS how, t.ord, t.id
  FROM queue.enqueue_batch('q_direct', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[],
                           priority => 4, max_attempts => 7,
                           expires_at => now() + interval '1 day') WITH ORDINALITY AS t(id, ord);
INSERT INTO batch_ids
SELECT 'keyed', t.ord, t.id
  FROM queue.enqueue_batch('q_direct', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[],
                           priority => 4, max_attempts => 7,
                           expires_at => now() + interval '1 day',
                           dedup_keys => ARRAY['x1', 'x2', 'x3']) WITH ORDINALITY AS t(id, ord);
SELECT p.ord, (to_jsonb(a) - 'item_id' - 'dedup_key') = (to_jsonb(b) - 'item_id' - 'dedup_key') AS same_row,
       a.payload, a.priority, a.max_attempts, a.expires_at = now() + interval '1 day' AS expires_1d
  FROM batch_ids p
  JOIN batch_ids k ON k.how = 'keyed' AND k.ord = p.ord
  JOIN queue.item_live a ON a.item_id = p.id
  JOIN queue.item_live b ON b.item_id = k.id
 WHERE p.how = 'plain' ORDER BY p.ord;
SELECT array_agg(id ORDER BY ord) = array_agg(id ORDER BY id) AS input_order
  FROM batch_ids WHERE how = 'plain';
COMMIT;
DROP TABLE batch_ids;
SELECT count(*) AS drained FROM queue.dequeue('q_direct', 'w0', 10) d
 WHERE queue.complete('q_direct', d.item_id, d.lease_token);

-- case: a plain batch of 2,500 (three rounds of rows): every item has its
-- claim and primary key entries, so all are claimed and completed
CREATE TEMP TABLE batch_ids AS
SELECT t.ord, t.id
  FROM queue.enqueue_batch('q_direct', (SELECT array_agg(pg_catalog.jsonb_build_object('i', i))
                                          FROM generate_series(1, 2500) i)) WITH ORDINALITY AS t(id, ord);
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       array_agg(id ORDER BY ord) = array_agg(id ORDER BY id) AS input_order
  FROM batch_ids;
SELECT count(*) AS live, bool_and(l.payload = pg_catalog.jsonb_build_object('i', b.ord)) AS payloads_in_place
  FROM batch_ids b JOIN queue.item_live l ON l.queue_name = 'q_direct' AND l.item_id = b.id;
WITH d AS (SELECT * FROM queue.dequeue('q_direct', 'w0', 2500))
SELECT queue.complete_batch('q_direct', array_agg(d.item_id), array_agg(d.lease_token)) AS completed
  FROM d;
DROP TABLE batch_ids;

-- case: with audit 'all' a plain batch records one enqueued event per item
SELECT queue.create_queue('q_direct_audit', audit => 'all');
SELECT count(*) AS enqueued FROM queue.enqueue_batch('q_direct_audit', ARRAY['{}', '{}']::jsonb[]);
SELECT kind, count(*) FROM queue.events WHERE queue_name = 'q_direct_audit' AND item_id IS NOT NULL
 GROUP BY kind;
SELECT queue.drop_queue('q_direct_audit', force => true);

-- case: one dequeue claims a plain item directly, then meets a routed one
-- and hands the rest of the claim to the statement: same lease columns
BEGIN;
SELECT queue.enqueue('q_direct', '{"n": 2}') AS plain_id \gset
SELECT queue.enqueue('q_direct', '{"n": 2}', requires => ARRAY['gpu']) AS routed_id \gset
COMMIT;
SELECT count(*) AS claimed FROM queue.dequeue('q_direct', 'w_gpu', 2);
SELECT (to_jsonb(a) - 'item_id' - 'requires' - 'lease_token')
       = (to_jsonb(b) - 'item_id' - 'requires' - 'lease_token') AS same_lease,
       a.attempt, a.worker, a.claimed_at = a.lease_expires_at - interval '5 min' AS lease_5min,
       a.visible_at = a.lease_expires_at AS visible_at_lease_end,
       a.lease_token <> b.lease_token AS own_tokens, a.lost_counted, a.cap_stripe
  FROM queue.item_live a, queue.item_live b
 WHERE a.item_id = :plain_id AND b.item_id = :routed_id;

-- case: a plain item's completion (direct) and a group head's (the
-- statement, for flow control's trigger) write the same history row
BEGIN;
SELECT queue.complete('q_direct', :plain_id, (SELECT lease_token FROM queue.item_live WHERE item_id = :plain_id), '{"ok": 1}') AS plain_done,
       queue.complete('q_direct', :routed_id, (SELECT lease_token FROM queue.item_live WHERE item_id = :routed_id), '{"ok": 1}') AS routed_done;
SELECT (to_jsonb(a) - 'item_id') = (to_jsonb(b) - 'item_id') AS same_history,
       a.result, a.attempts, a.worker,
       a.completed_at > now() AND a.completed_at < statement_timestamp() AS completed_by_its_statement
  FROM queue.item_done a, queue.item_done b
 WHERE a.item_id = :plain_id AND b.item_id = :routed_id;
COMMIT;
BEGIN;
SELECT queue.enqueue('q_direct', '{"n": 3}') AS plain_id \gset
SELECT queue.enqueue('q_direct', '{"n": 3}', group_key => 'g') AS group_id \gset
COMMIT;
SELECT count(*) AS claimed FROM queue.dequeue('q_direct', 'w1', 2);
BEGIN;
SELECT queue.complete('q_direct', l.item_id, l.lease_token) AS done
  FROM queue.item_live l WHERE l.item_id IN (:plain_id, :group_id) ORDER BY l.item_id;
SELECT (to_jsonb(a) - 'item_id') = (to_jsonb(b) - 'item_id') AS same_history
  FROM queue.item_done a, queue.item_done b
 WHERE a.item_id = :plain_id AND b.item_id = :group_id;
COMMIT;
SELECT count(*) AS group_left FROM queue.flow_group WHERE queue_name = 'q_direct';

-- case: a wrong token, a negative token and an unknown item complete nothing
SELECT queue.enqueue('q_direct', '{"n": 4}') AS id \gset
SELECT lease_token AS tok FROM queue.dequeue('q_direct', 'w1') \gset
SELECT queue.complete('q_direct', :id, :tok + 1000) AS wrong_token,
       queue.complete('q_direct', :id, -:tok) AS negative_token,
       queue.complete('q_direct', :id + 1000, :tok) AS unknown_item,
       queue.complete('q_direct', :id, :tok) AS right_token,
       queue.complete('q_direct', :id, :tok) AS twice;

-- case: a trigger added to item_live fires for every write, and one on
-- item_done for every history row: the writes go through the statements
CREATE TABLE direct_log (tab text, op text, item_id bigint);
CREATE FUNCTION direct_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.direct_log
    VALUES (TG_TABLE_NAME, TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.item_id ELSE NEW.item_id END);
    RETURN NULL;
END $$;
CREATE TRIGGER direct_log AFTER INSERT OR UPDATE OR DELETE ON queue.item_live
    FOR EACH ROW EXECUTE FUNCTION direct_log();
CREATE TRIGGER direct_log AFTER INSERT ON queue.item_done
    FOR EACH ROW EXECUTE FUNCTION direct_log();
SELECT queue.enqueue('q_direct', '{"n": 5}') AS id \gset
SELECT queue.complete('q_direct', d.item_id, d.lease_token) AS done
  FROM queue.dequeue('q_direct', 'w1') d;
SELECT op, tab LIKE 'item_done%' AS history FROM direct_log WHERE item_id = :id ORDER BY ctid;
SELECT count(*) AS enqueued FROM queue.enqueue_batch('q_direct', ARRAY['{"n": 51}', '{"n": 52}']::jsonb[]);
SELECT op, count(*) FROM direct_log WHERE item_id > :id GROUP BY op;
DROP TRIGGER direct_log ON queue.item_live;
DROP TRIGGER direct_log ON queue.item_done;

-- case: a CHECK constraint on item_live is checked by the claim
ALTER TABLE queue.item_live ADD CONSTRAINT direct_no_w9 CHECK (worker IS DISTINCT FROM 'w9');
SELECT queue.enqueue('q_direct', '{"n": 6}') IS NOT NULL AS enqueued;
SELECT count(*) FROM queue.dequeue('q_direct', 'w9');
ALTER TABLE queue.item_live DROP CONSTRAINT direct_no_w9;
SELECT count(*) AS claimed FROM queue.dequeue('q_direct', 'w9');

-- case: a read-only transaction writes nothing: each call fails with
-- 25006 naming the call
SELECT queue.enqueue('q_direct', '{"n": 7}') AS id \gset
BEGIN READ ONLY;
SELECT queue.enqueue('q_direct', '{"n": 8}');
ROLLBACK;
BEGIN READ ONLY;
SELECT count(*) FROM queue.enqueue_batch('q_direct', ARRAY['{"n": 8}']::jsonb[]);
ROLLBACK;
BEGIN READ ONLY;
SELECT count(*) FROM queue.dequeue('q_direct', 'w1');
ROLLBACK;
SELECT lease_token AS tok FROM queue.dequeue('q_direct', 'w1') \gset
BEGIN READ ONLY;
SELECT queue.complete('q_direct', :id, :tok);
ROLLBACK;
SELECT count(*) AS still_live FROM queue.item_live WHERE item_id = :id;

SELECT queue.drop_queue('q_direct', force => true);
DROP TABLE direct_log;
DROP FUNCTION direct_log();

-- case: the triggers of item_live are those the direct paths know never
-- fire for the rows they write (band_triggers in src/claim_direct.c,
-- delete_triggers in src/complete_direct.c, insert_triggers in
-- src/enqueue_direct.c): one missing there turns a direct path off
SELECT tgname FROM pg_trigger
 WHERE tgrelid = 'queue.item_live'::regclass AND NOT tgisinternal ORDER BY 1;
