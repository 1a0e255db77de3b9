#!/bin/bash
# Two builds of the extension on one server, interleaved: on a shared
# machine only neighbouring runs compare, so each pair installs build A,
# restarts the server and runs SCRIPT, then does the same with build B.
#
#   PGDATA=... test/bench/ab_builds.sh PORT DIR_A DIR_B SCRIPT [CLIENTS] [PAIRS] [SECONDS]
#
# PORT: a running PostgreSQL 15 whose data directory is $PGDATA, with
# queue preloaded and database qbench holding what SCRIPT needs (e.g. the
# queue bq of ../shared/bench/queue/compare.sh).  DIR_A, DIR_B: built
# source trees of the extension (make install runs in each, with
# $PG_CONFIG, default pg_config).  SCRIPT: a pgbench script.  CLIENTS
# (default 16), PAIRS (default 5), SECONDS per run (default 8).  Each run
# follows a 3 s warm-up after the restart.  Prints each pair's tps and
# B/A, then the medians.  The server is left running build B.
set -eu
port=$1
dir_a=$2
dir_b=$3
script=$4
clients=${5:-16}
pairs=${6:-5}
secs=${7:-8}
: "${PGDATA:?set PGDATA to the data directory of the server}"
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
RUNAS=()
[ "$(id -u)" = 0 ] && RUNAS=(runuser -u postgres --)

use() {	# DIR: install that build and restart the server
	make -s -C "$1" install PG_CONFIG="$PG_CONFIG" >/dev/null
	"${RUNAS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -w -l "$PGDATA/ab_builds.log" restart >/dev/null
}
run() {	# SECONDS: tps of SCRIPT
	pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -j 2 -c "$clients" -T "$1" \
		-f "$script" qbench 2>&1 | awk '/^tps/ {printf "%.0f", $3}'
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "pair  A tps  B tps  B/A"
for i in $(seq 1 "$pairs"); do
	use "$dir_a"; run 3 >/dev/null; a=$(run "$secs")
	use "$dir_b"; run 3 >/dev/null; b=$(run "$secs")
	r=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", (a > 0 ? b / a : 0)}')
	echo "$a $b $r" >>"$out"
	printf '%-5s %-6s %-6s %s\n' "$i" "$a" "$b" "$r"
done
printf 'median A %s  B %s  B/A %s  (%s pairs, %s clients, %s s)\n' \
	"$(cut -d' ' -f1 "$out" | median)" "$(cut -d' ' -f2 "$out" | median)" \
	"$(cut -d' ' -f3 "$out" | median)" "$pairs" "$clients" "$secs"
