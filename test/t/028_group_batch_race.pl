# Copyright (c) the queue authors
#
# enqueue_batch with group keys under concurrent producers and consumers:
# sixteen sessions enqueue three-item batches over five groups, in any
# order, while others claim batches (one head per group) and complete them
# with complete_batch.  No commit deadlocks with another over the groups
# it touched (40P01): each takes its groups' locks in one order.  The
# groups stay consistent: every live group has one head, never two items
# of a group processing at once.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('group_batch', port => 55028);
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 40
log_min_messages = warning
));
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql('postgres', "SELECT queue.create_queue('gbr', lease_timeout => '30 s')");

my $bindir = $node->config_data('--bindir');
my $connstr = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir;

open(my $fh, '>', "$dir/batch.sql") or die;
print $fh q{\set a random(1, 5)
\set b random(1, 5)
SELECT count(*) FROM queue.enqueue_batch('gbr', ARRAY['{}', '{}', '{}']::jsonb[],
       group_keys => ARRAY['g' || :a, 'g' || :b, 'g' || ((:a + 2) % 5 + 1)]);
};
close $fh;
open($fh, '>', "$dir/consume.sql") or die;
# the heads of several groups, completed in any order
print $fh q{SELECT queue.complete_batch('gbr', array_agg(item_id ORDER BY r), array_agg(lease_token ORDER BY r))
  FROM (SELECT item_id, lease_token, random() AS r
          FROM queue.dequeue('gbr', 'c' || :client_id, batch_size => 5)) c
HAVING count(*) > 0;
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
my ($deadlocks) = $stdout =~ /number of deadlock failures: (\d+)/;
my ($processed) = $stdout =~ /number of transactions actually processed: (\d+)/;
is($deadlocks, 0, 'no two commits deadlocked over their groups (40P01)');
unlike($stderr, qr/ERROR/, 'no other error');
cmp_ok($processed, '>', 200, 'producers and consumers made many calls');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM (SELECT group_key FROM queue.item_live
		  WHERE queue_name = 'gbr' AND NOT group_wait GROUP BY 1 HAVING count(*) > 1) d"),
	0,
	'never two heads in a group');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM (SELECT DISTINCT group_key FROM queue.item_live WHERE queue_name = 'gbr') g
		  WHERE NOT EXISTS (SELECT 1 FROM queue.item_live i WHERE i.queue_name = 'gbr'
		                     AND i.group_key = g.group_key AND NOT i.group_wait)"),
	0,
	'every live group has a head');

$node->stop;
done_testing();
