# Copyright (c) the queue authors
#
# Helpers shared by the TAP tests under test/t.

package QueueTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
our @EXPORT_OK = qw(state_sql model_session model_run);

# A query listing everything of the extension's state that must survive a
# dump and restore or an extension upgrade, one text row per object, in a
# stable order: comparing its output before and after shows any loss.
sub state_sql
{
	return q{
	SELECT 'queue', (to_jsonb(q)
		-- settings added since 0.1.0 come with their defaults
		- 'group_on_dead')::text FROM queue.queues q
	UNION ALL
	SELECT 'item', concat_ws('|', queue_name, item_id, state, priority, attempt, max_attempts,
		run_at, enqueued_at, lease_expires_at, worker, dedup_key, correlation_id, last_error,
		payload, progress) FROM queue.items
	UNION ALL
	SELECT 'history', concat_ws('|', queue_name, item_id, payload, result, attempts, worker,
		enqueued_at, claimed_at, completed_at, dedup_key, correlation_id) FROM queue.history
	UNION ALL
	SELECT 'dead', concat_ws('|', queue_name, item_id, payload, progress, attempts, reason,
		last_error, error_code, errors, dead_at, review_status, replayed_as, dedup_key,
		correlation_id, enqueued_at) FROM queue.dead_letters
	UNION ALL
	SELECT 'event', concat_ws('|', queue_name, event_id, item_id, kind, worker, attempt, details)
	  FROM queue.events
	UNION ALL
	SELECT 'grant', concat_ws('|', g.queue_name, r.rolname, g.access)
	  FROM queue.queue_grant g JOIN pg_roles r ON r.oid = g.grantee
	UNION ALL
	SELECT 'worker', concat_ws('|', w.worker, w.queues, w.capacity, w.draining)
	  FROM queue.worker_registry w
	UNION ALL
	SELECT 'seq', concat_ws('|', sequencename, last_value) FROM pg_sequences
	 WHERE schemaname = 'queue'
	ORDER BY 1, 2;
	};
}

# A psql session of one role on $node for a model test, errors reported by
# SQLSTATE only; @setup: statements run first (session settings).
sub model_session
{
	my ($node, $role, @setup) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', $role ]);
	$s->query("\\set VERBOSITY sqlstate");
	$s->query("SET client_min_messages = error");
	$s->query($_) for @setup;
	$s->{stderr} = '';
	return $s;
}

# Run one statement (autocommit) in a model_session; returns (output,
# sqlstate or undef).  Anything else on stderr ends the test.
my $model_qn = 0;
sub model_run
{
	my ($s, $sql) = @_;
	my $n = $model_qn++;
	my $banner = "model: SEP $n:";
	$s->{stdin} .= "$sql\n;\n\\echo '$banner'\n\\warn '$banner'\n";
	$s->{timeout}->start();
	$s->{run}->pump()
	  until ($s->{stdout} =~ /$banner\r?\n/ && $s->{stderr} =~ /$banner\r?\n/)
	  || $s->{timeout}->is_expired;
	die "query timed out: $sql" if $s->{timeout}->is_expired;
	my $out = $s->{stdout};
	my $err = $s->{stderr};
	$out =~ s/\r?\n?\Q$banner\E\r?\n//;
	$err =~ s/\r?\n?\Q$banner\E\r?\n//;
	$s->{stdout} = '';
	$s->{stderr} = '';
	my $state;
	if ($err =~ /ERROR:\s+([0-9A-Z]{5})/) { $state = $1; }
	elsif ($err ne '') { die "unexpected stderr for $sql: $err"; }
	return ($out, $state);
}

1;
