#!/usr/bin/env bash
# test/ecosystem/run.sh -- queue with the programs operators run around it:
# postgres_exporter, PgBouncer, and the bot examples in Python, Node.js
# and psql, each the real program against a throw-away cluster.
#
#   test/ecosystem/run.sh              run every case (under a minute or two)
#   test/ecosystem/run.sh pgbouncer    run the cases whose name contains "pgbouncer"
#
# Needs the extension installed (make install) and the programs of
# test/deps.sh (prometheus-postgres-exporter, pgbouncer, python3-psycopg2,
# node and npm).  The Node example's packages come from the npm registry
# with `npm ci`.  As root it re-runs itself as the postgres OS user, since
# initdb refuses to run as root.  Output is TAP ("ok N - name"); the exit
# status is 0 only if every case passed.  KEEP_TMP=1 keeps the folder.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
BINDIR=$($PG_CONFIG --bindir)

if [ "$(id -u)" = 0 ]; then
	exec runuser -u postgres -- env PG_CONFIG="$PG_CONFIG" KEEP_TMP="${KEEP_TMP:-}" bash "$0" "$@"
fi

FILTER=${1:-}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/queue-ecosystem-test.XXXXXX")
PGDATA="$TMP/data"
LOG="$TMP/logs"
mkdir -p "$LOG"
PIDS=()

# listening PORT : whether something accepts connections on 127.0.0.1:PORT
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port: a port in the private range 59000-59999 nobody listens on
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((59000 + RANDOM % 1000))
		if ! listening "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

cleanup() {
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	sleep 0.2
	for p in "${PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
	"$BINDIR/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1
	if [ -z "${KEEP_TMP:-}" ]; then rm -rf "$TMP"; else echo "# kept $TMP"; fi
}
trap cleanup EXIT

PORT=$(free_port) || { echo "Bail out! no free port in 59000-59999"; exit 1; }
"$BINDIR/initdb" -D "$PGDATA" -A trust -U postgres -E UTF8 --no-locale >"$LOG/initdb.log" 2>&1 ||
	{ echo "Bail out! initdb failed, see $LOG/initdb.log"; exit 1; }
cat >>"$PGDATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$TMP'
port = $PORT
fsync = off
max_connections = 60
log_min_messages = warning
shared_preload_libraries = 'queue'
CONF
"$BINDIR/pg_ctl" -D "$PGDATA" -l "$LOG/postgres.log" -w start >/dev/null ||
	{ echo "Bail out! postgres did not start, see $LOG/postgres.log"; exit 1; }

DSN="host=$TMP port=$PORT dbname=postgres"
sql() { "$BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "$DSN" -c "$1"; }
export PATH="$BINDIR:$PATH"

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
# wait_for SECONDS SQL : until SQL returns t
wait_for() {
	local deadline=$((SECONDS + $1))
	while [ $SECONDS -lt "$deadline" ]; do
		[ "$(sql "$2" 2>/dev/null)" = t ] && return 0
		sleep 0.1
	done
	return 1
}
# wait_port SECONDS PORT : until something listens on 127.0.0.1:PORT
wait_port() {
	local deadline=$((SECONDS + $1))
	while [ $SECONDS -lt "$deadline" ]; do
		listening "$2" && return 0
		sleep 0.1
	done
	return 1
}
want() { [ -z "$FILTER" ] || [[ "$1" == *"$FILTER"* ]]; }

echo "# cluster on port $PORT in $TMP"
for c in exporter pgbouncer bots; do
	[ -f "$HERE/$c.sh" ] || continue
	if want "$c" || { [ "$c" = bots ] && { want python || want node || want psql; }; }; then
		started=$SECONDS
		# shellcheck source=/dev/null
		. "$HERE/$c.sh"
		echo "# $c: $((SECONDS - started)) s"
	fi
done

echo "1..$T"
if [ "$FAILED" -gt 0 ]; then
	echo "# $FAILED of $T failed; logs in $LOG (KEEP_TMP=1 keeps them)"
	exit 1
fi
echo "# all $T passed"
