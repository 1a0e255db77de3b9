#!/usr/bin/env bash
# test/bench/citus_scale.sh -- does spreading queues over Citus workers scale?
#
# The full cycle (test/bench/sql/q_cycle.sql: enqueue, dequeue, complete,
# three transactions per item) on 8 queues, 16 pgbench clients in total
# (2 per queue, one pgbench per queue), DURATION seconds per layout:
#
#   single   one plain PostgreSQL server (no Citus) holding all 8 queues
#   citus    a coordinator and 2 workers, queue.distribute(), 4 queues on
#            each worker, every client connected to the coordinator
#   direct   the same cluster, each client connected to the worker holding
#            its queue (Citus routes from any node; no coordinator hop)
#
# For each layout: items/s, and the CPU time each node's processes used
# (the postmaster, its live children and the children it reaped) with its
# share, and pgbench's own.  All nodes share this machine's cores, so the
# figures show the overhead and the split of the work, not the gain of
# separate machines (README, "Scale-out").
#
#   test/bench/citus_scale.sh                       (as root or postgres)
#   DURATION=30 LAYOUTS="single citus direct" PG_CONFIG=... test/bench/citus_scale.sh
#
# Needs queue, pg_cron and Citus installed in the PostgreSQL of PG_CONFIG
# (`make install`; `make test-citus` builds and installs Citus).  Results:
# $OUT/summary.txt (default /tmp/queue-bench-results/citus-<timestamp>).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
command -v "$PG_CONFIG" >/dev/null 2>&1 || PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
BINDIR=$($PG_CONFIG --bindir)
DURATION=${DURATION:-30}
CLIENTS=${CLIENTS:-16}
NQUEUES=${NQUEUES:-8}
LAYOUTS=${LAYOUTS:-"single citus direct"}
OUT=${OUT:-/tmp/queue-bench-results/citus-$(date +%Y%m%d-%H%M%S)}

if [ "$(id -u)" = 0 ]; then
	[ -f "$($PG_CONFIG --pkglibdir)/citus.so" ] ||
		{ echo "Citus is not installed in $($PG_CONFIG --bindir)/..: run make test-citus first"; exit 1; }
	mkdir -p "$OUT" && chown postgres "$OUT"
	COPY=$(mktemp -d /tmp/queue-citus-bench.XXXXXX)
	cp -a "$HERE/." "$COPY/" && cp "$HERE/../citus/cluster.sh" "$COPY/cluster.sh" && chown -R postgres "$COPY"
	runuser -u postgres -- env PG_CONFIG="$PG_CONFIG" DURATION="$DURATION" CLIENTS="$CLIENTS" \
		NQUEUES="$NQUEUES" LAYOUTS="$LAYOUTS" OUT="$OUT" CLUSTER_SH="$COPY/cluster.sh" \
		bash "$COPY/citus_scale.sh"
	st=$?
	rm -rf "$COPY"
	exit $st
fi

mkdir -p "$OUT"
BASE=$(mktemp -d "${TMPDIR:-/tmp}/queue-citus-bench.XXXXXX")
# shellcheck source=test/citus/cluster.sh
. "${CLUSTER_SH:-$HERE/../citus/cluster.sh}"
TICK=$(getconf CLK_TCK)
SINGLE_DIR=

cleanup() {
	citus_stop
	[ -n "$SINGLE_DIR" ] && [ -f "$SINGLE_DIR/postmaster.pid" ] &&
		"$BINDIR/pg_ctl" -D "$SINGLE_DIR" -m fast -w stop >/dev/null 2>&1
	rm -rf "$BASE"
}
trap cleanup EXIT

say() { echo "$*" | tee -a "$OUT/summary.txt"; }

# CPU ticks used so far by the server of data directory $1: the
# postmaster, its live children, and the children it has reaped.
node_ticks() {
	local pm t=0 c
	pm=$(head -n 1 "$1/postmaster.pid")
	t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
	for c in $(ps --ppid "$pm" -o pid= 2>/dev/null); do
		[ -r "/proc/$c/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}

# One pgbench script per queue, its name a literal: Citus delegates a call
# whose queue name is a constant or a parameter.
write_scripts() {
	local i
	for i in $(seq 0 $((NQUEUES - 1))); do
		sed -e "s/'bq'/'cq${QNUM[$i]}'/g" "$HERE/sql/q_cycle.sql" >"$BASE/cycle$i.sql"
	done
}

# run LABEL DIRS PORT... : one pgbench per queue (CLIENTS / NQUEUES
# clients each) for DURATION s, queue i's clients connected to the i-th
# PORT; prints items/s and the CPU split over the nodes in DIRS.
run() {
	local label=$1 dirs=$2
	shift 2
	local ports=("$@") d before=() after=() total=0 tps=0 pids=() i t0 t1 used line=""
	for d in $dirs; do before+=("$(node_ticks "$d")"); done
	t0=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
	for i in $(seq 0 $((NQUEUES - 1))); do
		"$BINDIR/pgbench" -h "$BASE" -p "${ports[$i]}" -U postgres -n -M prepared \
			-c $((CLIENTS / NQUEUES)) -j 1 -T "$DURATION" -f "$BASE/cycle$i.sql" postgres \
			>"$BASE/$label.$i.out" 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}"
	t1=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
	for d in $dirs; do after+=("$(node_ticks "$d")"); done
	for i in $(seq 0 $((NQUEUES - 1))); do
		grep -q "^tps" "$BASE/$label.$i.out" || { cat "$BASE/$label.$i.out"; return 1; }
		tps=$(awk -v t="$tps" '/^tps/ {printf "%.0f", t + $3; exit}' "$BASE/$label.$i.out")
	done
	i=0
	for d in $dirs; do
		total=$((total + after[i] - before[i]))
		i=$((i + 1))
	done
	total=$((total + t1 - t0))
	i=0
	for d in $dirs; do
		used=$((after[i] - before[i]))
		line="$line $(basename "$d") $(awk -v u="$used" -v k="$TICK" -v t="$total" 'BEGIN {printf "%.1f s (%.0f %%)", u / k, 100 * u / t}'),"
		i=$((i + 1))
	done
	line="$line pgbench $(awk -v u="$((t1 - t0))" -v k="$TICK" -v t="$total" 'BEGIN {printf "%.1f s (%.0f %%)", u / k, 100 * u / t}')"
	say "$(printf '%-7s %7s items/s   CPU:%s' "$label" "$tps" "$line")"
}

setup_queues() {
	local psql_cmd=("$@") i
	for i in $(seq 0 $((NQUEUES - 1))); do
		"${psql_cmd[@]}" -c "SELECT queue.create_queue('cq${QNUM[$i]}')" >/dev/null || return 1
		# a standing backlog, as in make bench's cycle
		"${psql_cmd[@]}" -c "SELECT count(*) FROM queue.enqueue_batch('cq${QNUM[$i]}', array_fill('{}'::jsonb, ARRAY[1000]))" >/dev/null || return 1
	done
}

say "# citus_scale: $NQUEUES queues, $CLIENTS clients, full cycle (q_cycle.sql), ${DURATION} s per layout, $(nproc) cores"
say "# $(date -u '+%Y-%m-%d %H:%M UTC'), $("$BINDIR/postgres" --version), Citus $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$($PG_CONFIG --sharedir)/extension/citus.control")"

# The cluster first: it decides the queue names (half on each worker).
citus_start 2 || { echo "cluster did not start"; exit 1; }
cpsql -c "CREATE EXTENSION queue" -c "SELECT count(*) FROM queue.distribute(shard_count => 32)" >/dev/null || exit 1
QNUM=()
for w in 1 2; do
	want="127.0.0.1:${WORKER_PORTS[$((w - 1))]}"
	n=0
	for s in $(seq 1 500); do
		node=$(cpsql -c "SELECT n.nodename || ':' || n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid
		                 WHERE p.shardid = get_shard_id_for_distribution_column('queue.item_live', 'cq$s')")
		# alternate: even queue numbers on worker 1, odd on worker 2
		if [ "$node" = "$want" ]; then
			QNUM[$((2 * n + w - 1))]=$s
			n=$((n + 1))
			[ $n = $((NQUEUES / 2)) ] && break
		fi
	done
done
say "# queues: $(for i in $(seq 0 $((NQUEUES - 1))); do printf 'cq%s ' "${QNUM[$i]}"; done)(even positions on worker 1, odd on worker 2)"
write_scripts

for layout in $LAYOUTS; do
	case $layout in
		single)
			SINGLE_DIR=$BASE/single
			p=$(citus_free_port 58300)
			"$BINDIR/initdb" -D "$SINGLE_DIR" -A trust -U postgres >/dev/null 2>&1 || exit 1
			cat >>"$SINGLE_DIR/postgresql.conf" <<-CONF
				port = $p
				listen_addresses = ''
				unix_socket_directories = '$BASE'
				shared_preload_libraries = 'pg_cron,queue'
				cron.database_name = 'postgres'
				fsync = off
				max_connections = 100
			CONF
			"$BINDIR/pg_ctl" -D "$SINGLE_DIR" -l "$SINGLE_DIR.log" -w start >/dev/null || exit 1
			spsql=("$BINDIR/psql" -h "$BASE" -p "$p" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1)
			"${spsql[@]}" -c "CREATE EXTENSION queue" >/dev/null || exit 1
			setup_queues "${spsql[@]}" || exit 1
			run single "$SINGLE_DIR" $(for i in $(seq 1 "$NQUEUES"); do echo "$p"; done) || exit 1
			"$BINDIR/pg_ctl" -D "$SINGLE_DIR" -m fast -w stop >/dev/null
			;;
		citus)
			cpsql -c "SELECT count(*) FROM queue.queues" >/dev/null
			[ "$(cpsql -c "SELECT count(*) FROM queue.queues WHERE queue_name LIKE 'cq%'")" = 0 ] &&
				{ setup_queues cpsql || exit 1; }
			run citus "${CITUS_DIRS[*]}" $(for i in $(seq 1 "$NQUEUES"); do echo "$COORD_PORT"; done) || exit 1
			;;
		direct)
			[ "$(cpsql -c "SELECT count(*) FROM queue.queues WHERE queue_name LIKE 'cq%'")" = 0 ] &&
				{ setup_queues cpsql || exit 1; }
			# even queue numbers on worker 1, odd ones on worker 2
			run direct "${CITUS_DIRS[*]}" $(for i in $(seq 0 $((NQUEUES - 1))); do
				echo "${WORKER_PORTS[$((i % 2))]}"; done) || exit 1
			;;
		*) echo "unknown layout $layout"; exit 2 ;;
	esac
done
echo "results in $OUT/summary.txt"
