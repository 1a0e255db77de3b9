# Copyright (c) the queue authors
#
# LISTEN as a wake-up: committing an enqueue notifies queue_<name> (only
# with notify on, only at commit), and every new alert raised by sweep
# notifies queue_alerts with its row as JSON (bounded), and the queue's own
# channel (alert_channel) with the same row; an alert that stays open is not
# announced again.

use strict;
use warnings FATAL => 'all';

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('listen', port => 55051);
$node->init;
$node->append_conf('postgresql.conf', "log_min_messages = warning\n");
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION queue;
SELECT queue.create_queue('loud', sla => '10 min');
SELECT queue.create_queue('quiet', notify => false);
});

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN queue_loud');
$listener->query_safe('LISTEN queue_quiet');
$listener->query_safe('LISTEN queue_alerts');
my $loud_alerts = $node->safe_psql('postgres', q{SELECT queue.alert_channel('loud')});
my $quiet_alerts = $node->safe_psql('postgres', q{SELECT queue.alert_channel('quiet')});
$listener->query_safe(qq{LISTEN "$loud_alerts"});
$listener->query_safe(qq{LISTEN "$quiet_alerts"});

# Everything the listener has been told since the last call.
sub notifications
{
	my $out = $listener->query_safe('SELECT 1');
	my @n;
	while ($out =~ /Asynchronous notification "([^"]+)" with payload "(.*?)" received from server process/g)
	{
		push @n, [ $1, $2 ];
	}
	while ($out =~ /Asynchronous notification "([^"]+)" received from server process/g)
	{
		push @n, [ $1, '' ];
	}
	return @n;
}

# --- enqueue -------------------------------------------------------------------

$node->safe_psql('postgres', q{
BEGIN;
SELECT queue.enqueue('loud', '{"n": 1}');
ROLLBACK;
});
is(scalar(notifications()), 0, 'a rolled-back enqueue notifies nobody');

$node->safe_psql('postgres', q{SELECT queue.enqueue('loud', '{"n": 2}')});
my @n = notifications();
is(scalar(@n), 1, 'a committed enqueue notifies once');
is($n[0][0], 'queue_loud', 'on the channel queue_<name>');

$node->safe_psql('postgres', q{SELECT queue.enqueue('quiet', '{"n": 3}')});
is(scalar(notifications()), 0, 'a queue with notify off stays quiet');

# --- alerts --------------------------------------------------------------------

# a completion just now: workers are at work, so only the sla alerts speak
# (no workers_idle)
$node->safe_psql('postgres', q{
INSERT INTO queue.item_done (queue_name, item_id, payload, attempts, enqueued_at, claimed_at, completed_at)
VALUES ('loud', nextval('queue.item_id_seq'), '{}', 1, now(), now(), now());
UPDATE queue.item_live SET visible_at = now() - interval '6 min' WHERE queue_name = 'loud';
SELECT count(*) FROM queue.sweep();
});
my @all = notifications();
@n = grep { $_->[0] eq 'queue_alerts' } @all;
is(scalar(@n), 1, 'a new alert notifies queue_alerts once');
my @own = grep { $_->[0] eq $loud_alerts } @all;
is(scalar(@own), 1, "and the queue's own channel once");
is($own[0][1], $n[0][1], '... with the same row');
is(scalar(grep { $_->[0] eq $quiet_alerts } @all), 0, "another queue's channel hears nothing");
my $alert = eval { decode_json($n[0][1]) } // {};
is($alert->{queue_name}, 'loud', 'the payload names the alert as JSON: queue_name');
is($alert->{kind}, 'sla_warning', '... kind');
is_deeply([ sort keys %$alert ], [qw(alert_id cleared_at details kind message queue_name raised_at)],
	'... the row as JSON');
cmp_ok(length($n[0][1]), '<', 8000, '... within the size NOTIFY accepts');
is($alert->{alert_id},
	$node->safe_psql('postgres',
		q{SELECT alert_id FROM queue.alerts WHERE queue_name = 'loud' AND cleared_at IS NULL}),
	'... the id of the open alert');

$node->safe_psql('postgres', q{SELECT count(*) FROM queue.sweep()});
@all = notifications();
is(scalar(grep { $_->[0] eq 'queue_alerts' } @all), 0,
	'an alert that stays open is not announced again');
is(scalar(grep { $_->[0] eq $loud_alerts } @all), 0, '... on either channel');

$node->safe_psql('postgres', q{
UPDATE queue.item_live SET visible_at = now() - interval '9 min' WHERE queue_name = 'loud';
SELECT count(*) FROM queue.sweep();
});
@n = grep { $_->[0] eq 'queue_alerts' } notifications();
is(scalar(@n), 1, 'escalation notifies once');
is((eval { decode_json($n[0][1]) } // {})->{kind}, 'sla_critical', 'with the sla_critical alert');

$listener->quit;
$node->stop;
done_testing();
