#!/bin/bash
# Per-call cost at one client: each of enqueue, dequeue and complete against
# the raw statement it stands for, as the shared harness runs them.
#
#   test/bench/per_call.sh PORT [REPS] [SECONDS]
#
# PORT: a running PostgreSQL 15 with queue installed and preloaded (as for
# compare.sh).  Makes the database qpercall, then runs REPS pairs (default
# 5) of `pgbench -n -M prepared -c 1 -T SECONDS -r`: the shared
# raw_cycle.sql (INSERT, SKIP LOCKED claim, DELETE) and the full cycle of
# compare.sh (enqueue, dequeue, complete), back to back.  Prints every
# pair's per-statement latencies and ratios, then the median ratio of each
# statement over the pairs (a ratio is taken within a pair, so it compares
# neighbouring runs).  PGOPTIONS passes through (e.g. -c
# synchronous_commit=off).
set -eu
port=$1
reps=${2:-5}
secs=${3:-10}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pair_db.sh"
pair_db qpercall

# the three statement latencies (ms) of a pgbench -r run, in script order
latencies() {
	pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c 1 -T "$secs" -r -f "$1" qpercall 2>&1 |
		awk '/statement latencies/ {on = 1; next} on && $1 ~ /^[0-9.]+$/ && $0 !~ /\\set/ {printf "%s ", $1}'
}

printf '%-5s %-22s %-22s %s\n' pair "raw INSERT/claim/DELETE" "enqueue/dequeue/complete" "ratios"
for r in $(seq 1 "$reps"); do
	raw=($(latencies "$shared/sql/raw_cycle.sql"))
	q=($(latencies "$work/q_cycle.sql"))
	[ ${#raw[@]} -eq 3 ] && [ ${#q[@]} -eq 3 ] || { echo "pair $r: pgbench failed" >&2; exit 1; }
	printf '%-5s %-22s %-22s %.2f %.2f %.2f\n' "$r" "${raw[*]}" "${q[*]}" \
		"$(echo "${q[0]}/${raw[0]}" | bc -l)" "$(echo "${q[1]}/${raw[1]}" | bc -l)" \
		"$(echo "${q[2]}/${raw[2]}" | bc -l)" | tee -a "$work/pairs"
done
awk '{ e[NR] = $(NF-2); d[NR] = $(NF-1); c[NR] = $NF }
	function med(a, n,   i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	END { printf "median of %d pairs: enqueue %.2fx the INSERT, dequeue %.2fx the claim, complete %.2fx the DELETE\n",
		NR, med(e, NR), med(d, NR), med(c, NR) }' "$work/pairs"
