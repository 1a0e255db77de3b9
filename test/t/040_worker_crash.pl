# Copyright (c) the queue authors
#
# Bots that die mid-item: a backend killed with SIGKILL (the server
# restarts all backends), a backend terminated by an operator, and two
# clients whose connection is cut in the middle of a transaction.  Their
# items come back through lease expiry (2 s leases), or at once when the
# claim itself was never committed, and other consumers process them:
# nothing is lost, nothing is processed twice, and the dead bots' tokens
# are refused.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $n_items = 300;

my $node = PostgreSQL::Test::Cluster->new('wcrash', port => 55040);
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 30
restart_after_crash = on
log_min_messages = warning
));
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql(
	'postgres', qq{
SELECT queue.create_queue('wcrash', lease_timeout => '2 s', max_attempts => 5);
SELECT count(queue.enqueue('wcrash', jsonb_build_object('n', g)))
  FROM generate_series(1, $n_items) AS g;

-- Every claim the surviving consumers make, and every completion.
CREATE TABLE wc_claims (item_id bigint, attempt int, progress jsonb, worker text);
CREATE TABLE wc_done (item_id bigint);
});

# Claim one item in a session as a given worker; returns (id, token).
sub claim
{
	my ($session, $worker) = @_;
	my $row = $session->query_safe(
		"SELECT item_id || ' ' || lease_token FROM queue.dequeue('wcrash', '$worker')");
	my ($id, $token) = split / /, $row;
	return ($id, $token);
}

# Victim B: a backend killed with SIGKILL in the middle of an item.  Its
# claim and first checkpoint are committed; the second checkpoint is in an
# open transaction.  The server restarts every backend.
my $psql_b = $node->background_psql('postgres');
my ($b_id, $b_token) = claim($psql_b, 'victim_b');
ok($b_id, 'victim b claimed an item');
$psql_b->query_safe(
	"SELECT queue.checkpoint('wcrash', $b_id, $b_token, jsonb_build_object('step', 1))");
$psql_b->query_safe('BEGIN');
$psql_b->query_safe(
	"SELECT queue.checkpoint('wcrash', $b_id, $b_token, jsonb_build_object('step', 2))");
my $b_pid = $psql_b->query_safe('SELECT pg_backend_pid()');
note "killing backend $b_pid with SIGKILL";
kill 'KILL', $b_pid;
eval { $psql_b->quit };
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back after the backend crash';
pass('the server restarted its backends after the SIGKILL');

# Victim A: terminated by an operator while holding a committed claim.
my $psql_a = $node->background_psql('postgres');
my ($a_id, $a_token) = claim($psql_a, 'victim_a');
ok($a_id, 'victim a claimed an item');
my $a_pid = $psql_a->query_safe('SELECT pg_backend_pid()');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($a_pid)");
eval { $psql_a->quit };

# Victim C: the connection is cut while its claim is still uncommitted.
my $psql_c = $node->background_psql('postgres');
$psql_c->query_safe('BEGIN');
my ($c_id, $c_token) = claim($psql_c, 'victim_c');
ok($c_id, 'victim c claimed an item in an open transaction');
my $c_pid = $psql_c->query_safe('SELECT pg_backend_pid()');

# Victim D: the connection is cut while a lease extension by an hour is
# still uncommitted; the claim itself was committed.
my $psql_d = $node->background_psql('postgres');
my ($d_id, $d_token) = claim($psql_d, 'victim_d');
ok($d_id, 'victim d claimed an item');
$psql_d->query_safe('BEGIN');
$psql_d->query_safe("SELECT queue.extend_lease('wcrash', $d_id, $d_token, '1 hour')");
my $d_pid = $psql_d->query_safe('SELECT pg_backend_pid()');

for my $session ($psql_c, $psql_d)
{
	$session->{run}->signal('KILL');
	eval { $session->{run}->finish };
}
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid IN ($c_pid, $d_pid)")
  or die 'the cut connections did not go away';
pass('the cut connections ended on the server');

my %victim = (a => $a_id, b => $b_id, c => $c_id, d => $d_id);
is(scalar(keys %{ { reverse %victim } }), 4, 'the four victims held four different items');

is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM queue.items WHERE queue_name = 'wcrash' AND item_id = $c_id AND state = 'queued'"
	),
	1,
	'the item of the uncommitted claim is queued again at once');

# Survivors drain the queue; the victims' items come back as their leases
# run out.
my $script = $node->basedir . '/drain.sql';
append_to_file(
	$script, q{
WITH c AS (SELECT * FROM queue.dequeue('wcrash', 'survivor' || :client_id, lease_timeout => '1 min')),
     l AS (INSERT INTO wc_claims
             SELECT item_id, attempt, progress, 'survivor' || :client_id FROM c)
SELECT coalesce(max(item_id), 0) AS id, coalesce(max(lease_token), 0) AS tok FROM c \gset
\if :id > 0
INSERT INTO wc_done SELECT :id WHERE queue.complete('wcrash', :id, :tok);
\endif
});

my $left;
my $deadline = time() + 40;
while (1)
{
	$node->command_ok(
		[ 'pgbench', '-n', '-c', 3, '-j', 1, '-t', 60, '-f', $script, 'postgres' ],
		'survivors ran without errors');
	$left = $node->safe_psql('postgres',
		"SELECT count(*) FROM queue.items WHERE queue_name = 'wcrash'");
	last if $left == 0 || time() > $deadline;
	usleep(300_000);
}
is($left, 0, 'the queue drained, the victims\' items included');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) || '/' || count(DISTINCT item_id) FROM queue.history WHERE queue_name = 'wcrash'
}),
	"$n_items/$n_items",
	'every item is in history exactly once');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'wcrash'"),
	0, 'nothing was dead-lettered');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) || '/' || count(DISTINCT item_id) FROM wc_done
}),
	"$n_items/$n_items",
	'survivors completed every item once');

for my $v (sort keys %victim)
{
	my $id = $victim{$v};
	my $expected_attempts = $v eq 'c' ? 1 : 2;
	is( $node->safe_psql(
			'postgres',
			"SELECT worker LIKE 'survivor%' AND attempts = $expected_attempts FROM queue.history WHERE queue_name = 'wcrash' AND item_id = $id"
		),
		't',
		"victim $v\'s item was processed by a survivor at attempt $expected_attempts");
}

is( $node->safe_psql(
		'postgres',
		"SELECT progress->>'step' FROM wc_claims WHERE item_id = $b_id AND attempt = 2"),
	'1',
	'the survivor resumed from the committed checkpoint, not the rolled-back one');

# The dead bots' tokens do nothing now.
is($node->safe_psql('postgres',
		"SELECT queue.complete('wcrash', $a_id, $a_token)"),
	'f', 'a terminated bot cannot complete its old item');
is($node->safe_psql('postgres',
		"SELECT queue.fail('wcrash', $b_id, $b_token, 'late') IS NULL"),
	't', 'a killed bot cannot fail its old item');
is($node->safe_psql('postgres',
		"SELECT queue.extend_lease('wcrash', $d_id, $d_token) IS NULL"),
	't', 'a cut-off bot cannot extend its old lease');
is($node->safe_psql('postgres',
		"SELECT queue.complete('wcrash', $c_id, $c_token)"),
	'f', 'a rolled-back claim\'s token completes nothing');

# The three lost leases are failed attempts.
is( $node->safe_psql(
		'postgres', q{SELECT failed_1h FROM queue.stats('wcrash')}),
	3,
	'stats counts the three lost leases as failed attempts');

# Orphan recovery: a bot holding a 1 h lease loses its connection and is
# never seen again.  Once it counts as offline (queue.worker_offline_after,
# 2 s here) sweep releases its lease at once, and its token stops working;
# a worker that keeps heartbeating keeps its item.
$node->safe_psql(
	'postgres', q{
SELECT queue.create_queue('orphan', lease_timeout => '1 hour');
SELECT queue.enqueue('orphan', jsonb_build_object('n', g)) FROM generate_series(1, 2) AS g;
});
my $psql_e = $node->background_psql('postgres');
my $row_e = $psql_e->query_safe(
	"SELECT item_id || ' ' || lease_token FROM queue.dequeue('orphan', 'victim_e')");
my ($e_id, $e_token) = split / /, $row_e;
ok($e_id, 'victim e claimed an item with a 1 h lease');
$psql_e->{run}->signal('KILL');
eval { $psql_e->{run}->finish };

my $alive_id = $node->safe_psql('postgres',
	"SELECT item_id FROM queue.dequeue('orphan', 'alive_w')");
ok($alive_id, 'a live worker claimed the other item');

usleep(2_500_000);
$node->safe_psql('postgres', "SELECT queue.heartbeat('alive_w')");

is( $node->safe_psql(
		'postgres', q{
SET queue.worker_offline_after = '2s';
SELECT recovered FROM queue.sweep() WHERE queue_name = 'orphan';
}),
	1,
	'sweep recovered the offline worker\'s item before its lease ran out');
is($node->safe_psql('postgres',
		"SELECT queue.complete('orphan', $e_id, $e_token)"),
	'f', 'the offline worker\'s token no longer works');
is( $node->safe_psql(
		'postgres',
		"SELECT item_id || ':' || attempt FROM queue.dequeue('orphan', 'orphan_survivor')"),
	"$e_id:2",
	'another worker claimed the recovered item, the lost lease counted');
is( $node->safe_psql(
		'postgres',
		"SELECT worker || ':' || state FROM queue.items WHERE queue_name = 'orphan' AND item_id = $alive_id"
	),
	'alive_w:processing',
	'the heartbeating worker kept its item');
ok( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM queue.events WHERE queue_name = 'orphan' AND item_id = $e_id AND kind = 'recovered'"
	) >= 1,
	'the recovery is recorded in events');
is( $node->safe_psql(
		'postgres', q{
SET queue.worker_offline_after = '2s';
SELECT status FROM queue.workers WHERE worker = 'victim_e';
}),
	'offline',
	'the workers view shows the vanished worker offline');

# Heartbeats never keep a dead process's item alive, also for a worker
# registered by its first dequeue: the process that claimed exits, and a
# heartbeat from a new process leaves that lease to run out.
$node->safe_psql(
	'postgres', q{
SELECT queue.create_queue('hb_dead', lease_timeout => '1 hour');
SELECT queue.enqueue('hb_dead', '{}');
});
my $hb_expiry = $node->safe_psql('postgres',
	"SELECT lease_expires_at FROM queue.dequeue('hb_dead', 'hb_first_dequeue')");
usleep(100_000);
is($node->safe_psql('postgres', "SELECT queue.heartbeat('hb_first_dequeue')"),
	0, 'a heartbeat from a new process renews no lease of the dead one');
is( $node->safe_psql(
		'postgres',
		"SELECT lease_expires_at = '$hb_expiry' FROM queue.items WHERE queue_name = 'hb_dead'"),
	't',
	'the dead process\'s lease keeps its expiry');

# A producer whose connection is cut before its transaction commits leaves
# nothing behind: no item, and its dedup_key is free for the next producer.
my $psql_p = $node->background_psql('postgres');
$psql_p->query_safe('BEGIN');
my $cut_id = $psql_p->query_safe(
	"SELECT queue.enqueue('orphan', jsonb_build_object('n', 'cut'), dedup_key => 'cut-key')");
my $p_pid = $psql_p->query_safe('SELECT pg_backend_pid()');
$psql_p->{run}->signal('KILL');
eval { $psql_p->{run}->finish };
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $p_pid")
  or die 'the producer\'s connection did not go away';
is($node->safe_psql('postgres', "SELECT count(*) FROM queue.item('orphan', $cut_id)"),
	0, 'the uncommitted enqueue left no item');
my $next_id = $node->safe_psql('postgres',
	"SELECT queue.enqueue('orphan', jsonb_build_object('n', 'again'), dedup_key => 'cut-key')");
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM queue.items WHERE queue_name = 'orphan' AND dedup_key = 'cut-key' AND item_id = $next_id AND payload->>'n' = 'again'"
	),
	1,
	'the next producer\'s enqueue with the same key made its own item');

$node->stop;

done_testing();
