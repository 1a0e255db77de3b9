-- Reading a queue needs no write: every reader call works in a read-only
-- transaction, as on a hot standby (default_transaction_read_only, a
-- read-only pooler or role), while the calls that change something fail
-- there with 25006.
\set VERBOSITY terse
SET client_min_messages = warning;

CREATE ROLE regress_ro_reader LOGIN IN ROLE queue_reader;
CREATE ROLE regress_ro_worker LOGIN IN ROLE queue_worker;
SELECT queue.create_queue('ro_q');
SELECT count(*) AS enqueued FROM queue.enqueue_batch('ro_q', array_fill('{}'::jsonb, ARRAY[3]));
SET ROLE regress_ro_worker;
SELECT count(*) AS claimed FROM queue.dequeue('ro_q', 'ro_bot');
RESET ROLE;
SET ROLE regress_ro_reader;
SELECT queue.alert_channel('ro_q') AS channel \gset
RESET ROLE;

-- case: in read-only transactions a reader reads everything, the queue's
-- alert channel included (made by an earlier call)
SET ROLE regress_ro_reader;
SET default_transaction_read_only = on;
SELECT queue_name, queued, processing FROM queue.stats('ro_q');
SELECT queue_name, status FROM queue.health('ro_q');
SELECT state, count(*) FROM queue.items WHERE queue_name = 'ro_q' GROUP BY 1 ORDER BY 1;
SELECT state FROM queue.item('ro_q', (SELECT min(item_id) FROM queue.items WHERE queue_name = 'ro_q'));
SELECT queue.prometheus() LIKE '%queue_items{queue="ro_q",state="queued"} 2%' AS prometheus;
SELECT queue.desired_workers('ro_q');
SELECT count(*) AS workers FROM queue.workers WHERE worker = 'ro_bot';
SELECT queue.alert_channel('ro_q') = :'channel' AS same_channel;
RESET default_transaction_read_only;
RESET ROLE;

-- case: a queue whose channel nobody asked for yet: 25006 saying so, and
-- the channel is made by the next call in a read-write transaction
SELECT queue.create_queue('ro_new');
SET ROLE regress_ro_reader;
SET default_transaction_read_only = on;
SELECT queue.alert_channel('ro_new');
RESET default_transaction_read_only;
SELECT queue.alert_channel('ro_new') ~ '^queue_alerts_[0-9a-f]{32}$' AS made_now;
RESET ROLE;

-- case: the calls that write fail there with 25006, and change nothing
\set VERBOSITY sqlstate
SET ROLE regress_ro_worker;
SET default_transaction_read_only = on;
SELECT count(*) FROM queue.dequeue('ro_q', 'ro_bot');
SELECT queue.heartbeat('ro_bot');
RESET default_transaction_read_only;
RESET ROLE;
\set VERBOSITY terse
SELECT state, count(*) FROM queue.items WHERE queue_name = 'ro_q' GROUP BY 1 ORDER BY 1;

-- case: a bot's calls say which call needs a read-write transaction (on a
-- hot standby: the primary), not which statement inside it tried to write
SET ROLE regress_ro_worker;
SELECT item_id AS ro_item, lease_token AS ro_token FROM queue.dequeue('ro_q', 'ro_bot') \gset
RESET ROLE;
\set VERBOSITY default
\set SHOW_CONTEXT never
SET default_transaction_read_only = on;
SELECT queue.enqueue('ro_q', '{}');
SELECT queue.enqueue_batch('ro_q', ARRAY['{}'::jsonb]);
SELECT count(*) FROM queue.dequeue('ro_q', 'ro_bot');
SELECT queue.complete('ro_q', :ro_item, :ro_token);
SELECT queue.complete_batch('ro_q', ARRAY[:ro_item]::bigint[], ARRAY[:ro_token]::bigint[]);
SELECT queue.fail('ro_q', :ro_item, :ro_token, 'boom');
SELECT queue.release('ro_q', :ro_item, :ro_token);
SELECT queue.extend_lease('ro_q', :ro_item, :ro_token);
SELECT queue.checkpoint('ro_q', :ro_item, :ro_token, '{"step": 1}');
RESET default_transaction_read_only;
\set VERBOSITY terse
\set SHOW_CONTEXT errors
SELECT state, attempt, progress FROM queue.items WHERE queue_name = 'ro_q' AND item_id = :ro_item;

SELECT queue.drop_queue(q, force => true) FROM unnest('{ro_q,ro_new}'::text[]) q;
DROP ROLE regress_ro_reader;
DROP ROLE regress_ro_worker;
