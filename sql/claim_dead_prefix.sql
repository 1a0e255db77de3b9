--
-- claim_dead_prefix: claims do not keep reading the pages of index entries
-- already marked dead at the head of a queue.  A FIFO queue drained
-- faster than vacuum visits leaves its claimed and completed items'
-- entries in front of the first claimable one; once scans have marked
-- them dead they are no longer returned, but every claim from the head
-- would still read their pages.  A claim that read many pages counts
-- them against queue.claim_hint_threshold and starts this session's next
-- claims where it found its row.
--
SET client_min_messages = warning;
-- vacuum would remove the pages this test reads
ALTER TABLE queue.item_live SET (autovacuum_enabled = false);
SELECT queue.create_queue('dp');
SELECT count(*) FROM queue.enqueue_batch('dp', array_fill('{}'::jsonb, ARRAY[40000]));
-- drain the head in another transaction, so its rows are dead when read
SELECT count(*) FILTER (WHERE queue.complete('dp', item_id, lease_token)) AS completed
  FROM queue.dequeue('dp', 'drainer', 10000);
SELECT count(*) FILTER (WHERE queue.complete('dp', item_id, lease_token)) AS completed
  FROM queue.dequeue('dp', 'drainer', 10000);
SELECT count(*) FILTER (WHERE queue.complete('dp', item_id, lease_token)) AS completed
  FROM queue.dequeue('dp', 'drainer', 10000);
-- a scan from the head steps over them and marks their entries dead
SELECT count(*) FROM queue.dequeue('dp', 'marker');
\c
SET client_min_messages = warning;
SELECT pg_stat_force_next_flush();
SELECT idx_blks_hit + idx_blks_read AS blocks_before
  FROM pg_statio_user_indexes WHERE indexrelname = 'item_live_claim_idx' \gset
-- twenty single claims in a new session (no hint yet)
SELECT count(*) AS claimed FROM generate_series(1, 20) AS i,
       LATERAL queue.dequeue('dp', 'w', 1 + 0 * i) AS d;
SELECT pg_stat_force_next_flush();
SELECT idx_blks_hit + idx_blks_read - :blocks_before < 1000 AS dead_pages_read_once
  FROM pg_statio_user_indexes WHERE indexrelname = 'item_live_claim_idx';
-- a hinted claim still takes an urgent item first: the priorities above
-- the hint's are looked at from the head.  One call makes the first claim
-- of a new session (which takes the hint), enqueues a later and an urgent
-- item, and claims twice, so the hint is certainly in force.
CREATE FUNCTION dp_take(worker text) RETURNS TABLE (n int, taken text)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY SELECT 1, coalesce(payload->>'n', 'plain') FROM queue.dequeue('dp', worker);
  PERFORM queue.enqueue('dp', '{"n": "later"}', priority => 5);
  PERFORM queue.enqueue('dp', '{"n": "urgent"}', priority => 0);
  RETURN QUERY SELECT 2, coalesce(payload->>'n', 'plain') FROM queue.dequeue('dp', worker);
  RETURN QUERY SELECT 3, coalesce(payload->>'n', 'plain') FROM queue.dequeue('dp', worker);
END $$;
\c
SET client_min_messages = warning;
SELECT * FROM dp_take('w3');
-- the same through the claim statement (SERIALIZABLE takes it)
\c
SET client_min_messages = warning;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM dp_take('w4');
COMMIT;

-- the pages are really there: a claim from the head, in a session without
-- a hint, reads them
\c
SET client_min_messages = warning;
SET queue.claim_hint_threshold = -1;
SELECT pg_stat_force_next_flush();
SELECT idx_blks_hit + idx_blks_read AS blocks_before
  FROM pg_statio_user_indexes WHERE indexrelname = 'item_live_claim_idx' \gset
SELECT count(*) AS claimed FROM queue.dequeue('dp', 'w2');
SELECT pg_stat_force_next_flush();
SELECT idx_blks_hit + idx_blks_read - :blocks_before > 100 AS head_is_long
  FROM pg_statio_user_indexes WHERE indexrelname = 'item_live_claim_idx';
RESET queue.claim_hint_threshold;
SELECT queue.drop_queue('dp', force => true);
DROP FUNCTION dp_take(text);
ALTER TABLE queue.item_live RESET (autovacuum_enabled);
