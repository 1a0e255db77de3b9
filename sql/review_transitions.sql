-- review refuses nonsense transitions and records each review: a replayed
-- dead letter stays resolved (back to new it would reopen the dead_letters
-- alert for good, and could be replayed twice).
\set VERBOSITY terse

SELECT queue.create_queue('rv_q');
SELECT queue.enqueue('rv_q', '{"n": 1}') AS a \gset
SELECT queue.enqueue('rv_q', '{"n": 2}') AS b \gset
SELECT queue.cancel('rv_q', :a), queue.cancel('rv_q', :b);
SELECT queue.replay('rv_q', :a) IS NOT NULL AS replayed;

-- case: a replayed letter cannot leave resolved (55000); resolving it again is fine
\set VERBOSITY sqlstate
SELECT queue.review('rv_q', :a, 'new');
\echo :LAST_ERROR_SQLSTATE
SELECT queue.review('rv_q', :a, 'rejected');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT queue.review('rv_q', :a, 'resolved', 'checked');
SELECT review_status, review_note FROM queue.dead_letters WHERE queue_name = 'rv_q' AND item_id = :a;

-- case: a letter not replayed moves freely, and every review is an event
SELECT queue.review('rv_q', :b, 'in_review', 'looking'), queue.review('rv_q', :b, 'new');
SELECT kind, details ->> 'review_status' AS status, details ->> 'from' AS from_status
  FROM queue.events WHERE queue_name = 'rv_q' AND kind = 'reviewed' ORDER BY event_id;

SELECT queue.drop_queue('rv_q', force => true);
