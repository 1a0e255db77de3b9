#!/usr/bin/env bash
# test/bench/citus.sh -- scale-out figure: 8 queues, 16 clients in total
# (2 per queue), the full cycle (enqueue + dequeue + complete, three
# transactions per item), on one plain server against a Citus coordinator
# with the queues spread over two workers.
#
#   test/bench/citus.sh            (Citus must be installed in PG_CONFIG's
#                                   PostgreSQL: make test-citus does it)
#   DURATION=20 REPS=3             seconds per run, runs per setup (median)
#
# Prints items/s for each setup and the CPU seconds each node's processes
# used during the run (the coordinator's and each worker's), and writes
# them to $OUT/citus-scaling.txt.  Run as root it runs as postgres.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
BINDIR=$($PG_CONFIG --bindir)
DURATION=${DURATION:-20}
REPS=${REPS:-3}
OUT=${OUT:-/tmp/queue-bench-citus}
QUEUES=8
PER_QUEUE=2

if [ "$(id -u)" = 0 ]; then
	COPY=$(mktemp -d /tmp/queue-bench-citus-tree.XXXXXX)
	mkdir -p "$COPY/test"
	cp -a "$HERE/../citus" "$HERE" "$COPY/test/"
	chown -R postgres "$COPY"
	mkdir -p "$OUT" && chown postgres "$OUT"
	runuser -u postgres -- env PG_CONFIG="$PG_CONFIG" DURATION="$DURATION" REPS="$REPS" OUT="$OUT" \
		bash "$COPY/test/bench/citus.sh"
	st=$?
	rm -rf "$COPY"
	exit $st
fi
[ -f "$($PG_CONFIG --pkglibdir)/citus.so" ] || { echo "Citus is not installed; run make test-citus first" >&2; exit 1; }

mkdir -p "$OUT"
BASE=$(mktemp -d /tmp/queue-bench-citus.XXXXXX)
# shellcheck source=test/citus/cluster.sh
. "$HERE/../citus/cluster.sh"
trap 'citus_stop; rm -rf "$BASE"' EXIT

SCRIPT="$BASE/cycle.sql"
cat >"$SCRIPT" <<'SQL'
SELECT queue.enqueue(:q, '{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'::jsonb);
SELECT item_id, lease_token FROM queue.dequeue(:q, :q)
\gset
SELECT queue.complete(:q, :item_id, :lease_token);
SQL

# CPU seconds (user + system) of a postmaster and all its children.
node_cpu() {
	local pm=$1 hz
	hz=$(getconf CLK_TCK)
	{ echo "$pm"; pgrep -P "$pm"; } | while read -r p; do
		awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null
	done | awk -v hz="$hz" '{s += $1} END {printf "%.1f", s / hz}'
}

# run PORT LABEL QUEUE...: 2 clients per queue, one pgbench per queue
run() {
	local port=$1 label=$2
	shift 2
	local r q pids tps total pm before after dirs=("${CITUS_DIRS[@]}") cpu
	for r in $(seq 1 "$REPS"); do
		pids=()
		declare -A before=()
		for d in "${dirs[@]}"; do
			pm=$(head -n 1 "$d/postmaster.pid")
			before[$d]=$(node_cpu "$pm")
		done
		for q in "$@"; do
			"$BINDIR/pgbench" -n -M prepared -h "$BASE" -p "$port" -U postgres -c $PER_QUEUE -j 1 \
				-T "$DURATION" -D q="$q" -f "$SCRIPT" postgres >"$BASE/pgb_$q.out" 2>&1 &
			pids+=($!)
		done
		wait "${pids[@]}"
		cpu=
		for d in "${dirs[@]}"; do
			pm=$(head -n 1 "$d/postmaster.pid")
			cpu="$cpu $(basename "$d")=$(awk -v a="$(node_cpu "$pm")" -v b="${before[$d]}" 'BEGIN {printf "%.1f", a - b}')s"
		done
		total=$(cat "$BASE"/pgb_*.out | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | awk '{s += $1} END {printf "%.0f", s}')
		grep -h "aborted\|ERROR" "$BASE"/pgb_*.out | head -3
		echo "$label rep $r: $total items/s; CPU:$cpu" | tee -a "$OUT/citus-scaling.txt"
	done
}

prepare() {   # PORT QUEUE...
	local port=$1 q
	shift
	for q in "$@"; do
		"$BINDIR/psql" -h "$BASE" -p "$port" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 \
			-c "SELECT queue.create_queue('$q', audit => 'failures')" \
			-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[100]))" >/dev/null || exit 1
	done
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, DURATION=$DURATION REPS=$REPS" | tee -a "$OUT/citus-scaling.txt"

# 1. one plain server (Citus not loaded)
port=$(citus_free_port 58300)
"$BINDIR/initdb" -D "$BASE/plain" -A trust -U postgres >/dev/null || exit 1
cat >>"$BASE/plain/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$BASE'
shared_preload_libraries = 'queue'
max_connections = 100
CONF
"$BINDIR/pg_ctl" -D "$BASE/plain" -l "$BASE/plain.log" -w start >/dev/null || exit 1
CITUS_DIRS=("$BASE/plain")
"$BINDIR/psql" -h "$BASE" -p "$port" -U postgres -d postgres -qAtX -c 'CREATE EXTENSION queue' >/dev/null
plain_queues=$(for i in $(seq 1 $QUEUES); do echo "b$i"; done)
prepare "$port" $plain_queues
run "$port" "one server" $plain_queues
"$BINDIR/pg_ctl" -D "$BASE/plain" -m fast -w stop >/dev/null

# 2. Citus: coordinator + 2 workers, 4 queues on each worker
citus_start 2 || exit 1
cpsql -c 'CREATE EXTENSION queue' -c 'SELECT count(*) FROM queue.distribute(shard_count => 16)' >/dev/null || exit 1
spread=()
n1=0
n2=0
for i in $(seq 1 200); do
	node=$(cpsql -c "SELECT p.groupid FROM pg_dist_placement p
	                  WHERE p.shardid = get_shard_id_for_distribution_column('queue.item_live', 'c$i')")
	if [ "$node" = 1 ] && [ $n1 -lt $((QUEUES / 2)) ]; then spread+=("c$i"); n1=$((n1 + 1)); fi
	if [ "$node" = 2 ] && [ $n2 -lt $((QUEUES / 2)) ]; then spread+=("c$i"); n2=$((n2 + 1)); fi
	[ ${#spread[@]} = $QUEUES ] && break
done
prepare "$COORD_PORT" "${spread[@]}"
run "$COORD_PORT" "citus, 8 queues over 2 workers" "${spread[@]}"
