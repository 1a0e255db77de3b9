# Copyright (c) the queue authors
#
# An unattended night, compressed: producers, bots and an operator share
# two queues while bots crash mid-item (their psql killed with SIGKILL)
# and come back under the same name (register_worker(restart => true)),
# the operator pauses, holds, cancels, replays and purges, sweep and
# snapshot_metrics run on a timer, and the postmaster itself is killed
# with SIGKILL once and restarted.  Every call is its own transaction, as
# a LOGIN role of the group roles.  The bots keep a ledger of every claim
# and outcome, checked on every call and at checkpoints:
#   - every item ever enqueued is in exactly one place (live, history,
#     dead letter), and what is in none of them was counted by purge;
#   - a complete/fail/checkpoint/extend/release succeeds only with the
#     item's latest token, never with a token a restart ended;
#   - no item is held by two bots at once, no group has two items held,
#     the capped key never has more than its cap held, a bot without the
#     label never gets an item that requires it;
#   - every failed event is followed by retrying or dead_lettered;
#   - the counters (stats, workers, metrics_history, prometheus) agree
#     with the ledger and with history.
# The run is seeded (SOAK_SEED) and lasts SOAK_SECONDS (default 25);
# run it by hand with SOAK_SECONDS=1500 for a long night.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $seed = $ENV{SOAK_SEED} // 20261203;
my $seconds = $ENV{SOAK_SECONDS} // 25;
srand($seed);
note "seed $seed, $seconds s";

my $node = PostgreSQL::Test::Cluster->new('soak');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,queue'
cron.database_name = 'postgres'
max_connections = 40
restart_after_crash = on
log_min_messages = warning
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION queue;
	CREATE ROLE soak_admin LOGIN IN ROLE queue_admin;
	CREATE ROLE soak_producer LOGIN IN ROLE queue_producer;
	CREATE ROLE soak_bot LOGIN IN ROLE queue_worker;
});

my @queues = ('soak', 'soak_b');
my %max_attempts = (soak => 3, soak_b => 4);
my %failures;    # violations, by kind: reported once each at the end
my %example;

sub violation
{
	my ($kind, $msg) = @_;
	$failures{$kind}++;
	$example{$kind} //= $msg;
	note "VIOLATION $kind: $msg" if $failures{$kind} <= 3;
}

# Sessions: a background psql per actor, reconnected after a crash.
sub session
{
	my ($role) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=verbose' ]);
	# Each call has its own time limit, however long the run.
	$s->set_query_timer_restart;
	return $s;
}

# Runs one statement (its own transaction); returns (rows, sqlstate).
# rows is a list of array refs; sqlstate is '' on success, 'lost' if the
# connection went away.
sub call
{
	my ($s, $sql) = @_;
	my $out;
	eval { $out = $s->query($sql); 1 } or return ([], 'lost');
	my $err = $s->{stderr};
	if ($err =~ /ERROR:\s+([0-9A-Z]{5}):/)
	{
		return ([], $1);
	}
	return ([], 'lost') if $err =~ /connection|terminat|server closed/i;
	my @rows = map { [ split /\|/, $_, -1 ] } grep { $_ ne '' } split /\n/, $out;
	return (\@rows, '');
}

# The first column of the first row, '' for NULL or no row.
sub v { my ($r) = @_; return @$r ? $r->[0][0] // '' : ''; }

# A query through the operator's session (queue_admin reads every queue).
my $op;
sub admin_rows
{
	my ($sql) = @_;
	my ($r, $e) = call($op, $sql);
	die "operator query failed ($e): $sql" if $e;
	return @$r;
}
sub admin_val { my @r = admin_rows($_[0]); return @r ? $r[0][0] // '' : ''; }

$node->safe_psql('postgres', q{
	SELECT queue.create_queue('soak', lease_timeout => '2 s', max_attempts => 3,
		backoff_base => '0.2 s', backoff_factor => 2, backoff_max => '1 s',
		backoff_jitter => 0, audit => 'all');
	SELECT queue.create_queue('soak_b', lease_timeout => '2 s', max_attempts => 4,
		backoff_base => '0.1 s', backoff_max => '0.5 s', audit => 'all',
		dedup_window => '1 hour', breaker_threshold => 0.3, breaker_window => '10 s',
		breaker_min_samples => 8, breaker_cooldown => '1 s');
	SELECT queue.set_limit('soak', 'erp', max_in_flight => 2);
	SELECT queue.snapshot_metrics();
});

# The ledger.
my %item;        # "q/id" -> { g => group, k => limit key, req => 1 if gpu }
my %latest;      # "q/id" -> latest token handed out
my %lease;       # "q/token" -> { id, bot, exp (epoch), ended }
my %active;      # the "q/token" keys of leases that may still be current
my %purged = map { $_ => 0 } @queues;
my %completed_by;    # bot -> completions acknowledged
my %op_paused;       # queue -> 1 while the operator has it paused
my @log_claims;

my @bots = map {
	{
		name => "bot$_",
		labels => ($_ == 4 ? "'{gpu}'" : 'NULL'),
		held => undef,
	}
} 1 .. 4;

sub start_bot
{
	my ($b) = @_;
	$b->{s} = session('soak_bot');
	my ($r, $e) = call($b->{s},
		"SELECT queue.register_worker('$b->{name}', labels => $b->{labels}, restart => true)");
	violation('register', "$b->{name}: $e") if $e;
	# Every lease this name held before ends now.
	for my $t (keys %active)
	{
		$lease{$t}{ended} = 'restart' if $lease{$t}{bot} eq $b->{name} && !$lease{$t}{ended};
	}
	# The dead process's token must be refused from now on.
	if (my $h = $b->{held})
	{
		my ($r2) = call($b->{s},
			"SELECT queue.complete('$h->{q}', $h->{id}, $h->{token})");
		violation('fencing_restart', "complete of $h->{q}/$h->{id} with a token the restart ended succeeded")
		  if @$r2 && v($r2) eq 't';
		$b->{held} = undef;
	}
}

my @producers = map { { s => session('soak_producer') } } 1 .. 2;
$op = session('soak_admin');
start_bot($_) for @bots;

my $dedup_n = 0;

sub produce
{
	my ($p) = @_;
	my $q = $queues[ int(rand(2)) ];
	my $roll = rand();
	if ($roll < 0.6)
	{
		my $g = rand() < 0.4 ? 'g' . int(rand(4)) : undef;
		my $k = $q eq 'soak' && rand() < 0.4 ? 'erp' : undef;
		my $req = rand() < 0.1 ? 1 : 0;
		my $delay = rand() < 0.2 ? int(rand(1500)) : 0;
		my $dk = rand() < 0.3 ? "'d" . int(rand(30)) . "'" : 'NULL';
		my $sql = sprintf(
			"SELECT queue.enqueue('%s', '{\"n\": %d}', priority => %d, run_at => now() + interval '%d ms', dedup_key => %s, group_key => %s, limit_key => %s, requires => %s)",
			$q, $dedup_n++, int(rand(3)), $delay, $dk,
			defined $g ? "'$g'" : 'NULL', defined $k ? "'$k'" : 'NULL',
			$req ? "'{gpu}'" : 'NULL');
		my ($r, $e) = call($p->{s}, $sql);
		return $e if $e;
		my $id = v($r);
		$item{"$q/$id"} //= { g => $g, k => $k, req => $req };
	}
	else
	{
		# A batch with dedup keys, one repeated inside the batch.
		my $n = 2 + int(rand(6));
		my @keys = map { rand() < 0.5 ? "b" . int(rand(40)) : undef } 1 .. $n;
		$keys[-1] = $keys[0] if defined $keys[0] && rand() < 0.5;
		my $sql = sprintf(
			"SELECT * FROM queue.enqueue_batch('%s', array_fill('{\"b\": 1}'::jsonb, ARRAY[%d]), dedup_keys => ARRAY[%s]::text[])",
			$q, $n, join(',', map { defined $_ ? "'$_'" : 'NULL' } @keys));
		my ($r, $e) = call($p->{s}, $sql);
		return $e if $e;
		violation('batch_len', "batch of $n returned " . scalar(@$r)) if @$r != $n;
		my %first;
		for my $i (0 .. $#$r)
		{
			my $id = $r->[$i][0];
			$item{"$q/$id"} //= { g => undef, k => undef, req => 0 };
			if (defined $keys[$i])
			{
				violation('batch_dedup', "key $keys[$i] gave $first{$keys[$i]} and $id")
				  if exists $first{ $keys[$i] } && $first{ $keys[$i] } != $id;
				$first{ $keys[$i] } //= $id;
			}
		}
	}
	return '';
}

# A claim's time on the server's clock: its expiry minus the lease timeout.
sub claim_checks
{
	my ($b, $q, $id, $token, $exp, $attempt) = @_;
	my $k = "$q/$id";
	my $now = $exp - 2;
	my $it = $item{$k};
	unless ($it)
	{
		violation('unknown_item', "$b->{name} got $k, never enqueued");
		return;
	}
	violation('routing', "$b->{name} got $k which requires gpu")
	  if $it->{req} && $b->{labels} eq 'NULL';
	for my $t (keys %active)
	{
		my $l = $lease{$t};
		delete $active{$t} if $l->{ended} || $l->{exp} < $now - 5;
		next if $l->{ended} || $l->{exp} <= $now || $l->{q} ne $q;
		violation('two_holders', "$k claimed by $b->{name} while $l->{bot} held it until $l->{exp} (claim at $now)")
		  if $l->{id} == $id;
		my $o = $item{"$q/$l->{id}"};
		violation('group', "$k of group $it->{g} claimed while $q/$l->{id} of the same group was held")
		  if defined $it->{g} && defined $o->{g} && $o->{g} eq $it->{g} && $l->{id} != $id;
	}
	if (defined $it->{k})
	{
		my $held = 1 + grep {
			my $l = $lease{$_};
			!$l->{ended} && $l->{exp} > $now && $l->{q} eq $q && $l->{id} != $id
			  && defined $item{"$q/$l->{id}"}{k}
		} keys %active;
		violation('cap', "$held items of key erp held at once") if $held > 2;
	}
	# Attempts: one more per claim, except after a release in time.
	if (defined $attempt)
	{
		my $prev = defined $latest{$k} ? $lease{"$q/$latest{$k}"} : undef;
		my $expect = $prev ? $prev->{attempt} + 1 : 1;
		$expect-- if $prev && $prev->{ended} eq 'release';
		violation('attempt', "$k claimed with attempt $attempt, expected $expect")
		  if $attempt != $expect
		  && !($prev && $prev->{ended} eq 'release' && ($prev->{late} || $prev->{revived})
			&& $attempt == $expect + 1);
		violation('max_attempts', "$k claimed with attempt $attempt past $max_attempts{$q}")
		  if $attempt > $max_attempts{$q};
	}
	$latest{$k} = $token;
	$lease{"$q/$token"} = { q => $q, id => $id, bot => $b->{name}, exp => $exp, ended => '',
		attempt => $attempt // 0 };
	$active{"$q/$token"} = 1;
}

# Checks a successful call with a token: it must be the item's latest one,
# not ended by a restart.
sub fenced
{
	my ($b, $what, $q, $id, $token) = @_;
	my $l = $lease{"$q/$token"};
	violation('fencing', "$what of $q/$id by $b->{name} succeeded with a stale token")
	  if $latest{"$q/$id"} != $token || ($l->{ended} && $l->{ended} eq 'restart');
}

sub bot_step
{
	my ($b) = @_;
	my $h = $b->{held};
	if (!$h)
	{
		my $q = $queues[ int(rand(2)) ];
		my ($r, $e) = call($b->{s},
			"SELECT item_id, lease_token, extract(epoch FROM lease_expires_at), attempt FROM queue.dequeue('$q', '$b->{name}', lease_timeout => '2 s')");
		return $e if $e;
		return '' unless @$r;
		my ($id, $token, $exp, $attempt) = @{ $r->[0] };
		violation('paused', "$b->{name} got $q/$id while the operator had $q paused")
		  if $op_paused{$q};
		claim_checks($b, $q, $id, $token, $exp, $attempt);
		$b->{held} = { q => $q, id => $id, token => $token };
		return '';
	}
	my ($q, $id, $token) = @{$h}{qw(q id token)};
	my $l = $lease{"$q/$token"};
	my $roll = rand();
	my ($r, $e);
	if ($roll < 0.40)
	{
		($r, $e) = call($b->{s}, "SELECT queue.complete('$q', $id, $token, '{\"ok\": true}')");
		return $e if $e;
		if (v($r) eq 't')
		{
			fenced($b, 'complete', $q, $id, $token);
			$completed_by{ $b->{name} }++;
			$l->{ended} = 'complete';
		}
		$b->{held} = undef;
	}
	elsif ($roll < 0.55)
	{
		my $perm = rand() < 0.3 ? 'true' : 'false';
		($r, $e) = call($b->{s},
			"SELECT queue.fail('$q', $id, $token, 'boom', error_code => 'E" . int(rand(3)) . "', permanent => $perm)");
		return $e if $e;
		if (v($r) ne '')
		{
			fenced($b, 'fail', $q, $id, $token);
			$l->{ended} = 'fail';
		}
		$b->{held} = undef;
	}
	elsif ($roll < 0.62)
	{
		($r, $e) = call($b->{s}, "SELECT queue.release('$q', $id, $token), extract(epoch FROM now())");
		return $e if $e;
		if (v($r) eq 't')
		{
			fenced($b, 'release', $q, $id, $token);
			$l->{ended} = 'release';
			$l->{late} = $r->[0][1] >= $l->{exp};
		}
		$b->{held} = undef;
	}
	elsif ($roll < 0.72)
	{
		($r, $e) = call($b->{s},
			"SELECT queue.checkpoint('$q', $id, $token, jsonb_build_object('step', $roll))");
		return $e if $e;
		fenced($b, 'checkpoint', $q, $id, $token) if v($r) eq 't';
	}
	elsif ($roll < 0.80)
	{
		($r, $e) = call($b->{s},
			"SELECT extract(epoch FROM queue.extend_lease('$q', $id, $token, '2 s'))");
		return $e if $e;
		if (v($r) ne '')
		{
			fenced($b, 'extend_lease', $q, $id, $token);
			# A lease revived after it ran out may have been counted as lost.
			$l->{revived} = 1 if v($r) - 2 >= $l->{exp};
			$l->{exp} = v($r) if v($r) > $l->{exp};
			$active{"$q/$token"} = 1;
		}
	}
	elsif ($roll < 0.84)
	{
		($r, $e) = call($b->{s}, "SELECT queue.heartbeat('$b->{name}')");
		return $e if $e;
		# What the heartbeat renewed, as the items view shows it.
		my @rows = admin_rows(
			"SELECT queue_name, item_id, extract(epoch FROM lease_expires_at) FROM queue.items WHERE worker = '$b->{name}' AND state = 'processing'");
		for my $row (@rows)
		{
			my $lt = $latest{"$row->[0]/$row->[1]"};
			next unless defined $lt;
			my $ll = $lease{"$row->[0]/$lt"};
			if ($ll && $ll->{bot} eq $b->{name} && $row->[2] > $ll->{exp})
			{
				$ll->{revived} = 1 if $row->[2] - 2 >= $ll->{exp};
				$ll->{exp} = $row->[2];
				$active{"$row->[0]/$lt"} = 1;
			}
		}
	}
	elsif ($roll < 0.87)
	{
		# The bot process dies mid-item and comes back under its name.
		$b->{s}{run}->signal('KILL');
		eval { $b->{s}{run}->finish };
		start_bot($b);
	}
	# else: the bot is slow this round (its lease may run out).
	return '';
}

sub operator_step
{
	my $roll = rand();
	my $q = $queues[ int(rand(2)) ];
	my ($r, $e);
	if ($roll < 0.10)
	{
		($r, $e) = call($op, "SELECT queue.pause('$q', 'soak')");
		$op_paused{$q} = 1 unless $e;
	}
	elsif ($roll < 0.25)
	{
		($r, $e) = call($op, "SELECT queue.resume('$q')");
		$op_paused{$q} = 0 unless $e;
	}
	elsif ($roll < 0.40)
	{
		($r, $e) = call($op,
			"SELECT queue.hold('$q', item_id, 'look') FROM queue.items WHERE queue_name = '$q' AND state IN ('queued', 'scheduled') ORDER BY random() LIMIT 1");
	}
	elsif ($roll < 0.55)
	{
		($r, $e) = call($op,
			"SELECT queue.unhold('$q', item_id) FROM queue.items WHERE queue_name = '$q' AND state = 'on_hold' ORDER BY item_id LIMIT 2");
	}
	elsif ($roll < 0.65)
	{
		($r, $e) = call($op,
			"SELECT queue.cancel('$q', item_id, 'no longer needed') FROM queue.items WHERE queue_name = '$q' ORDER BY random() LIMIT 1");
	}
	elsif ($roll < 0.80)
	{
		($r, $e) = call($op,
			"SELECT queue_name, queue.replay('$q', item_id) FROM queue.dead_letters WHERE queue_name = '$q' AND review_status = 'new' ORDER BY random() LIMIT 1");
		for my $row (@$r)
		{
			$item{"$q/$row->[1]"} //= { g => undef, k => undef, req => 0 };
		}
	}
	elsif ($roll < 0.83)
	{
		($r, $e) = call($op, "SELECT queue.purge('$q')");
		$purged{$q} += v($r) if !$e && @$r;
	}
	else
	{
		($r, $e) = call($op, "SELECT count(*) FROM queue.sweep()");
	}
	return $e;
}

# Checkpoint: every item ever enqueued is in exactly one place.
sub check_places
{
	my ($label) = @_;
	for my $q (@queues)
	{
		my %where;
		for my $row (admin_rows(qq{
			SELECT 'live', item_id FROM queue.items WHERE queue_name = '$q'
			UNION ALL SELECT 'history', item_id FROM queue.history WHERE queue_name = '$q'
			UNION ALL SELECT 'dead', item_id FROM queue.dead_letters WHERE queue_name = '$q'}))
		{
			push @{ $where{ $row->[1] } }, $row->[0];
		}
		my @twice = grep { @{ $where{$_} } > 1 } keys %where;
		violation('two_places', "$label: $q/$twice[0] is in " . join(' and ', @{ $where{ $twice[0] } }))
		  if @twice;
		my @unknown = grep { !$item{"$q/$_"} } keys %where;
		violation('unknown_item', "$label: $q/$unknown[0] was never enqueued") if @unknown;
		my $known = grep { m{^\Q$q\E/} } keys %item;
		my $missing = $known - (keys(%where) - @unknown);
		violation('lost', "$label: $q: $missing items in no place, purge removed $purged{$q}")
		  if $missing != $purged{$q};
		# stats() counts every live item in one of its four states, and
		# the dead letters still to review.
		my ($st) = admin_rows(qq{
			SELECT s.queued + s.scheduled + s.processing + s.on_hold, s.on_hold, s.dead,
			       (SELECT count(*) FROM queue.items i WHERE i.queue_name = '$q'),
			       (SELECT count(*) FROM queue.items i WHERE i.queue_name = '$q' AND state = 'on_hold'),
			       (SELECT count(*) FROM queue.dead_letters d WHERE d.queue_name = '$q'
			           AND review_status IN ('new', 'in_review'))
			  FROM queue.stats('$q') s});
		violation('stats', "$label: $q: stats (live, on hold, dead) = ($st->[0], $st->[1], $st->[2]), items and dead letters say ($st->[3], $st->[4], $st->[5])")
		  if $st->[3] < 1000
		  && ($st->[0] != $st->[3] || $st->[1] != $st->[4] || $st->[2] != $st->[5]);
	}
}

my $started = time();
my $last_tick = $started;
my $crashed = 0;
my $steps = 0;
my %lost_calls;
while (time() - $started < $seconds)
{
	$steps++;
	my $roll = rand();
	my $e;
	if ($roll < 0.25)
	{
		$e = produce($producers[ int(rand(@producers)) ]);
	}
	elsif ($roll < 0.92)
	{
		$e = bot_step($bots[ int(rand(@bots)) ]);
	}
	else
	{
		$e = operator_step();
	}
	# 40P01 / 55P03 are retried by the callers; nothing else is expected.
	$lost_calls{$e}++ if $e;
	violation('sql_error', "unexpected SQLSTATE $e") if $e && $e ne 'lost';

	# The timer: sweep, metrics, schedules, and a checkpoint, 2 s after
	# the previous one ended.
	if (time() - $last_tick >= 2)
	{
		call($op, 'SELECT count(*) FROM queue.sweep()');
		call($op, 'SELECT queue.snapshot_metrics()');
		call($op, 'SELECT queue.run_schedules()');
		check_places("after $steps steps");
		$last_tick = time();
	}

	# The postmaster dies mid-load, half way through.
	if (!$crashed && time() - $started >= $seconds / 2)
	{
		$crashed = 1;
		note "killing the postmaster after $steps steps";
		# Calls in flight when it dies: each producer's enqueue and each
		# bot's complete of what it holds; whether they committed is
		# looked up after the restart.
		for my $i (0 .. $#producers)
		{
			$producers[$i]{s}{stdin} .= "SELECT queue.enqueue('soak', '{\"inflight\": $i}');\n";
			$producers[$i]{s}{run}->pump_nb;
		}
		for my $b (grep { $_->{held} } @bots)
		{
			my $h = $b->{held};
			$b->{s}{stdin} .= "SELECT queue.complete('$h->{q}', $h->{id}, $h->{token});\n";
			$b->{s}{run}->pump_nb;
		}
		usleep(int(rand(30_000)));
		my $pm_pid = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
		my @children = child_pids($pm_pid);
		$node->kill9;
		kill 'KILL', @children;
		for (1 .. 100)
		{
			last unless grep { kill 0, $_ } @children;
			usleep(100_000);
		}
		for my $s ($op, (map { $_->{s} } @producers), (map { $_->{s} } @bots))
		{
			$s->{run}->signal('KILL');
			eval { $s->{run}->finish };
		}
		usleep(500_000);
		$node->start;
		$op = session('soak_admin');
		for my $row (admin_rows(q{
			SELECT item_id FROM queue.items WHERE queue_name = 'soak' AND payload ? 'inflight'
			UNION ALL SELECT item_id FROM queue.history WHERE queue_name = 'soak' AND payload ? 'inflight'
			UNION ALL SELECT item_id FROM queue.dead_letters WHERE queue_name = 'soak' AND payload ? 'inflight'}))
		{
			note "the in-flight enqueue of soak/$row->[0] committed";
			$item{"soak/$row->[0]"} //= { g => undef, k => undef, req => 0 };
		}
		for my $b (grep { $_->{held} } @bots)
		{
			my $h = $b->{held};
			my ($st) = admin_rows("SELECT state, worker FROM queue.item('$h->{q}', $h->{id})");
			next unless $st && $st->[0] eq 'processed';
			note "the in-flight complete of $h->{q}/$h->{id} by $b->{name} committed";
			violation('fencing', "$h->{q}/$h->{id} processed by $st->[1], not $b->{name}")
			  if $st->[1] ne $b->{name};
			$completed_by{ $b->{name} }++;
			$lease{"$h->{q}/$h->{token}"}{ended} = 'complete';
			$b->{held} = undef;
		}
		$_->{s} = session('soak_producer') for @producers;
		start_bot($_) for @bots;
		check_places('after the postmaster restart');
	}
}
note "$steps steps; errors: " . join(', ', map { "$_ x$lost_calls{$_}" } sort keys %lost_calls);

# Wind down: resume, unhold, then the bots finish every live item.
$node->safe_psql('postgres', join('', map {
	"SELECT queue.resume('$_'); SELECT count(queue.unhold('$_', item_id)) FROM queue.items WHERE queue_name = '$_' AND state = 'on_hold';"
} @queues));
my $deadline = time() + 60;
while (time() < $deadline)
{
	my $live = admin_val('SELECT count(*) FROM queue.items');
	last if $live == 0;
	for my $b (@bots)
	{
		for my $q (@queues)
		{
			my ($r, $e) = call($b->{s},
				"SELECT item_id, lease_token, extract(epoch FROM lease_expires_at), attempt FROM queue.dequeue('$q', '$b->{name}', batch_size => 50, lease_timeout => '2 s')");
			next if $e || !@$r;
			for my $row (@$r)
			{
				my ($id, $token, $exp, $attempt) = @$row;
				claim_checks($b, $q, $id, $token, $exp, $attempt);
				my ($r2, $e2) = call($b->{s}, "SELECT queue.complete('$q', $id, $token)");
				if (!$e2 && v($r2) eq 't')
				{
					fenced($b, 'complete', $q, $id, $token);
					$completed_by{ $b->{name} }++;
					$lease{"$q/$token"}{ended} = 'complete';
				}
			}
		}
	}
	call($op, 'SELECT count(*) FROM queue.sweep()');
	usleep(100_000);
}
is(admin_val('SELECT count(*) FROM queue.items'), 0, 'the bots finished every live item');
$node->safe_psql('postgres', 'SELECT count(*) FROM queue.sweep(); SELECT queue.snapshot_metrics();');
check_places('at the end');

# Events per failure: failed, then retrying or dead_lettered.
my @bad_seq = admin_rows(q{
	SELECT queue_name, item_id, kind, next_kind FROM (
	  SELECT queue_name, item_id, kind,
	         lead(kind) OVER (PARTITION BY queue_name, item_id ORDER BY event_id) AS next_kind
	    FROM queue.events WHERE item_id IS NOT NULL) e
	 WHERE kind = 'failed' AND next_kind IS DISTINCT FROM 'retrying'
	   AND next_kind IS DISTINCT FROM 'dead_lettered'
	 LIMIT 5});
violation('events', "failed of $_->[0]/$_->[1] followed by " . ($_->[3] || 'nothing')) for @bad_seq;

# Counters against history.
for my $q (@queues)
{
	my ($hist, $dead, $dead_new) = @{ (admin_rows(qq{
		SELECT (SELECT count(*) FROM queue.history WHERE queue_name = '$q'),
		       (SELECT count(*) FROM queue.dead_letters WHERE queue_name = '$q'),
		       (SELECT count(*) FROM queue.dead_letters WHERE queue_name = '$q' AND review_status IN ('new', 'in_review'))}))[0] };
	my ($p1h, $f1h, $sdead) = @{ (admin_rows(
		"SELECT processed_1h, failed_1h, dead FROM queue.stats('$q')"))[0] };
	is($p1h, $hist, "$q: stats' processed_1h is the history's count");
	is($sdead, $dead_new, "$q: stats' dead counts the new and in-review dead letters");
	my ($mp, $mf) = @{ (admin_rows(
		"SELECT coalesce(sum(processed), 0), coalesce(sum(failed), 0) FROM queue.metrics_history WHERE queue_name = '$q'"))[0] };
	is($mp, $hist, "$q: metrics_history's processed add up to the history");
	is($mf, $f1h, "$q: metrics_history's failed add up to failed_1h");
	my $prom = $node->safe_psql('postgres', 'SELECT queue.prometheus()');
	my ($pp) = $prom =~ /^queue_processed_total\{queue="$q"\}\s+(\d+)/m;
	my ($pf) = $prom =~ /^queue_failed_total\{queue="$q"\}\s+(\d+)/m;
	my $pd = 0;
	$pd += $_ for $prom =~ /^queue_dead_letters_total\{[^}]*queue="$q"[^}]*\}\s+(\d+)/mg;
	is($pp, $hist, "$q: queue_processed_total is the history's count");
	is($pf, $f1h, "$q: queue_failed_total is failed_1h");
	is($pd, $dead, "$q: queue_dead_letters_total counts every dead letter");
	# Alerts: dead_letters open exactly while new dead letters exist.
	my $new = admin_val("SELECT count(*) FROM queue.dead_letters WHERE queue_name = '$q' AND review_status = 'new'");
	my $open = admin_val("SELECT count(*) FROM queue.alerts WHERE queue_name = '$q' AND kind = 'dead_letters' AND cleared_at IS NULL");
	is($open, $new > 0 ? 1 : 0, "$q: one dead_letters alert open exactly while new dead letters exist");
}
is(admin_val('SELECT count(*) FROM (SELECT 1 FROM queue.alerts WHERE cleared_at IS NULL GROUP BY queue_name, kind HAVING count(*) > 1) x'),
	0, 'at most one open alert per queue and kind');

# The audit trail (audit => 'all') against the bots' ledger: one claimed
# event per claim, one completed event per completion.
is(admin_val("SELECT count(*) FROM queue.events WHERE kind = 'claimed'"), scalar(keys %lease),
	'one claimed event per claim the bots were handed');
is(admin_val("SELECT count(*) FROM queue.events WHERE kind = 'completed'"),
	admin_val('SELECT count(*) FROM queue.history'), 'one completed event per completion');

# Workers' counts against the bots' ledger.
my %wc = map { $_->[0] => $_->[1] } admin_rows('SELECT worker, completed_24h FROM queue.workers');
is($wc{ $_->{name} } // 0, $completed_by{ $_->{name} } // 0,
	"$_->{name}: workers' completed_24h is what the bot saw complete") for @bots;
is(admin_val('SELECT count(*) FROM queue.history'),
	eval { my $n = 0; $n += $_ for values %completed_by; $n },
	'history holds exactly the completions the bots were told succeeded');

ok(keys(%item) > 20, 'the producers enqueued items (' . scalar(keys %item) . ')');
is($failures{$_} // 0, 0, "no violation: $_" . ($example{$_} ? " (e.g. $example{$_})" : ''))
  for qw(two_places lost unknown_item two_holders group cap routing fencing fencing_restart
  attempt max_attempts stats paused events batch_len batch_dedup register sql_error);
for my $k (sort keys %failures)
{
	next if grep { $_ eq $k } qw(two_places lost unknown_item two_holders group cap routing fencing
	  fencing_restart attempt max_attempts stats paused events batch_len batch_dedup register sql_error);
	fail("violation $k: $example{$k}");
}

$_->{s}->quit for @bots;
$_->{s}->quit for @producers;
$op->quit;
$node->stop;
done_testing();

# The server's processes: the postmaster's children, from /proc.
sub child_pids
{
	my ($parent) = @_;
	my @pids;
	opendir(my $dh, '/proc') or die "cannot read /proc: $!";
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh>;
		close $fh;
		next unless defined $stat && $stat =~ /\)\s+\S+\s+(\d+)/;
		push @pids, $pid if $1 == $parent;
	}
	closedir $dh;
	return @pids;
}
