-- queue: one heartbeat of one of 200 bots (run with pgbench -R to set the rate)
\set w random(1, 200)
SELECT queue.heartbeat('hb-' || :w);
