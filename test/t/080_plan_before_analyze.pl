
# Copyright (c) the queue authors
#
# No plan cliff before the first ANALYZE: on an item_live that was never
# analyzed (a fresh install, a restore, the first minute), with thousands
# of items queued, a claim and complete_batch read the rows they claim or
# complete, not the queue.  The
# kept statement is run often enough in one session to be planned both as
# custom and as generic plan; the tuples the transaction fetched from
# item_live (pg_stat_xact_user_tables) stay a handful per claimed item.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('fresh_plan');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'queue,pg_cron'\n");
$node->append_conf('postgresql.conf', "cron.database_name = 'postgres'\n");
$node->append_conf('postgresql.conf', "autovacuum = off\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION queue;
	SELECT queue.create_queue('fresh');
	SELECT count(*) FROM queue.enqueue_batch('fresh',
		(SELECT pg_catalog.array_agg(pg_catalog.jsonb_build_object('n', g))
		   FROM pg_catalog.generate_series(1, 5000) g));
});

is($node->safe_psql('postgres',
	"SELECT reltuples FROM pg_class WHERE oid = 'queue.item_live'::regclass"),
	'-1', 'item_live was never analyzed');

# Tuples read from item_live by the calls of one transaction (in database
# $db, postgres by default).
sub fetched_in
{
	my ($calls, $db) = @_;
	return $node->safe_psql($db // 'postgres', qq{
		BEGIN;
		$calls
		SELECT s.seq_tup_read OPERATOR(pg_catalog.+) s.idx_tup_fetch
		  FROM pg_catalog.pg_stat_xact_user_tables s
		 WHERE s.relid OPERATOR(pg_catalog.=) 'queue.item_live'::pg_catalog.regclass;
		COMMIT;
	});
}

my $claims = join('', map { "SELECT count(*) FROM queue.dequeue('fresh', 'w1', 3);\n" } 1 .. 8);
my $out = fetched_in($claims);
my @lines = split /\n/, $out;
my $fetched = $lines[-1];
is(scalar(grep { $_ eq '3' } @lines), 8, 'each of 8 claims got its 3 items');
cmp_ok($fetched, '<', 200,
	"8 claims of 3 items read a few rows each, not the queue (read $fetched)");

# The same for claims whose items are completed together by complete_batch.
my $batches = join('', map { qq{
	WITH c AS (SELECT * FROM queue.dequeue('fresh', 'w1', 3))
	SELECT queue.complete_batch('fresh', pg_catalog.array_agg(c.item_id),
	                            pg_catalog.array_agg(c.lease_token)) FROM c;
} } 1 .. 8);
@lines = split /\n/, fetched_in($batches);
$fetched = $lines[-1];
is(scalar(grep { $_ eq '3' } @lines), 8, 'each of 8 batches completed its 3 items');
cmp_ok($fetched, '<', 400,
	"8 claims and batch completions of 3 items read a few rows each, not the queue (read $fetched)");

# A batch claim on a never-analyzed queue: the candidate scan walks the
# claim index in order (no bitmap scan of the whole queue and sort, which
# a custom plan with a large LIMIT picks when the table has no
# statistics), and the statement joins nothing (a join of the claimed
# rows to the candidates, planned for one row, grew with the square of
# the batch: a dequeue of 4,000 items took seconds).  Its plan is logged
# by auto_explain.  Most claims lease rows without that statement
# (src/claim_direct.c); a routed item at the head of the queue, which
# only the statement can judge, hands this claim over to it.
$node->safe_psql('postgres', q{
	SELECT queue.enqueue('fresh', '{"routed": true}', priority => 0, requires => ARRAY['gpu']);
	SELECT count(*) FROM queue.enqueue_batch('fresh',
		(SELECT pg_catalog.array_agg(pg_catalog.jsonb_build_object('n', g))
		   FROM pg_catalog.generate_series(1, 20000) g));
});
my $log_start = -s $node->logfile;
$out = fetched_in(q{
	LOAD 'auto_explain';
	SET auto_explain.log_min_duration = 0;
	SET auto_explain.log_nested_statements = on;
	SELECT count(*) FROM queue.dequeue('fresh', 'w2', 1000);
	RESET auto_explain.log_min_duration;
});
@lines = split /\n/, $out;
is($lines[0], '1000', 'the batch claim got its 1,000 items');
cmp_ok($lines[-1], '<', 2500,
	"a claim of 1,000 of 24,900 items reads about the rows it claims (read $lines[-1])");
my $log = slurp_file($node->logfile, $log_start);
my ($plan) = $log =~ /(Query Text: WITH cand AS MATERIALIZED.*?)(?=\n\S[^\n]*LOG:|\z)/s;
ok(defined $plan, 'the claim statement was logged with its plan');
$plan //= '';
like($plan, qr/Index Scan using item_live_claim_idx/, 'candidates come from an ordered scan of the claim index');
unlike($plan, qr/Bitmap Heap Scan on item_live/, 'no bitmap scan of the whole queue');
unlike($plan, qr/Nested Loop|Hash Join|Merge Join/, 'the claim statement joins nothing');

# Statistics taken while the queue was empty (a queue that bots keep up
# with is analyzed empty), then a backlog of 20,000: the claim still walks
# the claim index, and reads about the rows it claims, not the backlog
# (a plan that fetched the queue by primary key and sorted it looked
# cheapest to statistics that say the table is tiny).
$node->safe_psql('postgres', q{
	CREATE DATABASE stale;
});
$node->safe_psql('stale', q{
	CREATE EXTENSION queue;
	SELECT queue.create_queue('stale');
	VACUUM ANALYZE queue.item_live;
	SELECT count(*) FROM queue.enqueue_batch('stale',
		(SELECT pg_catalog.array_agg(pg_catalog.jsonb_build_object('n', g))
		   FROM pg_catalog.generate_series(1, 20000) g));
});
$out = $node->safe_psql('stale', qq{
	BEGIN;
	@{[ join('', map { "SELECT count(*) FROM queue.dequeue('stale', 'w1');\n" } 1 .. 8) ]}
	SELECT s.seq_tup_read OPERATOR(pg_catalog.+) s.idx_tup_fetch
	  FROM pg_catalog.pg_stat_xact_user_tables s
	 WHERE s.relid OPERATOR(pg_catalog.=) 'queue.item_live'::pg_catalog.regclass;
	COMMIT;
});
@lines = split /\n/, $out;
is(scalar(grep { $_ eq '1' } @lines), 8, 'each of 8 claims got its item');
cmp_ok($lines[-1], '<', 200,
	"8 claims on statistics of an empty queue read a few rows each, not the backlog (read $lines[-1])");

# A drained queue analyzed in a table of many pages (the statistics say
# about one row in all of them), then a backlog of 20,000.  To such
# statistics a scan of the queue's claim index costs the same as a probe
# of the primary key, and which one a completion gets is a tie (on one
# server the claim index won: 14 ms per complete on this backlog, against
# 0.05).  complete and complete_batch find their items through the
# primary key themselves and touch item_live only by TID.
$node->safe_psql('postgres', 'CREATE DATABASE drained');
$node->safe_psql('drained', q{
	CREATE EXTENSION queue;
	SELECT queue.create_queue('stale');
	SELECT count(*) FROM queue.enqueue_batch('stale',
		(SELECT pg_catalog.array_agg('{}'::jsonb) FROM pg_catalog.generate_series(1, 3000)));
	SELECT count(queue.complete('stale', d.item_id, d.lease_token))
	  FROM queue.dequeue('stale', 'w0', 2999) d;
	ANALYZE queue.item_live;
	SELECT count(*) FROM queue.enqueue_batch('stale',
		(SELECT pg_catalog.array_agg('{}'::jsonb) FROM pg_catalog.generate_series(1, 20000)));
	-- the sizes as that ANALYZE left them, scaled to the grown table
	UPDATE pg_catalog.pg_class
	   SET reltuples = 1, relpages = pg_catalog.pg_relation_size('queue.item_live') / 8192
	 WHERE oid OPERATOR(pg_catalog.=) 'queue.item_live'::pg_catalog.regclass;
});
# complete() goes through no statement (src/complete_direct.c): its
# item is found through the primary key, one row read.
my ($id, $token) = split /\|/, $node->safe_psql('drained',
	"SELECT item_id, lease_token FROM queue.dequeue('stale', 'w1')");
$out = fetched_in("SELECT queue.complete('stale', $id, $token);", 'drained');
@lines = split /\n/, $out;
is($lines[0], 't', 'the item was completed');
cmp_ok($lines[-1], '<=', 1, "complete read its one row of item_live (read $lines[-1])");

# complete_batch completes plain items directly too: three rows read.
# (The claim runs in a session of its own: a session's counts not yet
# reported are part of what pg_stat_xact_user_tables shows.)
$node->safe_psql('drained',
	"CREATE TABLE batch3 AS SELECT item_id, lease_token FROM queue.dequeue('stale', 'w1', 3)");
$out = fetched_in(q{
	SELECT queue.complete_batch('stale', pg_catalog.array_agg(item_id), pg_catalog.array_agg(lease_token))
	  FROM batch3;
}, 'drained');
@lines = split /\n/, $out;
is($lines[0], '3', 'the batch was completed');
cmp_ok($lines[-1], '<=', 3, "complete_batch read its three rows of item_live (read $lines[-1])");

# Group heads are completed by the batch statement (their deletion moves
# their groups on): it reads item_live by TID only.
$node->safe_psql('drained', q{
	SELECT queue.enqueue('stale', '{}', priority => 0, group_key => 'g' || g)
	  FROM pg_catalog.generate_series(1, 3) g;
});
$log_start = -s $node->logfile;
$out = $node->safe_psql('drained', q{
	LOAD 'auto_explain';
	SET auto_explain.log_min_duration = 0;
	SET auto_explain.log_nested_statements = on;
	SELECT queue.complete_batch('stale', pg_catalog.array_agg(d.item_id), pg_catalog.array_agg(d.lease_token))
	  FROM queue.dequeue('stale', 'w1', 3) d;
});
is($out, '3', 'the group heads were completed');
$log = slurp_file($node->logfile, $log_start);
my @completes = $log =~ /(Query Text: WITH d AS \(DELETE FROM queue\.item_live.*?)(?=\n\S[^\n]*LOG:|\z)/sg;
is(scalar(@completes), 1, 'complete_batch of group heads was logged with its plan');
for my $p (@completes)
{
	my @scans = $p =~ /(\S+ Scan)(?: using \S+)? on item_live\b/g;
	ok(@scans && !grep({ $_ ne 'Tid Scan' } @scans),
		"a batch completion reads item_live by TID only (@scans)");
}

$node->stop;
done_testing();
