
# Copyright (c) the queue authors
#
# Faults inside the API functions: a lock_timeout or statement_timeout that
# fires while a function waits (another session holds the row) or works (a
# huge batch) leaves no partial state: the item, its lease, the history,
# the dead letters, the events and the failure log are exactly as before.
# A dequeue meeting a locked row skips it instead of waiting.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('faults');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION queue;
	SELECT queue.create_queue('ft', max_attempts => 3, audit => 'all');
});

# Everything a call could change, as one string.
my $state_sql = q{
	SELECT concat_ws(E'\n',
	  (SELECT string_agg(concat_ws('|', item_id, state, attempt, worker, lease_expires_at,
	                               progress, last_error, priority, run_at), ',' ORDER BY item_id)
	     FROM queue.items WHERE queue_name = 'ft'),
	  (SELECT string_agg(concat_ws('|', item_id, lease_token, visible_at, on_hold), ','
	                     ORDER BY item_id)
	     FROM queue.item_live WHERE queue_name = 'ft'),
	  (SELECT count(*) FROM queue.history WHERE queue_name = 'ft'),
	  (SELECT string_agg(concat_ws('|', item_id, review_status, replayed_as), ',' ORDER BY item_id)
	     FROM queue.dead_letters WHERE queue_name = 'ft'),
	  (SELECT count(*) FROM queue.events WHERE queue_name = 'ft'),
	  (SELECT count(*) FROM queue.failure_log WHERE queue_name = 'ft'),
	  (SELECT concat_ws('|', paused, pause_reason, max_attempts) FROM queue.queue_config
	    WHERE queue_name = 'ft'))
};
sub state { return $node->safe_psql('postgres', $state_sql); }

# Runs SQL with a timeout setting; returns the SQLSTATE of its error or 'ok'.
sub try_sql
{
	my ($setting, $sql) = @_;
	my ($out, $err) = ('', '');
	my $ret = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSET $setting;\n$sql",
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	return 'ok' if $ret == 0;
	return $1 if $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return "unexpected: $err";
}

# Items: a leased one, a queued one, a dead letter.
my ($leased, $queued, $dead) = split /\n/, $node->safe_psql('postgres', q{
	SELECT queue.enqueue('ft', '{"n": "leased"}', priority => 0);
	SELECT queue.enqueue('ft', '{"n": "queued"}', priority => 5);
	SELECT queue.enqueue('ft', '{"n": "dead"}', priority => 1);
});
my %tok = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	q{SELECT item_id || '|' || lease_token FROM queue.dequeue('ft', 'bot', batch_size => 2)});
ok(exists $tok{$leased} && exists $tok{$dead}, 'two items claimed');
$node->safe_psql('postgres',
	"SELECT queue.fail('ft', $dead, $tok{$dead}, 'broken', permanent => true)");
my $t = $tok{$leased};

# Another session holds the rows: the live items and the dead letter.
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN});
$holder->query_safe(q{SELECT 1 FROM queue.item_live WHERE queue_name = 'ft' FOR UPDATE});
$holder->query_safe(q{SELECT 1 FROM queue.dead_letters WHERE queue_name = 'ft' FOR UPDATE});

my $before = state();

my @calls = (
	[ 'complete', "SELECT queue.complete('ft', $leased, $t, '{\"r\": 1}')" ],
	[ 'complete_batch', "SELECT queue.complete_batch('ft', ARRAY[$leased], ARRAY[$t])" ],
	[ 'fail', "SELECT queue.fail('ft', $leased, $t, 'oops')" ],
	[ 'fail permanent', "SELECT queue.fail('ft', $leased, $t, 'oops', permanent => true)" ],
	[ 'release', "SELECT queue.release('ft', $leased, $t)" ],
	[ 'extend_lease', "SELECT queue.extend_lease('ft', $leased, $t, '1 h')" ],
	[ 'checkpoint', "SELECT queue.checkpoint('ft', $leased, $t, '{\"step\": 2}')" ],
	[ 'hold', "SELECT queue.hold('ft', $queued)" ],
	[ 'cancel', "SELECT queue.cancel('ft', $queued)" ],
	[ 'replay', "SELECT queue.replay('ft', $dead)" ],
	[ 'review', "SELECT queue.review('ft', $dead, 'rejected')" ],
	[ 'purge', "SELECT queue.purge('ft')" ],
	[ 'drop_queue force', "SELECT queue.drop_queue('ft', force => true)" ],
);

for my $setting ("lock_timeout = '100ms'", "statement_timeout = '100ms'")
{
	my $want = $setting =~ /lock/ ? '55P03' : '57014';
	for my $c (@calls)
	{
		my ($what, $sql) = @$c;
		is(try_sql($setting, $sql), $want, "$what under $setting fails with $want");
		is(state(), $before, "$what under $setting changed nothing");
	}
}

# dequeue does not wait for locked rows: nothing claimable, nothing changed.
is($node->safe_psql('postgres', q{SET lock_timeout = '5s';
	SELECT count(*) FROM queue.dequeue('ft', 'bot2', batch_size => 10)}),
	'0', 'dequeue skips the locked rows without waiting');
is(state(), $before, 'the skipping dequeue changed nothing');

$holder->query_safe(q{ROLLBACK});

# The settings row: alter_queue, pause and grant_queue wait for it.
$holder->query_safe(q{BEGIN});
$holder->query_safe(q{SELECT 1 FROM queue.queue_config WHERE queue_name = 'ft' FOR UPDATE});
for my $c ([ 'alter_queue', "SELECT queue.alter_queue('ft', max_attempts => 9)" ],
	[ 'pause', "SELECT queue.pause('ft', 'maintenance')" ],
	[ 'grant_queue', "SELECT queue.grant_queue('ft', 'postgres', 'reader')" ])
{
	my ($what, $sql) = @$c;
	my $got = try_sql("lock_timeout = '100ms'", $sql);
	is($got, '55P03', "$what waits for the settings row and fails with 55P03");
	is(state(), $before, "$what changed nothing");
}
$holder->query_safe(q{ROLLBACK});
$holder->quit;

# statement_timeout while working, not waiting: a batch too big to finish
# in time inserts none of its items.
my $live = $node->safe_psql('postgres', q{SELECT count(*) FROM queue.item_live});
is(try_sql("statement_timeout = '50ms'",
	q{SELECT count(*) FROM queue.enqueue_batch('ft',
	    ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 300000) g))}),
	'57014', 'a huge enqueue_batch is cancelled by statement_timeout');
is($node->safe_psql('postgres', q{SELECT count(*) FROM queue.item_live}), $live,
	'the cancelled batch left no items behind');
is(state(), $before, 'and nothing else changed');

# After the faults the queue works normally with the same lease.
is($node->safe_psql('postgres', "SELECT queue.complete('ft', $leased, $t)"), 't',
	'the lease survived the faults and completes');
is($node->safe_psql('postgres', "SELECT state FROM queue.item('ft', $leased)"), 'processed',
	'the item is processed');

$node->stop;
done_testing();
