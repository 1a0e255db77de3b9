# Copyright (c) the queue authors
#
# The notifier's shared slots are never lost and never miscounted.  A
# database whose notifier could not be started (no free background worker
# slot) does not keep a notifier slot: once all eight were taken that way,
# a ninth database still gets its notifier when a worker slot frees up.
# A producer that reserved a notifier before its commit, whose notifier
# then exited and whose slot went to another database's notifier, does not
# miscount that notifier's reservations when it commits: the other
# notifier still goes idle and exits, and DROP DATABASE of its database is
# not held up.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $always = q{SET queue.notify_handoff = 'always';};

# Wait up to $secs for $sql on $db to return $want.
sub wait_for
{
	my ($node, $db, $sql, $want, $secs) = @_;
	my $got = '';
	for (1 .. $secs * 10)
	{
		$got = $node->safe_psql($db, $sql);
		return 1 if $got eq $want;
		usleep(100_000);
	}
	diag("waited for '$want', got '$got': $sql");
	return 0;
}

sub notifiers_of
{
	my ($db) = @_;
	return qq{SELECT count(*) FROM pg_stat_activity
	           WHERE backend_type = 'queue notifier' AND datname = '$db'};
}

# --- a failed start frees the slot ----------------------------------------------

# One background worker slot in all: a parallel worker can hold it.
my $node = PostgreSQL::Test::Cluster->new('slots');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'queue'
max_worker_processes = 1
max_parallel_workers = 1
max_logical_replication_workers = 0
log_min_messages = warning
});
$node->start;

for my $k (1 .. 9)
{
	$node->safe_psql('postgres', "CREATE DATABASE db$k");
	$node->safe_psql("db$k", q{CREATE EXTENSION queue; SELECT queue.create_queue('q');});
}

my $holder = $node->background_psql('postgres');
$holder->query_until(qr/holding/, q{
SET force_parallel_mode = on;
\echo holding
SELECT pg_sleep(30);
});
ok(wait_for($node, 'postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'parallel worker'}, '1', 20),
	'a parallel worker holds the only background worker slot');

# Eight databases want a notifier; none can be started.
$node->safe_psql("db$_", $always . q{SELECT queue.enqueue('q', '{}')}) for 1 .. 8;
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'queue notifier'}), '0',
	'no notifier could be started');

$node->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	   WHERE backend_type = 'client backend' AND query LIKE 'SELECT pg_sleep(30)%'});
ok(wait_for($node, 'postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'parallel worker'}, '0', 20),
	'the worker slot is free again');
eval { $holder->quit; };	# its psql ended with the cancelled query

$node->safe_psql('db9', $always . q{SELECT queue.enqueue('q', '{}')});
ok(wait_for($node, 'postgres', notifiers_of('db9'), '1', 10),
	'a ninth database gets its notifier: failed starts left no slot taken');
$node->stop;

# --- a reused slot is not miscounted --------------------------------------------

# A producer waits for a synchronous standby that never comes, after its
# pre-commit reserved the notifier and before its commit settles that.
my $node2 = PostgreSQL::Test::Cluster->new('reuse');
$node2->init(allows_streaming => 1);
$node2->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'queue'
synchronous_standby_names = 'nobody'
synchronous_commit = local
log_min_messages = warning
});
$node2->start;
for my $db (qw(a b))
{
	$node2->safe_psql('postgres', "CREATE DATABASE $db");
	$node2->safe_psql($db, q{CREATE EXTENSION queue; SELECT queue.create_queue('q');});
}

$node2->safe_psql('a', $always . q{SELECT queue.enqueue('q', '{}')});
ok(wait_for($node2, 'postgres', notifiers_of('a'), '1', 10), 'database a has its notifier');

my $producer = $node2->background_psql('a');
my $producer_pid = $producer->query_safe('SELECT pg_backend_pid()');
$producer->query_until(qr/committing/, $always . q{
SET synchronous_commit = on;
BEGIN;
SELECT queue.enqueue('q', '{}');
\echo committing
COMMIT;
});
ok(wait_for($node2, 'postgres',
	qq{SELECT wait_event FROM pg_stat_activity WHERE pid = $producer_pid}, 'SyncRep', 20),
	'the producer has handed over and waits in its commit');

$node2->safe_psql('postgres',
	q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	   WHERE backend_type = 'queue notifier' AND datname = 'a'});
ok(wait_for($node2, 'postgres', notifiers_of('a'), '0', 10), 'the notifier of a is gone');

# Its slot now serves database b.
$node2->safe_psql('b', $always . q{SELECT queue.enqueue('q', '{}')});
ok(wait_for($node2, 'postgres', notifiers_of('b'), '1', 10), 'database b has its notifier');
$node2->safe_psql('b', $always . q{SELECT queue.enqueue('q', '{}')});

# The producer's commit completes (its wait is cancelled) and settles.
$node2->safe_psql('postgres', "SELECT pg_cancel_backend($producer_pid)");
ok(wait_for($node2, 'postgres',
	qq{SELECT wait_event IS DISTINCT FROM 'SyncRep' FROM pg_stat_activity WHERE pid = $producer_pid}, 't', 10),
	'the producer has committed');

ok(wait_for($node2, 'postgres', notifiers_of('b'), '0', 15),
	'the notifier of b still goes idle and exits');
my ($rc, $out, $err) = $node2->psql('postgres', 'DROP DATABASE b');
is($rc, 0, 'DROP DATABASE b is not held up') or diag($err);

$producer->quit;
$node2->stop;
done_testing();
