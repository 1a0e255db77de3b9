-- queue: a fresh extension (so every run starts from empty tables) and the queue 'bq'
-- with default settings, plus whatever run.sh passes in :opts (QUEUE_OPTS, e.g. ", notify => false")
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS queue CASCADE;
CREATE EXTENSION queue;
SELECT queue.create_queue('bq' :opts);
