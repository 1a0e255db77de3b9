-- A lease runs from the claim itself, not from the start of the caller's
-- transaction.
\set VERBOSITY terse

SELECT queue.create_queue('t_lease', lease_timeout => '1 s');
SELECT count(*) FROM queue.enqueue_batch('t_lease', array_fill('{}'::jsonb, ARRAY[2]));

-- case: a dequeue inside a transaction older than the lease hands out a
-- full lease, from the claiming statement's start
BEGIN;
SELECT pg_sleep(1.2);
CREATE TEMP TABLE t_claim AS
SELECT item_id, lease_token, lease_expires_at,
       lease_expires_at >= statement_timestamp() + interval '1 s' AS full_lease
  FROM queue.dequeue('t_lease', 'w-old-xact');
SELECT full_lease, lease_expires_at > clock_timestamp() AS not_expired FROM t_claim;
-- nobody else can take it meanwhile
SELECT count(*) AS others FROM queue.dequeue('t_lease', 'w-other', batch_size => 2);

-- case: extend_lease and heartbeat too run from their statement
SELECT pg_sleep(1.2);
SELECT queue.extend_lease('t_lease', item_id, lease_token) >= statement_timestamp() + interval '1 s'
       AS extended_from_statement
  FROM t_claim;
SELECT pg_sleep(1.2);
SELECT queue.heartbeat('w-old-xact') AS renewed;
SELECT lease_expires_at > clock_timestamp() AS renewed_from_statement
  FROM queue.item_live WHERE queue_name = 't_lease' AND worker = 'w-old-xact';
COMMIT;

SELECT queue.drop_queue('t_lease', force => true);
