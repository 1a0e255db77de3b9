-- Every call that names a queue that does not exist says so (42704) with
-- a hint: the admin calls too, not only the bot's.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.drop_queue('no_such_queue');
SELECT queue.drop_queue('no_such_queue', force => true);
SELECT * FROM queue.sweep('no_such_queue');
SELECT queue.apply_retention('no_such_queue');
SELECT queue.grant_queue('no_such_queue', 'queue_reader', 'reader');
SELECT queue.revoke_queue('no_such_queue', 'queue_reader', 'reader');
-- as the bot's calls say it
SELECT queue.enqueue('no_such_queue', '{}');
