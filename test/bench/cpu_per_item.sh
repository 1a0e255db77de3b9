#!/bin/bash
# CPU time per item: the raw floor's cycle and loop against the queue's
# full cycle and worker loop, each run for a fixed number of items.
#
#   test/bench/cpu_per_item.sh PORT [CLIENTS] [ITEMS_PER_CLIENT] [REPS]
#
# PORT: a running PostgreSQL 15 with queue installed and preloaded (as for
# compare.sh).  Makes the database qcpu (1,000 items standing in the queue
# and in the raw table, analyzed), then runs each script REPS times
# (default 2) with `pgbench -n -M prepared -c CLIENTS -t ITEMS_PER_CLIENT`
# (defaults 16 and 500) and prints msg/s and the whole machine's busy CPU
# time (user, system, interrupts, from /proc/stat) per 1,000 items.  Where
# the CPU is the limit (many clients on few cores) msg/s follows the CPU
# an item costs, and CPU per item moves far less with other load than
# msg/s does; it still counts whatever else the machine ran meanwhile, so
# compare scripts of the same run only.
set -eu
port=$1
clients=${2:-16}
per_client=${3:-500}
reps=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pair_db.sh"

# compare.sh's worker loop (its full cycle: pair_db.sh)
cat >"$work/q_loop.sql" <<SQL
SELECT queue.enqueue('bq', '$PAY'::jsonb);
BEGIN;
SELECT item_id, lease_token FROM queue.dequeue('bq', 'bench' || :client_id) \gset
SELECT queue.complete('bq', :item_id, :lease_token);
COMMIT;
SQL
# the raw floor's cycle in one transaction, the same shape as q_loop
sed -e 's/^WITH c AS (/BEGIN;\nWITH c AS (/' -e 's/^DELETE FROM rq WHERE id = :id;/&\nCOMMIT;/' \
	"$shared/sql/raw_cycle.sql" >"$work/raw_loop.sql"
cp "$shared/sql/raw_cycle.sql" "$work/raw_cycle.sql"

pair_db qcpu

# busy and idle jiffies of all CPUs
jiffies() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }
hz=$(getconf CLK_TCK)
items=$((clients * per_client))

printf '%-10s %4s %8s %14s %6s\n' script rep msg/s cpu_ms/1000 idle
for rep in $(seq 1 "$reps"); do
	for s in raw_cycle raw_loop q_cycle q_loop; do
		read -r b0 i0 < <(jiffies)
		tps=$(pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -j 2 -c "$clients" \
			-t "$per_client" -f "$work/$s.sql" qcpu 2>&1 | awk '/^tps/ {printf "%.0f", $3}')
		read -r b1 i1 < <(jiffies)
		awk -v s="$s" -v r="$rep" -v t="$tps" -v b="$((b1 - b0))" -v i="$((i1 - i0))" \
			-v hz="$hz" -v n="$items" \
			'BEGIN { printf "%-10s %4d %8s %14.0f %6.2f\n", s, r, t, b * 1000 / hz * 1000 / n, i / (b + i) }'
	done
done
