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

-- case: a worker loop run as a procedure that commits between its steps:
-- each lease (a claim's, an extension's, a heartbeat's) runs from the call
-- that takes it, not from the CALL's start
SELECT queue.create_queue('t_proc', lease_timeout => '3 s');
SELECT queue.enqueue('t_proc', '{}') IS NOT NULL AS enqueued;
CREATE PROCEDURE public.t_proc_bot(INOUT claimed_full boolean DEFAULT NULL,
                                   INOUT extended_full boolean DEFAULT NULL,
                                   INOUT heartbeat_full boolean DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    PERFORM pg_sleep(2);
    COMMIT;
    SELECT * INTO r FROM queue.dequeue('t_proc', 'w-proc');
    claimed_full := r.lease_expires_at > clock_timestamp() + interval '2 s';
    PERFORM pg_sleep(2);
    COMMIT;
    extended_full := queue.extend_lease('t_proc', r.item_id, r.lease_token)
                     > clock_timestamp() + interval '2 s';
    PERFORM pg_sleep(2);
    COMMIT;
    PERFORM queue.heartbeat('w-proc');
    heartbeat_full := (SELECT lease_expires_at FROM queue.item_live
                        WHERE queue_name = 't_proc' AND item_id = r.item_id)
                      > clock_timestamp() + interval '2 s';
END
$$;
CALL public.t_proc_bot();
DROP PROCEDURE public.t_proc_bot;
SELECT queue.drop_queue('t_proc', force => true);
