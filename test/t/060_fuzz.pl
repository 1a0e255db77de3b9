
# Copyright (c) the queue authors
#
# Fuzzing the SQL API: every public function is called thousands of times
# with random and extreme arguments (NULLs, empty and huge strings,
# negative and huge numbers, intervals like '-1 s' and '1000 years',
# unknown ids, other queues' lease tokens, invalid names).  Seeded and
# reproducible (QUEUE_FUZZ_SEED, QUEUE_FUZZ_CALLS), bounded in time.
#
# Afterwards: the server never crashed (still up, nothing "terminated by
# signal" in its log), every error carried a specific SQLSTATE (none of
# class XX internal_error, nor one that betrays a broken function such as
# an undefined column or function), and the items balance: every id an
# enqueue returned is in exactly one of items, history and dead_letters.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $seed = $ENV{QUEUE_FUZZ_SEED} // 20240611;
my $ncalls = $ENV{QUEUE_FUZZ_CALLS} // 4000;
my $budget = $ENV{QUEUE_FUZZ_SECONDS} // 35;
srand($seed);
note("fuzz seed $seed, $ncalls calls, $budget s budget");

my $node = PostgreSQL::Test::Cluster->new('fuzz');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
log_min_messages = warning
log_min_error_statement = panic
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION queue;
	SELECT queue.create_queue('fz_a', max_attempts => 3, backoff_base => '0 s', audit => 'all');
	SELECT queue.create_queue('fz_b', lease_timeout => '1 s', max_attempts => 2, audit => 'all',
		dedup_window => '1 h', priority_aging => '1 s', max_in_flight => 50, breaker_threshold => 0.9);
	SELECT queue.create_queue('fz_tmp');

	-- ids every enqueue, enqueue_batch and replay returned
	CREATE TABLE fuzz_ids (queue_name text, item_id bigint);
	-- one row per call: which function, 'ok' or its SQLSTATE, the message
	CREATE TABLE fuzz_log (n int, fn text, sqlstate text, message text, stmt text);

	CREATE FUNCTION fuzz_try(p_n int, p_fn text, p_sql text) RETURNS void
	LANGUAGE plpgsql AS $$
	DECLARE
		v_state text;
		v_msg text;
	BEGIN
		BEGIN
			EXECUTE p_sql;
			INSERT INTO fuzz_log VALUES (p_n, p_fn, 'ok', NULL, NULL);
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
			INSERT INTO fuzz_log VALUES (p_n, p_fn, v_state, left(v_msg, 300), left(p_sql, 300));
		END;
	END
	$$;
	SELECT setseed(0.5);
});

# ---------------------------------------------------------------- values

sub lit
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	$s =~ s/'/''/g;
	return "'$s'";
}
sub pick { return $_[ int(rand(scalar @_)) ]; }

my $huge = 'x' x 20_000;
my @bad_names = ('fz_nope', undef, '', 'A', 'Fz_a', 'a' x 47, 'a' x 48, $huge,
	"fz_a; DROP TABLE queue.item_live", "fz'a", 'fz a', 'é', '_x', '1abc', "fz_a\t", 'fz-a',
	' fz_a');

# Mostly a real queue, so that calls get past the name check.
sub q_name
{
	return lit(rand() < 0.8 ? pick('fz_a', 'fz_b') : pick(@bad_names)) . '::text';
}

sub text_arg
{
	return lit(pick(undef, '', 'x', 'w1', 'w2', 'ERP_TIMEOUT', $huge, "it's", "back\\slash",
		"line\nbreak", 'é' x 100, '%s %L %I', 'w' x 1000)) . '::text';
}

sub worker_arg
{
	return lit(pick('w1', 'w2', 'w3', 'w1', 'w2', undef, '', $huge, "w'x", 'w' x 200)) . '::text';
}

sub int_arg
{
	return pick('NULL', '0', '-1', '1', '2', '3', '5', '1000', '1001', '10000', '10001',
		'2147483647', '-2147483648', int(rand(20))) . '::int';
}

sub batch_arg
{
	return pick('NULL', '0', '-1', '1', '1', '2', '10', '100', '10000', '10001', '2147483647')
	  . '::int';
}

sub float_arg
{
	return pick('NULL', "'NaN'", "'Infinity'", "'-Infinity'", '0', '-1', '1', '0.5', '3',
		'1e308', '-1e-308', '0.999999') . '::float8';
}

sub interval_arg
{
	return pick('NULL', "'-1 s'", "'0'", "'1 microsecond'", "'1 s'", "'5 min'", "'1 h'",
		"'1000 years'", "'178000000 years'", "'-178000000 years'", "'1 mon'",
		"'-1 day +1 s'", "'2147483647 days'") . '::interval';
}

sub ts_arg
{
	return '(' . pick('NULL', 'now()', 'now()', "'infinity'", "'-infinity'",
		"now() - interval '1 h'", "now() + interval '1 s'", "now() + interval '1000 years'",
		"'4713-01-01 BC'", "'294276-12-31'", "'2000-01-01'")
	  . ')::timestamptz';
}

sub bool_arg { return pick('NULL', 'true', 'false') . '::boolean'; }

my $deep = ('[' x 5000) . (']' x 5000);
sub jsonb_arg
{
	return pick("'{}'", "'{}'", "'{\"k\": 1}'", "'[]'", "'null'", 'NULL', "'1'", "'\"s\"'",
		"'$deep'", "jsonb_build_object('blob', repeat('y', 300000))",
		"jsonb_build_object('blob', repeat('z', 1100000))",
		"(SELECT jsonb_object_agg(g::text, g) FROM generate_series(1, 5000) g)",
		"'{\"a\": {\"b\": [1, 2, {\"c\": null}]}}'")
	  . '::jsonb';
}

sub jsonb_array_arg
{
	return pick('NULL', "ARRAY[]::jsonb[]", "ARRAY[NULL]::jsonb[]", "ARRAY['{}']::jsonb[]",
		"ARRAY['{}', '{\"b\": 2}', '[]']::jsonb[]",
		"ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 500) g)",
		"ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10001))",
		"ARRAY[['{}', '{}'], ['{}', '{}']]::jsonb[]", "ARRAY['{}', NULL]::jsonb[]",
		"'[5:6]={\"{}\",\"{}\"}'::jsonb[]");
}

sub text_array_arg
{
	return pick('NULL', "ARRAY[]::text[]", "ARRAY[NULL]::text[]", "ARRAY['k1']::text[]",
		"ARRAY['k1', 'k1', 'k1']::text[]", "ARRAY['k' || random()::text, NULL, 'k2']::text[]",
		"ARRAY[['a', 'b'], ['c', 'd']]::text[]", "ARRAY['fz_a', 'fz_b']::text[]",
		"ARRAY['Bad Name']::text[]");
}

# An item id: mostly a real one, of this queue or another, else extreme.
sub id_arg
{
	my $r = rand();
	return "(SELECT item_id FROM queue.item_live ORDER BY random() LIMIT 1)" if $r < 0.35;
	return "(SELECT item_id FROM queue.item_live WHERE lease_token IS NOT NULL ORDER BY random() LIMIT 1)"
	  if $r < 0.55;
	return "(SELECT item_id FROM queue.dead_letters ORDER BY random() LIMIT 1)" if $r < 0.65;
	return "(SELECT item_id FROM queue.item_done ORDER BY random() LIMIT 1)" if $r < 0.7;
	return pick('NULL', '0', '-1', '9223372036854775807', '-9223372036854775808',
		int(rand(100000))) . '::bigint';
}

# A lease token: often the current one, sometimes another item's or
# another queue's, sometimes extreme.
sub token_arg
{
	my $r = rand();
	return "(SELECT lease_token FROM queue.item_live WHERE lease_token IS NOT NULL ORDER BY random() LIMIT 1)"
	  if $r < 0.5;
	return pick('NULL', '0', '-1', '9223372036854775807', int(rand(100000))) . '::bigint';
}

sub id_array_arg
{
	return pick('NULL', "ARRAY[]::bigint[]", "ARRAY[NULL]::bigint[]",
		"ARRAY(SELECT item_id FROM queue.item_live WHERE lease_token IS NOT NULL ORDER BY item_id LIMIT 5)",
		"ARRAY[-1, 0, 9223372036854775807]::bigint[]", "ARRAY[[1, 2], [3, 4]]::bigint[]");
}

sub token_array_arg
{
	return pick('NULL', "ARRAY[]::bigint[]", "ARRAY[NULL]::bigint[]",
		"ARRAY(SELECT lease_token FROM queue.item_live WHERE lease_token IS NOT NULL ORDER BY item_id LIMIT 5)",
		"ARRAY(SELECT lease_token FROM queue.item_live WHERE lease_token IS NOT NULL ORDER BY item_id DESC LIMIT 5)",
		"ARRAY[1, 2, 3]::bigint[]");
}

sub audit_arg { return lit(pick('all', 'failures', 'none', 'ALL', '', undef, 'x')) . '::text'; }
sub review_arg
{
	return lit(pick('new', 'in_review', 'resolved', 'rejected', 'bogus', '', undef)) . '::text';
}
sub access_arg { return lit(pick('producer', 'worker', 'reader', 'admin', '', undef)) . '::text'; }
sub role_arg { return lit(pick('postgres', 'queue_worker', 'no_such_role', '', undef, $huge)) . '::name'; }
sub cron_arg { return lit(pick('* * * * *', '*/5 * * * *', 'nonsense', '', undef, '61 * * * *')) . '::text'; }

# Queues whose items the balance check covers are never purged or dropped;
# fz_tmp is, over and over.
sub tmp_name { return lit(pick('fz_tmp', 'fz_tmp', 'fz_nope', '', undef)) . '::text'; }

# ------------------------------------------------------------ the calls

# fn => sub returning the statement; statements that return new item ids
# record them in fuzz_ids.
my %calls = (
	enqueue => sub {
		my $q = q_name();
		"INSERT INTO fuzz_ids SELECT $q, x FROM queue.enqueue($q, " . jsonb_arg() . ', '
		  . int_arg() . ', ' . ts_arg() . ', ' . text_arg() . ', ' . ts_arg() . ', '
		  . int_arg() . ', ' . text_arg() . ') x WHERE x IS NOT NULL';
	},
	enqueue_plain => sub {
		my $q = q_name();
		"INSERT INTO fuzz_ids SELECT $q, x FROM queue.enqueue($q, " . jsonb_arg() . ') x';
	},
	enqueue_batch => sub {
		my $q = q_name();
		"INSERT INTO fuzz_ids SELECT $q, x FROM queue.enqueue_batch($q, " . jsonb_array_arg() . ', '
		  . int_arg() . ', ' . ts_arg() . ', ' . text_array_arg() . ', ' . ts_arg() . ', '
		  . int_arg() . ') x WHERE x IS NOT NULL';
	},
	dequeue => sub {
		'SELECT count(*) FROM queue.dequeue(' . q_name() . ', ' . worker_arg() . ', '
		  . batch_arg() . ', ' . interval_arg() . ')';
	},
	complete => sub {
		'SELECT queue.complete(' . q_name() . ', ' . id_arg() . ', ' . token_arg() . ', '
		  . jsonb_arg() . ')';
	},
	complete_match => sub {
		# a current lease of that very item, so completions really happen
		"SELECT queue.complete(i.queue_name, i.item_id, i.lease_token, " . jsonb_arg() . ")"
		  . " FROM queue.item_live i WHERE i.lease_token IS NOT NULL ORDER BY random() LIMIT 1";
	},
	complete_batch => sub {
		'SELECT queue.complete_batch(' . q_name() . ', ' . id_array_arg() . ', '
		  . token_array_arg() . ', ' . jsonb_arg() . ')';
	},
	fail => sub {
		'SELECT queue.fail(' . q_name() . ', ' . id_arg() . ', ' . token_arg() . ', '
		  . text_arg() . ', ' . text_arg() . ', ' . bool_arg() . ', ' . interval_arg() . ')';
	},
	fail_match => sub {
		"SELECT queue.fail(i.queue_name, i.item_id, i.lease_token, " . text_arg() . ', '
		  . text_arg() . ', ' . bool_arg() . ', ' . interval_arg() . ')'
		  . " FROM queue.item_live i WHERE i.lease_token IS NOT NULL ORDER BY random() LIMIT 1";
	},
	release => sub {
		'SELECT queue.release(' . q_name() . ', ' . id_arg() . ', ' . token_arg() . ', '
		  . ts_arg() . ')';
	},
	extend_lease => sub {
		'SELECT queue.extend_lease(' . q_name() . ', ' . id_arg() . ', ' . token_arg() . ', '
		  . interval_arg() . ')';
	},
	checkpoint => sub {
		'SELECT queue.checkpoint(' . q_name() . ', ' . id_arg() . ', ' . token_arg() . ', '
		  . jsonb_arg() . ')';
	},
	heartbeat => sub { 'SELECT queue.heartbeat(' . worker_arg() . ')'; },
	register_worker => sub {
		'SELECT queue.register_worker(' . worker_arg() . ', ' . text_array_arg() . ', '
		  . int_arg() . ', ' . jsonb_arg() . ')';
	},
	item => sub { 'SELECT count(*) FROM queue.item(' . q_name() . ', ' . id_arg() . ')'; },
	create_queue => sub {
		'SELECT queue.create_queue(' . q_name() . ', ' . interval_arg() . ', ' . int_arg() . ', '
		  . interval_arg() . ', ' . float_arg() . ', ' . interval_arg() . ', ' . float_arg() . ', '
		  . interval_arg() . ', ' . interval_arg() . ', ' . interval_arg() . ', ' . int_arg() . ', '
		  . interval_arg() . ', ' . interval_arg() . ', ' . bool_arg() . ', ' . audit_arg() . ', '
		  . float_arg() . ', ' . interval_arg() . ', ' . int_arg() . ', ' . interval_arg() . ', '
		  . bool_arg() . ')';
	},
	alter_queue => sub {
		# never retention on the balanced queues: it would purge history legitimately
		my $q = pick(q_name(), tmp_name());
		my $ret = $q =~ /fz_tmp/ ? interval_arg() : 'NULL::interval';
		"SELECT queue.alter_queue($q, " . interval_arg() . ', ' . int_arg() . ', '
		  . interval_arg() . ', ' . float_arg() . ', ' . interval_arg() . ', ' . float_arg() . ', '
		  . interval_arg() . ', ' . interval_arg() . ', ' . interval_arg() . ', ' . int_arg() . ', '
		  . "$ret, " . interval_arg() . ', ' . bool_arg() . ', ' . audit_arg() . ', '
		  . float_arg() . ', ' . interval_arg() . ', ' . int_arg() . ', ' . interval_arg() . ')';
	},
	drop_queue => sub { 'SELECT queue.drop_queue(' . tmp_name() . ', ' . bool_arg() . ')'; },
	recreate_tmp => sub { "SELECT queue.create_queue('fz_tmp', if_not_exists => true)"; },
	purge => sub { 'SELECT queue.purge(' . tmp_name() . ')'; },
	hold => sub { 'SELECT queue.hold(' . q_name() . ', ' . id_arg() . ', ' . text_arg() . ')'; },
	unhold => sub { 'SELECT queue.unhold(' . q_name() . ', ' . id_arg() . ')'; },
	cancel => sub { 'SELECT queue.cancel(' . q_name() . ', ' . id_arg() . ', ' . text_arg() . ')'; },
	replay => sub {
		my $q = q_name();
		"INSERT INTO fuzz_ids SELECT $q, x FROM queue.replay($q, " . id_arg() . ', '
		  . jsonb_arg() . ') x WHERE x IS NOT NULL';
	},
	replay_match => sub {
		"INSERT INTO fuzz_ids SELECT d.queue_name, queue.replay(d.queue_name, d.item_id)"
		  . " FROM queue.dead_letters d WHERE d.replayed_as IS NULL ORDER BY random() LIMIT 1";
	},
	replay_all => sub {
		# its new ids are found through replayed_as at the end
		'SELECT queue.replay_all(' . q_name() . ', ' . text_arg() . ', ' . ts_arg() . ')';
	},
	review => sub {
		'SELECT queue.review(' . q_name() . ', ' . id_arg() . ', ' . review_arg() . ', '
		  . text_arg() . ')';
	},
	pause => sub { 'SELECT queue.pause(' . q_name() . ', ' . text_arg() . ')'; },
	resume => sub { 'SELECT queue.resume(' . q_name() . ')'; },
	drain_worker => sub { 'SELECT queue.drain_worker(' . worker_arg() . ')'; },
	undrain_worker => sub { 'SELECT queue.undrain_worker(' . worker_arg() . ')'; },
	add_maintenance => sub {
		'SELECT queue.add_maintenance(' . worker_arg() . ', ' . ts_arg() . ', ' . ts_arg() . ', '
		  . text_arg() . ')';
	},
	grant_queue => sub {
		'SELECT queue.grant_queue(' . tmp_name() . ', ' . role_arg() . ', ' . access_arg() . ')';
	},
	revoke_queue => sub {
		'SELECT queue.revoke_queue(' . pick(tmp_name(), q_name()) . ', ' . role_arg() . ', '
		  . access_arg() . ')';
	},
	sweep => sub { 'SELECT count(*) FROM queue.sweep()'; },
	snapshot_metrics => sub { 'SELECT queue.snapshot_metrics()'; },
	stats => sub { 'SELECT count(*) FROM queue.stats(' . pick('NULL::text', q_name()) . ')'; },
	health => sub { 'SELECT count(*) FROM queue.health(' . pick('NULL::text', q_name()) . ')'; },
	prometheus => sub { 'SELECT length(queue.prometheus())'; },
	enable_cron => sub { 'SELECT queue.enable_cron(' . cron_arg() . ', ' . cron_arg() . ')'; },
	disable_cron => sub { 'SELECT queue.disable_cron()'; },
	views => sub {
		'SELECT count(*) FROM (SELECT * FROM ' . pick('queue.items', 'queue.history',
			'queue.queues', 'queue.dead_letters', 'queue.workers', 'queue.events',
			'queue.alerts', 'queue.metrics_history') . ') v';
	},
);

# Functions of the contract the build does not define are reported, not fuzzed.
my %needs = (
	sweep => 'sweep()', snapshot_metrics => 'snapshot_metrics()', stats => 'stats(text)',
	health => 'health(text)', prometheus => 'prometheus()',
	enable_cron => 'enable_cron(text, text)', disable_cron => 'disable_cron()');
for my $fn (sort keys %needs)
{
	my $there = $node->safe_psql('postgres',
		"SELECT to_regprocedure('queue.$needs{$fn}') IS NOT NULL");
	if ($there ne 't')
	{
		diag("queue.$needs{$fn} is not defined: not fuzzed");
		delete $calls{$fn};
	}
}

# Weighted: the hot path more often than administration.
my %weight = (enqueue => 6, enqueue_plain => 6, enqueue_batch => 4, dequeue => 8,
	complete => 4, complete_match => 6, fail => 4, fail_match => 5, release => 3,
	extend_lease => 3, checkpoint => 3, complete_batch => 3, replay_match => 2);
my @deck = map { ($_) x ($weight{$_} // 1) } sort keys %calls;

# ------------------------------------------------------------ run

my $started = time();
my $n = 0;
my $batch = 200;
my $crashed = 0;
while ($n < $ncalls && time() - $started < $budget)
{
	my @stmts;
	for (1 .. $batch)
	{
		$n++;
		my $fn = pick(@deck);
		my $sql = $calls{$fn}->();
		push @stmts, "SELECT fuzz_try($n, '$fn', " . lit($sql) . ");";
	}
	my ($ret, $out, $err) = (0, '', '');
	$ret = $node->psql('postgres',
		"SET statement_timeout = '20s';\n" . join("\n", @stmts),
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	if ($ret != 0)
	{
		diag("batch ending at call $n failed: $err");
		$crashed = 1 if $err =~ /terminat|connection|server closed/i;
		last;
	}
}
my $elapsed = time() - $started;
note(sprintf('%d calls in %.1f s', $n, $elapsed));
cmp_ok($n, '>=', 1000, 'at least a thousand calls made within the time budget');

# ------------------------------------------------------------ checks

ok(!$crashed, 'no batch lost its connection');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'server still answers');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|was terminated by exception|TRAP:|PANIC:/,
	'no backend crashed, no assertion failed');

my $histogram = $node->safe_psql('postgres',
	q{SELECT fn || ' ' || sqlstate || ' ' || count(*) FROM fuzz_log GROUP BY fn, sqlstate ORDER BY 1});
note($histogram);
is($node->safe_psql('postgres', 'SELECT count(*) FROM fuzz_log'), $n, 'every call was logged');

# Internal errors, and errors that only a broken function body raises.
my $bad = $node->safe_psql('postgres', q{
	SELECT string_agg(DISTINCT fn || ': ' || sqlstate || ' ' || message || E'\n    ' || stmt, E'\n')
	  FROM fuzz_log
	 WHERE sqlstate LIKE 'XX%' OR sqlstate LIKE '58%' OR sqlstate LIKE '2F%'
	    OR sqlstate LIKE '39%' OR sqlstate IN ('P0001', 'P0004', '42P01', '42883', '42703',
	                                          '42804', '42702', '42725', '42P08', '0A000',
	                                          '57014', '40P01')
});
is($bad, '', 'every error has a specific SQLSTATE (no internal error, no broken statement)');

my $okcalls = $node->safe_psql('postgres',
	q{SELECT count(*) FROM fuzz_log WHERE sqlstate = 'ok'});
cmp_ok($okcalls, '>', $n / 5, "a good share of the calls succeeded ($okcalls)");

# Balance: every id an enqueue returned is in exactly one place.
$node->safe_psql('postgres', q{
	-- replay_all's new items, found through replayed_as
	INSERT INTO fuzz_ids SELECT d.queue_name, d.replayed_as FROM queue.dead_letters d
	 WHERE d.replayed_as IS NOT NULL;
});
my $unbalanced = $node->safe_psql('postgres', q{
	WITH ids AS (SELECT DISTINCT queue_name, item_id FROM fuzz_ids
	              WHERE queue_name IN ('fz_a', 'fz_b')),
	     places AS (
	       SELECT queue_name, item_id, 'live' AS place FROM queue.item_live
	       UNION ALL SELECT queue_name, item_id, 'done' FROM queue.item_done
	       UNION ALL SELECT queue_name, item_id, 'dead' FROM queue.dead_letters)
	SELECT string_agg(format('%s/%s in %s', i.queue_name, i.item_id,
	                         coalesce(p.places, 'nowhere')), ', ')
	  FROM ids i
	  LEFT JOIN (SELECT queue_name, item_id, string_agg(place, '+') AS places, count(*) AS n
	               FROM places GROUP BY 1, 2) p USING (queue_name, item_id)
	 WHERE coalesce(p.n, 0) <> 1
});
is($unbalanced, '', 'every enqueued item is in exactly one of items, history, dead letters');
my $strays = $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT queue_name, item_id FROM queue.item_live
	  UNION ALL SELECT queue_name, item_id FROM queue.item_done
	  UNION ALL SELECT queue_name, item_id FROM queue.dead_letters) p
	 WHERE queue_name IN ('fz_a', 'fz_b')
	   AND (queue_name, item_id) NOT IN (SELECT queue_name, item_id FROM fuzz_ids
	                                      WHERE item_id IS NOT NULL)
});
is($strays, '0', 'no item appeared that no enqueue returned');
my $counted = $node->safe_psql('postgres', q{
	SELECT count(DISTINCT (queue_name, item_id)) FROM fuzz_ids WHERE queue_name IN ('fz_a', 'fz_b')});
cmp_ok($counted, '>', 100, "many items enqueued ($counted)");

# The views agree with the tables they show.
is($node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM queue.items WHERE queue_name IN ('fz_a', 'fz_b'))
	     = (SELECT count(*) FROM queue.item_live WHERE queue_name IN ('fz_a', 'fz_b'))}),
	't', 'the items view shows every live item');

$node->stop;
done_testing();
