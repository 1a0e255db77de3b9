#!/usr/bin/env bash
# test/worker/run.sh -- script-level tests of queue-worker and queue-top
# against the installed queue extension, on a throw-away cluster.
#
#   test/worker/run.sh              run every case (about a minute)
#   test/worker/run.sh sigterm      run the cases whose name contains "sigterm"
#   SANITIZED=1 WORKER=... TOP=...  against sanitizer builds (make tools-asan)
#
# Needs the extension installed (make install) and the tools built (make).
# Run as root, it re-runs itself as the postgres OS user, since initdb
# refuses to run as root.  Output is TAP ("ok N - name"); the exit status
# is 0 only if every case passed.  KEEP_TMP=1 keeps the cluster folder.

set -u

REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORKER=${WORKER:-"$REPO/tools/queue-worker/queue-worker"}
TOP=${TOP:-"$REPO/tools/queue-top/queue-top"}
# SANITIZED=1 (with WORKER and TOP pointing at the *-asan builds): any
# sanitizer report fails the run, and leaks are reported too.
SANITIZED=${SANITIZED:-}
if [ -n "$SANITIZED" ]; then
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=86}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}
fi
PG_CONFIG=${PG_CONFIG:-pg_config}
BINDIR=$($PG_CONFIG --bindir)

if [ "$(id -u)" = 0 ]; then
	[ -x "$WORKER" ] && [ -x "$TOP" ] || make -s -C "$REPO" tools >/dev/null || exit 1
	# from a folder postgres may enter (a clone under /root is 0700): every
	# command it runs would otherwise print "could not change directory"
	cd / || exit 1
	exec runuser -u postgres -- env PG_CONFIG="$PG_CONFIG" KEEP_TMP="${KEEP_TMP:-}" \
		WORKER="$WORKER" TOP="$TOP" SANITIZED="$SANITIZED" bash "$REPO/test/worker/run.sh" "$@"
fi
for b in "$WORKER" "$TOP"; do
	[ -x "$b" ] || { echo "Bail out! $b is not built; run make first"; exit 1; }
done

FILTER=${1:-}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/queue-worker-test.XXXXXX")
PGDATA="$TMP/data"
LOG="$TMP/logs"
mkdir -p "$LOG"

# A free port in the private range 57000-57999: the lower half for the
# plain run, the upper half for the sanitizer run that goes beside it.
PORT=
base=57000
[ -n "$SANITIZED" ] && base=57500
for _ in $(seq 1 50); do
	p=$((base + RANDOM % 500))
	if ! "$BINDIR/pg_isready" -q -h "$TMP" -p "$p" 2>/dev/null &&
		! ss -ltn 2>/dev/null | grep -q ":$p "; then
		PORT=$p
		break
	fi
done
[ -n "$PORT" ] || { echo "Bail out! no free port in 57000-57999"; exit 1; }

DSN="host=$TMP port=$PORT dbname=postgres"
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
	"$BINDIR/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1
	if [ -z "${KEEP_TMP:-}" ]; then rm -rf "$TMP"; else echo "# kept $TMP"; fi
}
trap cleanup EXIT

"$BINDIR/initdb" -D "$PGDATA" -A trust -U postgres -E UTF8 --no-locale >"$LOG/initdb.log" 2>&1 ||
	{ echo "Bail out! initdb failed, see $LOG/initdb.log"; exit 1; }
cat >>"$PGDATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$TMP'
port = $PORT
fsync = off
log_min_messages = warning
EOF
start_pg() {
	"$BINDIR/pg_ctl" -D "$PGDATA" -l "$LOG/postgres.log" -w start >/dev/null ||
		{ echo "Bail out! postgres did not start, see $LOG/postgres.log"; exit 1; }
}
start_pg

sql() { "$BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "$DSN" -c "$1"; }

sql "CREATE EXTENSION queue" >"$LOG/create.log" 2>&1 ||
	{ echo "Bail out! CREATE EXTENSION queue failed: $(cat "$LOG/create.log")"; exit 1; }

T=0
FAILED=0
ok() {
	T=$((T + 1))
	echo "ok $T - $1"
}
notok() {
	T=$((T + 1))
	FAILED=$((FAILED + 1))
	echo "not ok $T - $1"
	shift
	for l in "$@"; do echo "#   $l"; done
}
# is NAME GOT WANT
is() {
	if [ "$2" = "$3" ]; then ok "$1"; else notok "$1" "got:      '$2'" "expected: '$3'"; fi
}
# like NAME TEXT PATTERN (grep -E)
like() {
	if printf '%s' "$2" | tr '\n' ' ' | grep -Eq -- "$3"; then ok "$1"; else notok "$1" "text '$2'" "does not match /$3/"; fi
}
want() { [ -z "$FILTER" ] || [[ "$1" == *"$FILTER"* ]]; }

# worker QUEUE LOGNAME ARGS... : run a worker in the foreground
worker() {
	local q=$1 name=$2
	shift 2
	timeout 60 "$WORKER" --dsn "$DSN" --queue "$q" --name "$name" --poll 200ms "$@" \
		>"$LOG/$name.out" 2>"$LOG/$name.log"
}
# bg_worker QUEUE NAME ARGS... : start one in the background, pid in $BG
bg_worker() {
	local q=$1 name=$2
	shift 2
	"$WORKER" --dsn "$DSN" --queue "$q" --name "$name" --poll 200ms "$@" \
		>"$LOG/$name.out" 2>"$LOG/$name.log" &
	BG=$!
	PIDS+=("$BG")
}
# wait_for SECONDS SQL : until SQL returns t
wait_for() {
	local deadline=$((SECONDS + $1))
	while [ $SECONDS -lt "$deadline" ]; do
		[ "$(sql "$2" 2>/dev/null)" = t ] && return 0
		sleep 0.1
	done
	return 1
}

echo "# cluster on port $PORT in $TMP"

# -- case: commands that succeed -----------------------------------------
if want success; then
	sql "SELECT queue.create_queue('t_ok')" >/dev/null
	sql "SELECT queue.enqueue('t_ok', '{\"n\": 1}'); SELECT queue.enqueue('t_ok', '{\"n\": 2}');
	     SELECT queue.enqueue('t_ok', '{\"n\": 3, \"text\": true}')" >/dev/null
	worker t_ok ok1 --concurrency 2 --max-items 3 --exec '
		p=$(cat)
		case "$p" in
		*text*) echo "plain words" ;;
		*) printf "{\"env\": \"%s/%s/%s/%s\", \"in\": %s}\n" "$QUEUE_ITEM_ID" "$QUEUE_ATTEMPT" "$QUEUE_NAME" "$QUEUE_WORKER" "$p" ;;
		esac'
	is "success: worker exits 0 after --max-items" "$?" 0
	is "success: all three items are in history" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_ok'")" 3
	is "success: JSON stdout becomes the result, env and stdin reach the command" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_ok'
		        AND result->>'env' = item_id || '/1/t_ok/ok1' AND result->'in' = payload")" 2
	is "success: other stdout is kept as {\"stdout\": ...}" \
		"$(sql "SELECT result::text FROM queue.history WHERE queue_name = 't_ok' AND payload ? 'text'")" \
		'{"stdout": "plain words"}'
	is "success: no live items left" "$(sql "SELECT count(*) FROM queue.items WHERE queue_name = 't_ok'")" 0
	like "success: log has claimed, done and a summary" "$(cat "$LOG/ok1.log")" \
		'claimed item .*done item .*summary: claimed 3, completed 3'
	# --verbose copies the output to the log line by line, stderr as stdout
	sql "SELECT queue.enqueue('t_ok', '{\"n\": 4}')" >/dev/null
	worker t_ok ok2 --max-items 1 --verbose --exec \
		'cat >/dev/null; printf "out one\nout two\n"; printf "err one\nerr two\n" >&2'
	is "success: --verbose logs each line of stdout and of stderr as its own log line" \
		"$(grep -cE 'item [0-9]+ (stdout: out|stderr: err) (one|two)$' "$LOG/ok2.log")" 4
fi

# -- case: a program path with plain words runs without a shell ----------
if want direct; then
	sql "SELECT queue.create_queue('t_direct')" >/dev/null
	sql "SELECT queue.enqueue('t_direct', '{\"n\": 1}'); SELECT queue.enqueue('t_direct', '{\"n\": 2}')" >/dev/null
	printf '#!/bin/sh\ncat >/dev/null\necho "{\\"arg\\": \\"$1\\", \\"parent\\": \\"$(ps -o comm= -p $PPID)\\"}"\n' >"$TMP/direct.sh"
	chmod +x "$TMP/direct.sh"
	worker t_direct direct1 --max-items 1 --exec "$TMP/direct.sh first-arg"
	is "direct: the program gets its arguments and runs as the worker's child" \
		"$(sql "SELECT result->>'arg' || ' ' || left(result->>'parent', 12) FROM queue.history WHERE queue_name = 't_direct'")" \
		"first-arg queue-worker"
	# a missing or not executable program is a mistake of the set-up: the
	# worker says so and exits 2 before it claims anything, rather than
	# dead-lettering every item of the queue
	worker t_direct direct2 --max-items 1 --exec "$TMP/no-such-program"
	is "direct: a missing program exits 2 at start" "$?" 2
	like "direct: ... and says which program and why" "$(cat "$LOG/direct2.log")" \
		"cannot run $TMP/no-such-program: No such file or directory"
	printf '#!/bin/sh\ncat >/dev/null\n' >"$TMP/not-executable.sh"
	worker t_direct direct3 --max-items 1 --exec "$TMP/not-executable.sh | cat"
	is "direct: a program that is not executable exits 2 at start, in the shell form too" "$?" 2
	is "direct: ... and no item was claimed or dead-lettered" \
		"$(sql "SELECT count(*) FILTER (WHERE attempt = 0) || '/' || count(*) || '/' ||
		        (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 't_direct')
		          FROM queue.items WHERE queue_name = 't_direct'")" "1/1/0"
	# a program that goes away while the worker runs (a deploy): its items
	# are given back, not dead-lettered, and the worker waits a poll
	sql "SELECT queue.create_queue('t_vanish')" >/dev/null
	cp "$TMP/direct.sh" "$TMP/vanishing.sh"
	bg_worker t_vanish direct4 --poll 1s --exec "$TMP/vanishing.sh"
	w=$BG
	sleep 1
	rm -f "$TMP/vanishing.sh"
	sql "SELECT queue.enqueue('t_vanish', '{\"n\": 1}')" >/dev/null
	sleep 2
	kill -TERM "$w"
	wait "$w"
	is "direct: a program gone after start gives its item back, no dead letter" \
		"$(sql "SELECT count(*) || '/' || (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 't_vanish')
		          FROM queue.items WHERE queue_name = 't_vanish' AND attempt = 0 AND worker IS NULL")" "1/0"
	like "direct: ... and the log says the program cannot be run" "$(cat "$LOG/direct4.log")" \
		"cannot run $TMP/vanishing.sh: No such file or directory"
fi

# -- case: LISTEN wakes an idle worker at once ---------------------------
if want listen; then
	sql "SELECT queue.create_queue('t_listen')" >/dev/null
	bg_worker t_listen listen1 --max-items 1 --poll 60s --exec 'cat >/dev/null; echo "{\"woke\": true}"'
	w=$BG
	sleep 1
	sql "SELECT queue.enqueue('t_listen', '{\"n\": 1}')" >/dev/null
	if wait_for 5 "SELECT count(*) = 1 FROM queue.history WHERE queue_name = 't_listen'"; then
		ok "listen: an enqueue wakes a worker that polls only every 60 s"
	else
		notok "listen: an enqueue wakes a worker that polls only every 60 s"
	fi
	wait "$w"
	is "listen: worker exits 0" "$?" 0
fi

# -- case: an enqueue while the worker reconnects is taken at once ---------
# Its notification went nowhere (the worker was not listening yet): once
# connected again the worker asks the queue at once instead of waiting for
# its next poll.
if want reconnwake; then
	sql "SELECT queue.create_queue('t_reconnwake')" >/dev/null
	"$WORKER" --dsn "$DSN application_name=reconnwake" --queue t_reconnwake --name reconnwake1 \
		--poll 30s --max-items 1 --exec 'cat >/dev/null; echo "{}"' \
		>"$LOG/reconnwake1.out" 2>"$LOG/reconnwake1.log" &
	w=$!
	PIDS+=("$w")
	sleep 1
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'reconnwake';
	     SELECT pg_sleep(0.2); SELECT queue.enqueue('t_reconnwake', '{\"n\": 1}')" >/dev/null
	if wait_for 8 "SELECT count(*) = 1 FROM queue.history WHERE queue_name = 't_reconnwake'"; then
		ok "reconnwake: an item enqueued while the worker reconnected was done within seconds, not at the next 30 s poll"
	else
		notok "reconnwake: an item enqueued while the worker reconnected was done within seconds, not at the next 30 s poll"
	fi
	kill -TERM "$w" 2>/dev/null
	wait "$w"
fi

# -- case: a paused queue gives nothing; the worker resumes with it -------
if want pause; then
	sql "SELECT queue.create_queue('t_pause'); SELECT queue.pause('t_pause', 'maintenance')" >/dev/null
	sql "SELECT queue.enqueue('t_pause', '{\"n\": 1}')" >/dev/null
	bg_worker t_pause pause1 --max-items 1 --poll 200ms --poll-max 1s --exec 'cat >/dev/null'
	w=$BG
	sleep 2
	is "pause: nothing is claimed while the queue is paused" \
		"$(sql "SELECT state FROM queue.items WHERE queue_name = 't_pause'")" "queued"
	sql "SELECT queue.resume('t_pause')" >/dev/null
	if wait_for 5 "SELECT count(*) = 1 FROM queue.history WHERE queue_name = 't_pause'"; then
		ok "pause: the worker picks the item up soon after resume"
	else
		notok "pause: the worker picks the item up soon after resume"
	fi
	wait "$w"
	is "pause: worker exits 0" "$?" 0
fi

# -- case: producers go on while the queue is paused -----------------------
# Every enqueue notifies, but a worker that found the queue paused asks for
# work no more often than --poll: a fleet does not poll a paused queue at
# the producers' rate.
if want pausednotify; then
	sql "SELECT queue.create_queue('t_pausednotify'); SELECT queue.pause('t_pausednotify', 'ERP down')" >/dev/null
	"$WORKER" --dsn "$DSN application_name=pausednotify options='-c log_min_duration_statement=0'" \
		--queue t_pausednotify --name pausednotify1 --poll 3s --poll-max 30s --exec 'cat >/dev/null' \
		>"$LOG/pausednotify1.out" 2>"$LOG/pausednotify1.log" &
	w=$!
	PIDS+=("$w")
	sleep 0.5
	before=$(grep -c 'execute .*FROM queue.dequeue' "$LOG/postgres.log")
	t0=$SECONDS
	for i in $(seq 1 20); do
		sql "SELECT queue.enqueue('t_pausednotify', '{\"n\": $i}')" >/dev/null
		sleep 0.1
	done
	sleep 0.5
	n=$(($(grep -c 'execute .*FROM queue.dequeue' "$LOG/postgres.log") - before))
	most=$(((SECONDS - t0) / 3 + 2))
	kill -TERM "$w"
	wait "$w"
	[ "$n" -le "$most" ] && ok "pausednotify: 20 enqueues into a paused queue made a claim at most every 3 s (--poll): $n" ||
		notok "pausednotify: 20 enqueues into a paused queue made a claim at most every 3 s (--poll)" "$n claims, at most $most expected"
	sql "SELECT queue.drop_queue('t_pausednotify', force => true)" >/dev/null
fi

# -- case: transient failures (exit 75) ----------------------------------
if want transient; then
	sql "SELECT queue.create_queue('t_tmp', max_attempts => 3, backoff_base => '200 ms',
	        backoff_factor => 1, backoff_jitter => 0)" >/dev/null
	sql "SELECT queue.enqueue('t_tmp', '{\"n\": 1}')" >/dev/null
	worker t_tmp tmp1 --idle-exit 2s --exec 'echo "calling the ERP" >&2; echo "ERP_TIMEOUT: no answer in 30 s" >&2; exit 75'
	is "transient: worker exits 0 on --idle-exit" "$?" 0
	is "transient: retried until attempts were spent, then dead-lettered" \
		"$(sql "SELECT reason || ' ' || attempts || ' ' || error_code FROM queue.dead_letters WHERE queue_name = 't_tmp'")" \
		"max_attempts 3 ERP_TIMEOUT"
	like "transient: the error is the end of stderr" \
		"$(sql "SELECT last_error FROM queue.dead_letters WHERE queue_name = 't_tmp'")" \
		'calling the ERP.*ERP_TIMEOUT: no answer in 30 s'
	is "transient: every failure is recorded with its code" \
		"$(sql "SELECT jsonb_array_length(errors) || ' ' || (errors->0->>'error_code') FROM queue.dead_letters WHERE queue_name = 't_tmp'")" \
		"3 ERP_TIMEOUT"
	like "transient: log shows retries then the dead letter" "$(cat "$LOG/tmp1.log")" \
		'attempt 1/3, transient, ERP_TIMEOUT, will retry.*attempt 3/3, transient, ERP_TIMEOUT, now a dead letter'
fi

# -- case: permanent failures --------------------------------------------
if want permanent; then
	sql "SELECT queue.create_queue('t_perm')" >/dev/null
	sql "SELECT queue.enqueue('t_perm', '{\"n\": 1}'); SELECT queue.enqueue('t_perm', '{\"n\": 2, \"sig\": 1}')" >/dev/null
	worker t_perm perm1 --max-items 2 --exec 'grep -q sig && kill -KILL $$; echo "BAD_INVOICE: no customer number" >&2; exit 3'
	is "permanent: worker exits 0" "$?" 0
	is "permanent: exit 3 dead-letters at once with the code" \
		"$(sql "SELECT reason || ' ' || attempts || ' ' || coalesce(error_code, '-') FROM queue.dead_letters WHERE queue_name = 't_perm' AND NOT payload ? 'sig'")" \
		"permanent 1 BAD_INVOICE"
	like "permanent: a command killed by a signal is a permanent failure" \
		"$(sql "SELECT reason || ' ' || attempts || ' ' || last_error FROM queue.dead_letters WHERE queue_name = 't_perm' AND payload ? 'sig'")" \
		'^permanent 1 .*(signal 9|Killed|137)'
fi

# -- case: commands that run past their lease ----------------------------
if want lease; then
	sql "SELECT queue.create_queue('t_lease', lease_timeout => '2 s')" >/dev/null
	sql "SELECT queue.enqueue('t_lease', '{\"n\": 1}')" >/dev/null
	worker t_lease lease1 --max-items 1 --exec 'sleep 5; echo "{\"slept\": 5}"'
	is "lease: a 5 s command under a 2 s lease completes on its first attempt (lease kept alive)" \
		"$(sql "SELECT attempts || ' ' || result::text FROM queue.history WHERE queue_name = 't_lease'")" \
		'1 {"slept": 5}'

	# a --lease longer than the queue's lease_timeout stays in force: a
	# heartbeat (which renews to the queue's timeout) is followed by the
	# worker's own extension
	sql "SELECT queue.create_queue('t_longlease', lease_timeout => '2 s')" >/dev/null
	sql "SELECT queue.enqueue('t_longlease', '{\"n\": 1}')" >/dev/null
	bg_worker t_longlease longlease1 --max-items 1 --lease 30s --heartbeat 1s --exec 'sleep 5; echo "{\"slept\": 5}"'
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_longlease' AND state = 'processing'"
	sleep 2.5
	wait_for 1 "SELECT lease_expires_at > now() + interval '20 s' FROM queue.items WHERE queue_name = 't_longlease'"
	is "lease: after heartbeats, a --lease of 30 s on a 2 s queue still runs 20 s ahead" "$?" 0
	wait "$w"
	is "lease: that item completes on its first attempt" \
		"$(sql "SELECT attempts FROM queue.history WHERE queue_name = 't_longlease'")" 1

	# --timeout: a hanging command is stopped and failed transiently
	sql "SELECT queue.create_queue('t_hang', lease_timeout => '2 s', max_attempts => 1)" >/dev/null
	sql "SELECT queue.enqueue('t_hang', '{\"n\": 1}')" >/dev/null
	worker t_hang hang1 --max-items 1 --timeout 1s --exec 'exec sleep 30'
	is "lease: --timeout stops a hanging command, error_code WORKER_TIMEOUT" \
		"$(sql "SELECT reason || ' ' || error_code FROM queue.dead_letters WHERE queue_name = 't_hang'")" \
		"max_attempts WORKER_TIMEOUT"

	# a worker that stalls past its lease loses the item to another claimant
	sql "SELECT queue.create_queue('t_lost', lease_timeout => '2 s')" >/dev/null
	sql "SELECT queue.enqueue('t_lost', '{\"n\": 1}')" >/dev/null
	bg_worker t_lost lost1 --idle-exit 2s --exec "sleep 10; touch '$TMP/lost-finished'"
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_lost' AND state = 'processing'"
	kill -STOP "$w"
	sleep 2.5
	thief=$(sql "SELECT attempt FROM queue.dequeue('t_lost', 'thief', 1, '1 min')")
	kill -CONT "$w"
	wait "$w"
	is "lease: the stalled worker exits 0" "$?" 0
	is "lease: another claimant took the item after the lease expired" "$thief" 2
	[ -e "$TMP/lost-finished" ] && notok "lease: the command of the lost lease was killed" || ok "lease: the command of the lost lease was killed"
	like "lease: the worker logged the loss and reported nothing" "$(cat "$LOG/lost1.log")" \
		'lease lost.*lost lease 1'
	is "lease: the item is still held by the new claimant" \
		"$(sql "SELECT state || ' ' || worker || ' ' || attempt FROM queue.items WHERE queue_name = 't_lost'")" \
		"processing thief 2"
fi

# -- case: checkpoints ---------------------------------------------------
if want checkpoint; then
	sql "SELECT queue.create_queue('t_ckpt', backoff_base => '200 ms', backoff_jitter => 0)" >/dev/null
	sql "SELECT queue.enqueue('t_ckpt', '{\"n\": 1}')" >/dev/null
	worker t_ckpt ckpt1 --idle-exit 2s --exec '
		if [ "$QUEUE_ATTEMPT" = 1 ]; then
			echo "{\"checkpoint\": {\"booked\": true}}"
			echo "ERP_TIMEOUT: gone after booking" >&2
			exit 75
		fi
		echo "{\"checkpoint\": {\"sent\": true}}"
		printf "{\"resumed_with\": %s}\n" "$QUEUE_PROGRESS"'
	is "checkpoint: worker exits 0" "$?" 0
	is "checkpoint: the retry saw the first attempt's progress" \
		"$(sql "SELECT attempts || ' ' || (result->'resumed_with')::text FROM queue.history WHERE queue_name = 't_ckpt'")" \
		'2 {"booked": true}'
	is "checkpoint: progress merged both checkpoints" \
		"$(sql "SELECT (SELECT i.progress FROM queue.item('t_ckpt', h.item_id) AS i)::text FROM queue.history h WHERE h.queue_name = 't_ckpt'" 2>/dev/null ||
		   echo 'queue.item has no progress column')" \
		'{"sent": true, "booked": true}'
fi

# -- case: a worker killed with SIGKILL ----------------------------------
if want sigkill; then
	sql "SELECT queue.create_queue('t_kill', lease_timeout => '2 s')" >/dev/null
	sql "SELECT queue.enqueue('t_kill', '{\"n\": 1}'); SELECT queue.enqueue('t_kill', '{\"n\": 2}')" >/dev/null
	bg_worker t_kill kill1 --concurrency 2 --exec "sleep 8; touch '$TMP/orphan-finished'"
	w=$BG
	wait_for 10 "SELECT count(*) = 2 FROM queue.items WHERE queue_name = 't_kill' AND state = 'processing'"
	kill -KILL "$w"
	wait "$w" 2>/dev/null
	sleep 0.3
	if pgrep -f "$TMP/orphan-finished" >/dev/null; then
		notok "sigkill: the killed worker's commands died with it"
	else
		ok "sigkill: the killed worker's commands died with it"
	fi
	t0=$SECONDS
	worker t_kill kill2 --concurrency 2 --max-items 2 --exec 'cat >/dev/null; echo "{\"attempt\": $QUEUE_ATTEMPT}"'
	is "sigkill: a second worker finishes" "$?" 0
	is "sigkill: both items came back via lease expiry and were completed on attempt 2" \
		"$(sql "SELECT count(*) FILTER (WHERE attempts = 2 AND worker = 'kill2') FROM queue.history WHERE queue_name = 't_kill'")" 2
	[ $((SECONDS - t0)) -le 10 ] && ok "sigkill: recovery took about one lease" ||
		notok "sigkill: recovery took about one lease" "took $((SECONDS - t0)) s"
fi

# -- case: a worker stopped with SIGTERM ---------------------------------
if want sigterm; then
	sql "SELECT queue.create_queue('t_term')" >/dev/null
	sql "SELECT queue.enqueue('t_term', '{\"slow\": false}'); SELECT queue.enqueue('t_term', '{\"slow\": true}');
	     SELECT queue.enqueue('t_term', '{\"slow\": true}')" >/dev/null
	# two slots, three claimed: one waits unstarted, one ends within grace
	bg_worker t_term term1 --concurrency 2 --batch 3 --grace 1s --exec \
		'if grep -q "\"slow\": true"; then exec sleep 30; else sleep 0.5; echo "{\"quick\": true}"; fi'
	w=$BG
	wait_for 10 "SELECT count(*) = 3 FROM queue.items WHERE queue_name = 't_term' AND state = 'processing'"
	kill -TERM "$w"
	wait "$w"
	is "sigterm: worker exits 0" "$?" 0
	is "sigterm: the item that finished within the grace period was completed" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_term'")" 1
	is "sigterm: the other two were released, attempt given back" \
		"$(sql "SELECT string_agg(state || '/' || attempt, ',') FROM queue.items WHERE queue_name = 't_term'")" \
		"queued/0,queued/0"
	like "sigterm: summary counts the releases" "$(cat "$LOG/term1.log")" 'released 2'
fi

# -- case: SIGTERM with the default grace releases within a supervisor's stop timeout
if want sigterm; then
	sql "SELECT queue.create_queue('t_term_default')" >/dev/null
	sql "SELECT queue.enqueue('t_term_default', '{\"n\": 1}')" >/dev/null
	bg_worker t_term_default termdef1 --exec 'exec sleep 60'
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_term_default' AND state = 'processing'"
	started=$SECONDS
	kill -TERM "$w"
	wait "$w"
	took=$((SECONDS - started))
	[ "$took" -le 8 ] && ok "sigterm: with the default --grace the worker releases and exits within 8 s (Docker stops after 10)" \
		|| notok "sigterm: with the default --grace the worker releases and exits within 8 s (Docker stops after 10): took $took s"
	is "sigterm: the running item was released, attempt given back" \
		"$(sql "SELECT state || '/' || attempt FROM queue.items WHERE queue_name = 't_term_default'")" "queued/0"
fi

# -- case: SIGTERM while the worker is still starting: it claims nothing --
if want sigterm; then
	sql "SELECT queue.create_queue('t_term_start')" >/dev/null
	sql "SELECT queue.enqueue('t_term_start', '{\"n\": 1}')" >/dev/null
	# the start's first look at the queue waits for this lock
	"$BINDIR/psql" -X -q -d "$DSN" -c "BEGIN; LOCK TABLE queue.queue_config; SELECT pg_sleep(2); COMMIT" \
		>/dev/null 2>&1 &
	locker=$!
	sleep 0.5
	bg_worker t_term_start termstart1 --exec 'cat >/dev/null; echo "{}"'
	w=$BG
	sleep 0.5
	kill -TERM "$w"
	wait "$locker"
	wait "$w"
	is "sigterm: a worker stopped while starting exits 0" "$?" 0
	is "sigterm: and claimed nothing after the signal" \
		"$(grep -c 'claimed item' "$LOG/termstart1.log") $(sql "SELECT count(*) FROM queue.events WHERE queue_name = 't_term_start' AND kind = 'claimed'")" "0 0"
fi

# -- case: SIGTERM to the worker and its commands at once (systemd's stop) -
# systemd's default KillMode=control-group, like `kill -TERM 0` in a
# supervisor script, sends SIGTERM to every process of the service: the
# commands die of it while the worker winds down. Their items are released
# as on any SIGTERM, not dead-lettered as commands that crashed.
if want sigterm; then
	sql "SELECT queue.create_queue('t_term_all')" >/dev/null
	sql "SELECT queue.enqueue('t_term_all', '{\"n\": 1}')" >/dev/null
	bg_worker t_term_all termall1 --grace 5s --exec 'exec sleep 30.25'
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_term_all' AND state = 'processing'"
	cmd=$(pgrep -f '^sleep 30.25' | head -1)
	kill -TERM "$w" "$cmd"
	wait "$w"
	is "sigterm: a worker stopped with its commands exits 0" "$?" 0
	is "sigterm: the item whose command died of the same SIGTERM was released, not dead-lettered" \
		"$(sql "SELECT coalesce((SELECT state || '/' || attempt FROM queue.items WHERE queue_name = 't_term_all'), 'gone')
		        || ' ' || (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 't_term_all')")" "queued/0 0"
fi

# -- case: the database restarts under a running command -----------------
if want restart; then
	sql "SELECT queue.create_queue('t_restart')" >/dev/null
	sql "SELECT queue.enqueue('t_restart', '{\"n\": 1}')" >/dev/null
	bg_worker t_restart rst1 --max-items 1 --exec 'sleep 3; echo "{\"survived\": true}"'
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_restart' AND state = 'processing'"
	"$BINDIR/pg_ctl" -D "$PGDATA" -m fast stop >/dev/null
	sleep 1
	start_pg
	wait "$w"
	is "restart: worker exits 0" "$?" 0
	is "restart: the item was reported once, after reconnecting" \
		"$(sql "SELECT attempts || ' ' || result::text FROM queue.history WHERE queue_name = 't_restart'")" \
		'1 {"survived": true}'
	like "restart: the log shows the reconnect" "$(cat "$LOG/rst1.log")" 'lost the database connection.*connected to the database again'
fi

# -- case: usage and configuration errors --------------------------------
if want usage; then
	sql "SELECT queue.create_queue('t_usage')" >/dev/null
	"$WORKER" --exec true >/dev/null 2>"$LOG/usage.err"
	is "usage: missing --queue exits 2" "$?" 2
	like "usage: and says what to fix" "$(cat "$LOG/usage.err")" '--queue is required'
	"$WORKER" --dsn "$DSN" --queue no_such_queue --exec true >/dev/null 2>"$LOG/usage.err"
	is "usage: unknown queue exits 1" "$?" 1
	like "usage: and names the fix" "$(cat "$LOG/usage.err")" "queue.create_queue\('no_such_queue'\)"
	"$WORKER" --dsn "host=$TMP port=1 dbname=postgres" --queue t_usage --exec true >/dev/null 2>"$LOG/usage.err"
	is "usage: an unreachable database at start exits 1" "$?" 1
	like "usage: and points at --dsn" "$(cat "$LOG/usage.err")" 'cannot connect.*Check --dsn'
	"$WORKER" --dsn "$DSN" --queue t_usage --exec true --lease 'soon' >/dev/null 2>"$LOG/usage.err"
	is "usage: a bad --lease exits 2" "$?" 2
	like "usage: --help documents the exit codes" "$("$WORKER" --help)" 'exit 75'
	like "usage: --version" "$("$WORKER" --version)" '^queue-worker [0-9]'
fi

# -- case: how a command stopped at shutdown ends ------------------------
if want grace; then
	# a command that finishes its work when told to stop
	cat >"$TMP/on-term.sh" <<'EOS'
#!/bin/sh
cat >/dev/null
trap 'echo "{\"finished_on\": \"TERM\"}"; exit 0' TERM
sleep 30 &
wait
EOS
	chmod +x "$TMP/on-term.sh"
	sql "SELECT queue.create_queue('t_grace')" >/dev/null
	sql "SELECT queue.enqueue('t_grace', '{\"n\": 1}')" >/dev/null
	bg_worker t_grace grace1 --grace 1s --exec "$TMP/on-term.sh"
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_grace' AND state = 'processing'"
	kill -TERM "$w"
	wait "$w"
	is "grace: worker exits 0" "$?" 0
	is "grace: a command that exits 0 when stopped at the end of the grace period completes its item" \
		"$(sql "SELECT attempts || ' ' || result::text FROM queue.history WHERE queue_name = 't_grace'")" \
		'1 {"finished_on": "TERM"}'

	# --timeout: the same command is failed, however it exits
	sql "SELECT queue.create_queue('t_tmo0', max_attempts => 1)" >/dev/null
	sql "SELECT queue.enqueue('t_tmo0', '{\"n\": 1}')" >/dev/null
	worker t_tmo0 tmo1 --max-items 1 --timeout 1s --exec "$TMP/on-term.sh"
	is "grace: a command stopped by --timeout that exits 0 is failed (WORKER_TIMEOUT)" \
		"$(sql "SELECT reason || ' ' || error_code FROM queue.dead_letters WHERE queue_name = 't_tmo0'")" \
		"max_attempts WORKER_TIMEOUT"

	# a command that always outlives the grace period: the attempt counts
	sql "SELECT queue.create_queue('t_outlive', max_attempts => 3)" >/dev/null
	sql "SELECT queue.enqueue('t_outlive', '{\"n\": 1}')" >/dev/null
	bg_worker t_outlive outlive1 --grace 1s --release-within 500ms --exec 'exec sleep 30'
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_outlive' AND state = 'processing'"
	sleep 0.6
	kill -TERM "$w"
	wait "$w"
	is "grace: worker exits 0 (outlive)" "$?" 0
	is "grace: a command stopped after running longer than --release-within counts its attempt" \
		"$(sql "SELECT attempt || ' ' || error_code
		        FROM queue.item('t_outlive', (SELECT item_id FROM queue.items WHERE queue_name = 't_outlive'))" 2>&1)" \
		"1 WORKER_STOPPED"
	like "grace: the log tells the outcome of a stopped command, not a release it did not make" \
		"$(grep -E 'still running at the end of the grace period|WORKER_STOPPED' "$LOG/outlive1.log" | grep -c 'releasing')" '^0$'
fi

# -- case: a command's own children do not outlive its item ---------------
if want children; then
	sql "SELECT queue.create_queue('t_kids', lease_timeout => '2 s')" >/dev/null
	sql "SELECT queue.enqueue('t_kids', '{\"n\": 1}'); SELECT queue.enqueue('t_kids', '{\"n\": 2}')" >/dev/null
	bg_worker t_kids kids1 --concurrency 2 --exec 'sleep 41.5 | cat'
	w=$BG
	wait_for 10 "SELECT count(*) = 2 FROM queue.items WHERE queue_name = 't_kids' AND state = 'processing'"
	sleep 0.3
	kill -KILL "$w"
	wait "$w" 2>/dev/null
	sleep 0.5
	is "children: a pipeline's processes die with a worker killed by SIGKILL" \
		"$(pgrep -f '^sleep 41.5' | wc -l)" 0

	sql "SELECT queue.create_queue('t_kids2')" >/dev/null
	sql "SELECT queue.enqueue('t_kids2', '{\"n\": 1}')" >/dev/null
	worker t_kids2 kids2 --max-items 1 --exec '(sleep 42.5 >/dev/null 2>&1 &); echo "{\"left\": \"a child\"}"'
	is "children: worker exits 0" "$?" 0
	sleep 0.3
	is "children: a background child of a finished command is stopped with it" \
		"$(pgrep -f '^sleep 42.5' | wc -l)" 0
	is "children: the item completed" \
		"$(sql "SELECT result::text FROM queue.history WHERE queue_name = 't_kids2'")" '{"left": "a child"}'
fi

# -- case: poll() fails: the worker does not leave its commands behind ----
if want pollfail && command -v cc >/dev/null; then
	cat >"$TMP/failpoll.c" <<'EOS'
/* poll() with two or more descriptors fails once the file $FAIL_POLL exists */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>
int
poll(struct pollfd *fds, nfds_t n, int timeout)
{
	static int (*real) (struct pollfd *, nfds_t, int);
	const char *flag = getenv("FAIL_POLL");

	if (real == NULL)
		real = (int (*) (struct pollfd *, nfds_t, int)) dlsym(RTLD_NEXT, "poll");
	if (n >= 2 && flag && access(flag, F_OK) == 0)
	{
		errno = ENOMEM;
		return -1;
	}
	return real(fds, n, timeout);
}
EOS
	cc -shared -fPIC -o "$TMP/failpoll.so" "$TMP/failpoll.c" -ldl
	sql "SELECT queue.create_queue('t_pollfail')" >/dev/null
	sql "SELECT queue.enqueue('t_pollfail', '{\"n\": 1}')" >/dev/null
	FAIL_POLL="$TMP/poll-fails" LD_PRELOAD="$TMP/failpoll.so" \
		ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
		bg_worker t_pollfail pollfail1 --grace 10s --heartbeat 200ms --exec 'sleep 3; echo "{\"finished\": true}"'
	w=$BG
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_pollfail' AND state = 'processing'"
	touch "$TMP/poll-fails"
	wait "$w"
	is "pollfail: the worker exits 1" "$?" 1
	is "pollfail: the running command finished and its item was completed first" \
		"$(sql "SELECT result::text FROM queue.history WHERE queue_name = 't_pollfail'")" '{"finished": true}'
	like "pollfail: the log says why it stopped" "$(cat "$LOG/pollfail1.log")" 'poll: .*stopping'
fi

# -- case: commands that cannot be started, a /tmp that cannot be written -
if want startfail && command -v cc >/dev/null; then
	cat >"$TMP/failstart.c" <<'EOS'
/* tmpfile() fails (a read-only /tmp) while $RO_TMP exists, fork() while $NO_FORK does */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int
flag(const char *name)
{
	const char *f = getenv(name);

	return f && access(f, F_OK) == 0;
}
FILE *
tmpfile(void)
{
	static FILE *(*real) (void);

	if (flag("RO_TMP"))
	{
		errno = EROFS;
		return NULL;
	}
	if (real == NULL)
		real = (FILE *(*) (void)) dlsym(RTLD_NEXT, "tmpfile");
	return real();
}
FILE *
tmpfile64(void)
{
	return tmpfile();
}
pid_t
fork(void)
{
	static pid_t (*real) (void);

	if (flag("NO_FORK"))
	{
		errno = EAGAIN;
		return -1;
	}
	if (real == NULL)
		real = (pid_t (*) (void)) dlsym(RTLD_NEXT, "fork");
	return real();
}
EOS
	cc -shared -fPIC -o "$TMP/failstart.so" "$TMP/failstart.c" -ldl
	# a read-only /tmp (a container's read-only root file system)
	sql "SELECT queue.create_queue('t_rotmp')" >/dev/null
	sql "SELECT queue.enqueue('t_rotmp', '{\"n\": \"ünï 😀\"}')" >/dev/null
	touch "$TMP/ro-tmp"
	RO_TMP="$TMP/ro-tmp" LD_PRELOAD="$TMP/failstart.so" ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
		timeout -k 3 15 "$WORKER" --dsn "$DSN" --queue t_rotmp --name rotmp1 --poll 200ms --idle-exit 2s \
		--exec 'cat' >"$LOG/rotmp1.out" 2>"$LOG/rotmp1.log"
	is "startfail: with /tmp not writable the worker exits 0" "$?" 0
	is "startfail: and the payload still reached the command" \
		"$(sql "SELECT (result = payload)::text FROM queue.history WHERE queue_name = 't_rotmp'")" true

	# fork() failing (a process limit reached): no claim-and-release storm
	sql "SELECT queue.create_queue('t_nofork')" >/dev/null
	NO_FORK="$TMP/no-fork" LD_PRELOAD="$TMP/failstart.so" ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
		bg_worker t_nofork nofork1 --poll 500ms --idle-exit 3s --exec 'cat >/dev/null; echo "{\"ran\": true}"'
	w=$BG
	sleep 1
	touch "$TMP/no-fork"
	sql "SELECT queue.enqueue('t_nofork', '{\"n\": 1}')" >/dev/null
	sleep 2
	rm -f "$TMP/no-fork"
	wait "$w"
	is "startfail: after fork failed the worker still exits 0" "$?" 0
	n=$(grep -c 'claimed item' "$LOG/nofork1.log")
	[ "$n" -le 10 ] && ok "startfail: while commands cannot start, the item is claimed again only every --poll (2 s: $n claims)" ||
		notok "startfail: while commands cannot start, the item is claimed again only every --poll" "$n claims in 2 s"
	is "startfail: once commands start again the item is done" \
		"$(sql "SELECT result::text FROM queue.history WHERE queue_name = 't_nofork'")" '{"ran": true}'
fi

# has_arg FUNCTION ARG : does this server's queue.FUNCTION take ARG?
has_arg() {
	sql "SELECT coalesce(bool_or('$2' = ANY (p.proargnames)), false) FROM pg_proc p
	     WHERE p.proname = '$1' AND p.pronamespace = 'queue'::regnamespace"
}
skip() { T=$((T + 1)); echo "ok $T - $1 # SKIP $2"; }

# -- case: a bot restarted under its name gets its items back at once ----
if want samename; then
	if [ "$(has_arg register_worker restart)" = t ]; then
		sql "SELECT queue.create_queue('t_same', lease_timeout => '5 min')" >/dev/null
		sql "SELECT queue.enqueue('t_same', '{\"n\": 1}')" >/dev/null
		bg_worker t_same same1 --exec 'exec sleep 30'
		w=$BG
		wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_same' AND state = 'processing'"
		kill -KILL "$w"
		wait "$w" 2>/dev/null
		if grep -q 'held under this name' "$LOG/same1.log"; then
			notok "samename: a worker starting under a new name does not log leases it did not end" \
				"$(grep 'held under this name' "$LOG/same1.log")"
		else
			ok "samename: a worker starting under a new name does not log leases it did not end"
		fi
		t0=$SECONDS
		worker t_same same1 --max-items 1 --exec 'cat >/dev/null; echo "{\"attempt\": $QUEUE_ATTEMPT}"'
		is "samename: the restarted worker exits 0" "$?" 0
		is "samename: it got its predecessor's item back at once, not after the 5 min lease" \
			"$(sql "SELECT attempts || ' ' || worker FROM queue.history WHERE queue_name = 't_same'")" "2 same1"
		[ $((SECONDS - t0)) -le 10 ] && ok "samename: within seconds" ||
			notok "samename: within seconds" "took $((SECONDS - t0)) s"
		like "samename: the log says the earlier leases were ended" "$(cat "$LOG/same1.log")" 'ended 1 lease an earlier process held'
	else
		skip "samename: restart under the same name" "register_worker has no restart argument here"
	fi
fi

# -- case: a registration that meets a lock timeout at start is sent again
# register_worker(restart => true) at start waits behind a lock past the
# role's lock_timeout: the worker registers once the lock is gone, ending
# the leases its predecessor held under the name, before it claims.
if want register; then
	if [ "$(has_arg register_worker restart)" = t ]; then
		sql "SELECT queue.create_queue('t_register', lease_timeout => '5 min')" >/dev/null
		sql "SELECT queue.enqueue('t_register', '{\"n\": 1}');
		     SELECT count(*) FROM queue.dequeue('t_register', 'reg1')" >/dev/null
		"$BINDIR/psql" -X -q -d "$DSN" -c "BEGIN; LOCK TABLE queue.worker_registry IN EXCLUSIVE MODE;
			SELECT pg_sleep(2); COMMIT" >/dev/null 2>&1 &
		locker=$!
		sleep 0.5
		timeout 60 "$WORKER" --dsn "$DSN options='-c lock_timeout=300ms'" --queue t_register --name reg1 \
			--poll 200ms --idle-exit 4s --exec 'cat >/dev/null; echo "{\"attempt\": $QUEUE_ATTEMPT}"' \
			>"$LOG/reg1.out" 2>"$LOG/reg1.log"
		is "register: worker exits 0" "$?" 0
		wait "$locker"
		is "register: the restart was made once the lock was gone: the predecessor's item came back and was done" \
			"$(sql "SELECT attempts || ' ' || worker FROM queue.history WHERE queue_name = 't_register'")" "2 reg1"
	else
		skip "register: a registration that met a lock timeout" "register_worker has no restart argument here"
	fi
fi

# -- case: a worker name another role registered: the worker refuses to start
if want owner; then
	sql "CREATE ROLE qw_other LOGIN IN ROLE queue_worker;
	     CREATE ROLE qw_me LOGIN IN ROLE queue_worker" >/dev/null
	sql "SELECT queue.create_queue('t_owner')" >/dev/null
	sql "SET ROLE qw_other; SELECT queue.register_worker('owned-name')" >/dev/null
	"$WORKER" --dsn "$DSN user=qw_me" --queue t_owner --name owned-name --max-items 1 --idle-exit 1s \
		--exec true >"$LOG/owner.out" 2>"$LOG/owner.log"
	is "owner: a worker name that another role registered stops the worker with exit 1" "$?" 1
	like "owner: the worker says whose name it is" "$(cat "$LOG/owner.log")" 'belongs to role qw_other'
	sql "DELETE FROM queue.worker_registry WHERE worker = 'owned-name'; DROP ROLE qw_other; DROP OWNED BY qw_me; DROP ROLE qw_me" >/dev/null
fi

# -- case: a queue closed to the worker's role: the worker says so --------
# (a reader grant of the queue to another role hides it from this one's
# queue.queues; the queue exists all the same)
if want closedqueue; then
	sql "CREATE ROLE qw_tenant LOGIN IN ROLE queue_worker; CREATE ROLE qw_grantee" >/dev/null
	sql "SELECT queue.create_queue('t_closed');
	     SELECT queue.grant_queue('t_closed', 'qw_grantee', 'reader');
	     SELECT queue.grant_queue('t_closed', 'qw_grantee', 'worker')" >/dev/null
	"$WORKER" --dsn "$DSN user=qw_tenant" --queue t_closed --name closed-1 --idle-exit 1s \
		--exec true >"$LOG/closedqueue.out" 2>"$LOG/closedqueue.log"
	is "closedqueue: a queue closed to the worker's role stops the worker with exit 1" "$?" 1
	like "closedqueue: the worker says the queue is not granted to it" "$(cat "$LOG/closedqueue.log")" \
		'permission denied for queue "t_closed"'
	like "closedqueue: and does not claim that the queue does not exist" \
		"$(grep -c 'does not exist' "$LOG/closedqueue.log")" '^0$'
	"$WORKER" --dsn "$DSN user=qw_tenant" --queue t_nosuch --name closed-2 --idle-exit 1s \
		--exec true >"$LOG/closedqueue2.out" 2>"$LOG/closedqueue2.log"
	is "closedqueue: an unknown queue stops the worker with exit 1" "$?" 1
	like "closedqueue: the worker says that queue does not exist" "$(cat "$LOG/closedqueue2.log")" \
		'queue "t_nosuch" does not exist'
	sql "SELECT queue.drop_queue('t_closed', force => true); DROP ROLE qw_grantee;
	     DROP OWNED BY qw_tenant; DROP ROLE qw_tenant" >/dev/null
fi

# -- case: a claim whose reply was lost comes back within one lease -------
if want lostreply; then
	if [ "$(has_arg register_worker restart)" = t ]; then
		sql "SELECT queue.create_queue('t_lostreply', lease_timeout => '3 s')" >/dev/null
		bg_worker t_lostreply lr1 --heartbeat 300ms --poll 200ms --idle-exit 10s \
			--exec 'cat >/dev/null; echo "{\"attempt\": $QUEUE_ATTEMPT}"'
		w=$BG
		sleep 1
		# A claim made as lr1 on a connection that then closed, as when the
		# worker's connection dies before dequeue's reply arrives: the
		# worker never heard of it and goes on heartbeating from its own.
		# Enqueued and claimed in one transaction, so the worker cannot
		# claim it first.
		sql "BEGIN; SELECT queue.heartbeat('lr1'); SELECT queue.enqueue('t_lostreply', '{\"n\": 1}');
		     SELECT count(*) FROM queue.dequeue('t_lostreply', 'lr1', 1); COMMIT" >"$LOG/lostreply.sql" 2>&1
		is "lostreply: the claim was made" "$(tail -1 "$LOG/lostreply.sql")" 1
		t0=$SECONDS
		if wait_for 15 "SELECT count(*) = 1 FROM queue.history WHERE queue_name = 't_lostreply'"; then
			ok "lostreply: the worker's heartbeat did not keep the lost claim alive"
		else
			notok "lostreply: the worker's heartbeat did not keep the lost claim alive" \
				"$(sql "SELECT state || ' ' || coalesce(worker, '-') || ' ' || coalesce(lease_expires_at::text, '-') FROM queue.items WHERE queue_name = 't_lostreply'")"
		fi
		[ $((SECONDS - t0)) -le 8 ] && ok "lostreply: it came back within about one lease (3 s)" ||
			notok "lostreply: it came back within about one lease (3 s)" "took $((SECONDS - t0)) s"
		kill -TERM "$w" 2>/dev/null
		wait "$w"
		is "lostreply: then the same worker processed it" \
			"$(sql "SELECT attempts || ' ' || worker FROM queue.history WHERE queue_name = 't_lostreply'")" "2 lr1"
	else
		skip "lostreply: a lost claim is not kept alive by the heartbeat" "register_worker has no restart argument here"
	fi
fi

# -- case: the operator cancels a running item ---------------------------
if want cancel; then
	if [ "$(sql "SELECT count(*) FROM pg_attribute WHERE attrelid = 'queue.item_live'::regclass
	             AND attname = 'cancel_requested_at' AND NOT attisdropped")" = 1 ]; then
		sql "SELECT queue.create_queue('t_cancel', lease_timeout => '3 s')" >/dev/null
		id=$(sql "SELECT queue.enqueue('t_cancel', '{\"n\": 1}')")
		bg_worker t_cancel cancel1 --concurrency 2 --idle-exit 5s --exec 'grep -q "\"n\": 1" && exec sleep 60.5; echo "{}"'
		w=$BG
		wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_cancel' AND state = 'processing'"
		sql "SELECT queue.cancel('t_cancel', $id, 'wrong customer')" >/dev/null
		t0=$SECONDS
		while [ $((SECONDS - t0)) -lt 10 ] && pgrep -f '^sleep 60.5' >/dev/null; do sleep 0.1; done
		[ $((SECONDS - t0)) -le 2 ] && ! pgrep -f '^sleep 60.5' >/dev/null &&
			ok "cancel: the command stopped within one lease-extension interval (1 s)" ||
			notok "cancel: the command stopped within one lease-extension interval (1 s)" "took $((SECONDS - t0)) s"
		wait_for 10 "SELECT count(*) = 1 FROM queue.dead_letters WHERE queue_name = 't_cancel'"
		is "cancel: the item is a dead letter, reason cancelled" \
			"$(sql "SELECT reason FROM queue.dead_letters WHERE queue_name = 't_cancel'")" cancelled
		sql "SELECT queue.enqueue('t_cancel', '{\"n\": 2}')" >/dev/null
		if wait_for 10 "SELECT count(*) = 1 FROM queue.history WHERE queue_name = 't_cancel'"; then
			ok "cancel: the worker goes on with the next item"
		else
			notok "cancel: the worker goes on with the next item"
		fi
		wait "$w"
		is "cancel: the worker exits 0" "$?" 0
		like "cancel: its log says the item was cancelled" "$(cat "$LOG/cancel1.log")" \
			'item [0-9]+ was cancelled.*cancelled item handed back.*cancelled 1'

		# a command that checkpoints often learns of the cancel from a
		# refused checkpoint before any lease extension: the item is handed
		# back all the same (a dead letter at once, not at lease expiry)
		sql "SELECT queue.create_queue('t_cancel_ckpt', lease_timeout => '60 s')" >/dev/null
		id=$(sql "SELECT queue.enqueue('t_cancel_ckpt', '{\"n\": 1}')")
		bg_worker t_cancel_ckpt cancel2 --idle-exit 3s --exec \
			'cat >/dev/null; i=0; while [ $i -lt 300 ]; do i=$((i + 1)); echo "{\"checkpoint\": {\"step\": $i}}"; sleep 0.1; done'
		w=$BG
		wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_cancel_ckpt' AND state = 'processing'"
		sleep 0.5
		sql "SELECT queue.cancel('t_cancel_ckpt', $id, 'wrong customer')" >/dev/null
		if wait_for 5 "SELECT count(*) = 1 FROM queue.dead_letters WHERE queue_name = 't_cancel_ckpt' AND reason = 'cancelled'"; then
			ok "cancel: an item cancelled while its command checkpoints is a dead letter at once"
		else
			notok "cancel: an item cancelled while its command checkpoints is a dead letter at once" \
				"$(sql "SELECT state || ' ' || coalesce(lease_expires_at::text, '-') FROM queue.items WHERE queue_name = 't_cancel_ckpt'")"
		fi
		wait "$w"
		like "cancel: the log says cancelled, not a lost lease" "$(cat "$LOG/cancel2.log")" \
			'was cancelled.*lost lease 0, released 0, cancelled 1'

		# a command that finished (exit 0) before the worker learnt of the
		# cancel: its complete comes first and wins. The command cancels its
		# own item, then exits 0 while a process outside its group (started
		# first, so that it has left the group) keeps stdout open for a
		# moment, during which the lease (1 s) is extended
		sql "SELECT queue.create_queue('t_cancel_done', lease_timeout => '1 s')" >/dev/null
		sql "SELECT queue.enqueue('t_cancel_done', '{\"n\": 1}')" >/dev/null
		worker t_cancel_done cancel3 --max-items 1 -v --exec "
			cat >/dev/null
			setsid sleep 1.5 &
			sleep 0.1
			'$BINDIR/psql' -X -q -d '$DSN' -c \"SELECT queue.cancel('t_cancel_done', \$QUEUE_ITEM_ID)\" >/dev/null
			echo '{\"done\": true}'"
		is "cancel: a command that exited 0 before the cancel was seen completes its item" \
			"$(sql "SELECT coalesce((SELECT result::text FROM queue.history WHERE queue_name = 't_cancel_done'), 'not completed')
			        || ' ' || (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 't_cancel_done')")" '{"done": true} 0'
	else
		skip "cancel: a running item cancelled" "cancel of processing items is not in this extension"
	fi
fi

# -- case: --labels reach register_worker ---------------------------------
if want labels; then
	sql "SELECT queue.create_queue('t_labels')" >/dev/null
	"$WORKER" --dsn "$DSN" --queue t_labels --labels 'gpu,,x' --exec true >/dev/null 2>"$LOG/labels.err"
	is "labels: a malformed --labels exits 2" "$?" 2
	if [ "$(has_arg register_worker labels)" = t ]; then
		worker t_labels lab1 --labels gpu,eu-west --idle-exit 300ms --exec true
		is "labels: worker exits 0" "$?" 0
		is "labels: the worker is registered with its labels" \
			"$(sql "SELECT labels::text FROM queue.worker_registry WHERE worker = 'lab1'")" "{gpu,eu-west}"
		if [ "$(has_arg enqueue requires)" = t ]; then
			sql "SELECT queue.enqueue('t_labels', '{\"n\": 1}', requires => '{gpu}')" >/dev/null
			worker t_labels nolab --idle-exit 1s --exec true
			is "labels: a worker without the label does not get the item" \
				"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_labels'")" 0
			worker t_labels lab2 --labels gpu --max-items 1 --exec true
			is "labels: a worker with the label does" \
				"$(sql "SELECT worker FROM queue.history WHERE queue_name = 't_labels'")" lab2
		fi
	else
		"$WORKER" --dsn "$DSN" --queue t_labels --labels gpu --exec true >/dev/null 2>"$LOG/labels.err"
		is "labels: on a server without labels, --labels exits 1" "$?" 1
	fi
fi

# -- case: behind a pooler in transaction mode, the worker polls ---------
if want pooler; then
	PGB=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null)
	if [ -n "$PGB" ]; then
		BPORT=$((PORT + 1000))
		echo '"postgres" ""' >"$TMP/userlist.txt"
		cat >"$TMP/pgbouncer.ini" <<EOF
[databases]
postgres = host=$TMP port=$PORT dbname=postgres
[pgbouncer]
listen_addr =
listen_port = $BPORT
unix_socket_dir = $TMP
auth_type = trust
auth_file = $TMP/userlist.txt
pool_mode = transaction
default_pool_size = 3
min_pool_size = 3
server_round_robin = 1
logfile = $LOG/pgbouncer.log
pidfile = $TMP/pgbouncer.pid
EOF
		"$PGB" -d "$TMP/pgbouncer.ini" >/dev/null 2>&1
		sleep 1
		[ -f "$TMP/pgbouncer.pid" ] && PIDS+=("$(cat "$TMP/pgbouncer.pid")")
		sql "SELECT queue.create_queue('t_pooled')" >/dev/null
		sql "SELECT queue.enqueue('t_pooled', '{\"n\": 1}')" >/dev/null
		# open the pool's server connections first
		for _ in 1 2 3; do
			"$BINDIR/psql" -X -q -A -t -h "$TMP" -p "$BPORT" -d postgres -c 'SELECT pg_sleep(0.3)' >/dev/null 2>&1 &
		done
		wait
		timeout 60 "$WORKER" --dsn "host=$TMP port=$BPORT dbname=postgres" --queue t_pooled --name pooled1 \
			--poll 200ms --max-items 1 --exec 'cat >/dev/null; echo "{}"' >"$LOG/pooled1.out" 2>"$LOG/pooled1.log"
		is "pooler: the worker works through PgBouncer in transaction mode" "$?" 0
		like "pooler: and says that LISTEN needs a direct connection" "$(cat "$LOG/pooled1.log")" \
			'LISTEN needs a direct connection.*polls every 0.2 s'
		[ -f "$TMP/pgbouncer.pid" ] && kill "$(cat "$TMP/pgbouncer.pid")" 2>/dev/null
	else
		skip "pooler: LISTEN behind PgBouncer" "pgbouncer is not installed"
	fi
fi

# -- case: text from the database reaches the terminal harmless ------------
if want control; then
	evil=$'bot\e]0;owned\a\e[2J'
	sql "SELECT queue.create_queue('t_ctl')" >/dev/null
	sql "SELECT queue.enqueue('t_ctl', '{}')" >/dev/null
	timeout 60 "$WORKER" --dsn "$DSN" --queue t_ctl --name "$evil" --poll 200ms --max-items 1 \
		--exec 'cat >/dev/null; printf "BAD_INPUT: \033]52;c;aGk=\007 rejected\n" >&2; exit 3' \
		>"$LOG/ctl.out" 2>"$LOG/ctl.log"
	is "control: the worker with an escape-laden name exits 0" "$?" 0
	sql "SELECT queue.pause('t_ctl', E'deploy \\x1b]52;c;aGk=\\x07 \\u009b2J now \\u202e')" >/dev/null
	"$TOP" --dsn "$DSN" --once >"$LOG/ctl-top.out" 2>&1
	is "control: queue-top --once exits 0" "$?" 0
	# raw C0 controls other than newline, DEL, or UTF-8 encoded C1 controls
	raw_controls() { LC_ALL=C grep -c $'[\x01-\x09\x0b-\x1f\x7f]\|\xc2[\x80-\x9f]' "$1"; }
	is "control: queue-top prints no raw control characters" "$(raw_controls "$LOG/ctl-top.out")" 0
	like "control: queue-top shows the worker name's escapes visibly" "$(cat "$LOG/ctl-top.out")" \
		'bot\\x1b\]0;owned\\x07\\x1b\[2J'
	like "control: queue-top shows the pause reason's OSC 52 and C1 visibly" "$(cat "$LOG/ctl-top.out")" \
		'deploy \\x1b\]52;c;aGk=\\x07 \\u009b2J now \\u202e'
	is "control: the worker's log has no raw control characters" "$(raw_controls "$LOG/ctl.log")" 0
	like "control: the worker's log shows them visibly" "$(cat "$LOG/ctl.log")" \
		'bot\\x1b\]0;owned\\x07\\x1b\[2J: .*BAD_INPUT: \\x1b\]52;c;aGk=\\x07 rejected'
	sql "SELECT queue.resume('t_ctl')" >/dev/null
fi

# -- case: queue-top --once ----------------------------------------------
if want top; then
	sql "SELECT queue.create_queue('t_top'); SELECT queue.enqueue('t_top', '{}'); SELECT queue.enqueue('t_top', '{}')" >/dev/null
	worker t_top top1 --max-items 1 --exec true
	out=$("$TOP" --dsn "$DSN" --once 2>&1)
	is "top: --once exits 0" "$?" 0
	like "top: shows the queues and their numbers" "$out" 't_top +1 +0 +0 +0 +0 '
	like "top: shows the sections" "$out" 'HEALTH'
	like "top: shows the workers of the queue given with --queue" \
		"$("$TOP" --dsn "$DSN" --once --queue t_top 2>&1)" 'top1 +(idle|active)'
	sql "SELECT queue.enqueue('t_top', '{}'); SELECT count(*) FROM queue.dequeue('t_top', 'top_dq_only')" >/dev/null
	like "top: --queue shows a worker that holds the queue's items without having registered it" \
		"$("$TOP" --dsn "$DSN" --once --queue t_top 2>&1)" 'top_dq_only +active'
	sql "SELECT queue.complete('t_top', item_id, lease_token) FROM queue.item_live
	      WHERE queue_name = 't_top' AND worker = 'top_dq_only'" >/dev/null
	is "top: --queue leaves out the other queues" \
		"$("$TOP" --dsn "$DSN" --once --queue t_top 2>&1 | grep '^t_' | grep -vc '^t_top ')" 0
	if printf '%s' "$out" | grep -q $'\033'; then notok "top: --once prints no escape codes"; else ok "top: --once prints no escape codes"; fi
	sql "SELECT queue.set_limit('t_top', 'sap', max_in_flight => 3); SELECT queue.set_limit('t_top', NULL, rate => 100, per => '1 min')" >/dev/null
	out=$("$TOP" --dsn "$DSN" --once --queue t_top 2>&1)
	like "top: shows a key's cap in the limits panel" "$out" 't_top +sap +0/3 '
	like "top: shows the queue-wide rate in the limits panel" "$out" 't_top +\(whole queue\) +0 +0/100 per 00:01:00'
	# failures of the last minute are unknown where audit = 'none' keeps no events
	sql "SELECT queue.create_queue('t_top_quiet', audit => 'none'); SELECT queue.enqueue('t_top_quiet', '{}');
	     SELECT queue.fail('t_top_quiet', item_id, lease_token, 'boom') FROM queue.dequeue('t_top_quiet', 'q1')" >/dev/null
	like "top: fail/m of a queue with audit = 'none' shows '-', not 0" \
		"$("$TOP" --dsn "$DSN" --once --queue t_top_quiet 2>&1)" ' t_top_quiet +[0-9].* +0 +- +running'
	sql "SELECT queue.drop_queue('t_top_quiet', force => true)" >/dev/null
	# long queue names that differ at their end stay apart
	sql "SELECT queue.create_queue('t_top_invoices_eu_west_a'); SELECT queue.create_queue('t_top_invoices_eu_west_b')" >/dev/null
	out=$("$TOP" --dsn "$DSN" --once 2>&1)
	is "top: two long names that differ at their end show as two names" \
		"$(printf '%s\n' "$out" | grep -E '^t_top_inv' | awk '{print $1}' | sort -u | wc -l)" 2
	sql "SELECT queue.drop_queue('t_top_invoices_eu_west_a'); SELECT queue.drop_queue('t_top_invoices_eu_west_b')" >/dev/null
	"$TOP" --dsn "host=$TMP port=1 dbname=postgres" --once >/dev/null 2>&1
	is "top: --once exits 1 when the database is unreachable" "$?" 1
	"$TOP" --interval 0 >/dev/null 2>&1
	is "top: a bad --interval exits 2" "$?" 2
	# a fleet after some deploys: the names of processes that are gone (the
	# default host-pid names) stay offline for days; the live ones must show
	sql "SELECT queue.register_worker('a_gone_' || lpad(i::text, 2, '0'), '{t_top}') FROM generate_series(1, 25) i;
	     UPDATE queue.worker_registry SET last_seen = now() - interval '1 hour' WHERE worker LIKE 'a_gone_%';
	     SELECT queue.enqueue('t_top', '{}'); SELECT count(*) FROM queue.dequeue('t_top', 'zz_live')" >/dev/null
	out=$("$TOP" --dsn "$DSN" --once 2>&1)
	like "top: a working worker is listed ahead of offline ones, not cut off behind them" "$out" 'zz_live +active'
	sql "SELECT queue.complete('t_top', item_id, lease_token) FROM queue.item_live
	      WHERE queue_name = 't_top' AND worker = 'zz_live';
	     DELETE FROM queue.worker_registry WHERE worker LIKE 'a_gone_%' OR worker = 'zz_live'" >/dev/null
fi

# -- case: queue-top talks UTF-8 whatever client encoding the environment asks
# queue-top shows text as UTF-8 (it counts columns by UTF-8 characters and
# shows other bytes as \x escapes): a PGCLIENTENCODING left over on a
# legacy host must not turn a pause reason's characters into escapes.
if want topencoding; then
	sql "SELECT queue.create_queue('t_topencoding'); SELECT queue.pause('t_topencoding', 'Zoë: ERP down €')" >/dev/null
	out=$(PGCLIENTENCODING=LATIN9 "$TOP" --dsn "$DSN" --once --queue t_topencoding 2>&1)
	is "topencoding: queue-top --once exits 0 under PGCLIENTENCODING=LATIN9" "$?" 0
	like "topencoding: ... and shows the pause reason's characters, not escapes" "$out" 'paused: Zoë: ERP down €'
	sql "SELECT queue.drop_queue('t_topencoding')" >/dev/null
fi

# -- case: queue-top for a reader whose queues are all closed to it -------
# Reader grants of every queue to other roles leave a reader nothing to
# see: queue-top says the queues may be closed to it, rather than that
# there are none and that it should create one.
if want topclosed; then
	sql "CREATE ROLE qt_tenant LOGIN IN ROLE queue_reader; CREATE ROLE qt_grantee" >/dev/null
	sql "SELECT queue.create_queue('t_topclosed'); SELECT queue.grant_queue('t_topclosed', 'qt_grantee', 'reader')" >/dev/null
	# every other queue of this cluster closed to the tenant as well
	sql "SELECT queue.grant_queue(queue_name, 'qt_grantee', 'reader') FROM queue.queues" >/dev/null
	out=$("$TOP" --dsn "$DSN user=qt_tenant" --once 2>&1)
	is "topclosed: queue-top --once exits 0" "$?" 0
	like "topclosed: it says no queue is open to this database user" "$out" 'no queue is open to this database user'
	is "topclosed: ... and does not suggest creating one" "$(printf '%s\n' "$out" | grep -c 'create_queue')" 0
	sql "SELECT queue.revoke_queue(queue_name, 'qt_grantee', 'reader') FROM queue.queues;
	     SELECT queue.drop_queue('t_topclosed'); DROP ROLE qt_grantee; DROP ROLE qt_tenant" >/dev/null
fi

# -- case: queue-top tells long worker names apart ------------------------
# The default worker name is host-pid; a Kubernetes pod's host name is its
# deployment's name plus a suffix, so the replicas of one deployment differ
# only at the end of long names.
if want topnames; then
	sql "SELECT queue.create_queue('t_topnames');
	     SELECT queue.register_worker('invoice-worker-5f7d8c9b6d-' || s || '-1', '{t_topnames}')
	       FROM unnest(ARRAY['abcde', 'fghij']) s;
	     SELECT queue.register_worker('zz-' || repeat('ü', 60) || '-replica-' || i, '{t_topnames}')
	       FROM generate_series(1, 2) i" >/dev/null
	out=$("$TOP" --dsn "$DSN" --once --queue t_topnames 2>&1)
	is "topnames: two workers whose long names differ at their end show as two names" \
		"$(printf '%s\n' "$out" | grep -E '^invoice-worker' | awk '{print $1}' | sort -u | wc -l)" 2
	like "topnames: a name that fits is shown whole" "$out" 'invoice-worker-5f7d8c9b6d-fghij-1 +idle'
	is "topnames: a name too long for its column keeps its start and its end, never a UTF-8 character cut in half" \
		"$(printf '%s\n' "$out" | grep -E '^zz-' | grep -v -F '\x' | grep -E -c '^zz-..*~.*-replica-[12] +idle')/$(printf '%s' "$out" | iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1 && echo utf8)" \
		"2/utf8"
	sql "DELETE FROM queue.worker_registry WHERE worker LIKE 'invoice-worker-%' OR worker LIKE 'zz-%';
	     SELECT queue.drop_queue('t_topnames')" >/dev/null
fi

# -- case: queue-top with its output in a file or a pipe -------------------
# No terminal to draw on: each refresh is a plain frame, as --once prints
# it, with no cursor or screen codes in a log file or a pipe.
if want topplain; then
	"$TOP" --dsn "$DSN" --interval 0.3 >"$LOG/topplain.out" 2>&1 </dev/null &
	top_pid=$!
	PIDS+=("$top_pid")
	sleep 1.5
	kill -TERM "$top_pid"
	wait "$top_pid"
	is "topplain: queue-top writing into a file ends 0 on SIGTERM" "$?" 0
	is "topplain: it wrote several frames, without a single escape code" \
		"$([ "$(grep -c '^queue-top ' "$LOG/topplain.out")" -ge 2 ] && echo frames)/$(grep -c $'\033' "$LOG/topplain.out")" \
		"frames/0"
fi

# -- case: queue-top --queue shows the bots that work the queue -----------
# A bot that never calls register_worker (a psql script) is registered by
# its first dequeue for every queue (queues NULL): between two items it
# holds nothing, yet it is one of the queue's workers.
if want topqueue; then
	sql "SELECT queue.create_queue('t_topqueue'); SELECT queue.enqueue('t_topqueue', '{}');
	     SELECT queue.complete('t_topqueue', item_id, lease_token) FROM queue.dequeue('t_topqueue', 'psql_bot_1');
	     SELECT queue.register_worker('elsewhere_bot')" >/dev/null
	out=$("$TOP" --dsn "$DSN" --once --queue t_topqueue 2>&1)
	like "topqueue: --queue shows an unregistered bot that completed one of its items, idle between items" \
		"$out" 'psql_bot_1 +idle'
	is "topqueue: ... but no bot that never worked the queue" "$(printf '%s\n' "$out" | grep -c 'elsewhere_bot')" 0
	sql "DELETE FROM queue.worker_registry WHERE worker IN ('psql_bot_1', 'elsewhere_bot')" >/dev/null
fi

# -- case: queue-top on a small terminal ---------------------------------
if want toptty; then
	sql "SELECT queue.create_queue('t_tty_' || i) FROM generate_series(1, 15) i" >/dev/null
	sql "SELECT queue.pause('t_tty_1', repeat('€', 30))" >/dev/null
	# queue-top stays in the terminal's foreground process group
	# (--foreground): in a background one, its first tcsetattr() would stop
	# it, as a shell that does not exec the last command (dash) would leave
	# it; the outer timeout bounds the case whatever happens
	SHELL=/bin/sh timeout -k 5 30 script -qec \
		"stty rows 12 cols 40; timeout --foreground --preserve-status -k 3 -s INT 3 '$TOP' --dsn '$DSN' --interval 1" /dev/null \
		>"$LOG/toptty.out" 2>&1 </dev/null
	is "toptty: queue-top on a terminal ends on SIGINT" "$?" 0
	# the lines of each frame (from one cursor-home to the next)
	frames=$(python3 - "$LOG/toptty.out" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read()
parts = data.split(b'\x1b[H')[1:]
print(max((p.count(b'\n') for p in parts), default=-1))
bad = 0
for p in parts:
    try:
        p.decode('utf-8')
    except UnicodeDecodeError:
        bad += 1
print(bad)
PY
)
	is "toptty: every frame fits in the terminal's 12 rows (at most 11 lines)" \
		"$(printf '%s\n' "$frames" | sed -n 1p | awk '{print ($1 >= 1 && $1 <= 11) ? "fits" : $1 " lines"}')" fits
	is "toptty: lines cut at the width never split a UTF-8 character" "$(printf '%s\n' "$frames" | sed -n 2p)" 0
	sql "SELECT queue.drop_queue('t_tty_' || i) FROM generate_series(1, 15) i" >/dev/null
fi

# -- case: NO_COLOR turns colours off only when it holds a value --------
# (no-color.org: "present and not an empty string"); on a terminal
if want nocolor; then
	for v in unset set empty; do
		val=1
		[ $v = empty ] && val=
		env=(env NO_COLOR="$val")
		[ $v = unset ] && env=(env -u NO_COLOR)
		"${env[@]}" SHELL=/bin/sh timeout -k 5 20 script -qec \
			"stty rows 30 cols 120; timeout --foreground --preserve-status -k 3 -s INT 2 '$TOP' --dsn '$DSN' --interval 1" /dev/null \
			>"$LOG/nocolor-$v.out" 2>&1 </dev/null
	done
	is "nocolor: without NO_COLOR, queue-top on a terminal colours its frame" \
		"$([ "$(grep -c $'\033\\[3[0-9]m' "$LOG/nocolor-unset.out")" -gt 0 ] && echo colours)" colours
	is "nocolor: NO_COLOR=1 on a terminal: no colour codes" "$(grep -c $'\033\\[3[0-9]m' "$LOG/nocolor-set.out")" 0
	is "nocolor: an empty NO_COLOR on a terminal leaves colours on" \
		"$([ "$(grep -c $'\033\\[3[0-9]m' "$LOG/nocolor-empty.out")" -gt 0 ] && echo colours)" colours
fi

# -- case: queue-top redraws at once when the terminal is resized --------
if want topresize; then
	sql "SELECT queue.create_queue('t_rsz_' || i) FROM generate_series(1, 15) i" >/dev/null
	# a 40x200 terminal, then 10x40 (the kernel sends SIGWINCH): with a
	# 30 s --interval, the next frame must come from the resize, not the timer
	python3 - "$TOP" "$DSN" >"$LOG/topresize.out" 2>&1 <<'PY'
import fcntl, os, pty, re, select, struct, sys, termios, time
def setsize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], '--dsn', sys.argv[2], '--interval', '30'])
setsize(fd, 40, 200)
buf = b''
def pump(secs):
    global buf
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                buf += os.read(fd, 65536)
            except OSError:
                return
pump(1.5)
mark = len(buf)
setsize(fd, 10, 40)
pump(1.5)
frames = buf[mark:].split(b'\x1b[H')[1:]
os.write(fd, b'q')
pump(1.0)
os.waitpid(pid, 0)
if not frames:
    print('no frame within 1.5 s of the resize')
else:
    lines = frames[-1].replace(b'\r', b'').split(b'\n')[:-1]
    plain = [re.sub(rb'\x1b\[[0-9;?]*[A-Za-z]', b'', l).decode() for l in lines]
    widest = max((len(l) for l in plain), default=0)
    print('redrawn fits' if len(lines) <= 9 and widest <= 40
          else 'redrawn: %d lines, widest %d' % (len(lines), widest))
PY
	is "topresize: a resized terminal gets a frame that fits it at once, not at the next --interval" \
		"$(tail -1 "$LOG/topresize.out")" "redrawn fits"
	sql "SELECT queue.drop_queue('t_rsz_' || i) FROM generate_series(1, 15) i" >/dev/null
fi

# -- case: queue-top suspended with Ctrl-Z ---------------------------------
# Ctrl-Z stops queue-top under a job-control shell: the shell's prompt must
# get the terminal as it was (echo on, cursor shown), and fg must bring the
# view back with its keys working.
if want topstop; then
	python3 - "$TOP" "$DSN" >"$LOG/topstop.out" 2>&1 <<'PY'
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv('/bin/bash', ['bash', '--norc', '--noprofile', '-m', '-c',
             "'%s' --dsn '%s' --interval 30; echo; stty -a | grep -o -- ' -*echo '; echo SUSPENDED; fg;"
             " echo RESUMED-AND-QUIT"
             % (sys.argv[1], sys.argv[2])])
buf = b''
def pump(secs, until=None):
    global buf
    end = time.time() + secs
    while time.time() < end:
        if until and until in buf:
            return True
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                buf += os.read(fd, 65536)
            except OSError:
                return False
    return until is None or until in buf
pump(2.0)
os.write(fd, b'\x1a')
stopped = pump(3.0, b'SUSPENDED')
at_stop = buf
# what stty said at the shell after the stop (the master side of a pty
# does not show the terminal's settings)
echo = b' echo ' in at_stop[at_stop.rfind(b'Stopped'):]
pump(1.5)
os.write(fd, b'q')
quit_ok = pump(3.0, b'RESUMED-AND-QUIT')
try:
    os.kill(pid, 9)
except OSError:
    pass
os.waitpid(pid, 0)
hidden = at_stop.rfind(b'\x1b[?25l')
shown = at_stop.rfind(b'\x1b[?25h')
print('stopped' if stopped else 'not stopped')
print('cursor shown' if shown > hidden else 'cursor hidden')
print('echo on' if echo else 'echo off')
print('q after fg quits' if quit_ok else 'q after fg does not quit')
PY
	is "topstop: Ctrl-Z gives the shell its terminal back as it was, and q quits after fg" \
		"$(tail -4 "$LOG/topstop.out" | tr '\n' '/')" "stopped/cursor shown/echo on/q after fg quits/"
fi

# -- case: queue-top piped into a reader that goes away (| head) -----------
if want toppipe; then
	# on a terminal, writing into a closed pipe: queue-top ends and the
	# terminal gets its echo back, as on q or SIGINT, whether SIGPIPE kills
	# by default or was left ignored by whoever started it
	for sigpipe in default ignored; do
		python3 - "$TOP" "$DSN" "$sigpipe" >"$LOG/toppipe-$sigpipe.out" 2>&1 <<'PY'
import os, pty, select, signal, sys, termios, time
pid, fd = pty.fork()
if pid == 0:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL if sys.argv[3] == 'default' else signal.SIG_IGN)
    os.execv('/bin/sh', ['sh', '-c', "'%s' --dsn '%s' --interval 0.3 | head -c 100 >/dev/null; sleep 1"
                         % (sys.argv[1], sys.argv[2])])
before = termios.tcgetattr(fd)
end = time.time() + 4
done = False
while time.time() < end and not done:
    r, _, _ = select.select([fd], [], [], 0.05)
    if r:
        try:
            os.read(fd, 65536)
        except OSError:
            pass
    after = termios.tcgetattr(fd)
    done = os.waitpid(pid, os.WNOHANG)[0] == pid
if not done:
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    print('queue-top still running 4 s after its reader went away')
else:
    print('restored' if after[3] == before[3] else 'echo %s, canonical %s' % (
        bool(after[3] & termios.ECHO), bool(after[3] & termios.ICANON)))
PY
		is "toppipe: with SIGPIPE $sigpipe, queue-top whose reader went away ends and leaves the terminal as it found it" \
			"$(tail -1 "$LOG/toppipe-$sigpipe.out")" restored
	done
fi

# -- case: the payload reaches the command as one line ---------------------
# A line ends with a newline: `read` in a shell script under set -e (or in
# a while-read loop) must get the payload, not an unterminated last line.
if want stdinline; then
	sql "SELECT queue.create_queue('t_stdinline')" >/dev/null
	sql "SELECT queue.enqueue('t_stdinline', '{\"name\": \"Zoë 😀\", \"n\": 1}')" >/dev/null
	worker t_stdinline stdinline1 --max-items 1 --exec '
		set -e
		IFS= read -r line
		printf "{\"line\": %s, \"more\": %s}\n" "$line" "$(wc -c)"'
	is "stdinline: worker exits 0" "$?" 0
	is "stdinline: read -r under set -e gets the whole payload, and nothing follows its line" \
		"$(sql "SELECT (result->'line' = payload)::text || ' ' || (result->>'more') FROM queue.history WHERE queue_name = 't_stdinline'")" \
		"true 0"
fi

# -- case: stdout lines that end in whitespace at a read's end -----------
if want jsonread; then
	sql "SELECT queue.create_queue('t_jsonread')" >/dev/null
	sql "SELECT queue.enqueue('t_jsonread', '{}') FROM generate_series(1, 3)" >/dev/null
	# "{" then only newlines, in blocks the size of one read: the checkpoint
	# test must not look past the bytes it was given
	{ printf '{'; head -c 8191 /dev/zero | tr '\0' '\n'; } >"$TMP/brace.txt"
	cat "$TMP/brace.txt" "$TMP/brace.txt" "$TMP/brace.txt" >"$TMP/braces.txt"
	worker t_jsonread jsonread1 --max-items 3 --exec "cat >/dev/null; cat '$TMP/braces.txt'"
	is "jsonread: worker exits 0" "$?" 0
	is "jsonread: each item completed with its output as text" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_jsonread' AND result ? 'stdout'")" 3
fi

# -- case: a JSON result on one line longer than a checkpoint line -------
if want longline; then
	sql "SELECT queue.create_queue('t_longline'); SELECT queue.enqueue('t_longline', '{}')" >/dev/null
	worker t_longline longline1 --max-items 1 --exec \
		'cat >/dev/null; printf "{\"s\": \"%s\"}\n" "$(head -c 300000 /dev/zero | tr "\0" y)"'
	is "longline: worker exits 0" "$?" 0
	is "longline: a 300 kB JSON line is the result, whole" \
		"$(sql "SELECT length(result->>'s') FROM queue.history WHERE queue_name = 't_longline'")" 300000
fi

# -- case: a report the server refuses never leaves the lease renewed ----
if want refused; then
	sql "SELECT queue.create_queue('t_refused', lease_timeout => '3 s', max_attempts => 2)" >/dev/null
	sql "SELECT queue.enqueue('t_refused', '{\"big\": true}', priority => 0);
	     SELECT queue.enqueue('t_refused', '{\"small\": true}', priority => 5)" >/dev/null
	# results over a lowered queue.max_payload_bytes (54000 from complete)
	timeout 60 "$WORKER" --dsn "$DSN options='-c queue.max_payload_bytes=2048'" --queue t_refused \
		--name refused1 --poll 200ms --max-items 2 --exec '
		case "$(cat)" in
		*big*) printf "{\"s\": \"%s\"}\n" "$(head -c 4000 /dev/zero | tr "\0" y)" ;;
		*) echo "{\"ok\": 1}" ;;
		esac' >"$LOG/refused1.out" 2>"$LOG/refused1.log"
	is "refused: worker exits 0 after both items" "$?" 0
	is "refused: both items completed, none left processing" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_refused'")/$(sql "SELECT count(*) FROM queue.items WHERE queue_name = 't_refused'")" \
		"2/0"
	is "refused: a result too large to store is kept cut, and says so" \
		"$(sql "SELECT (result->>'stdout_cut')::boolean AND length(result->>'stdout') BETWEEN 1 AND 1024
		        FROM queue.history WHERE queue_name = 't_refused' AND payload ? 'big'")" t
fi

# -- case: a report that waits past lock_timeout or statement_timeout -----
# A timeout is no refusal: the work is done, so the worker sends the same
# report again instead of failing the item for a retry of work already done.
if want locktimeout; then
	sql "SELECT queue.create_queue('t_locktimeout')" >/dev/null
	sql "SELECT queue.enqueue('t_locktimeout', '{\"n\": 1}')" >/dev/null
	timeout 60 "$WORKER" --dsn "$DSN options='-c lock_timeout=300ms'" --queue t_locktimeout \
		--name locktimeout1 --poll 200ms --max-items 1 \
		--exec 'cat >/dev/null; sleep 1; echo "{\"done\": 1}"' >"$LOG/locktimeout1.out" 2>"$LOG/locktimeout1.log" &
	w=$!
	PIDS+=("$w")
	wait_for 10 "SELECT count(*) = 1 FROM queue.items WHERE queue_name = 't_locktimeout' AND state = 'processing'"
	"$BINDIR/psql" -X -q -d "$DSN" -c "BEGIN; SELECT 1 FROM queue.item_live WHERE queue_name = 't_locktimeout' FOR UPDATE;
		SELECT pg_sleep(2.5); COMMIT" >/dev/null
	wait "$w"
	is "locktimeout: worker exits 0" "$?" 0
	is "locktimeout: a complete that ran into lock_timeout was sent again and completed the item on its first attempt" \
		"$(sql "SELECT attempts || ' ' || result::text FROM queue.history WHERE queue_name = 't_locktimeout'")" '1 {"done": 1}'
fi

# -- case: one lease held up by a lock does not hold up the others --------
# An operator's transaction holds a row lock on one of the worker's items,
# so its extend_lease waits past lock_timeout: the worker's other leases
# are still extended in their time, and no other bot takes their items.
if want lockedlease; then
	sql "SELECT queue.create_queue('t_lockedlease', lease_timeout => '2 s')" >/dev/null
	a=$(sql "SELECT queue.enqueue('t_lockedlease', '{\"n\": 1}')")
	sql "SELECT queue.enqueue('t_lockedlease', '{\"n\": 2}')" >/dev/null
	timeout 60 "$WORKER" --dsn "$DSN options='-c lock_timeout=300ms'" --queue t_lockedlease \
		--name lockedlease1 --poll 200ms --concurrency 2 --max-items 2 \
		--exec 'cat >/dev/null; sleep 6; echo "{\"attempt\": $QUEUE_ATTEMPT}"' \
		>"$LOG/lockedlease1.out" 2>"$LOG/lockedlease1.log" &
	w=$!
	PIDS+=("$w")
	wait_for 10 "SELECT count(*) = 2 FROM queue.items WHERE queue_name = 't_lockedlease' AND state = 'processing'"
	"$BINDIR/psql" -X -q -d "$DSN" -c "BEGIN; SELECT 1 FROM queue.item_live
		WHERE queue_name = 't_lockedlease' AND item_id = $a FOR UPDATE; SELECT pg_sleep(4); COMMIT" >/dev/null &
	locker=$!
	# another bot asks for work all the while the lock is held, and stops
	# short of its end: the locked item's own lease lapses under the lock
	# (it is 2 s long), and the worker revives it just after, which a
	# question asked in that moment would race
	stolen=0
	until_ms=$(( $(date +%s%3N) + 3300 ))
	while kill -0 "$locker" 2>/dev/null && [ "$(date +%s%3N)" -lt "$until_ms" ]; do
		stolen=$((stolen + $(sql "SELECT count(*) FROM queue.dequeue('t_lockedlease', 'other_bot')")))
		sleep 0.3
	done
	wait "$locker"
	wait "$w"
	is "lockedlease: worker exits 0" "$?" 0
	is "lockedlease: the other bot got nothing: the lease of the item nobody locked was kept alive" "$stolen" 0
	is "lockedlease: both items completed by the worker on their first attempt" \
		"$(sql "SELECT count(*) FILTER (WHERE attempts = 1 AND worker = 'lockedlease1') FROM queue.history
		        WHERE queue_name = 't_lockedlease'")" 2
fi

# -- case: --idle-exit asks the queue once more before it exits ----------
# An item that became claimable since the last poll (a run_at or a backoff
# coming due sends no notification) is still taken: with --idle-exit
# shorter than --poll, the worker polls at the idle deadline instead of
# exiting on the strength of a poll made before it.
if want idle; then
	sql "SELECT queue.create_queue('t_idle')" >/dev/null
	sql "SELECT queue.enqueue('t_idle', '{\"n\": 1}', run_at => now() + interval '1 s')" >/dev/null
	worker t_idle idle1 --poll 30s --idle-exit 2s --exec true
	is "idle: worker exits 0 on --idle-exit" "$?" 0
	is "idle: the item that came due before the idle deadline was done" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_idle'")" 1
	like "idle: the log says why it stopped" "$(cat "$LOG/idle1.log")" 'no work for 2 s \(--idle-exit\)'

	# the database is down at the idle deadline: the worker cannot ask, so
	# it waits for the database and asks then, rather than leaving behind
	# an item that came due meanwhile
	sql "SELECT queue.enqueue('t_idle', '{\"n\": 2}', run_at => now() + interval '2 s')" >/dev/null
	bg_worker t_idle idle2 --poll 30s --idle-exit 3s --exec true
	w=$BG
	sleep 1
	"$BINDIR/pg_ctl" -D "$PGDATA" -m fast stop >/dev/null
	sleep 4
	start_pg
	wait "$w"
	is "idle: a worker whose database was down at the idle deadline exits 0" "$?" 0
	is "idle: it asked the queue once the database was back and did the item that came due" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 't_idle' AND payload = '{\"n\": 2}'")" 1
fi

# -- case: output that is not valid UTF-8 as PostgreSQL judges it ---------
# Surrogates (CESU-8, Java's modified UTF-8), overlong forms and code
# points past U+10FFFF look like UTF-8 sequences but the server refuses
# them: they are replaced like any other invalid byte, so the command's
# exit status still decides the item.
if want utf8; then
	sql "SELECT queue.create_queue('t_utf8', max_attempts => 3)" >/dev/null
	sql "SELECT queue.enqueue('t_utf8', '{\"ok\": 1}'); SELECT queue.enqueue('t_utf8', '{\"bad\": 1}')" >/dev/null
	worker t_utf8 utf8w --max-items 2 --exec '
		if grep -q ok; then printf "ok \355\240\200 \340\200\257 \364\220\200\200 \303\251\n"
		else printf "BAD_BYTES: \355\240\200 \303\251\n" >&2; exit 3; fi'
	is "utf8: worker exits 0" "$?" 0
	is "utf8: exit 0 completes the item on its first attempt, the bytes the server refuses replaced" \
		"$(sql "SELECT attempts || ' ' || (result->>'stdout') FROM queue.history WHERE queue_name = 't_utf8'")" \
		"1 ok ??? ??? ???? é"
	is "utf8: another exit status is a permanent failure with its stderr and error code" \
		"$(sql "SELECT reason || ' ' || attempts || ' ' || error_code || ' ' || last_error FROM queue.dead_letters WHERE queue_name = 't_utf8'")" \
		"permanent 1 BAD_BYTES BAD_BYTES: ??? é"
fi

# -- case: the worker talks UTF-8 whatever client encoding the environment asks
# JSON is UTF-8 (RFC 8259), and the worker reads the command's output as
# UTF-8: a PGCLIENTENCODING left over on a legacy host must not hand the
# command a LATIN1 payload or turn its output into mojibake.
if want encoding; then
	sql "SELECT queue.create_queue('t_encoding')" >/dev/null
	sql "SELECT queue.enqueue('t_encoding', '{\"name\": \"Zoë €\"}')" >/dev/null
	PGCLIENTENCODING=LATIN9 timeout 60 "$WORKER" --dsn "$DSN" --queue t_encoding --name enc1 --poll 200ms \
		--max-items 1 --exec 'cat' >"$LOG/enc1.out" 2>"$LOG/enc1.log"
	is "encoding: worker exits 0" "$?" 0
	is "encoding: under PGCLIENTENCODING=LATIN9 the command still gets the payload in UTF-8 and its output is read as UTF-8" \
		"$(sql "SELECT (result = payload)::text || ' ' || (result->>'name') FROM queue.history WHERE queue_name = 't_encoding'")" \
		"true Zoë €"
fi

# -- case: a command that writes without a pause does not hold the worker -
# Output that comes faster than the worker handles it (here every line
# logged by --verbose) must not keep the worker reading one pipe: --timeout,
# lease extensions and signals still come in their time.
if want flood; then
	sql "SELECT queue.create_queue('t_flood', lease_timeout => '2 s', max_attempts => 1)" >/dev/null
	sql "SELECT queue.enqueue('t_flood', '{\"n\": 1}')" >/dev/null
	t0=$SECONDS
	timeout -k 3 15 "$WORKER" --dsn "$DSN" --queue t_flood --name flood1 --poll 200ms --max-items 1 \
		--verbose --timeout 3s --exec 'yes' >/dev/null 2>/dev/null
	is "flood: a worker whose command writes without a pause exits 0" "$?" 0
	[ $((SECONDS - t0)) -le 10 ] && ok "flood: it stopped the command at --timeout (3 s), not later" ||
		notok "flood: it stopped the command at --timeout (3 s), not later" "took $((SECONDS - t0)) s"
	is "flood: the item failed with WORKER_TIMEOUT on its first attempt, its lease kept alive meanwhile" \
		"$(sql "SELECT reason || ' ' || attempts || ' ' || error_code FROM queue.dead_letters WHERE queue_name = 't_flood'")" \
		"max_attempts 1 WORKER_TIMEOUT"
fi

if [ -n "$SANITIZED" ]; then
	reports=$(grep -l -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$LOG"/* 2>/dev/null)
	is "sanitizers: no report in any log" "$reports" ""
	for r in $reports; do echo "# --- $r"; grep -A 30 -E 'Sanitizer|runtime error' "$r" | head -60 | sed 's/^/# /'; done
fi

echo "1..$T"
if [ "$FAILED" -gt 0 ]; then
	echo "# $FAILED of $T failed; logs in $LOG (KEEP_TMP=1 keeps them)"
	exit 1
fi
echo "# all $T passed"
