
# Copyright (c) the queue authors
#
# Recurring items under a real pg_cron, with queue not preloaded:
#  - without pg_cron loaded, schedule() fails with 55000 and a hint;
#  - in the database pg_cron lives in, schedule() creates the job
#    queue_schedules itself;
#  - in another database (cron.database_name = 'postgres'), schedule()
#    says how to create the job there, and once that is done it ticks;
#  - a real tick enqueues one item keyed by its scheduled minute; running
#    the same tick again, after its item completed, enqueues nothing;
#  - pg_dump and restore keep the schedules.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# --- pg_cron not loaded ----------------------------------------------------

my $bare = PostgreSQL::Test::Cluster->new('nocron');
$bare->init;
$bare->start;
$bare->safe_psql('postgres', 'CREATE EXTENSION queue');
$bare->safe_psql('postgres', q{SELECT queue.create_queue('q')});
my ($rc, $out, $err) = $bare->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT queue.schedule('q', 'nightly', '0 2 * * *', '{}')");
isnt($rc, 0, 'schedule fails without pg_cron');
like($err, qr/55000: pg_cron is not loaded/, 'the error says pg_cron is not loaded, SQLSTATE 55000');
like($err, qr/HINT:.*shared_preload_libraries.*CREATE EXTENSION pg_cron/,
	'the hint says how to install pg_cron');
is($bare->safe_psql('postgres', q{SELECT count(*) FROM queue.schedules}), '0',
	'nothing was scheduled');
is($bare->safe_psql('postgres', q{SELECT queue.unschedule('q', 'nightly')}), 'f',
	'unschedule works without pg_cron');
$bare->stop;

# --- pg_cron in database postgres, queue in postgres and in app -------------

my $node = PostgreSQL::Test::Cluster->new('sched');
$node->init;
$node->append_conf('postgresql.conf', qq(
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 20
log_min_messages = warning
));
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION queue');

# here: the job is created by schedule()
$node->safe_psql('postgres', q{
	SELECT queue.create_queue('local_q');
	SELECT queue.schedule('local_q', 'every-minute', '* * * * *', '{"where": "postgres"}');
});
is($node->safe_psql('postgres',
		q{SELECT jobname || ' ' || schedule || ' ' || command || ' ' || database FROM cron.job}),
	'queue_schedules * * * * * SELECT queue.run_schedules() postgres',
	'schedule() created the pg_cron job in its own database');

# elsewhere: schedule() says what to run in the pg_cron database
$node->safe_psql('app', q{SELECT queue.create_queue('app_q')});
($rc, $out, $err) = $node->psql('app',
	q{SELECT queue.schedule('app_q', 'every-minute', '* * * * *', '{"where": "app"}', priority => 1)});
is($rc, 0, 'schedule() works in a database without pg_cron');
like($err, qr/NOTICE:  pg_cron runs in database "postgres"/, 'and says where pg_cron runs');
my ($cmd) = $err =~ /HINT:.*run once in database postgres: (SELECT cron\.schedule_in_database\(.*\);)/;
ok(defined $cmd, 'the hint gives the command to run there');
$node->safe_psql('postgres', $cmd);
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE database = 'app'}), '1',
	'the hinted command created the job for app');

# --- real ticks -------------------------------------------------------------

# pg_cron starts its jobs at the top of the minute: wait for a tick in both.
my $ticked = '';
for (my $i = 0; $i < 2 * $PostgreSQL::Test::Utils::timeout_default; $i++)
{
	$ticked = join ',', map {
		$node->safe_psql($_, q{SELECT count(*) > 0 FROM queue.schedules WHERE last_tick IS NOT NULL})
	} ('postgres', 'app');
	last if $ticked eq 't,t';
	sleep 1;
}
is($ticked, 't,t', 'both schedules ticked');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM cron.job_run_details WHERE status <> 'succeeded'}),
	'0', 'no failed job runs');

# Stop the jobs so that the checks below see one tick at a time.
$node->safe_psql('postgres', q{UPDATE cron.job SET active = false});

my $row = $node->safe_psql('app', q{
	SELECT i.payload->>'where', i.priority,
	       i.dedup_key = 'schedule:every-minute:'
	                     || to_char(s.last_tick AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"'),
	       s.last_tick = date_trunc('minute', s.last_tick),
	       s.last_run_at >= s.last_tick AND s.last_run_at < s.last_tick + interval '1 minute',
	       s.next_tick = s.last_tick + interval '1 minute'
	  FROM queue.schedules s JOIN queue.items i ON i.item_id = s.last_item_id
	 WHERE s.queue_name = 'app_q'});
is($row, 'app|1|t|t|t|t',
	'the tick enqueued the payload, keyed by its scheduled minute, and set the next tick');

# The same tick again (a second run of the job within the minute, or a
# failover replaying it) after its item completed, on a queue without
# dedup_window: nothing new.
$node->safe_psql('app', q{
	SELECT count(queue.complete('app_q', item_id, lease_token)) FROM queue.dequeue('app_q', 'bot', 100)});
my ($same_minute, $enqueued) = split /\|/, $node->safe_psql('app', q{
	SELECT date_trunc('minute', now()) = last_tick, queue.run_schedules()
	  FROM queue.schedules WHERE queue_name = 'app_q'});
SKIP:
{
	skip 'the tick\'s minute passed before the second run', 1 if $same_minute ne 't';
	is($enqueued, '0', 'running the same tick again enqueues nothing');
}
is($node->safe_psql('app', q{
	SELECT count(*) FROM queue.schedules s, queue.item('app_q', s.last_item_id) i
	 WHERE s.queue_name = 'app_q' AND i.state = 'processed'}),
	'1', 'the tick\'s item completed');
is($node->safe_psql('app', q{
	SELECT (SELECT count(*) FROM queue.history h WHERE h.dedup_key LIKE 'schedule:every-minute:%')
	     + (SELECT count(*) FROM queue.items i WHERE i.dedup_key LIKE 'schedule:every-minute:%')
	     = (SELECT count(DISTINCT h.dedup_key) FROM queue.history h WHERE h.dedup_key LIKE 'schedule:every-minute:%')
	     + (SELECT count(DISTINCT i.dedup_key) FROM queue.items i WHERE i.dedup_key LIKE 'schedule:every-minute:%')}),
	't', 'no tick produced two items');

# --- pg_dump and restore -----------------------------------------------------

$node->safe_psql('app', q{
	SELECT queue.schedule('app_q', 'month-end', '0 23 $ * *', '{"run": "month-end"}', priority => 0,
	                      group_key => 'ledger', limit_key => 'erp');
});
my $schedules_sql = q{
	SELECT concat_ws('|', queue_name, name, cron, payload, priority, group_key, limit_key,
	                 created_at, updated_at, next_tick, last_tick, last_item_id, last_run_at, last_error)
	  FROM queue.schedules ORDER BY queue_name, name};
my $before = $node->safe_psql('app', $schedules_sql);
my $dump = $node->basedir . '/app.dump';
command_ok([ 'pg_dump', '--format=custom', '--file', $dump, '--dbname', $node->connstr('app') ],
	'pg_dump of the database with schedules');
$node->safe_psql('postgres', 'CREATE DATABASE app_restored');
command_ok([ 'pg_restore', '--exit-on-error', '--dbname', $node->connstr('app_restored'), $dump ],
	'pg_restore into a new database');
is($node->safe_psql('app_restored', $schedules_sql), $before, 'the schedules came back unchanged');
like($before, qr/month-end\|0 23 \$ \* \*\|.*\|ledger\|erp\|/, 'with their keys');

# --- drop_queue removes the queue's schedules --------------------------------

$node->safe_psql('app', q{SELECT queue.drop_queue('app_q', force => true)});
is($node->safe_psql('app', q{SELECT count(*) FROM queue.schedules}), '0',
	'drop_queue removed the schedules');

$node->stop;
done_testing();
