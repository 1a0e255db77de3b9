# Copyright (c) the queue authors
#
# Model-based test of flow control and routing (SPEC "Flow control and
# routing" with section 1): a reference model in Perl of what dequeue may
# hand out when ordered groups (both group_on_dead settings), per-key caps
# (set, changed and dropped while items are in flight), the queue's cap
# changed while items are in flight, a per-key and a queue-wide rate,
# capability routing (requires against the labels of registered, relabelled
# and unknown workers), the queue's max_in_flight and the workers'
# capacity combine, with priorities, run_at ahead, hold / unhold, cancel
# of queued and processing items, transient and permanent failures,
# release, complete, complete_batch, replay of dead heads, review of
# blocking dead letters and batch dequeues of 1 to 6 items.
#
# A seeded random sequence of calls is made by login roles that are
# members of the group roles, each call committed on its own, from several
# connections.  After every dequeue the items handed out must be exactly
# the model's first ones in claim order (effective priority, the time the
# item became claimable, id), at most one per group, within every cap;
# after every step the call's return value, the queue's rows in items,
# dead_letters and history and its rows in limits must be exactly what the
# model says.
#
# Time is kept out of the way: items are either claimable now or scheduled
# an hour ahead, a lease is either five minutes long (the run takes less)
# or one microsecond (it has run out by the next statement: the item is
# claimable again, holds no place under any cap, and extend_lease revives
# it only where the caps leave room), and the rates are per hour, so their
# windows never slide during the run.  A short lease is taken only where
# no item of the batch is on its last attempt: the SPEC lets a claim or
# sweep bury a spent lost lease, which the item model covers.
#
# QUEUE_FLOW_MODEL_SEED, QUEUE_FLOW_MODEL_STEPS and
# QUEUE_FLOW_MODEL_SECONDS choose another sequence; the seed is printed
# with any disagreement.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::Bin/../perl";
use QueueTest qw(model_session model_run);

my $seed = $ENV{QUEUE_FLOW_MODEL_SEED} // 20261204;
my $nsteps = $ENV{QUEUE_FLOW_MODEL_STEPS} // 900;
my $budget = $ENV{QUEUE_FLOW_MODEL_SECONDS} // 40;
note("flow model seed $seed, $nsteps steps");

my $node = PostgreSQL::Test::Cluster->new('flow_model');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
log_min_messages = warning
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION queue;
	CREATE ROLE f_admin LOGIN IN ROLE queue_admin;
	CREATE ROLE f_prod LOGIN IN ROLE queue_producer;
	CREATE ROLE f_work1 LOGIN IN ROLE queue_worker;
	CREATE ROLE f_work2 LOGIN IN ROLE queue_worker;
	CREATE ROLE f_read LOGIN IN ROLE queue_reader;
});

# ------------------------------------------------------------- sessions

# A psql session of one role (QueueTest::model_session); run() sends one
# statement (autocommit) and returns (output, sqlstate or undef).
sub session { return model_session($node, $_[0],
	# A busy session may start its claims where its last one found its
	# row (README, Consuming, "Order"); the model claims from the head.
	"SET queue.claim_hint_threshold = -1"); }
sub run { return model_run(@_); }

my %sess = (
	admin => session('f_admin'),
	prod  => session('f_prod'),
	c1    => session('f_work1'),
	c2    => session('f_work2'),
	read  => session('f_read'));

# The workers: w1 and w2 registered with labels (w1 with a capacity), w4
# registered without labels and given other labels and another capacity
# now and then by the admin, w3 never registered (an unknown worker).  Each works from one connection.
my %wconn = (w1 => 'c1', w3 => 'c1', w2 => 'c2', w4 => 'c2');
my %labels = (w1 => ['gpu'], w2 => [ 'gpu', 'sap' ], w3 => [], w4 => []);
my %capacity = (w1 => 3, w4 => 2);

my ($out, $err) = run($sess{admin}, q{
	SELECT queue.create_queue('fa', max_attempts => 3, backoff_base => '1 h', max_in_flight => 5, audit => 'all');
	SELECT queue.create_queue('fb', max_attempts => 2, backoff_base => '1 h', group_on_dead => 'block', audit => 'all');
	SELECT queue.set_limit('fa', 'K1', max_in_flight => 1);
	SELECT queue.set_limit('fa', 'K2', max_in_flight => 2);
	SELECT queue.set_limit('fa', 'K4', rate => 7, per => '1 hour');
	SELECT queue.set_limit('fb', 'K1', max_in_flight => 2);
	SELECT queue.set_limit('fb', NULL, rate => 40, per => '1 hour');
	SELECT queue.register_worker('w4', capacity => 2)});
die "setup: $err" if $err;
($out, $err) = run($sess{c1}, q{SELECT queue.register_worker('w1', capacity => 3, labels => ARRAY['gpu'])});
die "register w1: $err" if $err;
($out, $err) = run($sess{c2}, q{SELECT queue.register_worker('w2', labels => ARRAY['gpu', 'sap'])});
die "register w2: $err" if $err;

# ---------------------------------------------------------------- model

# Seeded only now: starting the node draws random numbers (its port).
srand($seed);

my @queues = ('fa', 'fb');
my %qconf = (
	fa => { max_attempts => 3, block => 0, cap => 5 },
	fb => { max_attempts => 2, block => 1 });
# per-key limits: queue -> key -> { cap, rate }; key '*' is the queue-wide rate
my %limits = (
	fa => { K1 => { cap => 1 }, K2 => { cap => 2 }, K4 => { rate => 7 } },
	fb => { K1 => { cap => 2 }, '*' => { rate => 40 } });
my %claims;           # queue -> key -> claims of a rated key (the window never slides)
my %items;            # "q/id" -> item hash
my %blocker;          # "q/group" -> the dead head blocking the group (block mode)
my %override;         # "q/group" -> a replay that took its dead head's place
my $T = 0;            # model clock: one tick per step
my @stale;            # tokens that were current once
my @trail;            # the steps so far, for the report
my $step;
my %seen;             # how often the run met each case, for the report

sub pick { return $_[ int(rand(scalar @_)) ]; }
sub key { return "$_[0]/$_[1]"; }
sub q_items { my ($q) = @_; return grep { $_->{q} eq $q } values %items; }
sub is_live { my ($it) = @_; return $it->{st} =~ /^(queued|scheduled|on_hold|processing)$/; }

sub new_item
{
	my ($q, $id, %a) = @_;
	my $it = {
		q => $q, id => $id, st => $a{sched} ? 'scheduled' : 'queued',
		sched => $a{sched} ? 1 : 0, attempt => 0,
		max => $qconf{$q}{max_attempts}, prio => $a{prio} // 2,
		gk => $a{gk}, lk => $a{lk}, req => $a{req} // [], ctime => $T,
		token => undef, cancel => 0, worker => undef, lease_out => 0,
	};
	$items{ key($q, $id) } = $it;
	return $it;
}

# The item a group hands out next, or undef when the group is blocked by
# a dead head (block mode) or has no live item.
sub head
{
	my ($q, $gk) = @_;
	return undef if defined $blocker{ key($q, $gk) };
	my $o = $override{ key($q, $gk) };
	return $o if $o && is_live($o);
	my @m = sort { $a->{id} <=> $b->{id} } grep { defined $_->{gk} && $_->{gk} eq $gk && is_live($_) } q_items($q);
	return $m[0];
}

sub is_head
{
	my ($it) = @_;
	return 1 unless defined $it->{gk};
	my $h = head($it->{q}, $it->{gk});
	return $h && $h->{id} == $it->{id};
}

# An item leaves the live states (call before its state changes): a head
# that dies blocks its group in block mode; a replay that was the head
# gives its place back to the line.
sub leave
{
	my ($it, $dies) = @_;
	return unless defined $it->{gk};
	my $k = key($it->{q}, $it->{gk});
	my $was_head = is_head($it);
	delete $override{$k} if $override{$k} && $override{$k}{id} == $it->{id};
	if ($was_head && $dies && $qconf{ $it->{q} }{block})
	{
		$blocker{$k} = $it;
		$seen{blocked}++;
	}
}

sub bury
{
	my ($it, $reason, $code) = @_;
	leave($it, 1);
	$it->{st} = 'dead';
	$it->{reason} = $reason;
	$it->{code} = $code;
	$it->{review} = 'new';
	$it->{replayed_as} = undef;
	push @stale, $it->{token} if defined $it->{token};
	$it->{token} = undef;
}

sub finish
{
	my ($it) = @_;
	leave($it, 0);
	$it->{st} = 'processed';
	push @stale, $it->{token};
	$it->{token} = undef;
}

sub back_in_line
{
	my ($it, $later) = @_;
	push @stale, $it->{token};
	$it->{token} = undef;
	$it->{st} = $later ? 'scheduled' : 'queued';
	$it->{sched} = $later ? 1 : 0;
	$it->{ctime} = $T;
	$it->{lease_out} = 0;
}

# Claim order: effective priority, the time it became claimable, id.
sub by_order { return $a->{prio} <=> $b->{prio} || $a->{ctime} <=> $b->{ctime} || $a->{id} <=> $b->{id}; }

sub can_take
{
	my ($w, $it) = @_;
	my %l = map { $_ => 1 } @{ $labels{$w} };
	return !grep { !$l{$_} } @{ $it->{req} };
}

sub claimable
{
	my ($q, $w) = @_;
	my @c = sort by_order grep { ($_->{st} eq 'queued' || lost($_)) && is_head($_) } q_items($q);
	my @r = grep { can_take($w, $_) } @c;
	$seen{unroutable} += @c - @r;
	return @r;
}

# A lease that ran out and nobody re-claimed: claimable again, in line from
# the lease's end, holding no place under any cap while it stays so.
sub lost { my ($it) = @_; return $it->{st} eq 'processing' && $it->{lease_out}; }
sub holds { my ($it) = @_; return $it->{st} eq 'processing' && !$it->{lease_out}; }

sub in_flight
{
	my ($q, $lk) = @_;
	return scalar grep {
		holds($_) && (!defined $lk || (defined $_->{lk} && $_->{lk} eq $lk))
	} q_items($q);
}

sub worker_in_flight
{
	my ($w) = @_;
	return scalar grep { holds($_) && $_->{worker} eq $w } values %items;
}

# Whether one more lease of this item fits the queue's cap, its key's cap
# and the worker's capacity (a revival by extend_lease asks them all).
sub fits
{
	my ($it, $w) = @_;
	my $q = $it->{q};
	return 0 if defined $qconf{$q}{cap} && in_flight($q) >= $qconf{$q}{cap};
	return 0 if defined $capacity{$w} && worker_in_flight($w) >= $capacity{$w};
	my $lk = $it->{lk};
	return 0 if defined $lk && $limits{$q}{$lk} && defined $limits{$q}{$lk}{cap}
	  && in_flight($q, $lk) >= $limits{$q}{$lk}{cap};
	return 1;
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
sub arr { my ($l) = @_; return @$l ? 'ARRAY[' . join(', ', map { "'$_'" } @$l) . ']' : 'NULL'; }

sub a_token
{
	my ($it) = @_;
	my $r = rand();
	return $it->{token} if defined $it->{token} && $r < 0.85;
	return pick(@stale) if @stale && $r < 0.97;
	return 987654321;
}

sub an_item
{
	my ($q, $filter) = @_;
	my @c = grep { !$filter || $filter->($_) } q_items($q);
	return { id => 99999999, st => 'unknown', q => $q } if !@c || rand() < 0.04;
	return pick(@c);
}

sub current { my ($it, $tok) = @_; return defined $it->{token} && $tok == $it->{token}; }

sub a_group { return rand() < 0.55 ? 'g' . int(rand(4)) : undef; }
sub a_limit { return rand() < 0.55 ? pick('K1', 'K2', 'K3', 'K4') : undef; }
sub a_requires { my $r = rand(); return $r < 0.6 ? [] : $r < 0.8 ? ['gpu'] : $r < 0.9 ? ['sap'] : [ 'gpu', 'sap' ]; }

sub do_enqueue
{
	my ($q) = @_;
	my $prio = int(rand(3));
	my $sched = rand() < 0.08;
	my ($gk, $lk, $req) = (a_group(), a_limit(), a_requires());
	my $sql = "SELECT queue.enqueue('$q', '{}', priority => $prio, group_key => " . lit($gk)
	  . ", limit_key => " . lit($lk) . ", requires => " . arr($req) . '::text[]'
	  . ($sched ? ", run_at => now() + interval '1 h'" : '') . ')';
	my ($got, $e) = run($sess{prod}, $sql);
	push @trail, "$sql => " . ($e // $got);
	if ($e || $got !~ /^\d+$/ || exists $items{ key($q, $got) }) { mismatch($sql, $e ? "error $e" : $got, 'a new id'); return; }
	new_item($q, $got, gk => $gk, lk => $lk, prio => $prio, sched => $sched, req => $req);
}

sub do_enqueue_batch
{
	my ($q) = @_;
	my $n = 1 + int(rand(4));
	my @gk = map { a_group() } 1 .. $n;
	my @lk = map { a_limit() } 1 .. $n;
	my $req = a_requires();
	my $prio = int(rand(3));
	my $sql = "SELECT string_agg(i::text, ' ') FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[$n]), priority => $prio, "
	  . "group_keys => ARRAY[" . join(', ', map { lit($_) } @gk) . "]::text[], limit_keys => ARRAY["
	  . join(', ', map { lit($_) } @lk) . "]::text[], requires => " . arr($req) . "::text[]) i";
	my ($got, $e) = run($sess{prod}, $sql);
	push @trail, "$sql => " . ($e // $got);
	if ($e) { mismatch($sql, "error $e", 'ids'); return; }
	my @ids = split / /, $got;
	if (@ids != $n) { mismatch($sql, $got, "$n ids"); return; }
	for my $i (0 .. $n - 1)
	{
		if (exists $items{ key($q, $ids[$i]) }) { mismatch($sql, $got, "a new id at $i"); return; }
		new_item($q, $ids[$i], gk => $gk[$i], lk => $lk[$i], prio => $prio, req => $req);
	}
}

# What a dequeue of $n items by $w hands out: the first claimable items in
# claim order, each within the queue's cap, the worker's capacity and its
# key's cap and rate (a full key is skipped, the rest still served).
sub model_dequeue
{
	my ($q, $w, $n) = @_;
	my @taken;
	my %key_taken;
	my $qin = in_flight($q);
	my $win = worker_in_flight($w);
	for my $it (claimable($q, $w))
	{
		last if @taken >= $n;
		if (defined $qconf{$q}{cap} && $qin + @taken >= $qconf{$q}{cap}) { $seen{queue_cap}++; last; }
		if (defined $capacity{$w} && $win + @taken >= $capacity{$w}) { $seen{capacity}++; last; }
		if ($limits{$q}{'*'} && ($claims{$q}{'*'} // 0) + @taken >= $limits{$q}{'*'}{rate}) { $seen{queue_rate}++; last; }
		my $lk = $it->{lk};
		if (defined $lk && $limits{$q}{$lk})
		{
			my $l = $limits{$q}{$lk};
			my $k = $key_taken{$lk} // 0;
			if (defined $l->{cap} && in_flight($q, $lk) + $k >= $l->{cap}) { $seen{key_full}++; next; }
			if (defined $l->{rate} && ($claims{$q}{$lk} // 0) + $k >= $l->{rate}) { $seen{throttled}++; next; }
			$key_taken{$lk}++;
		}
		push @taken, $it;
	}
	return @taken;
}

sub do_dequeue
{
	my ($q) = @_;
	my $w = pick('w1', 'w2', 'w3', 'w4');
	my $n = 1 + int(rand(6));
	my @taken = model_dequeue($q, $w, $n);
	# a lease that runs out at once, where none of the items is on its
	# last attempt (a spent lost lease a claim "may" bury is left out)
	my $short = rand() < 0.25 && !grep { $_->{attempt} + 1 >= $_->{max} } @taken;
	my $sql = "SELECT string_agg(item_id || ':' || lease_token || ':' || attempt, ' ' ORDER BY ord) "
	  . "FROM queue.dequeue('$q', '$w', $n" . ($short ? ", lease_timeout => '1 microsecond'" : '') . ") WITH ORDINALITY AS d(item_id, lease_token, payload, progress, attempt, max_attempts, priority, enqueued_at, lease_expires_at, dedup_key, correlation_id, ord)";
	my ($got, $e) = run($sess{ $wconn{$w} }, $sql);
	push @trail, "[$w] $sql => " . ($e // $got);
	if ($e) { mismatch($sql, "error $e", 'rows'); return; }
	$seen{handed_out} += @taken;
	$seen{lost_reclaimed} += grep { lost($_) } @taken;
	$seen{batches} += @taken > 1;
	my @rows = map { [ split /:/ ] } split / /, $got;
	my $ok = @rows == @taken;
	for my $i (0 .. $#taken)
	{
		$ok = 0 unless $ok && $rows[$i][0] == $taken[$i]{id} && $rows[$i][2] == $taken[$i]{attempt} + 1;
	}
	if (!$ok)
	{
		mismatch("[$w] $sql", $got, join(' ', map { "$_->{id}:?:" . ($_->{attempt} + 1) } @taken));
		return;
	}
	for my $i (0 .. $#taken)
	{
		my $it = $taken[$i];
		$it->{attempt}++;
		push @stale, $it->{token} if defined $it->{token};
		$it->{token} = $rows[$i][1];
		$it->{st} = 'processing';
		$it->{lease_out} = $short ? 1 : 0;
		$it->{ctime} = $T + 0.5;
		$it->{sched} = 0;
		$it->{worker} = $w;
		$claims{$q}{ $it->{lk} }++ if defined $it->{lk} && $limits{$q}{ $it->{lk} } && defined $limits{$q}{ $it->{lk} }{rate};
		$claims{$q}{'*'}++ if $limits{$q}{'*'};
	}
}

sub processing_item
{
	my ($q, $p) = @_;
	return an_item($q, rand() < $p ? sub { $_[0]{st} eq 'processing' } : undef);
}

sub wsess { my ($it) = @_; return $sess{ $wconn{ $it->{worker} // 'w1' } }; }

sub do_complete
{
	my ($q) = @_;
	my $it = processing_item($q, 0.9);
	my $tok = a_token($it);
	my $sql = "SELECT queue.complete('$q', $it->{id}, $tok)";
	my ($got, $e) = run(wsess($it), $sql);
	push @trail, "$sql => " . ($e // $got);
	my $want = current($it, $tok) ? 't' : 'f';
	expect_eq($sql, $e ? "error $e" : $got, $want);
	finish($it) if $want eq 't';
}

sub do_complete_batch
{
	my ($q) = @_;
	my @l = grep { $_->{st} eq 'processing' } q_items($q);
	my %used;
	my (@ids, @toks, @done);
	for (1 .. 1 + int(rand(3)))
	{
		my $it = @l && rand() < 0.9 ? pick(@l) : { id => 99999999, st => 'unknown' };
		next if $used{ $it->{id} }++;
		my $tok = a_token($it);
		push @ids, $it->{id};
		push @toks, $tok;
		push @done, $it if current($it, $tok);
	}
	my $sql = "SELECT queue.complete_batch('$q', ARRAY[" . join(',', @ids) . "]::bigint[], ARRAY["
	  . join(',', @toks) . "]::bigint[])";
	my ($got, $e) = run($sess{ pick('c1', 'c2') }, $sql);
	push @trail, "$sql => " . ($e // $got);
	expect_eq($sql, $e ? "error $e" : $got, scalar @done);
	finish($_) for @done;
}

sub do_fail
{
	my ($q) = @_;
	my $it = processing_item($q, 0.9);
	my $tok = a_token($it);
	my $perm = rand() < 0.25;
	my $later = rand() < 0.3;
	my $sql = "SELECT coalesce(queue.fail('$q', $it->{id}, $tok, 'boom', 'E1'"
	  . ($perm ? ', permanent => true' : '')
	  . ", retry_in => '" . ($later ? '1 h' : '0 s') . "'), 'NULL')";
	my ($got, $e) = run(wsess($it), $sql);
	push @trail, "$sql => " . ($e // $got);
	my $want = 'NULL';
	if (current($it, $tok))
	{
		if ($it->{cancel})
		{
			$want = 'dead';
			bury($it, 'cancelled', undef);
		}
		elsif ($perm || $it->{attempt} >= $it->{max})
		{
			$want = 'dead';
			bury($it, $perm ? 'permanent' : 'max_attempts', 'E1');
		}
		else
		{
			$want = 'retrying';
			back_in_line($it, $later);
		}
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_release
{
	my ($q) = @_;
	my $it = processing_item($q, 0.9);
	# a late release of a lost lease gives its attempt back or not
	# depending on whether a claim met it first: left to the item model
	return if $it->{lease_out};
	my $tok = a_token($it);
	my $later = rand() < 0.25;
	my $sql = "SELECT queue.release('$q', $it->{id}, $tok"
	  . ($later ? ", run_at => now() + interval '1 h'" : '') . ')';
	my ($got, $e) = run(wsess($it), $sql);
	push @trail, "$sql => " . ($e // $got);
	my $want = 'f';
	if (current($it, $tok))
	{
		$want = 't';
		if ($it->{cancel})
		{
			bury($it, 'cancelled', undef);
		}
		else
		{
			$it->{attempt}--;
			back_in_line($it, $later);
		}
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_hold
{
	my ($q) = @_;
	my $it = an_item($q);
	my $sql = "SELECT queue.hold('$q', $it->{id}, 'why')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
	my $want = $it->{st} =~ /^(queued|scheduled)$/ || lost($it) ? 't' : 'f';
	if ($want eq 't')
	{
		push @stale, $it->{token} if defined $it->{token};
		$it->{token} = undef;
		$it->{st} = 'on_hold';
		$it->{lease_out} = 0;
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

sub do_unhold
{
	my ($q) = @_;
	my $it = an_item($q, rand() < 0.8 ? sub { $_[0]{st} eq 'on_hold' } : undef);
	my $sql = "SELECT queue.unhold('$q', $it->{id})";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
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
	push @trail, "$sql => " . ($e // $got);
	my $want = 'f';
	if ($it->{st} =~ /^(queued|scheduled|on_hold)$/ || lost($it))
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
	my $it = an_item($q, sub { $_[0]{st} eq 'dead' && (rand() < 0.2 || !defined $_[0]{replayed_as}) });
	return if $it->{st} eq 'unknown';
	my $sql = "SELECT queue.replay('$q', $it->{id})";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // $got);
	if (defined $it->{replayed_as})
	{
		expect_eq($sql, $e, '55000');
		return;
	}
	if ($e || $got !~ /^\d+$/ || exists $items{ key($q, $got) }) { mismatch($sql, $e ? "error $e" : $got, 'a new id'); return; }
	$it->{review} = 'resolved';
	$it->{replayed_as} = $got;
	my $new = new_item($q, $got, gk => $it->{gk}, lk => $it->{lk}, prio => $it->{prio}, req => $it->{req});
	if (defined $it->{gk})
	{
		my $k = key($q, $it->{gk});
		if ($blocker{$k} && $blocker{$k}{id} == $it->{id})
		{
			delete $blocker{$k};
			$override{$k} = $new;
			$seen{replayed_head}++;
		}
	}
}

sub do_review
{
	my ($q) = @_;
	my @b = grep { $_->{q} eq $q } values %blocker;
	my $it = @b && rand() < 0.6 ? pick(@b) : an_item($q, sub { $_[0]{st} eq 'dead' });
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
	if (defined $it->{gk} && ($status eq 'resolved' || $status eq 'rejected'))
	{
		my $k = key($q, $it->{gk});
		if ($blocker{$k} && $blocker{$k}{id} == $it->{id})
		{
			delete $blocker{$k};
			$seen{review_unblocked}++;
		}
	}
}

sub do_set_limit
{
	my ($q) = @_;
	my $k = pick('K1', 'K2', 'K3');
	my $cap = 1 + int(rand(3));
	my $sql = "SELECT queue.set_limit('$q', '$k', max_in_flight => $cap)";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // 'ok');
	if ($e) { mismatch($sql, "error $e", 'ok'); return; }
	$limits{$q}{$k} = { cap => $cap };
}

sub do_drop_limit
{
	my ($q) = @_;
	my $k = pick('K1', 'K2', 'K3');
	my $sql = "SELECT queue.drop_limit('$q', '$k')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // 'ok');
	if ($e) { mismatch($sql, "error $e", 'ok'); return; }
	delete $limits{$q}{$k};
}

# extend_lease renews a lease; one that ran out is revived only where the
# queue's cap, the key's cap and the worker's capacity leave room.
sub do_extend
{
	my ($q) = @_;
	my $it = processing_item($q, 0.95);
	my $tok = a_token($it);
	my $sql = "SELECT queue.extend_lease('$q', $it->{id}, $tok) IS NOT NULL";
	my ($got, $e) = run(wsess($it), $sql);
	push @trail, "$sql => " . ($e // $got);
	my $want = 'f';
	if (current($it, $tok) && !$it->{cancel} && (!$it->{lease_out} || fits($it, $it->{worker})))
	{
		$want = 't';
		$seen{revived}++ if $it->{lease_out};
		$it->{lease_out} = 0;
	}
	$seen{revival_refused}++ if current($it, $tok) && !$it->{cancel} && $want eq 'f';
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

# heartbeat renews every lease the worker holds (not a cancelled one) and
# revives its leases that ran out where the caps leave room; which of
# several such leases a tight cap lets back is not the model's to say, so
# it beats only for a worker with at most one.
sub do_heartbeat
{
	my $w = pick('w1', 'w2', 'w3', 'w4');
	my @lost = grep { lost($_) && $_->{worker} eq $w } values %items;
	return if @lost > 1;
	my $sql = "SELECT queue.heartbeat('$w')";
	my ($got, $e) = run($sess{ $wconn{$w} }, $sql);
	push @trail, "[$w] $sql => " . ($e // $got);
	my $want = grep { holds($_) && $_->{worker} eq $w && !$_->{cancel} } values %items;
	for my $it (@lost)
	{
		next if $it->{cancel} || !fits($it, $w);
		$it->{lease_out} = 0;
		$want++;
		$seen{heartbeat_revived}++;
	}
	expect_eq($sql, $e ? "error $e" : $got, $want);
}

# The queue's max_in_flight changes while items are in flight (0: off).
sub do_queue_cap
{
	my ($q) = @_;
	my $cap = int(rand(8));
	my $sql = "SELECT queue.alter_queue('$q', max_in_flight => $cap)";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // 'ok');
	if ($e) { mismatch($sql, "error $e", 'ok'); return; }
	$qconf{$q}{cap} = $cap ? $cap : undef;
}

# The queue-wide rate of fb is raised a little above what was claimed.
sub do_queue_rate
{
	return unless $limits{fb}{'*'};
	my $rate = ($claims{fb}{'*'} // 0) + 1 + int(rand(12));
	my $sql = "SELECT queue.set_limit('fb', NULL, rate => $rate, per => '1 hour')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // 'ok');
	if ($e) { mismatch($sql, "error $e", 'ok'); return; }
	$limits{fb}{'*'}{rate} = $rate;
}

sub do_relabel
{
	my $l = pick([], ['gpu'], ['sap'], [ 'gpu', 'sap' ]);
	my $cap = 1 + int(rand(3));
	my $sql = "SELECT queue.register_worker('w4', capacity => $cap, labels => " . arr($l) . "::text[])";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // 'ok');
	if ($e) { mismatch($sql, "error $e", 'ok'); return; }
	$labels{w4} = $l;
	$capacity{w4} = $cap;
}

# Switching a queue from 'block' to 'continue' lets the groups its dead
# heads block move on at once; back to 'block', heads that die from then
# on block their groups.
sub do_group_on_dead
{
	my ($q) = @_;
	my $block = !$qconf{$q}{block};
	my $sql = "SELECT queue.alter_queue('$q', group_on_dead => '" . ($block ? 'block' : 'continue') . "')";
	my ($got, $e) = run($sess{admin}, $sql);
	push @trail, "$sql => " . ($e // 'ok');
	if ($e) { mismatch($sql, "error $e", 'ok'); return; }
	$qconf{$q}{block} = $block;
	if (!$block)
	{
		$seen{switch_unblocked} += grep { $_->{q} eq $q } values %blocker;
		delete $blocker{$_} for grep { $blocker{$_}{q} eq $q } keys %blocker;
	}
}

# ------------------------------------------------------------ the check

sub model_rows
{
	my ($q) = @_;
	my @r;
	for my $it (sort { $a->{id} <=> $b->{id} } q_items($q))
	{
		if (is_live($it))
		{
			push @r, join(',', $it->{id}, lost($it) ? 'queued' : $it->{st}, $it->{attempt}, $it->{prio},
				holds($it) ? $it->{worker} : '-', $it->{cancel} ? 'c' : '-');
		}
		elsif ($it->{st} eq 'dead')
		{
			push @r, join(',', $it->{id}, 'dead', $it->{attempt}, $it->{reason}, $it->{review},
				$it->{replayed_as} // '-');
		}
		else
		{
			push @r, join(',', $it->{id}, 'processed', $it->{attempt}, $it->{worker});
		}
	}
	return join(";\n", @r);
}

sub model_limits
{
	my ($q) = @_;
	my @r;
	for my $k ((sort grep { $_ ne '*' } keys %{ $limits{$q} }), grep { $_ eq '*' } keys %{ $limits{$q} })
	{
		my $l = $limits{$q}{$k};
		push @r, join(':', $k, $l->{cap} // '-', $l->{rate} // '-', in_flight($q, $k eq '*' ? undef : $k),
			defined $l->{rate} ? $claims{$q}{$k} // 0 : 0);
	}
	return join(' ', @r);
}

sub check
{
	my ($q) = @_;
	my ($rows) = run($sess{read}, qq{
	SELECT string_agg(x, ';\n' ORDER BY id) FROM (
	  SELECT item_id AS id, concat_ws(',', item_id, state, attempt, priority,
	         CASE WHEN state = 'processing' THEN worker ELSE '-' END,
	         CASE WHEN cancel_requested_at IS NULL THEN '-' ELSE 'c' END) AS x
	    FROM queue.items WHERE queue_name = '$q'
	  UNION ALL
	  SELECT item_id, concat_ws(',', item_id, 'dead', attempts, reason, review_status,
	         coalesce(replayed_as::text, '-'))
	    FROM queue.dead_letters WHERE queue_name = '$q'
	  UNION ALL
	  SELECT item_id, concat_ws(',', item_id, 'processed', attempts, worker)
	    FROM queue.history WHERE queue_name = '$q') s});
	expect_eq("rows of queue $q", $rows, model_rows($q));
	my ($l) = run($sess{read},
		"SELECT string_agg(concat_ws(':', coalesce(limit_key, '*'), coalesce(max_in_flight::text, '-'), coalesce(rate::text, '-'), in_flight, claims_in_window), ' ' ORDER BY limit_key) FROM queue.limits WHERE queue_name = '$q'");
	expect_eq("limits of queue $q", $l, model_limits($q));
	my ($w) = run($sess{read},
		"SELECT string_agg(item_id || ':' || coalesce(waiting, '-'), ' ' ORDER BY item_id) FROM queue.items WHERE queue_name = '$q' AND state IN ('queued', 'scheduled')");
	for (split / /, $w // '')
	{
		my ($id, $why) = split /:/;
		my $it = $items{ key($q, $id) } or next;
		my %may = map { $_ => 1 } waiting_reasons($it);
		my $want = %may ? join('|', sort keys %may) : '-';
		$seen{"waiting_$why"}++;
		expect_eq("items.waiting of $q/$id", $why, $want) unless $may{$why} || $why eq $want;
	}
}

# Why a queued item is not handed out (items.waiting): it waits behind its
# group's head, its key is full or throttled, or the queue's rate is used
# up; where several hold, the product may name any of them.  A scheduled
# group member that is not the head says blocked_by_group too.
sub waiting_reasons
{
	my ($it) = @_;
	my $q = $it->{q};
	return is_head($it) ? () : ('blocked_by_group') if $it->{st} eq 'scheduled';
	return () unless $it->{st} eq 'queued' || lost($it);
	my @r;
	push @r, 'blocked_by_group' unless is_head($it);
	my $lk = $it->{lk};
	if (defined $lk && $limits{$q}{$lk})
	{
		my $l = $limits{$q}{$lk};
		push @r, 'limit_full' if defined $l->{cap} && in_flight($q, $lk) >= $l->{cap};
		push @r, 'throttled' if defined $l->{rate} && ($claims{$q}{$lk} // 0) >= $l->{rate};
	}
	push @r, 'throttled' if $limits{$q}{'*'} && ($claims{$q}{'*'} // 0) >= $limits{$q}{'*'}{rate};
	return @r;
}

# ------------------------------------------------------------ the run

my @ops = (
	[ 9, \&do_enqueue ], [ 3, \&do_enqueue_batch ], [ 22, \&do_dequeue ],
	[ 12, \&do_complete ], [ 4, \&do_complete_batch ], [ 7, \&do_fail ],
	[ 3, \&do_release ], [ 3, \&do_hold ], [ 3, \&do_unhold ], [ 4, \&do_cancel ],
	[ 4, \&do_replay ], [ 4, \&do_review ], [ 2, \&do_set_limit ],
	[ 1, \&do_drop_limit ], [ 1, sub { do_relabel() } ], [ 0.4, \&do_group_on_dead ],
	[ 2, sub { do_queue_rate() } ], [ 1, \&do_queue_cap ],
	[ 4, \&do_extend ], [ 2, sub { do_heartbeat() } ]);
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
	check($_) for @queues;
	last if defined $fail_msg;
	if (time() - $start > $budget)
	{
		note("time budget reached after $step steps");
		last;
	}
}

my %by;
$by{ $_->{st} . ($_->{st} eq 'dead' ? "/$_->{reason}" : '') }++ for values %items;
note("cases met: " . join(', ', map { "$_ $seen{$_}" } sort keys %seen));
note("items by state: " . join(', ', map { "$_ $by{$_}" } sort keys %by));
if (defined $fail_msg)
{
	my $from = @trail > 30 ? @trail - 30 : 0;
	diag("the last steps:\n" . join("\n", @trail[ $from .. $#trail ]));
	fail("the product follows the model of flow control and routing");
	diag($fail_msg);
	diag("live items:\n" . $node->safe_psql('postgres',
		"SELECT queue_name, item_id, state, priority, attempt, group_key, limit_key, requires, waiting, worker, run_at, enqueued_at FROM queue.items ORDER BY 1, 2"));
	diag("model:\n" . join("\n", map { my $it = $_; join(' ', map { "$_=" . ($it->{$_} // '') } qw(q id st attempt prio gk lk ctime worker cancel)) . ' req=' . join('+', @{ $it->{req} }) } sort { $a->{q} cmp $b->{q} || $a->{id} <=> $b->{id} } grep { is_live($_) } values %items));
	diag("model caps: " . join(' ', map { "$_: cap " . ($qconf{$_}{cap} // '-') . ', limits ' . model_limits($_) } @queues));
	diag("queues and limits:\n" . $node->safe_psql('postgres',
		"SELECT queue_name, max_in_flight, group_on_dead FROM queue.queues ORDER BY 1; SELECT * FROM queue.limits ORDER BY 1, 2; SELECT * FROM queue.flow_claim ORDER BY at"));
	diag("blocked groups: " . join(' ', map { "$_ by $blocker{$_}{id}" } sort keys %blocker));
	diag("replays at the head: " . join(' ', map { "$_: $override{$_}{id}" } sort keys %override));
}
else
{
	pass("the product follows the model of flow control and routing for $step steps (seed $seed)");
}

$_->quit for values %sess;
$node->stop;
done_testing();
