# Copyright (c) the queue authors
#
# Maintenance under pg_cron: enable_cron fails clearly where pg_cron is not
# installed, registers the queue_sweep and queue_snapshot_metrics jobs once
# however often it is called, and the jobs really run sweep() and
# snapshot_metrics() (checked in cron.job_run_details and in the tables).
# Concurrent sweeps never wait for each other: a queue being swept by one
# session is skipped by the other (zeros in its row), and a pgbench mix of
# sweeps, snapshots and bots finishes without errors or deadlocks.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('cron', port => 55050);
$node->init;
$node->append_conf('postgresql.conf', qq(
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
# jobs run in background workers: the test node listens on a socket only
cron.use_background_workers = on
max_worker_processes = 20
max_connections = 40
log_min_messages = warning
));
$node->start;

# --- pg_cron absent from the database -------------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE nocron');
$node->safe_psql('nocron', 'CREATE EXTENSION queue');
my ($rc, $out, $err) = $node->psql('nocron',
	"\\set VERBOSITY verbose\nSELECT queue.enable_cron()");
isnt($rc, 0, 'enable_cron fails without pg_cron');
like($err, qr/55000: pg_cron runs in database "postgres", not in "nocron"/,
	'the error names the database pg_cron runs in and this one, SQLSTATE 55000');
like($err,
	qr/HINT:  Run once in database postgres: SELECT cron\.schedule_in_database\('queue_sweep_nocron', '\* \* \* \* \*', 'CALL queue\.run_sweep\(\)', 'nocron'\)/,
	'the hint is the call that creates the sweep job there');
is($node->safe_psql('nocron', q{SELECT count(*) FROM queue.sweep()}), '0',
	'the extension works without pg_cron');

# --- registering the jobs ---------------------------------------------------

$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql('postgres', q{
SELECT queue.create_queue('cron_q', retention => '1 day');
SELECT queue.enqueue('cron_q', '{"n": 1}', expires_at => now() + interval '10 ms');
});

$node->safe_psql('postgres', q{SELECT queue.enable_cron('*/5 * * * *', '*/5 * * * *')});
$node->safe_psql('postgres', q{SELECT queue.enable_cron()});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(jobname || ' ' || schedule || ' ' || database, ', ' ORDER BY jobname) FROM cron.job}),
	'queue_snapshot_metrics * * * * * postgres, queue_sweep * * * * * postgres',
	'enabling twice leaves two jobs with the latest schedules');

# --- the jobs run -------------------------------------------------------------

# pg_cron starts jobs at the top of the minute: wait for one run of each.
my $ran = 0;
for (my $i = 0; $i < 2 * $PostgreSQL::Test::Utils::timeout_default; $i++)
{
	$ran = $node->safe_psql('postgres', q{
SELECT count(DISTINCT j.jobname) FROM cron.job_run_details d JOIN cron.job j USING (jobid)
 WHERE d.status = 'succeeded'});
	last if $ran eq '2';
	sleep 1;
}
is($ran, '2', 'both jobs ran and succeeded');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM cron.job_run_details WHERE status <> 'succeeded'}),
	'0', 'no failed job runs');
is( $node->safe_psql('postgres',
		q{SELECT reason FROM queue.dead_letters WHERE queue_name = 'cron_q'}),
	'expired', 'the scheduled sweep expired the item');
cmp_ok($node->safe_psql('postgres',
		q{SELECT count(*) FROM queue.metrics_history WHERE queue_name = 'cron_q'}),
	'>=', 1, 'the scheduled snapshot wrote metrics');

$node->safe_psql('postgres', q{SELECT queue.disable_cron()});
$node->safe_psql('postgres', q{SELECT queue.disable_cron()});
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job}),
	'0', 'disable_cron removed both jobs, and a second call is harmless');

# --- concurrent sweeps ----------------------------------------------------------

$node->safe_psql('postgres', q{
SELECT queue.create_queue('busy');
SELECT queue.create_queue('free');
SELECT queue.enqueue('busy', '{}', expires_at => now() + interval '10 ms');
SELECT queue.enqueue('free', '{}', expires_at => now() + interval '10 ms');
SELECT pg_sleep(0.05);
});

# Another session is sweeping 'busy': it holds that queue's sweep lock.
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN});
$holder->query_safe(q{SELECT queue._try_lock_sweep('busy')});

my $t0 = time;
is( $node->safe_psql('postgres', q{
SELECT string_agg(queue_name || ':' || expired, ' ' ORDER BY queue_name)
  FROM queue.sweep() WHERE queue_name IN ('busy', 'free')}),
	'busy:0 free:1',
	'a sweep skips the queue another session is sweeping and does the others');
cmp_ok(time - $t0, '<', 10, 'the sweep did not wait for the other session');

$holder->query_safe(q{COMMIT});
$holder->quit;
is( $node->safe_psql('postgres', q{
SELECT expired FROM queue.sweep() WHERE queue_name = 'busy'}),
	'1', 'the next sweep does the skipped queue');

# Sweeps, snapshots and bots together: no errors, no deadlocks.
$node->safe_psql('postgres', q{
SELECT queue.create_queue('mix', lease_timeout => '1 s', max_attempts => 2, priority_aging => '1 s');
SELECT count(*) FROM queue.enqueue_batch('mix', array_fill('{}'::jsonb, ARRAY[2000]),
                                         expires_at => now() + interval '3 s');
});
$node->pgbench(
	'--no-vacuum --client=6 --transactions=60',
	0,
	[qr{processed: 360/360}],
	[qr{^$}],
	'sweeps, snapshots and bots run concurrently without errors',
	{
		'050_sweep@2' => q{SELECT count(*) FROM queue.sweep();},
		'050_snapshot@1' => q{SELECT queue.snapshot_metrics();},
		'050_bot@4' => q{
SELECT count(queue.complete('mix', item_id, lease_token)) FROM queue.dequeue('mix', 'bot-' || :client_id, 5);
SELECT count(*) FROM queue.dequeue('mix', 'lazy-' || :client_id, 3);
},
	});
is( $node->safe_psql('postgres', q{
SELECT (SELECT count(*) FROM queue.item_live WHERE queue_name = 'mix')
     + (SELECT count(*) FROM queue.item_done WHERE queue_name = 'mix')
     + (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'mix')}),
	'2000', 'every item is live, processed or dead: none lost or doubled');

# --- pg_cron installed but not loaded ---------------------------------------

# The server restarts without pg_cron in shared_preload_libraries, its
# cron.database_name line left in postgresql.conf (a placeholder setting
# now): pg_cron is installed in 'postgres' and named by that line, but runs
# nothing.  enable_cron, disable_cron and schedule say so with 55000, in
# that database and in another one, and store nothing.
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$node->restart;
$node->safe_psql('nocron', q{SELECT queue.create_queue('nocron_q')});
foreach my $case (
	[ 'postgres', q{SELECT queue.enable_cron()} ],
	[ 'postgres', q{SELECT queue.disable_cron()} ],
	[ 'postgres', q{SELECT queue.schedule('cron_q', 'tick', '* * * * *', '{}')} ],
	[ 'nocron', q{SELECT queue.enable_cron()} ],
	[ 'nocron', q{SELECT queue.schedule('nocron_q', 'tick', '* * * * *', '{}')} ])
{
	my ($db, $sql) = @$case;
	($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\n$sql");
	like($err, qr/ERROR:  55000: pg_cron is not loaded/,
		"pg_cron not loaded: $sql in $db fails with 55000");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM queue.schedules}) . ' '
	. $node->safe_psql('nocron', q{SELECT count(*) FROM queue.schedules}),
	'0 0', 'and no schedule was stored');

$node->stop;
done_testing();
