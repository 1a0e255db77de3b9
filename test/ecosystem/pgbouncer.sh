# test/ecosystem/pgbouncer.sh -- sourced by run.sh: the bot cycle from 32
# clients through a real PgBouncer in transaction pooling with 8 server
# connections; every item is counted.

PGBOUNCER=$(command -v pgbouncer || true)
if [ -z "$PGBOUNCER" ]; then
	notok "pgbouncer: pgbouncer is installed" "run test/deps.sh as root"
else
	sql "CREATE ROLE pgb_bot LOGIN IN ROLE queue_producer, queue_worker;
	     SELECT queue.create_queue('pgb', lease_timeout => '1 min', max_attempts => 3)" >/dev/null
	BPORT=$(free_port)
	cat >"$TMP/pgbouncer.ini" <<INI
[databases]
qdb = host=$TMP port=$PORT dbname=postgres user=pgb_bot

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BPORT
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 8
max_db_connections = 8
max_client_conn = 100
logfile = $LOG/pgbouncer.log
pidfile = $TMP/pgbouncer.pid
INI
	"$PGBOUNCER" "$TMP/pgbouncer.ini" >"$LOG/pgbouncer.out" 2>&1 &
	PIDS+=($!)
	if ! wait_port 15 "$BPORT"; then
		notok "pgbouncer: listens" "$(cat "$LOG/pgbouncer.out" "$LOG/pgbouncer.log" 2>/dev/null)"
	else
		timeout 300 python3 "$HERE/pgbouncer_load.py" \
			"host=127.0.0.1 port=$BPORT dbname=qdb user=pgb_bot" pgb 32 25 \
			>"$LOG/pgbouncer_load.json" 2>"$LOG/pgbouncer_load.err"
		is "pgbouncer: 32 clients ran the cycle without an error" \
			"$?:$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["errors"][:3])' "$LOG/pgbouncer_load.json" 2>&1)" \
			"0:[]"
		# k = 0..799: every 13th dies, every other 7th fails once and is retried
		summary=$(python3 - "$LOG/pgbouncer_load.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
p, c, d = o['produced'], o['completed'], o['dead']
print(len(p), len(set(p)), len(c), len(d), len(set(c) | set(d)), set(c) | set(d) == set(p),
      len(set(c) & set(d)), o['retried'], o['lost'],
      o['checkpoints'] == o['extends'] == len(c) + len(d) + o['retried'], o['seconds'])
PY
)
		set -- $summary
		is "pgbouncer: 800 items produced, each id once" "$1 $2" "800 800"
		is "pgbouncer: each item completed or dead-lettered exactly once, none lost, none twice" \
			"$3 $4 $5 $6 $7" "738 62 800 True 0"
		is "pgbouncer: every 7th item failed once and was retried" "$8" 106
		is "pgbouncer: no lease was lost; every claim checkpointed and extended" "$9 ${10}" "0 True"
		echo "# pgbouncer: 800 items through 32 clients in ${11} s"
		is "pgbouncer: the database agrees: history, dead letters, no live item, no lease" \
			"$(sql "SELECT (SELECT count(*) FROM queue.history WHERE queue_name = 'pgb') || ' '
			            || (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'pgb') || ' '
			            || (SELECT count(*) FROM queue.items WHERE queue_name = 'pgb') || ' '
			            || (SELECT count(*) FROM queue.item_live WHERE queue_name = 'pgb' AND lease_token IS NOT NULL)")" \
			"738 62 0 0"
		is "pgbouncer: checkpoints survived into history and dead letters" \
			"$(sql "SELECT (SELECT count(*) FROM queue.history WHERE queue_name = 'pgb' AND (progress->>'step')::int = 1)
			            + (SELECT count(*) FROM queue.dead_letters WHERE queue_name = 'pgb' AND (progress->>'step')::int = 1)")" \
			800
		is "pgbouncer: retried items show two attempts" \
			"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 'pgb' AND attempts = 2")" 106
		servers=$(sql "SELECT count(*) FROM pg_stat_activity WHERE usename = 'pgb_bot'")
		if [ "$servers" -ge 2 ] && [ "$servers" -le 8 ]; then
			ok "pgbouncer: the 32 clients shared at most 8 server connections ($servers)"
		else
			notok "pgbouncer: the 32 clients shared at most 8 server connections" "server connections: $servers"
		fi
	fi
fi
