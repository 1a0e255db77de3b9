# test/citus/cluster.sh -- start and stop a Citus cluster on loopback.
#
# Sourced by test/citus/run.sh and the benchmark.  Needs BINDIR (the
# PostgreSQL binaries, with citus, pg_cron and queue installed) and BASE
# (a scratch directory the current user owns).  citus_start N starts a
# coordinator and N workers on free ports and joins them; the ports are in
# COORD_PORT and WORKER_PORTS; citus_stop stops every node it started.

citus_free_port() {
	local p
	for p in $(seq "${1:-58100}" 59999); do
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && [ ! -e /tmp/.s.PGSQL.$p ]; then
			echo $p
			return 0
		fi
	done
	return 1
}

citus_node_start() {
	local dir=$1 port=$2
	"$BINDIR/initdb" -D "$dir" -A trust -U postgres -E UTF8 --no-locale >"$dir.initdb.log" 2>&1 || { cat "$dir.initdb.log"; return 1; }
	cat >>"$dir/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$BASE'
shared_preload_libraries = 'citus,pg_cron,queue'
cron.database_name = 'postgres'
wal_level = logical
max_prepared_transactions = 100
max_connections = 100
max_wal_senders = 20
max_replication_slots = 20
fsync = off
log_min_messages = warning
citus.enable_statistics_collection = off
CONF
	"$BINDIR/pg_ctl" -D "$dir" -l "$dir.log" -w start >/dev/null || { tail -n 20 "$dir.log"; return 1; }
	"$BINDIR/psql" -h "$BASE" -p "$port" -U postgres -d postgres -qAtX -c 'CREATE EXTENSION citus' >/dev/null
}

# citus_start NWORKERS
citus_start() {
	local n=$1 i p next=58100
	CITUS_DIRS=()
	WORKER_PORTS=()
	COORD_PORT=$(citus_free_port $next) || return 1
	until citus_node_start "$BASE/coord" "$COORD_PORT" >"$BASE/coord.start.log" 2>&1; do
		grep -q "Address already in use" "$BASE/coord.log" 2>/dev/null || { cat "$BASE/coord.start.log"; return 1; }
		rm -rf "$BASE/coord" "$BASE/coord.log"
		COORD_PORT=$(citus_free_port $((COORD_PORT + 1))) || return 1
	done
	CITUS_DIRS+=("$BASE/coord")
	next=$((COORD_PORT + 1))
	for i in $(seq 1 "$n"); do
		p=$(citus_free_port $next) || return 1
		# a port found free may be taken before the node binds it: the next one
		until citus_node_start "$BASE/worker$i" "$p" >"$BASE/worker$i.start.log" 2>&1; do
			grep -q "Address already in use" "$BASE/worker$i.log" 2>/dev/null || { cat "$BASE/worker$i.start.log"; return 1; }
			rm -rf "$BASE/worker$i" "$BASE/worker$i.log"
			p=$(citus_free_port $((p + 1))) || return 1
		done
		CITUS_DIRS+=("$BASE/worker$i")
		WORKER_PORTS+=("$p")
		next=$((p + 1))
	done
	cpsql -c "SELECT citus_set_coordinator_host('127.0.0.1', $COORD_PORT)" >/dev/null || return 1
	for p in "${WORKER_PORTS[@]}"; do
		cpsql -c "SELECT citus_add_node('127.0.0.1', $p)" >/dev/null || return 1
	done
}

citus_stop() {
	local d
	for d in "${CITUS_DIRS[@]}"; do
		[ -f "$d/postmaster.pid" ] && "$BINDIR/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1
	done
	return 0
}

# psql on the coordinator / on worker I (1-based)
cpsql() { "$BINDIR/psql" -h "$BASE" -p "$COORD_PORT" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
wpsql() { local i=$1; shift; "$BINDIR/psql" -h "$BASE" -p "${WORKER_PORTS[$((i - 1))]}" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
