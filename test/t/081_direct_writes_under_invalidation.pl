# Copyright (c) the queue authors
#
# enqueue, dequeue and complete write plain items without statements
# (src/*_direct.c), with what they know of item_live and item_done
# (columns, defaults, indexes) kept per backend until a relcache
# invalidation.  Invalidations arrive at any lock a write takes; here
# another session sends them all the time (ALTER TABLE ... SET, ANALYZE,
# new history partitions) while eight bots run the cycle.  No backend
# may fail or crash, and every item is completed exactly once.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $n_clients = 8;
my $seconds   = 15;

my $node = PostgreSQL::Test::Cluster->new('invalidation');
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 40
log_min_messages = warning
shared_preload_libraries = 'queue'
queue.history_partition_width = '1 min'
));
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION queue;
	SELECT queue.create_queue('inv', lease_timeout => '10 min');
	SELECT count(*) FROM queue.enqueue_batch('inv',
		(SELECT pg_catalog.array_agg(pg_catalog.jsonb_build_object('n', g))
		   FROM pg_catalog.generate_series(1, 500) g));
	CREATE TABLE inv_done (item_id bigint);
});

# The bot: a new item, then one claimed and completed.
my $script = $node->basedir . '/cycle.sql';
append_to_file($script, q{
SELECT queue.enqueue('inv', jsonb_build_object('c', :client_id));
SELECT coalesce(max(item_id), 0) AS id, coalesce(max(lease_token), 0) AS tok
  FROM queue.dequeue('inv', 'inv_w' || :client_id) \gset
\if :id > 0
INSERT INTO inv_done SELECT :id WHERE queue.complete('inv', :id, :tok);
\endif
});

# The other session: invalidations of item_live, item_done and its partitions.
my $ddl = $node->basedir . '/ddl.sql';
append_to_file($ddl, q{
\set t random(1000, 2000)
ALTER TABLE queue.item_live SET (autovacuum_vacuum_threshold = :t);
ANALYZE queue.item_live;
ALTER TABLE queue.item_done_default SET (fillfactor = 100);
SELECT queue.maintain_history();
});

my ($out, $err) = ('', '');
my $bots = IPC::Run::start(
	[ 'pgbench', '-n', '-c', $n_clients, '-j', 2, '-T', $seconds, '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);
my ($dout, $derr) = ('', '');
my $churn = IPC::Run::start(
	[ 'pgbench', '-n', '-c', 1, '-T', $seconds, '-f', $ddl,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$dout, '2>', \$derr);
$bots->finish;
$churn->finish;

like($out, qr/number of failed transactions: 0/, 'no bot transaction failed');
unlike($err, qr/aborted|ERROR|server closed|terminated/, 'no bot was aborted by an error or a crash')
  or diag($err);
unlike(slurp_file($node->logfile), qr/terminated by signal|could not open relation/,
	'the server log has no crash');
like($dout, qr/number of failed transactions: 0/, 'the invalidating session ran');

my ($processed) = $out =~ /number of transactions actually processed: (\d+)/;
cmp_ok($processed // 0, '>', 100, "the bots ran cycles ($processed)");

is($node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM inv_done) = (SELECT count(DISTINCT item_id) FROM inv_done)
	   AND (SELECT count(*) FROM inv_done) =
	       (SELECT count(*) FROM queue.item_done WHERE queue_name = 'inv')
	   AND NOT EXISTS (SELECT FROM inv_done d JOIN queue.item_live l USING (item_id))
}), 't', 'every completed item is in the history once and no longer live');

is($node->safe_psql('postgres', q{
	SELECT count(*) FROM queue.item_live WHERE queue_name = 'inv' AND worker IS NOT NULL
}), '0', 'no item is left leased');

$node->stop;
done_testing();
