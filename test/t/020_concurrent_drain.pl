# Copyright (c) the queue authors
#
# Eight concurrent consumers drain 20,000 items while failing about one
# claim in ten: most failures are transient and retried at once, some are
# permanent.  At the end every item is processed exactly once or is a dead
# letter, and every claim is accounted for by exactly one acknowledgement.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $n_items   = 20_000;
my $n_clients = 8;

my $node = PostgreSQL::Test::Cluster->new('drain', port => 55020);
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 40
log_min_messages = warning
));
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION queue');
$node->safe_psql(
	'postgres', q{
SELECT queue.create_queue('drain', lease_timeout => '5 min', max_attempts => 5);

-- What the consumers saw, kept by the test itself: one row per successful
-- complete and one row per fail with the outcome fail returned.
CREATE TABLE drain_completed (item_id bigint, client int);
CREATE TABLE drain_failed (item_id bigint, client int, outcome text);
CREATE TABLE drain_enqueued (item_id bigint);
});

# Producer: four batches of 5,000 in one round trip each.
$node->safe_psql(
	'postgres', qq{
INSERT INTO drain_enqueued
  SELECT queue.enqueue_batch('drain',
           array_agg(jsonb_build_object('n', g, 'batch', b) ORDER BY g))
    FROM generate_series(1, $n_items) AS g,
         LATERAL (SELECT (g - 1) / 5000 AS b) AS bb
   GROUP BY b;
});

is( $node->safe_psql(
		'postgres',
		'SELECT count(*) || \'/\' || count(DISTINCT item_id) FROM drain_enqueued'),
	"$n_items/$n_items",
	'enqueue_batch returned one distinct id per payload');

# Consumer: claim one item, then (in a separate transaction, as a bot
# would) complete it, fail it transiently with retry_in 0 s (8 %), or fail
# it permanently (1 %).  The aggregate keeps \gset happy on an empty queue.
my $script = $node->basedir . '/consumer.sql';
PostgreSQL::Test::Utils::append_to_file(
	$script, q{
SELECT coalesce(max(item_id), 0) AS id, coalesce(max(lease_token), 0) AS tok
  FROM queue.dequeue('drain', 'drain_w' || :client_id) \gset
\set r random(1, 100)
\if :id > 0
\if :r <= 8
INSERT INTO drain_failed
  SELECT :id, :client_id,
         queue.fail('drain', :id, :tok, 'flaky backend', 'FLAKY', retry_in => '0 s');
\elif :r <= 9
INSERT INTO drain_failed
  SELECT :id, :client_id,
         queue.fail('drain', :id, :tok, 'malformed invoice', 'BAD_INPUT', permanent => true);
\else
INSERT INTO drain_completed
  SELECT :id, :client_id
   WHERE queue.complete('drain', :id, :tok, jsonb_build_object('by', :client_id));
\endif
\endif
});

# Rounds of 8 x 300 transactions until nothing is left.  The deadline is
# a safety net for a loaded machine; a normal run drains in about a minute.
my $rounds   = 0;
my $deadline = time() + 150;
my $left;
while (1)
{
	$rounds++;
	$node->command_ok(
		[
			'pgbench', '-n', '-c', $n_clients, '-j', 2, '-t', 300,
			'-f', $script, 'postgres'
		],
		"consumer round $rounds ran without errors");
	$left = $node->safe_psql('postgres',
		"SELECT count(*) FROM queue.items WHERE queue_name = 'drain'");
	last if $left == 0 || time() > $deadline;
}
note "drained in $rounds rounds";

is($left, 0, 'the items view is empty for the queue');

my $stats = $node->safe_psql(
	'postgres', q{
SELECT (SELECT count(*) FROM queue.history WHERE queue_name = 'drain'),
       (SELECT count(DISTINCT item_id) FROM queue.history WHERE queue_name = 'drain'),
       (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'drain'),
       (SELECT count(DISTINCT item_id) FROM queue.dead_letters WHERE queue_name = 'drain')
});
my ($hist, $hist_distinct, $dead, $dead_distinct) = split /\|/, $stats;
note "history $hist, dead letters $dead";

is($hist + $dead, $n_items, 'history plus dead letters count every item');
is($hist, $hist_distinct, 'no item is in history twice');
is($dead, $dead_distinct, 'no item is a dead letter twice');
ok($hist > 0.9 * $n_items, 'most items were processed');
ok($dead > 0, 'some items were dead-lettered');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM queue.history h
  JOIN queue.dead_letters d ON d.queue_name = h.queue_name AND d.item_id = h.item_id
 WHERE h.queue_name = 'drain'
}),
	0,
	'no item is both processed and dead');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM drain_enqueued e
 WHERE (SELECT count(*) FROM queue.history h
         WHERE h.queue_name = 'drain' AND h.item_id = e.item_id)
     + (SELECT count(*) FROM queue.dead_letters d
         WHERE d.queue_name = 'drain' AND d.item_id = e.item_id) <> 1
}),
	0,
	'every enqueued id ends exactly once in history or dead letters');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT item_id FROM drain_completed
                      GROUP BY item_id HAVING count(*) > 1) AS d
}),
	0,
	'no item was completed successfully twice');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
  (SELECT item_id FROM drain_completed
   EXCEPT SELECT item_id FROM queue.history WHERE queue_name = 'drain')
  UNION ALL
  (SELECT item_id FROM queue.history WHERE queue_name = 'drain'
   EXCEPT SELECT item_id FROM drain_completed)) AS x
}),
	0,
	'history holds exactly the items whose complete returned true');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (
  (SELECT item_id FROM drain_failed WHERE outcome = 'dead'
   EXCEPT SELECT item_id FROM queue.dead_letters WHERE queue_name = 'drain')
  UNION ALL
  (SELECT item_id FROM queue.dead_letters WHERE queue_name = 'drain'
   EXCEPT SELECT item_id FROM drain_failed WHERE outcome = 'dead')) AS x
}),
	0,
	'dead letters are exactly the items whose fail returned dead');

is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM drain_failed WHERE outcome IS NULL OR outcome NOT IN ('retrying', 'dead')"
	),
	0,
	'every fail found its lease current and returned retrying or dead');

# Without lease expiries every claim ends in exactly one acknowledgement, so
# the attempts recorded add up to the acknowledgements seen by the clients.
is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT coalesce(sum(attempts), 0) FROM queue.history WHERE queue_name = 'drain')
     + (SELECT coalesce(sum(attempts), 0) FROM queue.dead_letters WHERE queue_name = 'drain')
     = (SELECT count(*) FROM drain_completed) + (SELECT count(*) FROM drain_failed)
}),
	't',
	'attempts add up to the claims acknowledged');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*)
  FROM queue.history h
  LEFT JOIN (SELECT item_id, count(*) AS fails FROM drain_failed GROUP BY item_id) f
         ON f.item_id = h.item_id
 WHERE h.queue_name = 'drain' AND h.attempts <> 1 + coalesce(f.fails, 0)
}),
	0,
	'each processed item\'s attempts are its transient failures plus one');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM queue.dead_letters
 WHERE queue_name = 'drain' AND reason NOT IN ('permanent', 'max_attempts')
}),
	0,
	'dead letters are permanent failures or spent attempts only');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM queue.dead_letters d
 WHERE d.queue_name = 'drain' AND d.reason = 'max_attempts' AND d.attempts <> 5
}),
	0,
	'items dead for max_attempts used all five attempts');

is( $node->safe_psql(
		'postgres',
		"SELECT count(DISTINCT worker) FROM queue.history WHERE queue_name = 'drain'"
	),
	$n_clients,
	'all consumers took part');

# The numbers an operator sees agree with what the consumers saw.
my $failures = $node->safe_psql('postgres', 'SELECT count(*) FROM drain_failed');
is( $node->safe_psql(
		'postgres', q{
SELECT queued || ' ' || scheduled || ' ' || processing || ' ' || on_hold || ' '
       || dead || ' ' || processed_1h || ' ' || failed_1h
  FROM queue.stats('drain')
}),
	"0 0 0 0 $dead $hist $failures",
	'stats: nothing live, dead letters, processed and failed attempts counted');

is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM queue.events WHERE queue_name = 'drain' AND kind = 'failed')
       = (SELECT count(*) FROM drain_failed)
   AND (SELECT count(*) FROM queue.events WHERE queue_name = 'drain' AND kind = 'retrying')
       = (SELECT count(*) FROM drain_failed WHERE outcome = 'retrying')
   AND (SELECT count(*) FROM queue.events WHERE queue_name = 'drain' AND kind = 'dead_lettered')
       = (SELECT count(*) FROM drain_failed WHERE outcome = 'dead')
}),
	't',
	'events: one failed and one retrying or dead_lettered per failure');

$node->stop;

done_testing();
