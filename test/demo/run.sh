#!/usr/bin/env bash
# test/demo/run.sh -- the bot-fleet demo behind `make demo`.
#
# On a throw-away cluster (pg_cron, queue preloaded) it enqueues 4,000
# invoices, starts five queue-worker bots running test/demo/erp.sh, sends
# 200 urgent invoices while the backlog is deep, kills one bot with
# kill -9, takes the "ERP" down for a while so the circuit breaker pauses
# the queue and later resumes it through its half-open probe, books
# seven customers' invoices in order (group_key), caps the old ERP's
# customers at three sessions (set_limit), schedules the month-end close,
# and ends with a report drawn from SQL.  About a minute; everything it starts is
# stopped on exit.
#
# Run as root, it installs missing build dependencies (apt), runs
# `make && make install` with $PG_CONFIG, and runs the cluster and bots
# as the postgres OS user in a scratch folder under /tmp that it removes
# afterwards: the clone itself may lie where postgres cannot enter (under
# /root, in a mktemp -d).  The bots' logs are copied to ./.demo/logs.
# Otherwise it runs in ./.demo and expects the extension installed and
# the tools built.
#
#   DEMO_KEEP=1    keep the cluster's data folder (and, as root, the
#                  scratch folder) afterwards
#   DEMO_SHORT=1   a short run (300 invoices, no killed bot, no outage):
#                  the set-up path only, for the tests

set -u

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
# postgres may have another PATH: name pg_config by its full path
PG_CONFIG=$(command -v "$PG_CONFIG" || echo "$PG_CONFIG")
DEMO_SHORT=${DEMO_SHORT:-}
if [ -n "$DEMO_SHORT" ]; then
	INVOICES=300 URGENT=20 DUPLICATES=5
else
	INVOICES=4000       # the bulk load
	URGENT=200          # urgent invoices sent while the backlog is deep (priority 0)
	DUPLICATES=30       # invoices sent a second time, to be dropped by dedup
fi
BOTS=5

say() { printf '\033[1m== %s\033[0m\n' "$*"; }
note() { printf '   %s\n' "$*"; }

# -- as root: dependencies, build, install; then carry on as postgres ----
if [ "$(id -u)" = 0 ] && [ -z "${DEMO_AS_POSTGRES:-}" ]; then
	missing=()
	for p in postgresql-server-dev-15 postgresql-15-cron libpq-dev; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" ||
			{ echo "could not install ${missing[*]}; install them and run again"; exit 1; }
	fi
	PG_CONFIG=$(command -v "$PG_CONFIG") || { echo "pg_config not found: set PG_CONFIG"; exit 1; }
	# The cluster and the bots run as postgres, who may not be able to
	# enter this clone: they get a scratch folder of their own.
	SCRATCH=$(mktemp -d /tmp/queue-demo.XXXXXX) || exit 1
	finish() {
		rm -rf "$REPO/.demo"
		mkdir -p "$REPO/.demo"
		[ -d "$SCRATCH/demo/logs" ] && cp -a "$SCRATCH/demo/logs" "$REPO/.demo/"
		if [ -n "${DEMO_KEEP:-}" ]; then
			echo "   kept the scratch folder $SCRATCH (cluster data in $SCRATCH/demo/data)"
		else
			rm -rf "$SCRATCH"
		fi
	}
	trap finish EXIT
	say "building and installing the extension and tools (PG_CONFIG=$PG_CONFIG)"
	(make -s -C "$REPO" PG_CONFIG="$PG_CONFIG" && make -s -C "$REPO" PG_CONFIG="$PG_CONFIG" install) \
		>"$SCRATCH/build.log" 2>&1 ||
		{ cat "$SCRATCH/build.log"; echo "build failed (log above)"; exit 1; }
	mkdir -p "$SCRATCH/bin" "$SCRATCH/demo"
	cp "$REPO/tools/queue-worker/queue-worker" "$REPO/tools/queue-top/queue-top" \
		"$REPO/test/demo/erp.sh" "$REPO/test/demo/run.sh" "$SCRATCH/bin/" || exit 1
	chmod 755 "$SCRATCH" "$SCRATCH/bin"
	chown -R postgres: "$SCRATCH/demo"
	cd "$SCRATCH" || exit 1
	runuser -u postgres -- env DEMO_AS_POSTGRES=1 DEMO_DIR="$SCRATCH/demo" DEMO_BIN="$SCRATCH/bin" \
		PG_CONFIG="$PG_CONFIG" DEMO_KEEP="${DEMO_KEEP:-}" DEMO_SHORT="$DEMO_SHORT" \
		bash "$SCRATCH/bin/run.sh" "$@"
	exit $?
fi

DEMO=${DEMO_DIR:-"$REPO/.demo"}
if [ -n "${DEMO_BIN:-}" ]; then
	WORKER="$DEMO_BIN/queue-worker" TOP="$DEMO_BIN/queue-top" ERP="$DEMO_BIN/erp.sh"
else
	WORKER="$REPO/tools/queue-worker/queue-worker"
	TOP="$REPO/tools/queue-top/queue-top"
	ERP="$REPO/test/demo/erp.sh"
fi

BINDIR=$($PG_CONFIG --bindir)
[ -f "$($PG_CONFIG --sharedir)/extension/queue.control" ] ||
	{ echo "the queue extension is not installed: run make install (as root), then again"; exit 1; }
[ -f "$($PG_CONFIG --pkglibdir)/pg_cron.so" ] ||
	{ echo "pg_cron is not installed: apt-get install postgresql-15-cron, then again"; exit 1; }
for b in "$WORKER" "$TOP"; do
	[ -x "$b" ] || { echo "$b is not built: run make, then again"; exit 1; }
done

rm -rf "$DEMO/data" "$DEMO/logs" "$DEMO/outage"
mkdir -p "$DEMO/logs" || exit 1
PGDATA="$DEMO/data"
LOGS="$DEMO/logs"
FLAG="$DEMO/outage"

PORT=
for _ in $(seq 1 50); do
	p=$((57000 + RANDOM % 1000))
	if ! ss -ltn 2>/dev/null | grep -q ":$p " && [ ! -e "$DEMO/.s.PGSQL.$p" ]; then
		PORT=$p
		break
	fi
done
[ -n "$PORT" ] || { echo "no free port in 57000-57999"; exit 1; }
DSN="host=$DEMO port=$PORT dbname=demo"

declare -A BOT_PID=()
cleanup() {
	local pids=()
	for b in "${!BOT_PID[@]}"; do
		kill -TERM "${BOT_PID[$b]}" 2>/dev/null && pids+=("${BOT_PID[$b]}")
	done
	for _ in $(seq 1 70); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	[ -f "$PGDATA/postmaster.pid" ] && "$BINDIR/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1
	if [ -z "${DEMO_KEEP:-}" ]; then rm -rf "$PGDATA"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sql() { "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d "$DSN" "$@"; }
val() { "$BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "$DSN" -c "$1"; }

T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%5.1f", b - a }'; }

# -- cluster ---------------------------------------------------------------
say "starting a throw-away cluster on port $PORT in $DEMO"
"$BINDIR/initdb" -D "$PGDATA" -A trust -U postgres -E UTF8 --no-locale >"$LOGS/initdb.log" 2>&1 ||
	{ cat "$LOGS/initdb.log"; exit 1; }
cat >>"$PGDATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$DEMO'
port = $PORT
shared_preload_libraries = 'pg_cron,queue'
cron.database_name = 'demo'
cron.use_background_workers = on
# the breaker's run rule: 20 failures in a row trip it, however many
# successes the window still holds (README, Fleet control)
queue.breaker_run_rule = on
max_worker_processes = 16
max_connections = 60
fsync = off
synchronous_commit = off
log_min_messages = warning
EOF
"$BINDIR/pg_ctl" -D "$PGDATA" -l "$LOGS/postgres.log" -w start >/dev/null ||
	{ tail -20 "$LOGS/postgres.log"; exit 1; }
"$BINDIR/createdb" -h "$DEMO" -p "$PORT" demo || exit 1

sql >/dev/null <<'EOF' || exit 1
\set VERBOSITY terse
CREATE EXTENSION pg_cron;
CREATE EXTENSION queue;
SELECT queue.enable_cron();
ALTER SYSTEM SET queue.worker_offline_after = '10s';
SELECT pg_reload_conf();
SELECT queue.create_queue('invoices',
         lease_timeout       => '6 s',
         max_attempts        => 5,
         backoff_base        => '2 s',
         backoff_factor      => 2,
         backoff_max         => '30 s',
         dedup_window        => '1 hour',
         sla                 => '2 min',
         -- a short window: a burst of earlier successes must not hide
         -- an outage from the breaker for long
         breaker_threshold   => 0.5,
         breaker_window      => '2 s',
         breaker_min_samples => 20,
         breaker_cooldown    => '10 s');
-- the month-end close: one item on the last day of every month, 02:00
SELECT queue.schedule('invoices', 'month-end-close', '0 2 $ * *',
                      '{"run": "month-end close", "customer": "internal"}', priority => 1);
-- what the demo sent, for the accounting at the end
CREATE TABLE demo_sent (invoice text, item_id bigint, urgent boolean, resent boolean,
                        grp text, lim text);
-- the old ERP takes three sessions at once
SELECT queue.set_limit('invoices', 'erp-legacy', max_in_flight => 3);
-- when things happened, for the report's stories
CREATE TABLE demo_marks (mark text PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(), n bigint);
CREATE TABLE demo_orphans (item_id bigint, attempt int);
EOF
note "pg_cron jobs: $(val "SELECT string_agg(jobname || ' ' || schedule, ', ') FROM cron.job")"
note "recurring: $(val "SELECT string_agg(format('%s (%s), next %s', name, cron, to_char(next_tick, 'YYYY-MM-DD HH24:MI TZ')), ', ') FROM queue.schedules")"

# -- producers -------------------------------------------------------------
say "enqueueing $INVOICES invoices in one enqueue_batch (a few malformed, one slow; customers C90-C96 in order; C0-C9 through the old ERP)"
sql <<EOF || exit 1
WITH src AS (
  SELECT g, format('INV-%s', lpad(g::text, 6, '0')) AS inv,
         -- the statement runs of customers C90-C96 are booked in order,
         -- one invoice at a time per customer (ordered groups)
         CASE WHEN g % 350 <> 0 AND g % 97 BETWEEN 90 AND 96 THEN format('C%s', g % 97) END AS grp,
         -- customers C0-C9 are booked in the old ERP, which accepts
         -- three sessions at once (a per-key cap)
         CASE WHEN g % 350 <> 0 AND g % 97 < 10 THEN 'erp-legacy' END AS lim,
         CASE WHEN g % 350 = 0
              THEN jsonb_build_object('invoice', format('INV-%s', lpad(g::text, 6, '0')),
                                      'amount', 100 + g % 900, 'malformed', true)
              ELSE jsonb_build_object('invoice', format('INV-%s', lpad(g::text, 6, '0')),
                                      'customer', format('C%s', g % 97), 'amount', 100 + g % 900,
                                      'slow', g = 777,
                                      'statement_run', CASE WHEN g % 97 BETWEEN 90 AND 96
                                                            THEN format('C%s', g % 97) END)
         END AS payload
  FROM generate_series(1, $INVOICES) AS g),
ids AS (
  SELECT t.id, t.n
  FROM queue.enqueue_batch('invoices',
         (SELECT array_agg(payload ORDER BY g) FROM src),
         dedup_keys => (SELECT array_agg(inv ORDER BY g) FROM src),
         group_keys => (SELECT array_agg(grp ORDER BY g) FROM src),
         limit_keys => (SELECT array_agg(lim ORDER BY g) FROM src)) WITH ORDINALITY AS t(id, n))
INSERT INTO demo_sent SELECT src.inv, ids.id, false, false, src.grp, src.lim FROM src JOIN ids ON ids.n = src.g;
EOF
note "$(val "SELECT count(*) FROM demo_sent") enqueued; stats: $(val "SELECT format('queued %s, scheduled %s', queued, scheduled) FROM queue.stats('invoices')")"

# -- the fleet -------------------------------------------------------------
start_bot() {
	local n=$1
	ERP_OUTAGE_FLAG="$FLAG" ERP_LATENCY=0 "$WORKER" --dsn "$DSN" --queue invoices \
		--exec "$ERP" --name "bot-$n" --concurrency 4 --batch 8 --lease '6 s' --heartbeat 2s \
		--poll 1s --poll-max 2s --grace 5s >"$LOGS/bot-$n.out" 2>"$LOGS/bot-$n.log" &
	BOT_PID[$n]=$!
}
say "starting $BOTS bots: queue-worker --queue invoices --exec test/demo/erp.sh --concurrency 4 --batch 8 --lease '6 s'"
for n in $(seq 1 $BOTS); do start_bot "$n"; done

# One query per tick: live item count, paused flag, and a status line.
poll_state() {
	IFS='|' read -r LEFT PAUSED STATUS < <(val "SELECT
	        (SELECT count(*) FROM queue.items WHERE queue_name = 'invoices'), q.paused,
	        format('processed %s  dead %s  queued %s  scheduled %s  processing %s  %s',
	          (SELECT count(*) FROM queue.history WHERE queue_name = 'invoices'),
	          s.dead, s.queued, s.scheduled, s.processing,
	          CASE WHEN s.paused THEN 'PAUSED: ' || coalesce(q.pause_reason, '') ELSE 'running' END)
	     FROM queue.stats('invoices') s, queue.queues q WHERE q.queue_name = 'invoices'" 2>/dev/null)
}

finished=0
killed=0
[ -n "$DEMO_SHORT" ] && killed=skip
tripped_at=0
LEFT=
PAUSED=
STATUS=
outage_on=0
outage_done=0
[ -n "$DEMO_SHORT" ] && outage_done=skip
outage_start=0
urgent_sent=0
top_shown=0
last_sweep=0
last_status=0
# about a minute on an idle machine; a busy one gets up to five
deadline=$((SECONDS + 300))
KILLED_BOT=3
T_START=$SECONDS

while [ $SECONDS -lt $deadline ]; do
	now=$SECONDS
	t=$((now - T_START))
	poll_state

	# Urgent invoices arrive while the backlog is deep and the queue runs:
	# priority 0 is claimed before every waiting priority-2 invoice.
	if [ $urgent_sent = 0 ] && { [ $t -ge 1 ] || [ -n "$DEMO_SHORT" ]; }; then
		say "t=$(elapsed)s a producer sends $URGENT urgent invoices (priority 0) behind a backlog of $(val "SELECT queued FROM queue.stats('invoices')"), and re-sends $DUPLICATES old ones"
		sql <<EOF >/dev/null || exit 1
INSERT INTO demo_marks (mark, n) SELECT 'urgent_sent', queued FROM queue.stats('invoices');
WITH src AS (
  SELECT g, format('INV-%s', lpad(g::text, 6, '0')) AS inv,
         jsonb_build_object('invoice', format('INV-%s', lpad(g::text, 6, '0')),
                            'customer', format('C%s', g % 97), 'amount', 5000, 'urgent', true) AS payload
  FROM generate_series($INVOICES + 1, $INVOICES + $URGENT) AS g),
ids AS (
  SELECT t.id, t.n
  FROM queue.enqueue_batch('invoices', (SELECT array_agg(payload ORDER BY g) FROM src),
         priority => 0, dedup_keys => (SELECT array_agg(inv ORDER BY g) FROM src)) WITH ORDINALITY AS t(id, n))
INSERT INTO demo_sent SELECT src.inv, ids.id, true, false FROM src JOIN ids ON ids.n = src.g - $INVOICES;
-- the same invoice sent twice: enqueue returns the first one's id
INSERT INTO demo_sent
SELECT s.invoice, queue.enqueue('invoices',
         jsonb_build_object('invoice', s.invoice, 'customer', 'C1', 'amount', 1, 'resent', true),
         dedup_key => s.invoice), false, true
FROM (SELECT invoice FROM demo_sent WHERE NOT urgent ORDER BY item_id LIMIT $DUPLICATES OFFSET 100) AS s;
EOF
		urgent_sent=1
		note "dedup: $(val "SELECT count(*) FILTER (WHERE resent) || ' re-sent, ' || count(DISTINCT item_id) FILTER (WHERE resent) || ' of them matched existing items, ' || (count(*) - count(DISTINCT item_id)) || ' duplicates dropped' FROM demo_sent")"
	fi

	if [ $killed = 0 ] && [ $t -ge 2 ] && [ $urgent_sent = 1 ]; then
		kill -KILL "${BOT_PID[$KILLED_BOT]}"
		wait "${BOT_PID[$KILLED_BOT]}" 2>/dev/null
		val "INSERT INTO demo_orphans SELECT item_id, attempt FROM queue.items WHERE queue_name = 'invoices' AND worker = 'bot-$KILLED_BOT' AND state = 'processing'" >/dev/null
		say "t=$(elapsed)s kill -9 bot-$KILLED_BOT while it holds $(val "SELECT count(*) FROM demo_orphans") item(s); nobody releases them"

		unset "BOT_PID[$KILLED_BOT]"
		killed=1
	fi

	# The outage starts while the backlog is still deep; it ends 12 s
	# after the breaker opened: the first half-open probe (10 s cooldown)
	# still fails and re-opens the breaker, the next one succeeds.  NB:
	# $SECONDS, not the tick's $now: on a busy machine one tick can last
	# longer than the outage.
	if [ $outage_on = 0 ] && [ $outage_done = 0 ] && [ $killed = 1 ] && [ $t -ge 3 ]; then
		val "INSERT INTO demo_marks (mark) VALUES ('outage_start')" >/dev/null
		touch "$FLAG"
		say "t=$(elapsed)s ERP outage begins: every call fails (exit 75, ERP_TIMEOUT)"
		outage_on=1
		outage_start=$SECONDS
	fi
	if [ $outage_on = 1 ] && [ "$PAUSED" = t ] && [ $tripped_at = 0 ]; then
		tripped_at=$SECONDS
		say "t=$(elapsed)s the circuit breaker opened: $(val "SELECT pause_reason FROM queue.queues WHERE queue_name = 'invoices'")"
	fi
	if [ $outage_on = 1 ] && [ $top_shown = 0 ] && [ $tripped_at != 0 ] && [ $((SECONDS - tripped_at)) -ge 2 ]; then
		say "t=$(elapsed)s what an operator sees now (queue-top --once):"
		"$TOP" --dsn "$DSN" --once 2>&1 | sed 's/^/   | /'
		top_shown=1
	fi
	if [ $outage_on = 1 ] && { { [ $tripped_at != 0 ] && [ $((SECONDS - tripped_at)) -ge 12 ]; } ||
		[ $((SECONDS - outage_start)) -ge 45 ]; }; then
		say "t=$(elapsed)s ERP outage ends"
		rm -f "$FLAG"
		val "INSERT INTO demo_marks (mark) VALUES ('outage_end')" >/dev/null 2>&1
		outage_on=0
		outage_done=1
	fi

	# pg_cron sweeps once a minute; the demo compresses time by sweeping
	# and snapshotting every 5 s as well.
	if [ $((now - last_sweep)) -ge 5 ]; then
		val "SELECT queue.sweep()" >/dev/null 2>>"$LOGS/sweep.err"
		val "SELECT queue.snapshot_metrics()" >/dev/null 2>>"$LOGS/sweep.err"
		last_sweep=$now
	fi
	if [ $((now - last_status)) -ge 3 ]; then
		note "t=$(elapsed)s  $STATUS"
		last_status=$now
	fi

	if [ "$LEFT" = 0 ] && [ $urgent_sent = 1 ]; then
		note "t=$(elapsed)s  $STATUS"
		say "t=$(elapsed)s every invoice is processed or dead-lettered"
		finished=1
		break
	fi
	sleep 1
done
[ $finished = 1 ] || say "time is up: reporting what there is (some invoices are still live)"

rm -f "$FLAG"
say "stopping the bots (SIGTERM)"
for b in "${!BOT_PID[@]}"; do kill -TERM "${BOT_PID[$b]}" 2>/dev/null; done
for b in "${!BOT_PID[@]}"; do wait "${BOT_PID[$b]}" 2>/dev/null; done
BOT_PID=()
for n in $(seq 1 $BOTS); do
	summary=$(grep -o 'summary: .*' "$LOGS/bot-$n.log" | sed 's/^summary: //')
	note "bot-$n: ${summary:-killed with -9, no summary}"
done
val "SELECT queue.sweep()" >/dev/null 2>&1
val "SELECT queue.snapshot_metrics()" >/dev/null 2>&1

# -- report ----------------------------------------------------------------
say "REPORT"
sql <<'EOF'
\pset footer off
\echo
\echo '-- every invoice accounted for'
SELECT (SELECT count(*) FROM demo_sent)                          AS enqueue_calls,
       (SELECT count(DISTINCT invoice) FROM demo_sent)           AS distinct_invoices,
       (SELECT count(*) - count(DISTINCT item_id) FROM demo_sent) AS duplicates_dropped,
       p.processed, d.dead_letters, l.still_live,
       p.processed + d.dead_letters = (SELECT count(DISTINCT invoice) FROM demo_sent) AS all_accounted_for
FROM (SELECT count(*) AS processed FROM queue.history WHERE queue_name = 'invoices') p,
     (SELECT count(*) AS dead_letters FROM queue.dead_letters WHERE queue_name = 'invoices') d,
     (SELECT count(*) AS still_live FROM queue.items WHERE queue_name = 'invoices') l;

\echo '-- urgent invoices (priority 0), sent while the backlog was deep, overtake it'
SELECT CASE WHEN s.urgent THEN 'urgent (0)' ELSE 'backlog (2)' END AS priority,
       count(*) AS processed,
       round(avg(extract(epoch FROM h.claimed_at - h.enqueued_at))::numeric, 2) AS avg_wait_s,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM h.claimed_at - h.enqueued_at))::numeric, 2) AS median_wait_s,
       CASE WHEN s.urgent THEN (SELECT m.n FROM demo_marks m WHERE m.mark = 'urgent_sent') END AS backlog_when_sent
FROM queue.history h JOIN demo_sent s ON s.item_id = h.item_id AND NOT s.resent
WHERE h.queue_name = 'invoices' GROUP BY s.urgent ORDER BY s.urgent DESC;

\echo '-- ordered groups: each customer statement run (C90-C96) booked in order, one at a time'
\echo '-- (started and finished: the clock of the ERP calls, from their results)'
WITH g AS (
  SELECT s.grp, h.item_id, (h.result->>'started')::numeric AS started,
         lag((h.result->>'finished')::numeric) OVER (PARTITION BY s.grp ORDER BY h.item_id) AS previous_finished
  FROM queue.history h JOIN demo_sent s ON s.item_id = h.item_id AND NOT s.resent
  WHERE h.queue_name = 'invoices' AND s.grp IS NOT NULL)
SELECT grp AS customer, count(*) AS invoices,
       count(*) FILTER (WHERE started < previous_finished) AS started_before_previous_finished,
       bool_and(previous_finished IS NULL OR started >= previous_finished) AS in_order
FROM g GROUP BY grp ORDER BY grp;

\echo '-- the old ERP (limit_key erp-legacy, set_limit max_in_flight 3): never more than 3 sessions'
WITH legacy AS (
  SELECT h.claimed_at, h.completed_at
  FROM queue.history h JOIN demo_sent s ON s.item_id = h.item_id AND NOT s.resent
  WHERE h.queue_name = 'invoices' AND s.lim = 'erp-legacy'),
ev AS (SELECT claimed_at AS at, 1 AS d FROM legacy UNION ALL SELECT completed_at, -1 FROM legacy)
SELECT (SELECT count(*) FROM legacy) AS invoices, max(running) AS most_at_once,
       (SELECT max_in_flight FROM queue.limits WHERE queue_name = 'invoices' AND limit_key = 'erp-legacy') AS cap
FROM (SELECT sum(d) OVER (ORDER BY at, d) AS running FROM ev) x;

\echo '-- the orphans of the bot killed with -9'
SELECT o.item_id, o.attempt AS attempt_when_killed, i.state AS now,
       h.worker AS finished_by, h.attempts,
       (SELECT string_agg(DISTINCT e.kind, ', ') FROM queue.events e
         WHERE e.queue_name = 'invoices' AND e.item_id = o.item_id
           AND e.kind IN ('recovered', 'failed', 'retrying')) AS recovery_events
FROM demo_orphans o
LEFT JOIN LATERAL queue.item('invoices', o.item_id) i ON true
LEFT JOIN queue.history h ON h.queue_name = 'invoices' AND h.item_id = o.item_id
ORDER BY o.item_id;

\echo '-- the slow invoice: 15 s of work under a 6 s lease, kept alive by extend_lease'
SELECT item_id, payload->>'invoice' AS invoice, worker, attempts,
       round(extract(epoch FROM completed_at - claimed_at)::numeric, 1) AS run_s
FROM queue.history WHERE queue_name = 'invoices' AND payload @> '{"slow": true}';

\echo '-- the circuit breaker saw the outage: how soon, after how many failures'
SELECT round(extract(epoch FROM b.at - o.at)::numeric, 2) AS seconds_after_outage_began,
       (SELECT count(*) FROM queue.events e
         WHERE e.queue_name = 'invoices' AND e.kind = 'failed' AND e.at >= o.at AND e.at <= b.at) AS failures_until_open,
       b.details->>'reason' AS why
FROM demo_marks o
CROSS JOIN LATERAL (SELECT e.at, e.details FROM queue.events e
                     WHERE e.queue_name = 'invoices' AND e.kind = 'breaker_open' AND e.at >= o.at
                     ORDER BY e.at LIMIT 1) b
WHERE o.mark = 'outage_start';

\echo '-- the circuit breaker: trip, half-open probes, recovery (queue.events)'
SELECT to_char(at, 'HH24:MI:SS.MS') AS at, kind, coalesce(details::text, '') AS details
FROM queue.events
WHERE queue_name = 'invoices' AND item_id IS NULL
  AND kind NOT IN ('enqueued')
ORDER BY at, event_id;

\echo '-- retries: processed invoices by the attempt that succeeded'
SELECT attempts, count(*) AS invoices FROM queue.history WHERE queue_name = 'invoices'
GROUP BY 1 ORDER BY 1;

\echo '-- failures by error code (queue.events)'
SELECT coalesce(details->>'error_code', '(none)') AS error_code, count(*) AS failures
FROM queue.events WHERE queue_name = 'invoices' AND kind = 'failed'
GROUP BY 1 ORDER BY 2 DESC;

\echo '-- dead letters'
SELECT item_id, payload->>'invoice' AS invoice, reason, attempts, error_code,
       split_part(last_error, E'\n', array_length(string_to_array(last_error, E'\n'), 1)) AS last_error_line
FROM queue.dead_letters WHERE queue_name = 'invoices' ORDER BY item_id;

\echo '-- health() and stats()'
SELECT queue_name, status, array_to_string(reasons, '; ') AS reasons FROM queue.health('invoices');
SELECT queue_name, queued, scheduled, processing, dead, processed_1h, failed_1h,
       wait_p50, wait_p95, run_p50, run_p95, paused
FROM queue.stats('invoices');

\echo '-- throughput (completions per 5 s; the gap is the outage)'
WITH h AS (
  SELECT extract(epoch FROM completed_at - min(claimed_at) OVER ()) AS s
  FROM queue.history WHERE queue_name = 'invoices'),
b AS (SELECT floor(s / 5)::int AS bucket, count(*) AS n FROM h GROUP BY 1)
SELECT format('%3s-%3s s', g * 5, g * 5 + 5) AS window, coalesce(b.n, 0) AS completed,
       repeat('#', (coalesce(b.n, 0) * 50 / (SELECT max(n) FROM b))::int) AS bar
FROM generate_series(0, (SELECT max(bucket) FROM b)) AS g LEFT JOIN b ON b.bucket = g
ORDER BY g;
SELECT count(*) AS processed,
       round(extract(epoch FROM max(completed_at) - min(claimed_at))::numeric, 1) AS seconds,
       round((count(*) / nullif(extract(epoch FROM max(completed_at) - min(claimed_at)), 0))::numeric, 1) AS per_second
FROM queue.history WHERE queue_name = 'invoices';

\echo '-- recurring work (queue.schedules): the month-end close enqueues itself'
SELECT name, cron, payload, next_tick FROM queue.schedules WHERE queue_name = 'invoices';

\echo '-- the fleet (queue.workers)'
SELECT * FROM queue.workers ORDER BY 1;
EOF

say "where to look next"
cat <<EOF
   psql '$DSN'                       (run with DEMO_KEEP=1 to keep the cluster; start it with
                                      pg_ctl -D $DEMO/data -l $DEMO/logs/postgres.log start)
   SELECT * FROM queue.stats();       live numbers per queue
   SELECT * FROM queue.health();      what needs attention, and why
   SELECT * FROM queue.events WHERE queue_name = 'invoices' ORDER BY at DESC LIMIT 20;
   SELECT * FROM queue.dead_letters;  then queue.replay('invoices', item_id, corrected_payload)
   tools/queue-top/queue-top --dsn '$DSN'    the live view
   .demo/logs/bot-*.log               one line per item from each bot
EOF
say "demo finished in $(elapsed) s"
