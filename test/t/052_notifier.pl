# Copyright (c) the queue authors
#
# The notifier: with queue in shared_preload_libraries, a producer that
# would wait for the cluster-wide notify lock hands its NOTIFY to a
# per-database background worker instead.  queue.notify_handoff = always
# forces that path so it can be checked without racing for the lock:
# committed enqueues are announced (by the notifier, which the default
# 'auto' also uses while it runs), rolled-back ones and rolled-back
# subtransactions are not, a transaction is announced once, a stream of
# enqueues is folded into a notification per 10 ms, a killed notifier is
# replaced, an idle one exits (DROP DATABASE is not held
# up), PREPARE TRANSACTION is refused as for NOTIFY, and under concurrent
# producers with the default 'auto' every enqueue commits and a listener
# hears about them.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep gettimeofday tv_interval);

my $node = PostgreSQL::Test::Cluster->new('notifier', port => 55052);
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'queue'
max_prepared_transactions = 2
log_min_messages = warning
});
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION queue;
SELECT queue.create_queue('fast');
SELECT queue.create_queue('slow');
});

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN queue_fast');
$listener->query_safe('LISTEN queue_slow');

# Notifications the listener has received since the last call, as
# [channel, sender pid]; waits up to $wait seconds for at least $want.
sub notifications
{
	my ($want, $wait) = @_;
	my @n;
	my $deadline = time() + $wait;
	while (1)
	{
		my $out = $listener->query_safe('SELECT 1');
		while ($out =~ /Asynchronous notification "([^"]+)" received from server process with PID (\d+)/g)
		{
			push @n, [ $1, $2 ];
		}
		last if @n >= $want || time() >= $deadline;
		usleep(100_000);
	}
	return @n;
}

sub notifier_pids
{
	return $node->safe_psql('postgres',
		q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
		   WHERE backend_type = 'queue notifier'});
}

my $always = q{SET queue.notify_handoff = 'always';};

# --- hand-over path --------------------------------------------------------------

# The first hand-over finds no notifier: it notifies by itself and starts one.
my ($producer) = $node->safe_psql('postgres',
	$always . q{SELECT queue.enqueue('fast', '{"n": 0}'); SELECT pg_backend_pid();}) =~ /(\d+)\s*$/;
my @n = notifications(1, 10);
is(scalar(@n), 1, 'without a running notifier the producer notifies by itself');
is($n[0][1], $producer, '... from its own backend');

my $notifier = '';
for (1 .. 100)
{
	$notifier = notifier_pids();
	last if $notifier ne '';
	usleep(50_000);
}
like($notifier, qr/^\d+$/, 'and one notifier is started for the database');

$node->safe_psql('postgres', $always . q{SELECT queue.enqueue('fast', '{"n": 1}')});
@n = notifications(1, 10);
is(scalar(@n), 1, 'a committed enqueue is announced once');
is($n[0][0], 'queue_fast', '... on queue_<name>');
is($n[0][1], $notifier, '... by the notifier');

$node->safe_psql('postgres', q{SELECT queue.enqueue('fast', '{"n": 1}')});
@n = notifications(1, 10);
is($n[0][1] // '', $notifier,
	'while a notifier runs, the default handoff goes through it even with the lock free');

$node->safe_psql('postgres', $always . q{
BEGIN;
SELECT queue.enqueue('fast', '{"n": 2}');
ROLLBACK;
});
is(scalar(notifications(1, 2)), 0, 'a rolled-back enqueue is not announced');

$node->safe_psql('postgres', $always . q{
BEGIN;
SAVEPOINT s;
SELECT queue.enqueue('fast', '{"n": 3}');
ROLLBACK TO SAVEPOINT s;
SELECT queue.enqueue('slow', '{"n": 4}');
COMMIT;
});
@n = notifications(1, 10);
push @n, notifications(2, 1);
is(join(',', map { $_->[0] } @n), 'queue_slow',
	'an enqueue in a rolled-back subtransaction is not announced, the rest of the transaction is');

$node->safe_psql('postgres', $always . q{
BEGIN;
SAVEPOINT s;
SELECT queue.enqueue('fast', '{"n": 5}');
RELEASE SAVEPOINT s;
SELECT queue.enqueue('fast', '{"n": 6}');
SELECT queue.enqueue_batch('fast', ARRAY['{"n": 7}', '{"n": 8}']::jsonb[]);
COMMIT;
});
@n = notifications(1, 10);
push @n, notifications(2, 1);
is(join(',', map { $_->[0] } @n), 'queue_fast',
	'a transaction with many enqueues, one in a released subtransaction, is announced once');

my ($err) = ($node->psql('postgres', $always . q{
BEGIN;
SELECT queue.enqueue('fast', '{"n": 9}');
PREPARE TRANSACTION 'p';
}))[2];
like($err, qr/cannot PREPARE a transaction that has executed LISTEN, UNLISTEN, or NOTIFY/,
	'PREPARE TRANSACTION after an enqueue is refused as it is after NOTIFY');

$node->safe_psql('postgres', q{SET queue.notify_handoff = 'never'; SELECT queue.enqueue('fast', '{"n": 10}')});
@n = notifications(1, 10);
isnt($n[0][1] // '', $notifier, 'notify_handoff = never notifies from the producer');

# --- a stream of enqueues is folded ---------------------------------------------------

# One notifying transaction per 10 ms at most, however many commits: a
# listener hears far fewer notifications than there were enqueues.  The
# notifier must be up first (it exits after two idle seconds, and until a
# new one runs every producer notifies by itself).
$node->safe_psql('postgres', $always . q{SELECT queue.enqueue('fast', '{"s": 0}')});
for (1 .. 100)
{
	last if notifier_pids() ne '';
	usleep(50_000);
}
notifications(1, 10);
my $stream = $always . join('', map { qq{SELECT queue.enqueue('fast', '{"s": $_}');\n} } 1 .. 200);
my $t0 = [ gettimeofday() ];
$node->safe_psql('postgres', $stream);
my $ms = tv_interval($t0) * 1000;
@n = notifications(1000, 2);
ok(@n >= 1 && @n <= $ms / 10 + 4,
	'200 enqueues in a row are folded into a notification per 10 ms at most')
  or diag(scalar(@n) . " notifications in $ms ms");

# --- the notifier's life ------------------------------------------------------------

$node->safe_psql('postgres', "SELECT pg_terminate_backend($notifier)");
for (1 .. 100)
{
	last if notifier_pids() eq '';
	usleep(50_000);
}
$node->safe_psql('postgres', $always . q{SELECT queue.enqueue('fast', '{"n": 11}')});
is(scalar(notifications(1, 10)), 1, 'a killed notifier loses no later notification');
my $next = '';
for (1 .. 100)
{
	$next = notifier_pids();
	last if $next ne '';
	usleep(50_000);
}
ok($next ne '' && $next ne $notifier, 'and a new notifier takes its place');

my $gone = 0;
for (1 .. 100)
{
	if (notifier_pids() eq '')
	{
		$gone = 1;
		last;
	}
	usleep(100_000);
}
ok($gone, 'an idle notifier exits within seconds');

$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', q{
CREATE EXTENSION queue;
SELECT queue.create_queue('fast');
});
$node->safe_psql('other', $always . q{SELECT queue.enqueue('fast', '{}')}) for 1 .. 2;
is(scalar(notifications(1, 2)), 0, 'notifications stay in their database');
my ($rc, $out, $drop_err) = $node->psql('postgres', 'DROP DATABASE other');
is($rc, 0, 'DROP DATABASE waits out the idle notifier of that database')
  or diag($drop_err);

# --- concurrent producers, default handoff -------------------------------------------------

$node->safe_psql('postgres', 'SELECT queue.purge(\'fast\')');
my $script = $node->basedir . '/enqueue.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	q{SELECT queue.enqueue('fast', '{"job": 1}');} . "\n");
$node->command_ok(
	[ 'pgbench', '-n', '-c', '8', '-j', '2', '-t', '200', '-f', $script,
	  '-p', $node->port, '-h', $node->host, 'postgres' ],
	'8 producers enqueue 1,600 items with the default handoff');
is($node->safe_psql('postgres', q{SELECT count(*) FROM queue.item_live WHERE queue_name = 'fast'}),
	'1600', 'every enqueue committed');
ok(scalar(notifications(1, 10)) >= 1, 'and the listener was told');

$listener->quit;
$node->stop;
done_testing();
