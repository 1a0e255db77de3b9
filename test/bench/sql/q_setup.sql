-- queue: a fresh extension (so every run starts from empty tables) and the queue 'bq' with default settings
DROP EXTENSION IF EXISTS queue CASCADE;
CREATE EXTENSION queue;
SELECT queue.create_queue('bq');
