# Copyright (c) the queue authors
#
# Limits under contention: eight consumers hammer a queue with
# max_in_flight 3, then eight sessions of one worker with capacity 2, then
# eight dequeuers race for the single probe of a half-open breaker.  A
# monitor samples the committed number of items in flight meanwhile; it
# never exceeds the limit.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('limits', port => 55025);
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 40
log_min_messages = warning
));
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql(
	'postgres', q{
SELECT queue.create_queue('mif', max_in_flight => 3);
SELECT queue.create_queue('cap');
SELECT queue.register_worker('capw', capacity => 2);
SELECT count(queue.enqueue('mif', jsonb_build_object('n', g))) FROM generate_series(1, 400) AS g;
SELECT count(queue.enqueue('cap', jsonb_build_object('n', g))) FROM generate_series(1, 400) AS g;
CREATE TABLE samples (queue_name text, in_flight bigint);
CREATE TABLE done (queue_name text, item_id bigint);
});

# A monitor that samples the items in flight while the consumers run.
sub start_monitor
{
	my ($queue, $worker_filter) = @_;
	my $file = $node->basedir . "/monitor_$queue.sql";
	my $sample =
	  "INSERT INTO samples SELECT '$queue', count(*) FROM queue.items"
	  . " WHERE queue_name = '$queue' AND state = 'processing'$worker_filter;\n";
	append_to_file($file, $sample x 2000);
	return IPC::Run::start(
		[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', $file ],
		'>', '/dev/null', '2>', $node->basedir . "/monitor_$queue.err");
}

# A consumer: claim a batch of up to three, hold it briefly, complete it.
sub consumer_script
{
	my ($queue, $worker) = @_;
	my $file = $node->basedir . "/consumer_$queue.sql";
	append_to_file(
		$file, qq{
SELECT coalesce(array_agg(item_id)::text, '{}') AS ids,
       coalesce(array_agg(lease_token)::text, '{}') AS toks
  FROM queue.dequeue('$queue', $worker, batch_size => 3) \\gset
SELECT pg_sleep(0.002);
INSERT INTO done SELECT '$queue', unnest(':ids'::bigint[])
 WHERE queue.complete_batch('$queue', ':ids'::bigint[], ':toks'::bigint[])
       = cardinality(':ids'::bigint[]);
});
	return $file;
}

for my $case (
	[ 'mif', "'mif_w' || :client_id", '',                       3 ],
	[ 'cap', "'capw'",               " AND worker = 'capw'", 2 ])
{
	my ($queue, $worker, $filter, $limit) = @$case;
	my $monitor = start_monitor($queue, $filter);
	my $script  = consumer_script($queue, $worker);
	my $left;
	for my $round (1 .. 20)
	{
		$node->command_ok(
			[ 'pgbench', '-n', '-c', 8, '-j', 2, '-t', 100, '-f', $script, 'postgres' ],
			"$queue: consumer round $round ran without errors");
		$left = $node->safe_psql('postgres',
			"SELECT count(*) FROM queue.items WHERE queue_name = '$queue'");
		last if $left == 0;
	}
	$monitor->finish;
	is($left, 0, "$queue: the queue drained");
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) || '/' || count(DISTINCT item_id) FROM done WHERE queue_name = '$queue'"
		),
		'400/400',
		"$queue: every item was completed once");
	my ($samples, $max) = split /\|/,
	  $node->safe_psql('postgres',
		"SELECT count(*), max(in_flight) FROM samples WHERE queue_name = '$queue'");
	note "$queue: $samples samples, at most $max in flight";
	ok($samples > 100, "$queue: the monitor took samples");
	ok($max >= 1, "$queue: the monitor saw items in flight");
	ok($max <= $limit, "$queue: never more than $limit in flight (saw $max)");
}

is($node->safe_psql('postgres', "SELECT count(*) FROM queue.history WHERE queue_name IN ('mif', 'cap')"),
	800, 'history holds all 800 items');

# Half-open breaker: eight dequeuers race, exactly one probe is handed out.
$node->safe_psql(
	'postgres', q{
SELECT queue.create_queue('brk', breaker_threshold => 0.5, breaker_min_samples => 2,
                          breaker_cooldown => '3 s');
SELECT count(queue.enqueue('brk', jsonb_build_object('n', g))) FROM generate_series(1, 50) AS g;
CREATE TABLE probes (item_id bigint, worker text);
});
for (1 .. 2)
{
	$node->safe_psql(
		'postgres', q{
SELECT queue.fail('brk', item_id, lease_token, 'ERP down', 'ERP_DOWN', permanent => true)
  FROM queue.dequeue('brk', 'brk_w0');
});
}
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM queue.dequeue('brk', 'brk_w0')"),
	0,
	'brk: the breaker is open');
sleep 4;
my $probe_script = $node->basedir . '/probe.sql';
append_to_file(
	$probe_script, q{
INSERT INTO probes
  SELECT item_id, 'brk_w' || :client_id
    FROM queue.dequeue('brk', 'brk_w' || :client_id, batch_size => 5);
});
$node->command_ok(
	[ 'pgbench', '-n', '-c', 8, '-j', 2, '-t', 50, '-f', $probe_script, 'postgres' ],
	'brk: eight dequeuers ran without errors');
is($node->safe_psql('postgres', 'SELECT count(*) FROM probes'),
	1, 'brk: exactly one probe was handed out');

$node->stop;

done_testing();
