# Copyright (c) the queue authors
#
# Model-based test of an item's life (SPEC section 1): a reference model
# of the state machine in Perl (queued, scheduled, on hold, processing,
# processed, dead letter with its reason; attempts, lease tokens, lost
# leases, dedup keys, ordered groups, per-key and queue caps, expiry,
# cancel requests, reviews and replays) is driven by a
# seeded random sequence of calls made by login roles that are members of
# the group roles, each call committed on its own, from several
# connections interleaved.  After every step the call's return value, the
# queue's rows in items, dead_letters and history and its stats() counts
# must be exactly what the model says; item() is compared every few steps.
#
# Time is kept out of the way: items are either claimable now or scheduled
# an hour ahead, a lease is either five minutes long or one microsecond
# (so it has run out by the next statement), and an item that expires
# does so a microsecond after its enqueue.  Where the SPEC leaves the
# product a choice (a dequeue "may" bury a spent lost lease or an expired
# item it meets; sweep does at the latest), the model follows what the
# product did.
#
# QUEUE_MODEL_SEED and QUEUE_MODEL_STEPS choose another sequence; the
# seed is printed with any disagreement.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::Bin/../perl";
use QueueTest qw(model_session model_run);

my $seed = $ENV{QUEUE_MODEL_SEED} // 20261203;
my $nsteps = $ENV{QUEUE_MODEL_STEPS} // 1200;
my $budget = $ENV{QUEUE_MODEL_SECONDS} // 40;
note("model seed $seed, $nsteps steps");

my $node = PostgreSQL::Test::Cluster->new('model');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
log_min_messages = warning
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION queue;
	CREATE ROLE m_admin LOGIN IN ROLE queue_admin;
	CREATE ROLE m_prod LOGIN IN ROLE queue_producer;
	CREATE ROLE m_work LOGIN IN ROLE queue_worker;
	CREATE ROLE m_read LOGIN IN ROLE queue_reader;
});

# ------------------------------------------------------------- sessions

# A psql session of one role (QueueTest::model_session); run() sends one
# statement (autocommit) and returns (output, sqlstate or undef).
sub session { return model_session($node, $_[0]); }
sub run { return model_run(@_); }

my %sess = (
	admin => session('m_admin'),
	prod  => session('m_prod'),
	w1    => session('m_work'),
	w2    => session('m_work'),
	read  => session('m_read'));

my ($out, $err) = run($sess{admin}, q{
	SELECT queue.create_queue('mq', max_attempts => 3, backoff_base => '1 h', audit => 'all');
	SELECT queue.create_queue('mw', max_attempts => 2, backoff_base => '1 h', audit => 'all',
		dedup_window => '1 h', max_in_flight => 3);
	SELECT queue.set_limit('mq', 'L1', max_in_flight => 2);
	SELECT queue.set_limit('mq', 'L2', max_in_flight => 1)});
die "create_queue: $err" if $err;

# ---------------------------------------------------------------- model

# Seeded only now: starting the node draws random numbers (its port).
srand($seed);

my @queues = ('mq', 'mw');
my %qconf = (mq => { max_attempts => 3, window => 0, limits => { L1 => 2, L2 => 1 } },
	mw => { max_attempts => 2, window => 1, cap => 3, limits => {} });
my %paused = (mq => 0, mw => 0);
my %items;            # "q/id" -> item hash
my %failed = (mq => 0, mw => 0);       # failed outcomes (stats failed_1h)
my %processed = (mq => 0, mw => 0);    # completions (stats processed_1h)
my $T = 0;            # model clock: one tick per step, claims expire at T + 0.5
my @stale;            # tokens that were current once
my @trail;            # the steps so far, for the report
my $step;

sub pick { return $_[ int(rand(scalar @_)) ]; }
sub key { return "$_[0]/$_[1]"; }
sub q_items { my ($q) = @_; return grep { $_->{q} eq $q } values %items; }

# Live states of the model: queued, scheduled, on_hold, processing (with
# a flag for a lease that has run out); final: processed, dead, purged.
sub is_live { my ($it) = @_; return $it->{st} =~ /^(queued|scheduled|on_hold|processing|taking)$/; }
sub expired { my ($it) = @_; return $it->{st} eq 'processing' && $it->{lease_out}; }

# The live item holding a dedup key (or, with the queue's window, the
# newest completed one), else undef.
sub key_holder
{
	my ($q, $k) = @_;
	return undef unless defined $k;
	for my $it (q_items($q))
	{
		next unless is_live($it) && defined $it->{dk} && $it->{dk} eq $k;
		# an item past its expires_at holds no key: it becomes a dead letter
		if ($it->{exp} && $it->{st} ne 'processing')
		{
			bury($it, 'expired', undef);
			next;
		}
		return $it;
	}
	if ($qconf{$q}{window})
	{
		my @done = sort { $b->{done_at} <=> $a->{done_at} || $b->{id} <=> $a->{id} }
		  grep { $_->{st} eq 'processed' && defined $_->{dk} && $_->{dk} eq $k } q_items($q);
		return $done[0] if @done;
	}
	return undef;
}

sub new_item
{
	my ($q, $id, %a) = @_;
	my $it = {
		q => $q, id => $id, st => $a{sched} ? 'scheduled' : 'queued',
		sched => $a{sched} ? 1 : 0, attempt => 0,
		max => $a{max} // $qconf{$q}{max_attempts}, prio => $a{prio} // 2,
		dk => $a{dk}, gk => $a{gk}, lk => $a{lk}, exp => $a{exp} ? 1 : 0, ctime => $T, progress => $a{progress} // {},
		token => undef, lease_out => 0, counted => 0, cancel => 0,
	};
	$items{ key($q, $id) } = $it;
	return $it;
}

# Ends an item as a dead letter.
sub bury
{
	my ($it, $reason, $code) = @_;
	$it->{st} = 'dead';
	$it->{reason} = $reason;
	$it->{code} = $code;
	$it->{review} = 'new';
	$it->{replayed_as} = undef;
	$it->{dead_at} = $T;
	push @stale, $it->{token} if defined $it->{token};
	$it->{token} = undef;
}

# A lease that ends with the item back in line (a transient failure, a
# release): its token stops working; with $later it waits an hour.
sub back_in_line
{
	my ($it, $later) = @_;
	push @stale, $it->{token};
	$it->{token} = undef;
	$it->{st} = $later ? 'scheduled' : 'queued';
	$it->{sched} = $later ? 1 : 0;
	$it->{ctime} = $T;
	$it->{lease_out} = 0;
	$it->{counted} = 0;
}

# A lease that ran out is counted as a lost attempt by whoever meets it
# first: a spent one (or one whose cancel was requested) becomes a dead
# letter, another stays claimable.  Returns 'dead' or 'counted'.
sub count_lost
{
	my ($it) = @_;
	if ($it->{cancel})
	{
		bury($it, 'cancelled', undef);
		return 'dead';
	}
	if (!$it->{counted})
	{
		$failed{ $it->{q} }++;
		$it->{counted} = 1;
		$it->{code} = undef;
	}
	if ($it->{attempt} >= $it->{max})
	{
		bury($it, 'lease_expired', undef);
		return 'dead';
	}
	return 'counted';
}

# Claim order: priority, the time it became claimable, id.
sub claimable
{
	my ($q) = @_;
	my %head;
	for my $it (q_items($q))
	{
		next unless defined $it->{gk} && is_live($it);
		$head{ $it->{gk} } = $it->{id}
		  if !defined $head{ $it->{gk} } || $it->{id} < $head{ $it->{gk} };
	}
	return sort { $a->{prio} <=> $b->{prio} || $a->{ctime} <=> $b->{ctime} || $a->{id} <=> $b->{id} }
	  grep {
		($_->{st} eq 'queued' || expired($_))
		  && (!defined $_->{gk} || $head{ $_->{gk} } == $_->{id})
	  } q_items($q);
}

# Leases held now (not run out), of the queue or of one limit key.
sub in_flight
{
	my ($q, $lk) = @_;
	return scalar grep {
		($_->{st} eq 'taking' || ($_->{st} eq 'processing' && !$_->{lease_out}))
		  && (!defined $lk || (defined $_->{lk} && $_->{lk} eq $lk))
	} q_items($q);
}

# Whether one more lease of this item fits the queue's and its key's caps.
sub fits
{
	my ($it) = @_;
	my $q = $it->{q};
	return 0 if defined $qconf{$q}{cap} && in_flight($q) >= $qconf{$q}{cap};
	my $lk = $it->{lk};
	return 0 if defined $lk && defined $qconf{$q}{limits}{$lk}
	  && in_flight($q, $lk) >= $qconf{$q}{limits}{$lk};
	return 1;
}

# Whether the item is one a claim that meets it buries instead.
sub buryable
{
	my ($it) = @_;
	return 1 if $it->{exp} && $it->{st} eq 'queued';
	return expired($it) && ($it->{exp} || $it->{cancel} || $it->{attempt} >= $it->{max});
}

# The product may bury such an item whenever a claim
# meets it (SPEC: a dequeue "may dead-letter it on the spot, and sweep
# does so at the latest"): follow it where it did.
sub reconcile
{
	my ($q, $rows) = @_;
	my %dead = map { (split /,/)[0] => 1 } grep { /^\d+,dead,/ } split /;\n/, $rows // '';
	for my $it (q_items($q))
	{
		next unless $dead{ $it->{id} } && buryable($it);
		if (expired($it)) { count_lost($it); }
		bury($it, 'expired', undef) if is_live($it);
		push @trail, "(the product buried $q/$it->{id} on the way)";
	}
}

# ------------------------------------------------------------ the calls

my $fail_msg;
sub mismatch
{
	my ($what, $got, $want) = @_;
	$fail_msg //= "seed $seed, step $step: $what\n  got:  $got\n  want: $want\n";
}

sub expect_eq
{
	my ($what, $got, $want) = @_;
	$got //= '<error>';
	mismatch($what, $got, $want) if $got ne $want;
}

sub lit { my ($s) = @_; return defined $s ? "'$s'" : 'NULL'; }

sub prog_text
{
	my ($p) = @_;
	return '{' . join(', ', map { "\"$_\": $p->{$_}" } sort keys %$p) . '}';
}

sub a_token
{
	my ($it) = @_;
	my $r = rand();
	return $it->{token} if defined $it->{token} && $r < 0.8;
	return pick(@stale) if @stale && $r < 0.95;
	return 987654321;
}

# A random item of a queue (any state) or an unknown id.
sub an_item
{
	my ($q, $filter) = @_;
	my @c = grep { $_->{st} ne 'purged' && (!$filter || $filter->($_)) } q_items($q);
	return { id => 99999999, st => 'unknown', q => $q } if !@c || rand() < 0.05;
	return pick(@c);
}

# Whether a token is the item's current lease.
sub current { my ($it, $tok) = @_; return defined $it->{token} && $tok == $it->{token}; }

sub do_enqueue
{
	my ($q) = @_;
	my $dk = rand() < 0.5 ? 'k' . int(rand(4)) : undef;
	my $prio = int(rand(3));
	my $sched = rand() < 0.2;
	my $max = rand() < 0.2 ? 1 : undef;
	my $past = rand() < 0.03;
	my $gk = rand() < 0.35 ? 'g' . int(rand(3)) : undef;
	my $lk = rand() < 0.5 ? pick('L1', 'L2', 'L3') : undef;
	# an item that expires by the next statement
	my $exp = !$past && !$sched && !defined $lk && rand() < 0.1;
	my $sql = "SELECT queue.enqueue('$q', '{}', priority => $prio, dedup_key => " . lit($dk)
	  . ", group_key => " . lit($gk) . ", limit_key => " . lit($lk)
	  . ($sched ? ", run_at => now() + interval '1 h'" : '')
	  . (defined $max ? ", max_attempts => $max" : '')
	  . ($past ? ", expires_at => now() - interval '1 s'" : '')
	  . ($exp ? ", expires_at => statement_timestamp() + interval '1 microsecond'" : '') . ')';
	my ($got, $e) = run($sess{prod}, $sql);
	push @trail, $sql;
	if ($past)
	{
		expect_eq('enqueue with expires_at past', $e, '22023');
		return;
	}
	if ($e) { mismatch($sql, "error $e", 'an id'); return; }
	my $h = key_holder($q, $dk);
	if ($h)
	{
		expect_eq($sql, $got, $h->{id});
		return;
	}
	if (exists $items{ key($q, $got) }) { mismatch($sql, $got, 'a new id'); return; }
	new_item($q, $got, dk => $dk, gk => $gk, lk => $lk, prio => $prio, sched => $sched, max => $max,
		exp => $exp);
}

sub do_enqueue_batch
{
	my ($q) = @_;
	my $n = 1 + int(rand(4));
	my @dk = map { rand() < 0.6 ? 'k' . int(rand(4)) : undef } 1 .. $n;
	my @gk = map { rand() < 0.35 ? 'g' . int(rand(3)) : undef } 1 .. $n;
	my @lk = map { rand() < 0.5 ? pick('L1', 'L2', 'L3') : undef } 1 .. $n;
	my $limits = (grep { defined } @lk)
	  ? 'ARRAY[' . join(', ', map { lit($_) } @lk) . ']::text[]'
	  : 'NULL';
	my $groups = (grep { defined } @gk)
	  ? 'ARRAY[' . join(', ', map { lit($_) } @gk) . ']::text[]'
	  : 'NULL';
	my $prio = int(rand(3));
	my $keys = (grep { defined } @dk)
	  ? 'ARRAY[' . join(', ', map { lit($_) } @dk) . ']::text[]'
	  : 'NULL';
	my $sql = "SELECT string_agg(i::text, ' ') FROM queue.enqueue_batch('$q', "
	  . "array_fill('{}'::jsonb, ARRAY[$n]), priority => $prio, dedup_keys => $keys, group_keys => $groups, limit_keys => $limits) i";
	my ($got, $e) = run($sess{prod}, $sql);
	push @trail, $sql;
	if ($e) { mismatch($sql, "error $e", 'ids'); return; }
	my @ids = split / /, $got;
	if (@ids != $n) { mismatch($sql, $got, "$n ids"); return; }
	my %seen;
	for my $i (0 .. $n - 1)
	{
		my $dk = $dk[$i];
		my $h = key_holder($q, $dk);
		if ($h)
		{
			expect_eq("$sql (element $i)", $ids[$i], $h->{id});
			next;
		}
		if (exists $items{ key($q, $ids[$i]) }) { mismatch($sql, $got, "a new id at $i"); return; }
		new_item($q, $ids[$i], dk => $dk, gk => $gk[$i], lk => $lk[$i], prio => $prio);
	}
}

sub do_dequeue
{
	my ($q, $w) = @_;
	my $n = 1 + int(rand(5));
	my $short = rand() < 0.25;
	my $sql = "SELECT string_agg(item_id || ':' || lease_token || ':' || attempt, ' ' ORDER BY ord) "
	  . "FROM queue.dequeue('$q', '$w', $n"
	  . ($short ? ", lease_timeout => '1 microsecond'" : '') . ") WITH ORDINALITY AS d(item_id, lease_token, payload, progress, attempt, max_attempts, priority, enqueued_at, lease_expires_at, dedup_key, correlation_id, ord)";
	my ($got, $e) = run($sess{$w}, $sql);
	push @trail, "[$w] $sql => $got";
	if ($e) { mismatch($sql, "error $e", 'rows'); return; }
	my @want;
	my @taken;
	# which of the items a claim may bury it did bury (read back)
	my @may = grep { buryable($_) } q_items($q);
	my %buried;
	if (@may)
	{
		my ($ids) = run($sess{read},
			"SELECT string_agg(item_id::text, ' ') FROM queue.dead_letters WHERE queue_name = '$q' AND item_id IN ("
			  . join(',', map { $_->{id} } @may) . ')');
		%buried = map { $_ => 1 } split / /, $ids;
	}
	if (!$paused{$q})
	{
		# the first claimable item, again after each one taken or buried
		# (a group whose head dies moves on within the same call)
		my %skip;
		while (@taken < $n)
		{
			last if defined $qconf{$q}{cap} && in_flight($q) >= $qconf{$q}{cap};
			my ($it) = grep { !$skip{ $_->{id} } } claimable($q);
			last unless $it;
			if (!fits($it) || (buryable($it) && !$buried{ $it->{id} }))
			{
				# a claim may leave what it would bury to sweep (where
				# keys are limited, a claim shares the batch out between
				# their lanes and the rest, looking only at claimable rows)
				$skip{ $it->{id} } = 1;
				next;
			}
			if (expired($it) && count_lost($it) eq 'dead')
			{
				next;
			}
			if ($it->{exp})
			{
				# never handed out: the claim that meets it buries it
				count_lost($it) if expired($it);
				bury($it, 'expired', undef) if is_live($it);
				next;
			}
			push @taken, $it;
			$it->{st} = 'taking';
		}
		$_->{st} = 'processing' for @taken;
		# the batch comes back in claim order (a member a buried head
		# let in may sort before items the claim took earlier)
		@taken = sort { $a->{prio} <=> $b->{prio} || $a->{ctime} <=> $b->{ctime} || $a->{id} <=> $b->{id} } @taken;
	}
	my @rows = map { [ split /:/ ] } split / /, $got;
	my $ok = @rows == @taken;
	for my $i (0 .. $#taken)
	{
		last unless $ok;
		my $it = $taken[$i];
		push @stale, $it->{token} if defined $it->{token};
		$it->{attempt}++;
		$ok = 0 if $rows[$i][0] != $it->{id} || $rows[$i][2] != $it->{attempt};
		$it->{token} = $rows[$i][1];
		$it->{st} = 'processing';
		$it->{lease_out} = $short ? 1 : 0;
		$it->{counted} = 0;
		$it->{sched} = 0;
		$it->{ctime} = $T + 0.5;
		$it->{worker} = $w;
	}
	mismatch($sql, $got, join(' ', map { "$_->{id}:?:$_->{attempt}" } @taken)) unless $ok;
}

# Items of a queue under some lease (current, ran out, or cancelled).
sub leased { my ($q) = @_; return grep { $_->{st} eq 'processing' } q_items($q); }

sub do_complete
{
	my ($q) = @_;
	my $it = an_item($q, rand() < 0.8 ? sub { $_[0]{st} eq 'processing' } : undef);
	my $tok = a_token($it);
	my $w = $it->{worker} // 'w1';
	my $sql = "SELECT queue.complete('$q', $it->{id}, $tok)";
	my ($got, $e) = run($sess{$w}, $sql);
	push @trail, "[$w] $sql => $got";
	my $want = current($it, $tok) ? 't' : 'f';
	expect_eq($sql, $e ? "error $e" : $got, $want);
	if ($want eq 't')
	{
		$it->{st} = 'processed';
		$it->{done_at} = $T;
		push @stale, $tok;
		$it->{token} = undef;
		$processed{$q}++;
	}
}

sub do_complete_batch
{
	my ($q) = @_;
	my @l = leased($q);
	my %used;
	my (@ids, @toks);
	my $want = 0;
	my @done;
	for (1 .. 1 + int(rand(3)))
	{
		my $it = @l && rand() < 0.85 ? pick(@l) : { id => 99999999, st => 'unknown' };
		next if $used{ $it->{id} }++;
		my $tok = a_token($it);
		push @ids, $it->{id};
		push @toks, $tok;
		if (current($it, $tok)) { $want++; push @done, $it; }
	}
	my $sql = "SELECT queue.complete_batch('$q', ARRAY[" . join(',', @ids) . "]::bigint[], ARRAY["
	  . join(',', @toks) . "]::bigint[])";
	my ($got, $e) = run($sess{ pick('w1', 'w2') }, $sql);
	push @trail, "$sql => $got";
	expect_eq($sql, $e ? "error $e" : $got, $want);
	for my $it (@done)
	{
		$it->{st} = 'processed';
		$it->{done_at} = $T;
		push @stale, $it->{token};
		$it->{token} = undef;
		$processed{$q}++;
	}
}

sub do_fail
{
	my ($q) = @_;
	my $it = an_item($q, rand() < 0.85 ? sub { $_[0]{st} eq 'processing' } : undef);
	my $tok = a_token($it);
	my $perm = rand() < 0.2;
	my $retry = pick('0 s', '1 h', undef);
	my $code = pick('E1', 'E2', undef);
	my $w = $it->{worker} // 'w2';
	my $sql = "SELECT coalesce(queue.fail('$q', $it->{id}, $tok, 'boom', " . lit($code)
	  . ($perm ? ', permanent => true' : '')
	  . (defined $retry ? ", retry_in => '$retry'" : '') . "), 'NULL')";
	my ($got, $e) = run($sess{$w}, $sql);
	push @trail, "[$w] $sql => $got";
	my $want = 'NULL';
	if (current($it, $tok))
	{
		if ($it->{cancel})
		{
			$want = 'dead';
			bury($it, 'cancelled', undef);
		}
		else
		{
			# a late report of a lost lease already counted is the same attempt
			$failed{$q}++ unless $it->{counted};
			if ($perm || $it->{attempt} >= $it->{max})
			{
				$want = 'dead';
				bury($it, $perm ? 'permanent' : 'max_attempts', $code);
			}
			else
			{
				$want = 'retrying';
				$it->{code} = $code;
				back_in_line($it, !defined $retry || $retry eq '1 h');
			}
		}
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_release
{
	my ($q) = @_;
	my $it = an_item($q, rand() < 0.85 ? sub { $_[0]{st} eq 'processing' } : undef);
	my $tok = a_token($it);
	my $later = rand() < 0.3;
	my $w = $it->{worker} // 'w1';
	my $sql = "SELECT queue.release('$q', $it->{id}, $tok"
	  . ($later ? ", run_at => now() + interval '1 h'" : '') . ')';
	my ($got, $e) = run($sess{$w}, $sql);
	push @trail, "[$w] $sql => $got";
	my $want = 'f';
	if (current($it, $tok))
	{
		if ($it->{cancel})
		{
			# the cancelled lease ends as the cancelled dead letter
			$want = 't';
			bury($it, 'cancelled', undef);
		}
		else
		{
			$want = 't';
			$it->{attempt}-- unless $it->{counted};
			back_in_line($it, $later);
		}
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_extend
{
	my ($q) = @_;
	my $it = an_item($q, rand() < 0.85 ? sub { $_[0]{st} eq 'processing' } : undef);
	my $tok = a_token($it);
	my $w = $it->{worker} // 'w1';
	my $sql = "SELECT queue.extend_lease('$q', $it->{id}, $tok) IS NOT NULL";
	my ($got, $e) = run($sess{$w}, $sql);
	push @trail, "[$w] $sql => $got";
	my $want = 'f';
	if (current($it, $tok) && !$it->{cancel} && (!$it->{lease_out} || fits($it)))
	{
		$want = 't';
		# a revived lease is a lease again: a lost lease counted before
		# stays counted, and its end is an outcome of its own
		$it->{lease_out} = 0;
		$it->{counted} = 0;
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_checkpoint
{
	my ($q) = @_;
	my $it = an_item($q, rand() < 0.85 ? sub { $_[0]{st} eq 'processing' } : undef);
	my $tok = a_token($it);
	my $k = pick('a', 'b', 'c');
	my $w = $it->{worker} // 'w2';
	my $sql = "SELECT queue.checkpoint('$q', $it->{id}, $tok, jsonb_build_object('$k', $step))";
	my ($got, $e) = run($sess{$w}, $sql);
	push @trail, "[$w] $sql => $got";
	my $want = 'f';
	if (current($it, $tok) && !$it->{cancel})
	{
		$want = 't';
		$it->{progress}{$k} = $step;
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_hold
{
	my ($q) = @_;
	my $it = an_item($q);
	my $sql = "SELECT queue.hold('$q', $it->{id}, 'why')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => $got";
	my $want = 'f';
	if (expired($it))
	{
		if (count_lost($it) ne 'dead')
		{
			$want = 't';
		}
	}
	elsif ($it->{st} eq 'queued' || $it->{st} eq 'scheduled')
	{
		$want = 't';
	}
	if ($want eq 't')
	{
		push @stale, $it->{token} if defined $it->{token};
		$it->{token} = undef;
		$it->{st} = 'on_hold';
		$it->{lease_out} = 0;
		$it->{counted} = 0;
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_unhold
{
	my ($q) = @_;
	my $it = an_item($q);
	my $sql = "SELECT queue.unhold('$q', $it->{id})";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => $got";
	my $want = 'f';
	if ($it->{st} eq 'on_hold')
	{
		$want = 't';
		$it->{st} = $it->{sched} ? 'scheduled' : 'queued';
		$it->{ctime} = $T;
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_cancel
{
	my ($q) = @_;
	my $it = an_item($q);
	my $sql = "SELECT queue.cancel('$q', $it->{id}, 'stop')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => $got";
	my $want = 'f';
	if (expired($it))
	{
		if (!$it->{cancel} && count_lost($it) ne 'dead')
		{
			$want = 't';
			bury($it, 'cancelled', undef);
		}
	}
	elsif ($it->{st} =~ /^(queued|scheduled|on_hold)$/)
	{
		$want = 't';
		bury($it, 'cancelled', undef);
	}
	elsif ($it->{st} eq 'processing' && !$it->{cancel})
	{
		$want = 't';
		$it->{cancel} = 1;
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_replay
{
	my ($q) = @_;
	my $it = an_item($q, sub { $_[0]{st} eq 'dead' });
	return if $it->{st} eq 'unknown';
	my $sql = "SELECT queue.replay('$q', $it->{id})";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
	if (defined $it->{replayed_as})
	{
		expect_eq($sql, $e, '55000');
		return;
	}
	replay_one($sql, $it, $e ? "error $e" : $got);
}

sub replay_one
{
	my ($what, $it, $got) = @_;
	my $q = $it->{q};
	my $h = key_holder($q, $it->{dk});
	$h = undef if $h && $h->{st} eq 'processed';
	$it->{review} = 'resolved';
	if ($h)
	{
		expect_eq($what, $got, $h->{id}) if defined $got;
		$it->{replayed_as} = $h->{id};
		return;
	}
	if (defined $got && ($got !~ /^\d+$/ || exists $items{ key($q, $got) }))
	{
		mismatch($what, $got, 'a new id');
		return;
	}
	$it->{replayed_as} = $got;
	new_item($q, $got, dk => $it->{dk}, gk => $it->{gk}, lk => $it->{lk}, prio => $it->{prio}, max => $it->{max},
		progress => { %{ $it->{progress} } });
}

sub do_replay_all
{
	my ($q) = @_;
	my $code = rand() < 0.3 ? pick('E1', 'E2') : undef;
	my $sql = "SELECT queue.replay_all('$q', error_code => " . lit($code) . ')';
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
	my @todo = sort { $a->{dead_at} <=> $b->{dead_at} || $a->{id} <=> $b->{id} }
	  grep {
		$_->{st} eq 'dead' && ($_->{review} eq 'new' || $_->{review} eq 'in_review')
		  && (!defined $code || (defined $_->{code} && $_->{code} eq $code))
	  } q_items($q);
	expect_eq($sql, $e ? "error $e" : $got, scalar @todo);
	return if $e;
	# which new ids: read them back from the dead letters
	my ($rows) = run($sess{read},
		"SELECT string_agg(item_id || ':' || replayed_as, ' ') FROM queue.dead_letters WHERE queue_name = '$q' AND item_id IN ("
		  . join(',', 0, map { $_->{id} } @todo) . ')');
	my %as = map { split /:/ } split / /, $rows;
	replay_one("$sql (item $_->{id})", $_, $as{ $_->{id} } // 'none') for @todo;
}

sub do_review
{
	my ($q) = @_;
	my $it = an_item($q, sub { $_[0]{st} eq 'dead' });
	my $status = pick('new', 'in_review', 'resolved', 'rejected');
	my $sql = "SELECT queue.review('$q', $it->{id}, '$status')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
	if ($it->{st} ne 'dead')
	{
		expect_eq($sql, $e ? "error $e" : $got, 'f');
		return;
	}
	if (defined $it->{replayed_as} && $status ne 'resolved')
	{
		expect_eq($sql, $e, '55000');
		return;
	}
	expect_eq($sql, $e ? "error $e" : $got, 't');
	$it->{review} = $status;
}

sub do_purge
{
	my ($q) = @_;
	my $sql = "SELECT queue.purge('$q')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
	my $n = 0;
	for my $it (sort { $a->{id} <=> $b->{id} } q_items($q))
	{
		if (expired($it))
		{
			next if count_lost($it) eq 'dead';
		}
		elsif ($it->{st} !~ /^(queued|scheduled|on_hold)$/)
		{
			next;
		}
		push @stale, $it->{token} if defined $it->{token};
		$it->{st} = 'purged';
		$n++;
	}
	expect_eq($sql, $e ? "error $e" : $got, $n);
}

sub do_pause
{
	my ($q) = @_;
	my $on = rand() < 0.5;
	my $sql = $on ? "SELECT queue.pause('$q', 'model')" : "SELECT queue.resume('$q')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, $sql;
	mismatch($sql, "error $e", 'ok') if $e;
	$paused{$q} = $on ? 1 : 0;
}

sub do_sweep
{
	my $sql = "SELECT string_agg(concat_ws(':', queue_name, recovered, dead_lettered, expired, aged), ' ' ORDER BY queue_name) FROM queue.sweep()";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
	my @want;
	for my $q (sort @queues)
	{
		my ($rec, $dead, $exp) = (0, 0, 0);
		for my $it (sort { $a->{id} <=> $b->{id} } q_items($q))
		{
			if ($it->{exp} && $it->{st} =~ /^(queued|scheduled|on_hold)$/)
			{
				bury($it, 'expired', undef);
				$exp++;
				next;
			}
			next unless expired($it) && !($it->{counted} && !$it->{cancel});
			if (count_lost($it) eq 'dead') { $dead++; } else { $rec++; }
		}
		push @want, "$q:$rec:$dead:$exp:0";
	}
	expect_eq($sql, $e ? "error $e" : $got, join(' ', @want));
}

# ------------------------------------------------------------ the check

sub model_rows
{
	my ($q) = @_;
	my @r;
	for my $it (sort { $a->{id} <=> $b->{id} } q_items($q))
	{
		next if $it->{st} eq 'purged';
		my $dk = $it->{dk} // '-';
		my $p = prog_text($it->{progress});
		if (is_live($it))
		{
			my $st = expired($it) ? 'queued' : $it->{st};
			push @r, join(',', $it->{id}, $st, $it->{attempt}, $it->{prio}, $dk, $p,
				$it->{cancel} ? 'c' : '-');
		}
		elsif ($it->{st} eq 'dead')
		{
			push @r, join(',', $it->{id}, 'dead', $it->{attempt}, $it->{reason}, $it->{review},
				$it->{replayed_as} // '-', $dk, $p);
		}
		else
		{
			push @r, join(',', $it->{id}, 'processed', $it->{attempt}, $dk);
		}
	}
	return join(";\n", @r);
}

sub model_stats
{
	my ($q) = @_;
	my %c = (queued => 0, scheduled => 0, processing => 0, on_hold => 0, dead => 0);
	for my $it (q_items($q))
	{
		if (expired($it)) { $c{queued}++ unless $it->{exp}; }
		elsif ($it->{exp} && $it->{st} eq 'queued') { }
		elsif (is_live($it)) { $c{ $it->{st} }++; }
		elsif ($it->{st} eq 'dead' && $it->{review} =~ /^(new|in_review)$/) { $c{dead}++; }
	}
	return join(',', @c{qw(queued scheduled processing on_hold dead)}, $processed{$q},
		$failed{$q});
}

sub check
{
	my ($q, $with_item) = @_;
	my ($rows) = run($sess{read}, qq{
	SELECT string_agg(x, ';\n' ORDER BY id) FROM (
	  SELECT item_id AS id, concat_ws(',', item_id, state, attempt, priority, coalesce(dedup_key, '-'),
	         coalesce(progress, '{}'), CASE WHEN cancel_requested_at IS NULL THEN '-' ELSE 'c' END) AS x
	    FROM queue.items WHERE queue_name = '$q'
	  UNION ALL
	  SELECT item_id, concat_ws(',', item_id, 'dead', attempts, reason, review_status,
	         coalesce(replayed_as::text, '-'), coalesce(dedup_key, '-'), coalesce(progress, '{}'))
	    FROM queue.dead_letters WHERE queue_name = '$q'
	  UNION ALL
	  SELECT item_id, concat_ws(',', item_id, 'processed', attempts, coalesce(dedup_key, '-'))
	    FROM queue.history WHERE queue_name = '$q') s});
	reconcile($q, $rows);
	expect_eq("rows of queue $q", $rows, model_rows($q));
	my ($st) = run($sess{read},
		"SELECT concat_ws(',', queued, scheduled, processing, on_hold, dead, processed_1h, failed_1h) FROM queue.stats('$q')"
	);
	expect_eq("stats('$q')", $st, model_stats($q));
	return unless $with_item;
	my @its = sort { $a->{id} <=> $b->{id} } q_items($q);
	my $ids = join(',', 0, map { $_->{id} } @its);
	my ($got) = run($sess{read},
		"SELECT string_agg(i || ':' || coalesce((SELECT concat_ws(':', state, attempt, reason) FROM queue.item('$q', i)), 'none'), ' ' ORDER BY i) FROM unnest(ARRAY[$ids]::bigint[]) i"
	);
	my $want = join(' ', '0:none', map {
		my $s = $_->{st} eq 'purged' ? 'none'
		  : join(':', expired($_) ? 'queued' : $_->{st}, $_->{attempt},
			$_->{st} eq 'dead' ? $_->{reason} : ());
		"$_->{id}:$s"
	} @its);
	expect_eq("item() of queue $q", $got, $want);
}

# ------------------------------------------------------------ the run

my @ops = (
	[ 12, \&do_enqueue ], [ 4, \&do_enqueue_batch ],
	[ 9, sub { do_dequeue($_[0], 'w1') } ], [ 9, sub { do_dequeue($_[0], 'w2') } ],
	[ 8, \&do_complete ], [ 2, \&do_complete_batch ], [ 9, \&do_fail ],
	[ 3, \&do_release ], [ 3, \&do_extend ], [ 3, \&do_checkpoint ],
	[ 3, \&do_hold ], [ 3, \&do_unhold ], [ 3, \&do_cancel ],
	[ 3, \&do_replay ], [ 1, \&do_replay_all ], [ 3, \&do_review ],
	[ 1, \&do_purge ], [ 2, \&do_pause ], [ 3, sub { do_sweep() } ]);
my $total = 0;
$total += $_->[0] for @ops;

my $start = time();
for ($step = 1; $step <= $nsteps; $step++)
{
	$T++;
	my $q = pick(@queues);
	my $r = rand($total);
	my $op;
	for (@ops) { $op = $_->[1]; last if ($r -= $_->[0]) < 0; }
	$op->($q);
	check($_, $step % 10 == 0) for @queues;
	last if defined $fail_msg;
	if (time() - $start > $budget)
	{
		note("time budget reached after $step steps");
		last;
	}
}

my %by;
$by{ $_->{st} . ($_->{st} eq 'dead' ? "/$_->{reason}" : '') }++ for values %items;
note("items by state: " . join(', ', map { "$_ $by{$_}" } sort keys %by));
note("failed outcomes: $failed{mq} + $failed{mw}, completions $processed{mq} + $processed{mw}");
if (defined $fail_msg)
{
	my $from = @trail > 25 ? @trail - 25 : 0;
	diag("the last steps:\n" . join("\n", @trail[ $from .. $#trail ]));
	fail("the product follows the model of an item's life");
	diag($fail_msg);
	diag("the last events:\n" . $node->safe_psql('postgres',
		"SELECT event_id, queue_name, item_id, kind, worker, attempt, details, at FROM queue.events ORDER BY event_id DESC LIMIT 14"));
	diag("live items:\n" . $node->safe_psql('postgres',
		"SELECT queue_name, item_id, state, priority, attempt, max_attempts, group_key, limit_key, waiting, lease_expires_at < now() AS out, run_at, enqueued_at FROM queue.items ORDER BY 1, 2"));
	diag("model:\n" . join("\n", map { my $it = $_; join(' ', map { "$_=" . ($it->{$_} // '') } qw(q id st attempt prio gk lk ctime lease_out counted cancel)) } sort { $a->{q} cmp $b->{q} || $a->{id} <=> $b->{id} } grep { is_live($_) } values %items));
	my @ids = $trail[-1] =~ /\('m[qw]', (\d+)/g;
	diag("the events of items @ids:\n" . $node->safe_psql('postgres',
		"SELECT event_id, queue_name, item_id, kind, worker, attempt, details, at FROM queue.events WHERE item_id IN (0, " . join(',', 0, @ids) . ") ORDER BY event_id")) if @ids;
}
else
{
	pass("the product follows the model of an item's life for $step steps (seed $seed)");
}

$_->quit for values %sess;
$node->stop;
done_testing();
