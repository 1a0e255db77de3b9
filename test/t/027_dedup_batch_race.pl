# Copyright (c) the queue authors
#
# enqueue_batch with dedup keys under concurrent producers: sixteen
# sessions enqueue two-item batches over five keys, in either order, while
# others complete what they claim.  Every call returns an id for each
# position (the new item's or the live holder's): none fails because a
# holder finished between the insert and its lookup (40001), none fails
# with a deadlock between two batches that share keys (40P01), and there
# are never two live items with one key.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('dedup_batch', port => 55027);
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 40
log_min_messages = warning
));
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql('postgres',
	"SELECT queue.create_queue('dbr', lease_timeout => '5 s', audit => 'all')");
$node->safe_psql('postgres',
	'CREATE TABLE calls (n int NOT NULL, ids bigint[] NOT NULL)');

my $bindir = $node->config_data('--bindir');
my $connstr = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir;

open(my $fh, '>', "$dir/batch.sql") or die;
print $fh q{\set k random(1, 5)
\set k2 random(1, 5)
INSERT INTO calls SELECT 2, array_agg(id) FROM queue.enqueue_batch('dbr', ARRAY['{}', '{}']::jsonb[],
       dedup_keys => ARRAY['k' || :k2, 'k' || :k]) AS id;
};
close $fh;
open($fh, '>', "$dir/consume.sql") or die;
print $fh q{SELECT queue.complete('dbr', item_id, lease_token) FROM queue.dequeue('dbr', 'c' || :client_id);
};
close $fh;

my ($stdout, $stderr) = ('', '');
my $ok = IPC::Run::run(
	[
		"$bindir/pgbench", '-n', '-c', '16', '-j', '4', '-T', '10', '--failures-detailed',
		'-f', "$dir/batch.sql\@2", '-f', "$dir/consume.sql\@1", $connstr
	],
	'>', \$stdout, '2>', \$stderr);
ok($ok, 'pgbench ran the producers and consumers to the end');
# pgbench counts a transaction that failed with a serialization failure
# or a deadlock (and does not retry it: one try)
my ($serialization) = $stdout =~ /number of serialization failures: (\d+)/;
my ($deadlocks) = $stdout =~ /number of deadlock failures: (\d+)/;
is($serialization, 0, 'no batch failed to settle a dedup_key conflict (40001)');
is($deadlocks, 0, 'no two batches deadlocked over their keys (40P01)');
unlike($stderr, qr/ERROR/, 'no other error');
ok($node->safe_psql('postgres', 'SELECT count(*) FROM calls') > 100,
	'the producers made many calls');
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM calls WHERE cardinality(ids) <> n OR array_position(ids, NULL) IS NOT NULL'),
	0,
	'every call returned an id for each position');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM (SELECT dedup_key FROM queue.items WHERE queue_name = 'dbr'
		  GROUP BY 1 HAVING count(*) > 1) d"),
	0,
	'never two live items with one key');

$node->stop;
done_testing();
