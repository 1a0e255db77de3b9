# Copyright (c) the queue authors
#
# Orphan recovery: three queue-worker bots share a queue with long leases;
# one is killed with SIGKILL in the middle of an item and never heard of
# again.  Once it has been silent for queue.worker_offline_after, one
# sweep() releases its lease at once (no waiting for the 10-minute lease),
# the other bots process the item, and at the end every item is processed
# exactly once by a live bot, nothing lost.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $n_items = 30;
my $worker_bin = 'tools/queue-worker/queue-worker';
plan skip_all => "$worker_bin is not built" unless -x $worker_bin;

my $node = PostgreSQL::Test::Cluster->new('offline');
$node->init;
$node->append_conf('postgresql.conf', "queue.worker_offline_after = '3s'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql('postgres', qq{
SELECT queue.create_queue('orphans', lease_timeout => '10 min');
SELECT count(*) FROM queue.enqueue_batch('orphans',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $n_items) g));
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my $log = "$dir/processed.log";
# Each item takes 0.3 s; the line is written only when the work finished.
my $cmd = qq{sleep 0.3; echo "\$QUEUE_WORKER \$QUEUE_ITEM_ID" >> $log};
my $dsn = $node->connstr('postgres');

sub start_bot
{
	my ($name, $extra) = @_;
	my @argv = ($worker_bin, '--dsn', $dsn, '--queue', 'orphans',
		'--exec', $cmd, '--name', $name, '--heartbeat', '1s',
		'--poll', '200ms', '--idle-exit', '4s', @$extra);
	return IPC::Run::start(\@argv, '>', "$dir/$name.out", '2>', "$dir/$name.err");
}

# The victim runs alone first with a command that never finishes, so it is
# sure to hold a lease when it dies.
my $victim = IPC::Run::start(
	[ $worker_bin, '--dsn', $dsn, '--queue', 'orphans', '--exec', 'sleep 600',
	  '--name', 'victim', '--heartbeat', '1s', '--max-items', '1' ],
	'>', "$dir/victim.out", '2>', "$dir/victim.err");
my $held = 0;
for (1 .. 100)
{
	$held = $node->safe_psql('postgres',
		"SELECT count(*) FROM queue.items WHERE worker = 'victim' AND state = 'processing'");
	last if $held > 0;
	usleep(100_000);
}
is($held, 1, 'the victim holds one item');
my $victim_item = $node->safe_psql('postgres',
	"SELECT item_id FROM queue.items WHERE worker = 'victim'");

$victim->signal('KILL');
$victim->finish;

my @bots = map { start_bot("bot$_", []) } 1 .. 2;

# The victim's item stays leased: its lease has ten minutes to run.
usleep(1_500_000);
is($node->safe_psql('postgres',
		"SELECT state FROM queue.items WHERE item_id = $victim_item"),
	'processing', 'the orphaned item is still leased before the offline threshold');

# Past queue.worker_offline_after, one sweep recovers it.
usleep(3_000_000);
my $recovered = $node->safe_psql('postgres',
	"SELECT coalesce(sum(recovered), 0) FROM queue.sweep() WHERE queue_name = 'orphans'");
is($recovered, 1, 'sweep recovered the offline worker\'s lease');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM queue.events WHERE queue_name = 'orphans' AND kind = 'recovered'"
		  . " AND worker = 'victim' AND item_id = $victim_item"),
	1, 'the recovery is recorded with the worker\'s name');
is($node->safe_psql('postgres',
		"SELECT status FROM queue.workers WHERE worker = 'victim'"),
	'offline', 'the victim shows as offline');

$_->finish for @bots;

is($node->safe_psql('postgres', "SELECT count(*) FROM queue.history WHERE queue_name = 'orphans'"),
	$n_items, 'every item was processed');
is($node->safe_psql('postgres', "SELECT count(*) FROM queue.items WHERE queue_name = 'orphans'"),
	0, 'no item is left');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM queue.history WHERE queue_name = 'orphans' AND worker = 'victim'"),
	0, 'the dead bot completed nothing');
is($node->safe_psql('postgres',
		"SELECT attempts FROM queue.history WHERE item_id = $victim_item"),
	2, 'the lost lease counted as an attempt');

my @lines = split /\n/, slurp_file($log);
my %seen;
$seen{ (split / /, $_)[1] }++ for @lines;
is(scalar(@lines), $n_items, 'live bots finished each item once');
is(scalar(grep { $_ > 1 } values %seen), 0, 'no item was processed twice');

$node->stop;
done_testing();
