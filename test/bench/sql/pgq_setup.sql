-- PgQ (pgq 3.5 from postgresql-15-pgq3). Queue 'bq' with 16 consumers c0..c15.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgq;
SELECT pgq.unregister_consumer('bq', consumer_name)
  FROM pgq.get_consumer_info() WHERE queue_name = 'bq';
SELECT pgq.drop_queue(queue_name) FROM pgq.get_queue_info() WHERE queue_name = 'bq';
SELECT pgq.create_queue('bq');
SELECT pgq.register_consumer('bq', 'c' || g) FROM generate_series(0, 15) g;
