#!/bin/bash
# The shared reference harness (../shared/bench/queue/compare.sh) repeated
# and summed up: on a shared machine one run of it is one sample.
#
#   test/bench/compare_median.sh PORT [REPS] [SECONDS] [CLIENTS...]
#
# PORT: a running PostgreSQL 15 with queue installed and preloaded, as
# compare.sh needs (COMPARE=path/to/compare.sh when the shared harness is
# not at ../shared/bench/queue/ beside the repository).  Runs compare.sh
# REPS times (default 3) and prints, per pass and client count, the median
# raw msg/s and the median of each run's own ratios (queue/raw and
# loop/raw are taken within a run, so they compare neighbouring cells).
# Every run's lines are kept in $OUT (default a temporary file, printed).
set -eu
port=$1
reps=${2:-3}
secs=${3:-10}
shift 3 2>/dev/null || shift $#
clients=${*:-"1 4 16"}
here=$(cd "$(dirname "$0")" && pwd)
compare=${COMPARE:-$here/../../../shared/bench/queue/compare.sh}
[ -x "$compare" ] || { echo "compare.sh not found (set COMPARE)" >&2; exit 1; }
out=${OUT:-$(mktemp /tmp/queue-compare.XXXXXX)}

for r in $(seq 1 "$reps"); do
	echo "run $r of $reps ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
	"$compare" "$port" "$secs" $clients | tee -a "$out" >&2
done

echo "runs: $out"
awk '
	/queue\/raw=/ {
		pass = $1; split($2, c, "="); n = c[2];
		for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
		key = pass " " n; keys[key] = 1; cnt[key]++;
		raw[key, cnt[key]] = v["raw"]; qr[key, cnt[key]] = v["queue/raw"]; lr[key, cnt[key]] = v["loop/raw"]
	}
	function median(arr, key, k,    i, j, t, a) {
		for (i = 1; i <= k; i++) a[i] = arr[key, i] + 0;
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	END {
		printf "%-9s %-8s %-10s %-10s %-10s %s\n", "pass", "clients", "raw msg/s", "queue/raw", "loop/raw", "(medians of runs)";
		for (key in keys) {
			split(key, p, " ");
			printf "%-9s %-8s %-10d %-10.2f %-10.2f %d runs\n", p[1], p[2], median(raw, key, cnt[key]),
				median(qr, key, cnt[key]), median(lr, key, cnt[key]), cnt[key]
		}
	}' "$out" | sort -k1,1r -k2,2n
