-- The unroutable rule judges the items that wait to be handed out: an
-- item past its expires_at is never handed out, so whatever labels it
-- requires it makes no unroutable reason in health() nor an unroutable
-- alert, also before sweep makes it an expired dead letter.
\set VERBOSITY terse

CREATE ROLE regress_ure_prod LOGIN IN ROLE queue_producer;
SELECT queue.create_queue('q_ure', sla => '1 s');
SELECT queue.register_worker('ure-bot', labels => ARRAY['cpu']);

-- case: the only item needing labels nobody has expires before the sla
SET ROLE regress_ure_prod;
SELECT queue.enqueue('q_ure', '{"n": 1}', requires => ARRAY['ure-gpu'],
                     expires_at => now() + interval '1 s') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(2.5);
SELECT queue.heartbeat('ure-bot') >= 0 AS bot_alive;
SELECT status, reasons FROM queue.health('q_ure');

-- case: one that does not expire still counts, alone
SET ROLE regress_ure_prod;
SELECT queue.enqueue('q_ure', '{"n": 2}', requires => ARRAY['ure-gpu'],
                     run_at => now() - interval '1 h') > 0 AS enqueued;
RESET ROLE;
SELECT pg_sleep(1.5);
SELECT queue.heartbeat('ure-bot') >= 0 AS bot_alive;
SELECT r AS reason FROM queue.health('q_ure') h, unnest(h.reasons) r WHERE r LIKE 'unroutable%';

SELECT queue.drop_queue('q_ure', force => true);
DROP ROLE regress_ure_prod;
