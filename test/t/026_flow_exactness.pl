# Copyright (c) the queue authors
#
# Flow control under contention: sixteen sessions hammer one queue that
# mixes ordered groups, two capped limit keys (one of them grouped too), a
# rated key, items that require a label and plain items, for several
# seconds, completing, releasing and failing what they claim.  Every claim
# and every lease end is logged in the transaction that made it; with
# track_commit_timestamp the commit times of those transactions give each
# lease's exact interval.  From that history:
#   - no two items of one group were ever leased at once;
#   - no limit key ever had more leases at once than its max_in_flight;
#   - no window of `per` holds more than `rate` claims of the rated key
#     (and every claim of it is recorded);
#   - no item went to a worker lacking one of its requires;
#   - unlimited items kept flowing while the limited keys were full.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('flow');
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 40
track_commit_timestamp = on
log_min_messages = warning
));
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql(
	'postgres', q{
SELECT queue.create_queue('fx');
SELECT queue.set_limit('fx', 'k1', max_in_flight => 2);
SELECT queue.set_limit('fx', 'k2', max_in_flight => 3);
SELECT queue.set_limit('fx', 'r1', rate => 5, per => '1 s');
-- 40 groups of 6
SELECT count(queue.enqueue('fx', jsonb_build_object('n', g), group_key => 'g' || (g % 40)))
  FROM generate_series(1, 240) AS g;
-- capped keys; k2's items are also in five groups
SELECT count(queue.enqueue('fx', jsonb_build_object('n', g), limit_key => 'k1'))
  FROM generate_series(1, 150) AS g;
SELECT count(queue.enqueue('fx', jsonb_build_object('n', g), limit_key => 'k2',
                           group_key => 'kg' || (g % 5)))
  FROM generate_series(1, 150) AS g;
-- a rated key
SELECT count(queue.enqueue('fx', jsonb_build_object('n', g), limit_key => 'r1'))
  FROM generate_series(1, 100) AS g;
-- requires a label; some also capped
SELECT count(queue.enqueue('fx', jsonb_build_object('n', g), requires => ARRAY['excel'],
                           limit_key => CASE WHEN g % 4 = 0 THEN 'k1' END))
  FROM generate_series(1, 100) AS g;
SELECT count(queue.enqueue('fx', jsonb_build_object('n', g))) FROM generate_series(1, 400) AS g;
-- even bots have the label, odd ones none
SELECT count(queue.register_worker('w' || c,
                                   labels => CASE WHEN c % 2 = 0 THEN ARRAY['excel', 'pdf'] END))
  FROM generate_series(0, 15) AS c;

CREATE TABLE claim_log (
    id bigserial PRIMARY KEY, item_id bigint, token bigint, worker text,
    grp text, lkey text, req text[], labels text[],
    claim_xid xid, done_xid xid, how text);

-- claim up to three and log them in the claiming transaction
CREATE FUNCTION stress_claim(c int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
    INSERT INTO claim_log (item_id, token, worker, grp, lkey, req, labels, claim_xid)
    SELECT d.item_id, d.lease_token, 'w' || c, i.group_key, i.limit_key, i.requires,
           w.labels, pg_current_xact_id()::xid
      FROM queue.dequeue('fx', 'w' || c, 3) d
      JOIN queue.item_live i ON i.queue_name = 'fx' AND i.item_id = d.item_id
      LEFT JOIN queue.worker_registry w ON w.worker = 'w' || c;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- end the leases held: mostly complete, sometimes release or retry
CREATE FUNCTION stress_finish(c int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
    x float8;
BEGIN
    FOR r IN SELECT * FROM claim_log WHERE worker = 'w' || c AND done_xid IS NULL LOOP
        x := random();
        IF x < 0.85 THEN
            PERFORM queue.complete('fx', r.item_id, r.token);
        ELSIF x < 0.93 THEN
            PERFORM queue.release('fx', r.item_id, r.token);
        ELSE
            PERFORM queue.fail('fx', r.item_id, r.token, 'again', retry_in => '20 ms');
        END IF;
        UPDATE claim_log SET done_xid = pg_current_xact_id()::xid,
                             how = CASE WHEN x < 0.85 THEN 'complete' WHEN x < 0.93 THEN 'release' ELSE 'retry' END
         WHERE id = r.id;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

CREATE VIEW leases AS
SELECT l.*, pg_xact_commit_timestamp(l.claim_xid) AS t0,
       coalesce(pg_xact_commit_timestamp(l.done_xid), 'infinity') AS t1
  FROM claim_log l;
});

my $script = $node->basedir . '/flow_bot.sql';
append_to_file(
	$script, q{
SELECT stress_claim(:client_id);
SELECT pg_sleep(0.003);
SELECT stress_finish(:client_id);
});
$node->command_ok(
	[ 'pgbench', '-n', '-c', 16, '-j', 4, '-T', 8, '-f', $script, 'postgres' ],
	'sixteen bots ran for eight seconds without errors');

my $claims = $node->safe_psql('postgres', 'SELECT count(*) FROM claim_log');
note "$claims claims";
ok($claims > 300, "the bots claimed items ($claims)");

# groups: per group, each lease ends before the next one starts
my $overlaps = $node->safe_psql(
	'postgres', q{
SELECT count(*) FROM (
    SELECT grp, t0, t1, lag(t1) OVER (PARTITION BY grp ORDER BY t0) AS prev_end
      FROM leases WHERE grp IS NOT NULL) s
 WHERE s.t0 < s.prev_end});
is($overlaps, 0, 'no two items of one group were ever leased at once');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(DISTINCT grp) > 30 AND count(*) > 60 FROM leases WHERE grp LIKE 'g%'}),
	't', 'the groups made progress');

# caps: sweep the starts and ends of each key's leases
my $caps = $node->safe_psql(
	'postgres', q{
WITH ev AS (
    SELECT lkey, t0 AS t, 1 AS d FROM leases WHERE lkey IN ('k1', 'k2')
    UNION ALL
    SELECT lkey, t1, -1 FROM leases WHERE lkey IN ('k1', 'k2') AND t1 < 'infinity'),
run AS (
    SELECT lkey, sum(d) OVER (PARTITION BY lkey ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS held
      FROM ev)
SELECT string_agg(lkey || '=' || m, ',' ORDER BY lkey)
  FROM (SELECT lkey, max(held) AS m FROM run GROUP BY lkey) x});
note "most leases at once: $caps";
like($caps, qr/^k1=(1|2),k2=(1|2|3)$/, "no limit key held more leases than its max_in_flight ($caps)");

# rate: every claim of r1 recorded, and no window of one second holds more than five
is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM queue.flow_claim WHERE queue_name = 'fx' AND limit_key = 'r1')
     = (SELECT count(*) FROM claim_log WHERE lkey = 'r1')}),
	't', 'every claim of the rated key is on record');
my ($rated, $worst) = split /\|/, $node->safe_psql(
	'postgres', q{
SELECT count(*), coalesce(max((SELECT count(*) FROM queue.flow_claim b
                                WHERE b.queue_name = 'fx' AND b.limit_key = 'r1'
                                  AND b.at > a.at - interval '1 s' AND b.at <= a.at)), 0)
  FROM queue.flow_claim a WHERE a.queue_name = 'fx' AND a.limit_key = 'r1'});
note "r1: $rated claims, at most $worst in a window";
ok($rated >= 20, "the rated key kept flowing ($rated claims)");
ok($worst <= 5, "no window of 1 s holds more than 5 claims of the rated key (saw $worst)");
# the key's lock serialised its claimers
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
    SELECT x.t0, lag(x.t0) OVER (ORDER BY x.t0) AS before
      FROM (SELECT claim_xid, min(t0) AS t0 FROM leases WHERE lkey = 'r1' GROUP BY claim_xid) x) s
 WHERE s.t0 <= s.before}),
	0, 'the transactions claiming the rated key committed one after another');

# routing
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM claim_log WHERE req IS NOT NULL AND NOT (req <@ coalesce(labels, '{}'))}),
	0, 'no item went to a worker lacking one of its requires');
ok( $node->safe_psql('postgres', q{SELECT count(*) FROM claim_log WHERE req IS NOT NULL}) > 10,
	'labelled bots took the items that require a label');

# no head-of-line blocking: plain items flowed throughout
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM claim_log WHERE lkey IS NULL AND grp IS NULL AND req IS NULL} ) > 200
	  ? 1 : 0,
	1, 'plain items flowed past full and throttled keys');

$node->stop;

done_testing();
