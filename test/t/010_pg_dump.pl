
# Copyright (c) the queue authors
#
# pg_dump / restore: a database with queues and items in every state is
# dumped (custom and plain format) and restored into new databases; the
# queues, their settings, the items with their states, leases, history,
# dead letters and events come back intact, and the restored queue keeps
# working: the old lease token completes its item, new items get fresh ids,
# dedup still sees the old keys, dead letters can be replayed.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/../perl";
use QueueTest qw(state_sql);

my $node = PostgreSQL::Test::Cluster->new('dump');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_cron'\n");
$node->append_conf('postgresql.conf', "cron.database_name = 'postgres'\n");
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION queue');

# A queue with non-default settings, and a second, default one.
$node->safe_psql('src', q{
	SELECT queue.create_queue('dumped', lease_timeout => '10 min', max_attempts => 3,
		backoff_base => '2 s', backoff_factor => 2, backoff_max => '5 min',
		backoff_jitter => 0, item_ttl => '30 days', dedup_window => '1 h',
		priority_aging => '5 min', max_in_flight => 10, retention => '3 days',
		sla => '20 min', notify => false, audit => 'all');
	SELECT queue.create_queue('plain');
});

# The history, events and failure log partitioned as the sweep leaves them:
# partitions made at run time (not members of the extension) hold the rows
# from here on, the DEFAULT partitions what came before or lies outside.
$node->safe_psql('src', q{
	SELECT queue.enqueue('plain', '{"s": "before partitions"}');
	SELECT queue.complete('plain', item_id, lease_token) FROM queue.dequeue('plain', 'bot-0');
	INSERT INTO queue.events (queue_name, kind, at) VALUES ('plain', 'note', now() - interval '30 days');
	SELECT queue.maintain_history();
});
is($node->safe_psql('src', q{
	SELECT string_agg(t.table_name || '=' || (SELECT count(*) FROM queue._history_partitions(t.table_name)), ',')
	  FROM queue._history_tables() t}),
	'item_done=2,events=2,failure_log=2', 'the history tables have their partitions');

# Items in every state.
my $ids = $node->safe_psql('src', q{
	SELECT queue.enqueue('dumped', '{"s": "processed"}', priority => 0, dedup_key => 'k-done');
	SELECT queue.enqueue('dumped', '{"s": "dead"}', priority => 0, correlation_id => 'c-dead');
	SELECT queue.enqueue('dumped', '{"s": "processing"}', priority => 0);
	SELECT queue.enqueue('dumped', '{"s": "retrying"}', priority => 0);
	SELECT queue.enqueue('dumped', '{"s": "queued"}', priority => 3, dedup_key => 'k-queued',
		correlation_id => 'c-queued');
	SELECT queue.enqueue('dumped', '{"s": "scheduled"}', run_at => now() + interval '1 day');
	SELECT queue.enqueue('dumped', '{"s": "held"}');
	SELECT queue.enqueue('plain', '{"s": "other queue"}');
});
my ($done, $dead, $proc, $retry, $queued, $sched, $held, $other) = split /\n/, $ids;
is(scalar(grep { defined && /^\d+$/ } ($done, $dead, $proc, $retry, $queued, $sched, $held, $other)),
	8, 'eight items enqueued');

my $claims = $node->safe_psql('src', q{
	SELECT item_id || ' ' || lease_token FROM queue.dequeue('dumped', 'bot-1', batch_size => 4)
	 ORDER BY item_id;
});
my %token = map { split / / } split /\n/, $claims;
is(scalar(keys %token), 4, 'four items claimed');

$node->safe_psql('src', qq{
	SELECT queue.complete('dumped', $done, $token{$done}, '{"ok": true}');
	SELECT queue.fail('dumped', $dead, $token{$dead}, 'vendor unknown',
		error_code => 'NO_VENDOR', permanent => true);
	SELECT queue.checkpoint('dumped', $proc, $token{$proc}, '{"page": 4}');
	SELECT queue.checkpoint('dumped', $retry, $token{$retry}, '{"step": 1}');
	SELECT queue.fail('dumped', $retry, $token{$retry}, 'ERP down', error_code => 'ERP', retry_in => '1 h');
	SELECT queue.hold('dumped', $held, 'customer asked');
});

is($node->safe_psql('src', q{
	SELECT string_agg(payload->>'s' || '=' || state, ',' ORDER BY item_id)
	  FROM queue.items WHERE queue_name = 'dumped'}),
	'processing=processing,retrying=scheduled,queued=queued,scheduled=scheduled,held=on_hold',
	'source has items in every live state');

# Ordered groups as they stand mid-run: the head of g1 is processing with
# two members behind it, the head of g2 is queued with one behind it, the
# head of g3 is on hold with one behind it.
my $gids = $node->safe_psql('src', q{
	SELECT queue.create_queue('grouped');
	SELECT queue.enqueue('grouped', '{"g": "g1-head"}', group_key => 'g1');
	SELECT queue.enqueue('grouped', '{"g": "g1-second"}', group_key => 'g1');
	SELECT queue.enqueue('grouped', '{"g": "g1-third"}', group_key => 'g1');
	SELECT queue.enqueue('grouped', '{"g": "g2-head"}', group_key => 'g2');
	SELECT queue.enqueue('grouped', '{"g": "g2-second"}', group_key => 'g2');
	SELECT queue.enqueue('grouped', '{"g": "g3-head"}', group_key => 'g3');
	SELECT queue.enqueue('grouped', '{"g": "g3-second"}', group_key => 'g3');
});
my (undef, $g1_head, $g1_second, $g1_third, $g2_head, $g2_second, $g3_head, $g3_second) =
	split /\n/, $gids;
$node->safe_psql('src', qq{SELECT queue.hold('grouped', $g3_head, 'wait for the customer')});
my ($g1_claimed, $g1_token) = split / /, $node->safe_psql('src', q{
	SELECT item_id || ' ' || lease_token FROM queue.dequeue('grouped', 'bot-g')});
is($g1_claimed, $g1_head, 'the head of g1 is processing');

# A queue closed to readers by a grant to a role that was dropped later
# (its grant row names the role by its old OID, keeping the kind closed).
# The same role registered a worker name, which thereby belongs to it; the
# sweep that follows the drop of the role finds it.
$node->safe_psql('src', q{
	CREATE ROLE regress_gone IN ROLE queue_worker;
	SELECT queue.create_queue('closed');
	SELECT queue.enqueue('closed', '{"secret": "of the gone tenant"}');
	SELECT queue.grant_queue('closed', 'regress_gone', 'reader');
	SET ROLE regress_gone;
	SELECT queue.register_worker('bot-of-gone');
	RESET ROLE;
});
my $gone_oid = $node->safe_psql('src', q{SELECT 'regress_gone'::regrole::oid});
$node->safe_psql('src', 'DROP ROLE regress_gone');
$node->safe_psql('src', 'SELECT queue.sweep_dropped()');

# Everything that must survive, as text.
my $snapshot_sql = state_sql();
my $before = $node->safe_psql('src', $snapshot_sql);
like($before, qr/^dead\|dumped\|$dead\|/m, 'snapshot has the dead letter');
like($before, qr/^history\|dumped\|$done\|/m, 'snapshot has the history row');

my $tempdir = PostgreSQL::Test::Utils::tempdir;
my $dumpfile = "$tempdir/queue.dump";
my $sqlfile = "$tempdir/queue.sql";

$node->command_ok(
	[ 'pg_dump', '--format=custom', '--file', $dumpfile, '--dbname', $node->connstr('src') ],
	'pg_dump --format=custom');
$node->command_ok(
	[ 'pg_dump', '--format=plain', '--file', $sqlfile, '--dbname', $node->connstr('src') ],
	'pg_dump --format=plain');

$node->safe_psql('postgres', 'CREATE DATABASE dst_custom');
$node->safe_psql('postgres', 'CREATE DATABASE dst_plain');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '--dbname', $node->connstr('dst_custom'), $dumpfile ],
	'pg_restore into a new database');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '--file', $sqlfile, '--dbname',
	  $node->connstr('dst_plain') ],
	'plain dump restored with psql');

# Runs SQL in a restored database without dying on errors, so that one
# broken step does not hide the remaining checks: returns the output, or the
# error text prefixed with ERROR.
sub query_db
{
	my ($db, $sql) = @_;
	my ($ret, $out, $err) = $node->psql($db, $sql);
	return $ret == 0 ? $out : "ERROR: $err";
}

foreach my $db ('dst_custom', 'dst_plain')
{
	is(query_db($db, q{
		SELECT string_agg(t.table_name || '=' || (SELECT count(*) FROM queue._history_partitions(t.table_name)), ',')
		  FROM queue._history_tables() t}),
		'item_done=2,events=2,failure_log=2', "$db: the partitions of the history came back");
	is(query_db($db, q{SELECT count(*) FROM queue.events_default WHERE kind = 'note'}),
		'1', "$db: and the rows of the DEFAULT partitions");
	is(query_db($db, q{SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		WHERE c.relname ~ '^(item_done|events|failure_log)_p'}),
		'18', "$db: each partition with its own key and three indexes, once");
	is(query_db($db, $snapshot_sql), $before,
		"$db: queues, items, states, history, dead letters and events intact");

	is(query_db($db, qq{SELECT state FROM queue.item('dumped', $held)}),
		'on_hold', "$db: held item still on hold");
	is(query_db($db, qq{SELECT state FROM queue.item('dumped', $dead)}),
		'dead', "$db: dead letter still dead");
	is(query_db($db, qq{SELECT state FROM queue.item('dumped', $done)}),
		'processed', "$db: processed item still in history");

	# The lease taken before the dump is still the current one.
	is(query_db($db, qq{SELECT queue.complete('dumped', $proc, $token{$proc} + 1)}),
		'f', "$db: a wrong token is still refused");
	is(query_db($db, qq{SELECT queue.complete('dumped', $proc, $token{$proc}, '{"after": "restore"}')}),
		't', "$db: the lease token from before the dump completes its item");

	# The queue still hands out work and completes it.
	my $got = query_db($db, q{
		SELECT item_id || ' ' || lease_token || ' ' || attempt
		  FROM queue.dequeue('dumped', 'bot-2', batch_size => 10)});
	my ($got_id, $got_token, $got_attempt) = split / /, $got;
	is($got_id, $queued, "$db: dequeue returns the queued item, and only it");
	is($got_attempt, 1, "$db: first attempt");
	is(query_db($db, qq{SELECT queue.complete('dumped', $got_id, $got_token)}),
		't', "$db: complete after restore");

	# New items get new ids; dedup still knows the keys completed before the dump.
	my $new = query_db($db, q{SELECT queue.enqueue('dumped', '{"s": "new"}')});
	ok($new =~ /^\d+$/ && $new > $other && $new > $sched && $new > $held, "$db: new ids do not collide with restored ones");
	is(query_db($db, q{SELECT queue.enqueue('dumped', '{"s": "dup"}', dedup_key => 'k-done')}),
		$done, "$db: dedup_window still covers an item completed before the dump");
	my $newclaim = query_db($db, q{
		SELECT item_id || ' ' || lease_token FROM queue.dequeue('dumped', 'bot-2')});
	my ($nid, $ntok) = split / /, $newclaim;
	is($nid, $new, "$db: the new item is claimed");
	is(query_db($db, qq{SELECT queue.complete('dumped', $nid, $ntok)}),
		't', "$db: the new item completes");

	# Dead letters can be replayed once.
	my $replayed = query_db($db, qq{SELECT queue.replay('dumped', $dead)});
	ok($replayed =~ /^\d+$/ && $replayed != $dead, "$db: dead letter replayed as a new item");
	is(query_db($db, qq{SELECT progress IS NOT DISTINCT FROM (SELECT progress FROM queue.dead_letters
		WHERE queue_name = 'dumped' AND item_id = $dead) FROM queue.items
		WHERE queue_name = 'dumped' AND item_id = $replayed}),
		't', "$db: the replayed item keeps its progress");
	my ($ret, $out, $err) = $node->psql($db, qq{SELECT queue.replay('dumped', $dead)},
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "$db: second replay fails");
	like($err, qr/55000/, "$db: second replay is 55000");

	# Ordered groups go on where they stood: only the queued head of g2 is
	# claimable, the members behind a processing or held head wait, and
	# completing the head of g1 with its old lease hands out the next one.
	is(query_db($db, q{
		SELECT string_agg(payload->>'g', ',' ORDER BY item_id) FROM queue.dequeue('grouped', 'bot-h', batch_size => 10)}),
		'g2-head', "$db: of the ordered groups only the queued head is claimable");
	is(query_db($db, qq{SELECT queue.complete('grouped', $g1_head, $g1_token)}),
		't', "$db: the processing head of a group completes with its old lease");
	is(query_db($db, q{
		SELECT string_agg(payload->>'g', ',' ORDER BY item_id) FROM queue.dequeue('grouped', 'bot-h', batch_size => 10)}),
		'g1-second', "$db: then the next item of its group, and nothing behind it");
	is(query_db($db, qq{SELECT queue.unhold('grouped', $g3_head)}),
		't', "$db: the held head of a group is released");
	is(query_db($db, q{
		SELECT string_agg(payload->>'g', ',' ORDER BY item_id) FROM queue.dequeue('grouped', 'bot-h', batch_size => 10)}),
		'g3-head', "$db: and is claimable, its member still waiting");

	# The other queue is intact too.
	is(query_db($db, q{SELECT payload->>'s' FROM queue.dequeue('plain', 'bot-3')}),
		'other queue', "$db: the second queue works");

	is(query_db($db, q{
		SELECT string_agg(payload->>'s' || '=' || state, ',' ORDER BY item_id)
		  FROM queue.items WHERE queue_name = 'dumped'}),
		'retrying=scheduled,scheduled=scheduled,held=on_hold,dead=queued',
		"$db: live items after the work");
}

# Restored into another cluster, the grant of the dropped role grants
# nothing to whichever role has its old OID there: the queue stays closed.
my $other_node = PostgreSQL::Test::Cluster->new('other');
$other_node->init;
$other_node->start;
my $innocent = $other_node->safe_psql('postgres', qq{
	DO \$\$
	DECLARE
		v_oid oid;
	BEGIN
		FOR i IN 1 .. 100000 LOOP
			EXECUTE format('CREATE ROLE regress_filler_%s', i);
			SELECT r.oid INTO v_oid FROM pg_roles r WHERE r.rolname = format('regress_filler_%s', i);
			IF v_oid >= $gone_oid THEN
				EXECUTE format('ALTER ROLE regress_filler_%s RENAME TO regress_innocent', i);
				EXIT;
			END IF;
		END LOOP;
	END
	\$\$;
	SELECT oid FROM pg_roles WHERE rolname = 'regress_innocent';
});
is($innocent, $gone_oid, 'another cluster has a role with the dropped role\'s OID');
$other_node->safe_psql('postgres', 'CREATE DATABASE dst_other');
$other_node->command_ok(
	[ 'pg_restore', '--exit-on-error', '--dbname', $other_node->connstr('dst_other'), $dumpfile ],
	'pg_restore into another cluster');
$other_node->safe_psql('dst_other', 'GRANT queue_reader TO regress_innocent');
is($other_node->safe_psql('dst_other', q{
	SET ROLE regress_innocent;
	SELECT count(*) FROM queue.items WHERE queue_name = 'closed'}),
	'0', 'a role that was never granted the closed queue does not read its items');
my ($oret, $oout, $oerr) = $other_node->psql('dst_other', q{
	SET ROLE regress_innocent;
	SELECT queue.item('closed', 1)}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($oerr, qr/42501/, 'and is refused the queue\'s calls with 42501');
is($other_node->safe_psql('dst_other', q{
	SELECT restrict_reader FROM queue.queue_config WHERE queue_name = 'closed'}),
	't', 'the queue stays closed to readers');
$other_node->safe_psql('dst_other', 'GRANT queue_worker TO regress_innocent');
($oret, $oout, $oerr) = $other_node->psql('dst_other', q{
	SET ROLE regress_innocent;
	SELECT queue.register_worker('bot-of-gone', restart => true)},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($oerr, qr/42501/, 'nor may it change the worker name the dropped role registered');
$other_node->stop;

# The source database is untouched by all of this.
is($node->safe_psql('src', $snapshot_sql), $before, 'source database unchanged');

$node->stop;

done_testing();
