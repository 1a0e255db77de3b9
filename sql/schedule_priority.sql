-- schedule() refuses a priority outside 0..1000 as enqueue() does, with
-- the same message and hint (the ticks it enqueues are enqueue's items),
-- and stores nothing.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT queue.create_queue('q_sp');
SELECT queue.enqueue('q_sp', '{}', priority => 1001);
SELECT queue.schedule('q_sp', 'nightly', '0 2 * * *', '{}', priority => 1001);
SELECT queue.schedule('q_sp', 'nightly', '0 2 * * *', '{}', priority => -1);
SELECT count(*) AS schedules FROM queue.schedules WHERE queue_name = 'q_sp';
SELECT queue.drop_queue('q_sp');
