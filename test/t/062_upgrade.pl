
# Copyright (c) the queue authors
#
# Upgrade path: a database created at the first release (0.1.0) and filled
# with queues, items in every state, grants, dead letters and events is
# brought to the current version with ALTER EXTENSION queue UPDATE.  When
# upgrade scripts queue--0.1.0--*.sql exist, the update must lose nothing
# and leave the same schema, privileges, policies and pg_dump registrations
# as a fresh CREATE EXTENSION of the current version; the old leases still
# work.  Without upgrade scripts, ALTER EXTENSION queue UPDATE is a no-op
# that keeps everything.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use JSON::PP;
use lib "$FindBin::Bin/../perl";
use QueueTest qw(state_sql);

my $first = '0.1.0';

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
});
$node->start;

my $current = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'queue'});
like($current, qr/^\d+\.\d+\.\d+$/, "current version is $current");
my $paths = $node->safe_psql('postgres', qq{
	SELECT string_agg(target || ': ' || path, '; ' ORDER BY target)
	  FROM pg_extension_update_paths('queue')
	 WHERE source = '$first' AND path IS NOT NULL});
note("update paths from $first: " . ($paths || 'none'));
if ($current ne $first)
{
	like($paths, qr/\Q$current\E: /, "an update path leads from $first to $current");
}

# ---------------------------------------------------------------- old data

$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', "CREATE EXTENSION queue VERSION '$first'");
$node->safe_psql('old', q{
	CREATE ROLE regress_up_worker LOGIN IN ROLE queue_worker;
	CREATE ROLE regress_up_other LOGIN IN ROLE queue_worker;
	SELECT queue.create_queue('up', max_attempts => 2, dedup_window => '1 h', audit => 'all',
		sla => '10 min', breaker_threshold => 0.5);
	SELECT queue.create_queue('up_closed');
	SELECT queue.grant_queue('up_closed', 'regress_up_worker', 'worker');
	SELECT queue.enqueue('up', jsonb_build_object('n', g), priority => g % 3,
		dedup_key => 'k' || g) FROM generate_series(1, 40) g;
	SELECT queue.enqueue('up', '{"later": true}', run_at => now() + interval '1 day');
	SELECT queue.enqueue('up_closed', '{"closed": true}');
	SELECT queue.register_worker('up_bot', ARRAY['up'], 20);
});
my %tok = map { split /\|/ } split /\n/, $node->safe_psql('old',
	q{SELECT item_id || '|' || lease_token FROM queue.dequeue('up', 'up_bot', batch_size => 12)});
my @claimed = sort { $a <=> $b } keys %tok;
is(scalar @claimed, 12, 'twelve items claimed');
# four completed, two failed for good, one retrying, one checkpointed, the rest processing
$node->safe_psql('old', join("\n",
	(map { "SELECT queue.complete('up', $_, $tok{$_}, '{\"ok\": 1}');" } @claimed[0 .. 3]),
	(map { "SELECT queue.fail('up', $_, $tok{$_}, 'bad', error_code => 'E1', permanent => true);" }
		@claimed[4 .. 5]),
	"SELECT queue.fail('up', $claimed[6], $tok{$claimed[6]}, 'later', retry_in => '1 h');",
	"SELECT queue.checkpoint('up', $claimed[7], $tok{$claimed[7]}, '{\"page\": 3}');",
	"SELECT queue.hold('up', (SELECT max(item_id) - 2 FROM queue.item_live WHERE queue_name = 'up'));"));

# The installed library serves the old database until the update: a bot
# giving its item back (graceful shutdown) gets true and the attempt back.
my $given_back = $claimed[11];
my ($rel_out, $rel_err) = ('', '');
$node->psql('old', "SELECT queue.release('up', $given_back, $tok{$given_back})",
	stdout => \$rel_out, stderr => \$rel_err);
is($rel_out, 't', "release works before the update ($rel_err)");
is($node->safe_psql('old', "SELECT state || '|' || attempt FROM queue.items WHERE item_id = $given_back"),
	'queued|0', 'the released item is queued again, its attempt given back');

# Everything that must survive, as text.
my $data_sql = state_sql();

# The extension's schema, privileges, policies and pg_dump registrations.
my $catalog_sql = q{
	SELECT 'function ' || p.oid::regprocedure || ' returns ' || pg_get_function_result(p.oid)
	       || ' lang ' || l.lanname || ' ' || p.provolatile::text || p.proparallel::text
	       || ' secdef=' || p.prosecdef || ' strict=' || p.proisstrict
	       || ' config=' || coalesce(array_to_string(p.proconfig, ','), '')
	       || ' acl=' || coalesce(p.proacl::text, 'default')
	       || ' args=' || pg_get_function_arguments(p.oid)
	       || ' body=' || md5(p.prosrc)
	  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
	 WHERE p.pronamespace = 'queue'::regnamespace
	UNION ALL
	SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' rls=' || c.relrowsecurity
	       || ' acl=' || coalesce(c.relacl::text, 'default')
	       || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
	       || coalesce(' partitioned by ' || pg_get_partkeydef(c.oid), '')
	       || coalesce(' partition of ' || p.inhparent::regclass || ' '
	                   || pg_get_expr(c.relpartbound, c.oid), '')
	  FROM pg_class c LEFT JOIN pg_inherits p ON p.inhrelid = c.oid
	 WHERE c.relnamespace = 'queue'::regnamespace AND NOT queue_test_range_part(c.oid)
	   AND NOT queue_test_range_part((SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = c.oid))
	   AND NOT queue_test_range_part((SELECT t.oid FROM pg_class t WHERE t.reltoastrelid = c.oid))
	UNION ALL
	SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
	       || ' notnull=' || a.attnotnull
	       || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
	  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE c.relnamespace = 'queue'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
	   AND NOT queue_test_range_part(c.oid)
	   AND NOT queue_test_range_part((SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = c.oid))
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
	 WHERE c.relnamespace = 'queue'::regnamespace AND NOT queue_test_range_part(c.oid)
	UNION ALL
	SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
	  FROM pg_constraint WHERE connamespace = 'queue'::regnamespace
	   AND NOT queue_test_range_part(conrelid)
	UNION ALL
	SELECT 'view ' || c.relname || ' ' || md5(pg_get_viewdef(c.oid))
	  FROM pg_class c WHERE c.relnamespace = 'queue'::regnamespace AND c.relkind IN ('v', 'm')
	UNION ALL
	SELECT 'policy ' || tablename || ' ' || policyname || ' ' || cmd || ' ' || roles::text
	       || ' ' || coalesce(qual, '') || ' ' || coalesce(with_check, '')
	  FROM pg_policies WHERE schemaname = 'queue'
	UNION ALL
	SELECT 'trigger ' || pg_get_triggerdef(t.oid)
	  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	 WHERE c.relnamespace = 'queue'::regnamespace AND NOT t.tgisinternal
	UNION ALL
	SELECT 'config_dump ' || x::regclass || ' ' || coalesce(e.extcondition[i], '')
	  FROM pg_extension e, unnest(e.extconfig) WITH ORDINALITY u(x, i)
	 WHERE e.extname = 'queue'
	UNION ALL
	SELECT 'role ' || rolname || ' login=' || rolcanlogin FROM pg_roles WHERE rolname LIKE 'queue\_%'
	ORDER BY 1;
};

# The range partitions of the history tables are made at run time, named
# by their dates (or, after an update, the converted 0.1.0 tables): they
# are compared by their layout below, not by name.
my $range_part_sql = q{
	CREATE FUNCTION pg_temp.queue_test_range_part(r oid) RETURNS boolean LANGUAGE sql STABLE AS $$
		SELECT coalesce((SELECT c.relispartition AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
		                   FROM pg_class c WHERE c.oid = r), false)
	$$;
};
$catalog_sql =~ s/queue_test_range_part/pg_temp.queue_test_range_part/g;
$catalog_sql = $range_part_sql . $catalog_sql;

my $data_before = $node->safe_psql('old', $data_sql);
like($data_before, qr/^dead\|up\|/m, 'the old database has dead letters');
like($data_before, qr/^history\|up\|/m, 'and history');
like($data_before, qr/^grant\|up_closed\|regress_up_worker\|worker$/m, 'and a per-queue grant');
my $catalog_before = $node->safe_psql('old', $catalog_sql);

# ---------------------------------------------------------------- update

my ($ret, $out, $err) = (0, '', '');
$ret = $node->psql('old', 'ALTER EXTENSION queue UPDATE',
	stdout => \$out, stderr => \$err, on_error_stop => 1);
is($ret, 0, 'ALTER EXTENSION queue UPDATE succeeds');
is($node->safe_psql('old', q{SELECT extversion FROM pg_extension WHERE extname = 'queue'}),
	$current, "the extension is at $current");

# Columns a view gained in the update are new, not changed: compare the
# queues rows on the columns they had before.
sub old_columns_only
{
	my ($after, $before) = @_;
	my %had;
	for my $line (split /\n/, $before)
	{
		next unless $line =~ /^queue\|(.*)$/;
		my $row = JSON::PP::decode_json($1);
		$had{ $row->{queue_name} } = $row;
	}
	my @out;
	for my $line (split /\n/, $after)
	{
		if ($line =~ /^queue\|(.*)$/)
		{
			my $row = JSON::PP::decode_json($1);
			my $old = $had{ $row->{queue_name} } || {};
			my $json = JSON::PP->new->canonical;
			my %kept = map { $_ => $row->{$_} } grep { exists $old->{$_} } keys %$row;
			$line = 'queue|' . $json->encode(\%kept);
		}
		push @out, $line;
	}
	return join("\n", @out);
}
sub canonical_queues
{
	my ($text) = @_;
	return join("\n", map {
		/^queue\|(.*)$/ ? 'queue|' . JSON::PP->new->canonical->encode(JSON::PP::decode_json($1)) : $_
	} split /\n/, $text);
}
is(old_columns_only($node->safe_psql('old', $data_sql), $data_before),
	canonical_queues($data_before), 'no data was lost or changed');

if ($current eq $first)
{
	like($err, qr/already installed/, 'without upgrade scripts the update is a no-op');
	is($node->safe_psql('old', $catalog_sql), $catalog_before, 'and the schema is unchanged');
}

# Upgraded equals a fresh install of the current version.
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION queue');
my $catalog_fresh = $node->safe_psql('fresh', $catalog_sql);
my $catalog_after = $node->safe_psql('old', $catalog_sql);
is($catalog_after, $catalog_fresh,
	'the updated schema, privileges and policies equal a fresh install');
if ($catalog_after ne $catalog_fresh)
{
	my %fresh = map { $_ => 1 } split /\n/, $catalog_fresh;
	my %after = map { $_ => 1 } split /\n/, $catalog_after;
	diag("only after update: $_") for grep { !$fresh{$_} } sort keys %after;
	diag("only in fresh install: $_") for grep { !$after{$_} } sort keys %fresh;
}

# The partition layout: the update kept each 0.1.0 history table, rows and
# all, as its table's partition from MINVALUE; maintain_history() then
# adds partitions from where it ends, in the fresh database from now on.
if ($current ne $first)
{
	my $layout_sql = q{
		SELECT t.table_name || ' ' || count(p.*) || ' '
		       || coalesce(string_agg(CASE WHEN p.lo IS NULL THEN p.partition_name END, ','), '-') || ' '
		       || bool_and(p.lo IS NULL OR p.lo = (SELECT max(q.hi) FROM queue._history_partitions(t.table_name) q
		                                           WHERE q.hi <= p.lo))
		  FROM queue._history_tables() t
		  LEFT JOIN LATERAL queue._history_partitions(t.table_name) p ON true
		 GROUP BY t.table_name ORDER BY t.table_name};
	is($node->safe_psql('old', $layout_sql),
		"events 1 events_upgraded true\nfailure_log 1 failure_log_upgraded true\nitem_done 1 item_done_upgraded true",
		'each 0.1.0 history table is the partition from MINVALUE of its new table');
	is($node->safe_psql('fresh', q{
		SELECT string_agg(p.table_name || '=' || (SELECT count(*) FROM queue._history_partitions(p.table_name)), ',')
		  FROM queue._history_tables() p}),
		'item_done=0,events=0,failure_log=0', 'a fresh install has only the DEFAULT partitions');
	my $history_rows = $node->safe_psql('old', q{SELECT count(*) FROM queue.item_done_upgraded});
	cmp_ok($history_rows, '>', 0, "the history rows of 0.1.0 are in it ($history_rows)");
	$node->safe_psql('old', 'SELECT queue.maintain_history()');
	$node->safe_psql('fresh', 'SELECT queue.maintain_history()');
	is($node->safe_psql('old', $layout_sql),
		"events 3 events_upgraded true\nfailure_log 3 failure_log_upgraded true\nitem_done 3 item_done_upgraded true",
		'maintain_history adds the next two slots after it, without a gap');
	is($node->safe_psql('fresh', $layout_sql),
		"events 2 - true\nfailure_log 2 - true\nitem_done 2 - true",
		"and the next two slots in the fresh database");
	is($node->safe_psql('old', q{SELECT count(*) FROM queue.item_done}), $history_rows,
		'the history keeps its rows');
}

# ---------------------------------------------------------------- still works

my $proc = $claimed[8];
is($node->safe_psql('old', "SELECT queue.complete('up', $proc, $tok{$proc})"), 't',
	'a lease taken before the update completes after it');
is($node->safe_psql('old', "SELECT queue.enqueue('up', '{}', dedup_key => 'k40')"),
	$node->safe_psql('old', q{SELECT item_id FROM queue.items WHERE dedup_key = 'k40'}),
	'dedup still sees the old keys');
my $dead = $claimed[4];
like($node->safe_psql('old', "SELECT queue.replay('up', $dead)"), qr/^\d+$/,
	'an old dead letter replays');
my ($got_ret, $got_out, $got_err) = (0, '', '');
$got_ret = $node->psql('old',
	"SET ROLE regress_up_other; SELECT count(*) FROM queue.dequeue('up_closed', 'x');",
	stdout => \$got_out, stderr => \$got_err);
like($got_err, qr/permission denied for queue "up_closed"/,
	'the per-queue grant still closes the queue to others');
is($node->safe_psql('old',
	"SET ROLE regress_up_worker; SELECT count(*) FROM queue.dequeue('up_closed', 'x')"),
	'1', 'and admits the granted worker');
my $queued = $node->safe_psql('old',
	q{SELECT count(*) FROM queue.items WHERE queue_name = 'up' AND state = 'queued'});
cmp_ok($queued, '>', 20, "old items still queued ($queued)");
is($node->safe_psql('old',
	"SET ROLE regress_up_worker; SELECT count(*) FROM queue.dequeue('up', 'up_bot2', batch_size => 100)"),
	$queued, 'a worker claims the remaining old items');

# pg_dump of the updated database still carries the data.
my $dump = $node->safe_psql('postgres', 'SELECT 1') && do {
	my ($o, $e) = ('', '');
	IPC::Run::run([ 'pg_dump', '--data-only', '--table=queue.item_live', '--dbname',
		$node->connstr('old') ], '>', \$o, '2>', \$e);
	$o;
};
like($dump, qr/COPY queue\.item_live/, 'pg_dump still dumps the item table');

$node->safe_psql('old', q{
	SELECT queue.drop_queue('up', force => true);
	SELECT queue.drop_queue('up_closed', force => true);
	DROP EXTENSION queue;
	DROP ROLE regress_up_worker, regress_up_other;
});
$node->stop;
done_testing();
