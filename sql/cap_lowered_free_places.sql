-- A queue's max_in_flight lowered while more leases are out than the new
-- cap: once enough of them end, every free place under the cap can be
-- claimed again, whichever of the old leases are the ones still out.
\set VERBOSITY terse

CREATE ROLE regress_cl_admin LOGIN IN ROLE queue_admin;
CREATE ROLE regress_cl_producer LOGIN IN ROLE queue_producer;
CREATE ROLE regress_cl_bot LOGIN IN ROLE queue_worker;

SET ROLE regress_cl_admin;
SELECT queue.create_queue('cl_lowered', max_in_flight => 6);
SET ROLE regress_cl_producer;
SELECT count(*) FROM queue.enqueue_batch('cl_lowered', array_fill('{}'::jsonb, ARRAY[10]));
SET ROLE regress_cl_bot;
CREATE TEMP TABLE cl_held AS
SELECT item_id, lease_token, row_number() OVER (ORDER BY item_id) AS n
  FROM queue.dequeue('cl_lowered', 'cl-one', 6);
SET ROLE regress_cl_admin;
SELECT queue.alter_queue('cl_lowered', max_in_flight => 4);
-- the cap is exceeded (6 out of 4): nothing more comes out
SET ROLE regress_cl_bot;
SELECT count(*) AS over_cap_gets FROM queue.dequeue('cl_lowered', 'cl-two', 5);
-- four of the six end: the first and the fifth are still out, 2 of 4
SELECT count(*) FILTER (WHERE queue.complete('cl_lowered', item_id, lease_token)) AS completed
  FROM cl_held WHERE n IN (2, 3, 4, 6);
SELECT count(*) AS in_flight FROM queue.items
 WHERE queue_name = 'cl_lowered' AND state = 'processing';
-- two free places under the cap: a batch gets two, the next one nothing
SELECT count(*) AS claimed FROM queue.dequeue('cl_lowered', 'cl-two', 5);
SELECT count(*) AS at_cap_gets FROM queue.dequeue('cl_lowered', 'cl-three', 5);
SELECT count(*) AS in_flight FROM queue.items
 WHERE queue_name = 'cl_lowered' AND state = 'processing';
-- two of the four end: two single claims get one each, a third nothing
SELECT count(*) FILTER (WHERE queue.complete('cl_lowered', h.item_id, h.lease_token)) AS completed
  FROM cl_held h WHERE n IN (1, 5);
SELECT count(*) AS one FROM queue.dequeue('cl_lowered', 'cl-four');
SELECT count(*) AS two FROM queue.dequeue('cl_lowered', 'cl-four');
SELECT count(*) AS cap_reached FROM queue.dequeue('cl_lowered', 'cl-four');
DROP TABLE cl_held;

-- the same for reviving a lease that ran out and nobody re-claimed: it
-- takes a free place under the lowered cap like a claim
SET ROLE regress_cl_admin;
SELECT queue.create_queue('cl_revive', max_in_flight => 6);
SET ROLE regress_cl_producer;
SELECT count(*) FROM queue.enqueue_batch('cl_revive', array_fill('{}'::jsonb, ARRAY[10]));
SET ROLE regress_cl_bot;
CREATE TEMP TABLE cl_lost AS
SELECT item_id, lease_token FROM queue.dequeue('cl_revive', 'cl-one', 1, lease_timeout => '1 microsecond');
CREATE TEMP TABLE cl_held AS
SELECT item_id, lease_token, row_number() OVER (ORDER BY item_id) AS n
  FROM queue.dequeue('cl_revive', 'cl-two', 5);
SET ROLE regress_cl_admin;
SELECT queue.alter_queue('cl_revive', max_in_flight => 4);
SET ROLE regress_cl_bot;
SELECT count(*) FILTER (WHERE queue.complete('cl_revive', item_id, lease_token)) AS completed
  FROM cl_held WHERE n IN (2, 3, 4);
SELECT queue.extend_lease('cl_revive', item_id, lease_token) IS NOT NULL AS revived
  FROM cl_lost;
SELECT count(*) AS in_flight FROM queue.items
 WHERE queue_name = 'cl_revive' AND state = 'processing';
SELECT count(*) AS one_more FROM queue.dequeue('cl_revive', 'cl-three', 5);
DROP TABLE cl_held, cl_lost;
RESET ROLE;

SELECT queue.drop_queue('cl_lowered', force => true);
SELECT queue.drop_queue('cl_revive', force => true);
DROP ROLE regress_cl_admin, regress_cl_producer, regress_cl_bot;
