#!/bin/bash
# Instructions per item of the hot path, counted by callgrind in a
# single-user backend: a measure that, unlike msg/s, does not move with
# the load of a shared machine.
#
#   PG_CONFIG=... test/bench/instructions.sh [CYCLES]
#
# Uses the installed extension (make install first).  Prints, each for a
# queue never analyzed and one after VACUUM ANALYZE:
#   cycle   prepared enqueue + complete(dequeue), whole backend per cycle
#           (difference between a run with CYCLES cycles and one with none)
#   stmts   the same cycle, inside the EXECUTEd statements only
#   batch   dequeue(100) + complete_batch, per item, statements only
# and the raw floor's three statements (INSERT, SKIP LOCKED claim, DELETE)
# counted the same way.  Needs valgrind (installed with apt-get when
# missing and running as root).
set -eu
CYCLES=${1:-300}
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
command -v valgrind >/dev/null || {
	[ "$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind >/dev/null
}
RUNAS=()
[ "$(id -u)" = 0 ] && RUNAS=(runuser -u postgres --)
WORK=$(mktemp -d /tmp/queue-instr.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"
[ "$(id -u)" = 0 ] && chown postgres "$WORK"
D=$WORK/data
"${RUNAS[@]}" "$BIN/initdb" -D "$D" -A trust -U postgres >/dev/null
cat >>"$D/postgresql.conf" <<EOF
shared_preload_libraries = 'queue'
synchronous_commit = off
EOF

single() {	# DB FILE [valgrind options...]: run FILE in a single-user backend
	local db=$1 file=$2
	shift 2
	"${RUNAS[@]}" "$@" "$BIN/postgres" --single -D "$D" "$db" <"$file" >/dev/null 2>>"$WORK/server.log"
}
fresh_db() {
	printf 'DROP DATABASE IF EXISTS %s;\nCREATE DATABASE %s;\n' "$1" "$1" >"$WORK/db.sql"
	single postgres "$WORK/db.sql"
}
counted() {	# DB FILE [toggle function]: instructions callgrind collected
	local out=$WORK/cg.out err=$WORK/cg.err
	fresh_db "$1"
	if [ $# -ge 3 ]; then
		single "$1" "$2" valgrind --tool=callgrind --collect-atstart=no \
			--toggle-collect="$3" --callgrind-out-file="$out" --log-file="$err"
	else
		single "$1" "$2" valgrind --tool=callgrind --callgrind-out-file="$out" --log-file="$err"
	fi
	grep -o 'Collected : [0-9]*' "$err" | awk '{print $3}'
}

queue_setup() {	# ANALYZE(0/1) ITEMS
	echo "CREATE EXTENSION queue;"
	echo "SELECT queue.create_queue('bq');"
	echo "SELECT count(*) FROM queue.enqueue_batch('bq', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, $2)));"
	[ "$1" = 1 ] && echo "VACUUM ANALYZE;"
	echo "PREPARE e AS SELECT queue.enqueue('bq', '{\"job\":\"x\"}'::jsonb);"
	echo "PREPARE c AS SELECT queue.complete('bq', d.item_id, d.lease_token) FROM queue.dequeue('bq', 'w1') d;"
	echo "PREPARE b AS WITH d AS (SELECT * FROM queue.dequeue('bq', 'w1', 100)) SELECT queue.complete_batch('bq', array_agg(d.item_id), array_agg(d.lease_token)) FROM d;"
	for _ in $(seq 1 20); do echo "EXECUTE e;"; echo "EXECUTE c;"; done
}
cycles() { for _ in $(seq 1 "$1"); do echo "EXECUTE e;"; echo "EXECUTE c;"; done; }

for analyze in 0 1; do
	label=$([ $analyze = 1 ] && echo analyzed || echo fresh)
	queue_setup $analyze 1000 >"$WORK/setup.sql"
	{ cat "$WORK/setup.sql"; cycles "$CYCLES"; } >"$WORK/run.sql"
	a=$(counted qi "$WORK/setup.sql")
	b=$(counted qi "$WORK/run.sql")
	s=$(counted qi "$WORK/run.sql" ExecuteQuery)
	queue_setup $analyze 20000 >"$WORK/batch.sql"
	for _ in $(seq 1 60); do echo "EXECUTE b;"; done >>"$WORK/batch.sql"
	t=$(counted qi "$WORK/batch.sql" ExecuteQuery)
	bs=$(counted qi "$WORK/setup.sql" ExecuteQuery)
	printf '%-8s cycle %8d   stmts %8d   batch %8d per item\n' "$label" \
		$(((b - a) / CYCLES)) $(((s - bs) / CYCLES)) $(((t - bs) / 6000))
done

{
	# one statement per line: a single-user backend ends a statement at a newline
	echo "CREATE TABLE rq (id bigserial PRIMARY KEY, queue text NOT NULL, priority int NOT NULL DEFAULT 0, vt timestamptz NOT NULL DEFAULT now(), payload jsonb, attempts int NOT NULL DEFAULT 0);"
	echo "CREATE INDEX rq_claim_idx ON rq (queue, priority, id);"
	echo "INSERT INTO rq (queue, payload) SELECT 'q1', '{}' FROM generate_series(1, 1000);"
	echo "VACUUM ANALYZE;"
	echo "PREPARE e AS INSERT INTO rq (queue, priority, payload) VALUES ('q1', 0, '{\"job\":\"x\"}'::jsonb);"
	echo "PREPARE c AS WITH c AS (UPDATE rq SET vt = now() + interval '30 seconds', attempts = attempts + 1 WHERE id = (SELECT id FROM rq WHERE queue = 'q1' AND vt <= now() ORDER BY priority, id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id) SELECT coalesce(max(id), 0) FROM c;"
	echo "PREPARE d(bigint) AS DELETE FROM rq WHERE id = \$1;"
	for i in $(seq 1 "$CYCLES"); do echo "EXECUTE e;"; echo "EXECUTE c;"; echo "EXECUTE d($i);"; done
} >"$WORK/raw.sql"
r=$(counted qr "$WORK/raw.sql" ExecuteQuery)
printf '%-8s stmts %8d (INSERT, claim, DELETE)\n' raw $((r / CYCLES))
