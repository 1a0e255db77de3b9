# Copyright (c) the queue authors
#
# The server is killed with SIGKILL (postmaster and every backend at once)
# during a mixed load of four producers and four consumers, with
# synchronous_commit on.  Each client logs what the server acknowledged:
# the ids of committed enqueues and the items whose complete committed.
# After crash recovery every acknowledged enqueue is present exactly once
# (live, processed or dead), every acknowledged completion is in history,
# and the queue keeps working: the rest drains once the leases run out.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $n_producers = 4;
my $n_consumers = 4;

my $node = PostgreSQL::Test::Cluster->new('crash', port => 55030);
$node->init;

# A process crash loses nothing the kernel already has, so the harness's
# fsync = off does not weaken the test; commits are acknowledged only once
# their WAL is written.
$node->append_conf('postgresql.conf', qq(
synchronous_commit = on
max_connections = 40
restart_after_crash = on
log_min_messages = warning
));
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql('postgres',
	"SELECT queue.create_queue('crash', lease_timeout => '2 s', max_attempts => 10)");

# Work for the consumers from the start; these ids are committed too.
my @enqueued = split /\n/,
  $node->safe_psql('postgres',
	"SELECT queue.enqueue('crash', jsonb_build_object('seed', g)) FROM generate_series(1, 1000) g"
  );
is(scalar(@enqueued), 1000, 'seeded 1,000 items');

my $dir = $node->basedir;

# Producers: single enqueues, and every tenth statement a batch of five;
# a short pause every 20 statements keeps the backlog small enough to drain
# quickly after the crash.
for my $p (1 .. $n_producers)
{
	my $sql = '';
	for my $k (1 .. 20_000)
	{
		$sql .= "SELECT pg_sleep(0.02);\n" if $k % 20 == 0;
		if ($k % 10 == 0)
		{
			$sql .=
			  "SELECT queue.enqueue_batch('crash', ARRAY[" . join(
				', ',
				map { "jsonb_build_object('p', $p, 'k', $k, 'b', $_)" } 1 .. 5)
			  . "]);\n";
		}
		else
		{
			$sql .=
			  "SELECT queue.enqueue('crash', jsonb_build_object('p', $p, 'k', $k));\n";
		}
	}
	append_to_file("$dir/producer$p.sql", $sql);
}

# Consumers: claim, then complete; every tenth claim fails transiently
# instead.  Only acknowledged outcomes are printed.
for my $c (1 .. $n_consumers)
{
	my $sql = '';
	for my $k (1 .. 40_000)
	{
		$sql .= "SELECT coalesce(max(item_id), 0) AS id, coalesce(max(lease_token), 0) AS tok,"
		  . " count(*) > 0 AS got FROM queue.dequeue('crash', 'crash_c$c') \\gset\n"
		  . "\\if :got\n";
		if ($k % 10 == 0)
		{
			$sql .= "SELECT 'retry ' || :id WHERE queue.fail('crash', :id, :tok, 'flaky',"
			  . " retry_in => '0 s') IS NOT NULL;\n";
		}
		else
		{
			$sql .= "SELECT 'done ' || :id WHERE queue.complete('crash', :id, :tok);\n";
		}
		$sql .= "\\endif\n";
	}
	append_to_file("$dir/consumer$c.sql", $sql);
}

my @clients;
for my $script ((map { "producer$_" } 1 .. $n_producers),
	(map { "consumer$_" } 1 .. $n_consumers))
{
	my $h = IPC::Run::start(
		[
			'psql', '-X', '-At', '-d', $node->connstr('postgres'),
			'-f', "$dir/$script.sql"
		],
		'>', "$dir/$script.out", '2>', "$dir/$script.err");
	push @clients, $h;
}

# Let the load run until it is well under way: at least 3 s, and at least
# 300 completions (for at most 20 s).
my $started  = time();
my $progress = 0;
for (1 .. 200)
{
	$progress = $node->safe_psql('postgres',
		"SELECT count(*) FROM queue.history WHERE queue_name = 'crash'");
	last if $progress >= 300 && time() - $started >= 3;
	usleep(100_000);
}
note "processed before the crash: $progress";
ok($progress > 0, 'the consumers made progress before the crash');

# A bot holding five claims when the server dies; its tokens must not be
# handed out again after recovery.
my @held = map { [ split /\|/ ] } split /\n/,
  $node->safe_psql('postgres',
	"SELECT item_id, lease_token FROM queue.dequeue('crash', 'crash_holder', batch_size => 5)");
is(scalar(@held), 5, 'a bot holds five claims at the time of the crash');

# The crash: the postmaster and all its children die at once.
my $pm_pid = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
my @children = child_pids($pm_pid);
note "killing postmaster $pm_pid and " . scalar(@children) . " children";
$node->kill9;
kill 'KILL', @children;
for (1 .. 100)
{
	last unless grep { kill 0, $_ } @children;
	usleep(100_000);
}

# The clients notice the lost connection and stop.
$_->finish for @clients;

my $crash_errors = 0;
for my $script ((map { "producer$_" } 1 .. $n_producers),
	(map { "consumer$_" } 1 .. $n_consumers))
{
	my $err = slurp_file("$dir/$script.err");
	$crash_errors++ if $err =~ /connection|terminat|closed/i;
	note "$script: $err" if $err =~ /ERROR/;
	ok($err !~ /ERROR/, "$script saw no SQL error before the crash");
}
is($crash_errors, $n_producers + $n_consumers,
	'every client was still running when the server died');

my (%done, %retried);
my $done_twice = 0;
for my $p (1 .. $n_producers)
{
	push @enqueued, grep { /^\d+$/ } split /\n/,
	  slurp_file("$dir/producer$p.out");
}
for my $c (1 .. $n_consumers)
{
	for my $line (split /\n/, slurp_file("$dir/consumer$c.out"))
	{
		if ($line =~ /^done (\d+)$/)
		{
			$done_twice++ if $done{$1}++;
		}
		elsif ($line =~ /^retry (\d+)$/)
		{
			$retried{$1} = 1;
		}
	}
}
note "acknowledged: "
  . scalar(@enqueued)
  . " enqueues, "
  . scalar(keys %done)
  . " completions, "
  . scalar(keys %retried)
  . " retries";
ok(scalar(@enqueued) > 1000, 'producers had enqueues acknowledged');
is($done_twice, 0, 'no item was acknowledged as completed twice');

# Crash recovery.
$node->start;

$node->safe_psql(
	'postgres', qq{
CREATE TABLE acked_enqueue (item_id bigint);
INSERT INTO acked_enqueue SELECT unnest('{@{[ join(',', @enqueued) ]}}'::bigint[]);
CREATE TABLE acked_complete (item_id bigint);
INSERT INTO acked_complete SELECT unnest('{@{[ join(',', keys %done) ]}}'::bigint[]);
});

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM acked_enqueue
 GROUP BY item_id HAVING count(*) > 1
}),
	'',
	'no id was handed to two enqueues');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM acked_enqueue a
 WHERE (SELECT count(*) FROM queue.items i WHERE i.queue_name = 'crash' AND i.item_id = a.item_id)
     + (SELECT count(*) FROM queue.history h WHERE h.queue_name = 'crash' AND h.item_id = a.item_id)
     + (SELECT count(*) FROM queue.dead_letters d WHERE d.queue_name = 'crash' AND d.item_id = a.item_id)
     <> 1
}),
	0,
	'every acknowledged enqueue is present exactly once after recovery');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM acked_complete c
 WHERE NOT EXISTS (SELECT 1 FROM queue.history h
                    WHERE h.queue_name = 'crash' AND h.item_id = c.item_id)
}),
	0,
	'every acknowledged completion is in history after recovery');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
  SELECT item_id FROM (
    SELECT item_id FROM queue.items WHERE queue_name = 'crash'
    UNION ALL SELECT item_id FROM queue.history WHERE queue_name = 'crash'
    UNION ALL SELECT item_id FROM queue.dead_letters WHERE queue_name = 'crash') AS a
  GROUP BY item_id HAVING count(*) > 1) AS d
}),
	0,
	'no item is in two places after recovery');

my $total = $node->safe_psql(
	'postgres', q{
SELECT (SELECT count(*) FROM queue.items WHERE queue_name = 'crash')
     + (SELECT count(*) FROM queue.history WHERE queue_name = 'crash')
     + (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'crash')
});
ok($total >= scalar(@enqueued), 'at least every acknowledged item exists');

# After recovery the queue works: claims cut short by the crash come back
# when their 2 s leases run out, and everything drains.
$node->safe_psql('postgres',
	'CREATE TABLE after_claims (item_id bigint, lease_token bigint)');
my $left;
for (1 .. 150)
{
	$node->safe_psql(
		'postgres', q{
WITH c AS (SELECT * FROM queue.dequeue('crash', 'crash_after', batch_size => 1000)),
     l AS (INSERT INTO after_claims SELECT item_id, lease_token FROM c)
SELECT count(queue.complete('crash', item_id, lease_token)) FROM c
});
	$left = $node->safe_psql('postgres',
		"SELECT count(*) FROM queue.items WHERE queue_name = 'crash'");
	last if $left == 0;
	usleep(200_000);
}
is($left, 0, 'everything drained after recovery');

is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM queue.history WHERE queue_name = 'crash')
     + (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'crash')
}),
	$total,
	'every item ended in history or dead letters');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM acked_enqueue a
 WHERE NOT EXISTS (SELECT 1 FROM queue.history h
                    WHERE h.queue_name = 'crash' AND h.item_id = a.item_id)
}),
	0,
	'every acknowledged enqueue was processed in the end');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT item_id FROM queue.history WHERE queue_name = 'crash'
                      GROUP BY item_id HAVING count(*) > 1) AS d
}),
	0,
	'no item was processed twice');

my $held_values = join(', ', map { "($_->[0], $_->[1])" } @held);
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (VALUES $held_values) AS h(item_id, lease_token)
 WHERE NOT EXISTS (SELECT 1 FROM after_claims a
                    WHERE a.item_id = h.item_id AND a.lease_token <> h.lease_token)
}),
	0,
	'the held items were re-claimed after recovery with new tokens');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM after_claims
 WHERE lease_token IN (SELECT lease_token FROM (VALUES $held_values) AS h(item_id, lease_token))
}),
	0,
	'no token from before the crash was handed out again');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT lease_token FROM after_claims
                      GROUP BY lease_token HAVING count(*) > 1) AS d
}),
	0,
	'every claim after recovery got its own token');

$node->stop;

done_testing();

# Children of a process, from /proc.
sub child_pids
{
	my ($parent) = @_;
	my @pids;
	opendir(my $dh, '/proc') or die "cannot read /proc: $!";
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh>;
		close $fh;
		next unless defined $stat;

		# the command name is in parentheses and may contain spaces
		my ($ppid) = $stat =~ /\)\s+\S+\s+(\d+)/;
		push @pids, $pid if defined $ppid && $ppid == $parent;
	}
	closedir $dh;
	return @pids;
}
