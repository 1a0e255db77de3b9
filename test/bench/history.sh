#!/usr/bin/env bash
# test/bench/history.sh - history that never bloats: ITEMS items through the
# full cycle (enqueue, dequeue, complete; test/bench/sql/q_cycle.sql) with the
# history, the events and the failure log partitioned by time, and retention
# dropping whole partitions while the cycle runs.
#
#   [PG_CONFIG=...] [ITEMS=5000000] test/bench/history.sh
#
# The run is cut into segments of SEGMENT seconds (pgbench -T), alternately
# with retention ("on") and without ("off"); between segments it records the
# size of each table (all partitions, indexes and TOAST) and the number of
# partitions.  In both modes a driver calls CALL queue.run_sweep() every
# SWEEP_EVERY seconds, as the pg_cron job would, which creates the partitions
# ahead (queue.history_partition_width = WIDTH); in "on" segments it also
# drops the partitions older than KEEP.
#
# The history and the failure log are kept at least an hour whatever the
# retention (stats' last hour, the breaker window), so within a run of
# minutes nothing would be due: the queue keeps its default retention (7
# days), and the driver drops with queue._history_drop() given a "now"
# moved forward by the difference between the table's keep window and KEEP,
# which is what maintain_history() does when that window has passed.
# The drop takes the same locks (lock_timeout 500 ms) as in production.
#
# Knobs: ITEMS (5,000,000), MAX_SECONDS (no limit: the run also stops after
# the segment that passes it), CLIENTS (4), SEGMENT (60 s), WIDTH (60 s),
# KEEP ('3 min'), SWEEP_EVERY (5 s), AUDIT ('all': three events an item),
# BACKLOG (1,000 items queued before the cycle starts), SYNC (on: the
# server's synchronous_commit; off gets 5 million items through in about
# half an hour on 2 cores), OUT (results dir).
# Results: $OUT/segments.tsv (mode, items, tps), $OUT/sizes.tsv, summary.txt;
# SUMMARY_ONLY=1 OUT=dir writes the summary of an earlier (or cut) run again.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir)}
ITEMS=${ITEMS:-5000000}
MAX_SECONDS=${MAX_SECONDS:-0}
CLIENTS=${CLIENTS:-4}
SEGMENT=${SEGMENT:-60}
WIDTH=${WIDTH:-60}
KEEP=${KEEP:-3 min}
SWEEP_EVERY=${SWEEP_EVERY:-5}
AUDIT=${AUDIT:-all}
BACKLOG=${BACKLOG:-1000}
SYNC=${SYNC:-on}
OUT=${OUT:-/tmp/queue-history-bench-$(date +%Y%m%d-%H%M%S)}
DB=bench

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
q() { as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -At -h "$BASE" -p "$PORT" -d "$DB" "$@"; }

pick_port() {
  local p=$1
  while as_pg "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$p" >/dev/null 2>&1 || ss -ltn 2>/dev/null | grep -q ":$p "; do
    p=$((p + 1))
  done
  echo "$p"
}

summary() {
  local items seg
  items=$(awk -F'\t' 'NR > 1 {n = $6} END {print n + 0}' "$OUT/segments.tsv")
  seg=$(awk -F'\t' 'NR > 1 {n = $1} END {print n + 0}' "$OUT/segments.tsv")
  {
    echo "== history: $items items through the full cycle (c=$CLIENTS, audit=$AUDIT, synchronous_commit=$SYNC), partitions of ${WIDTH}s, retention by partition past $KEEP"
    echo "   command: PG_CONFIG=$PG_CONFIG SYNC=$SYNC ITEMS=$ITEMS MAX_SECONDS=$MAX_SECONDS CLIENTS=$CLIENTS SEGMENT=$SEGMENT WIDTH=$WIDTH KEEP='$KEEP' test/bench/history.sh"
    awk -F'\t' 'NR > 1 { n[$2]++; v[$2, n[$2]] = $5 }
      function median(m,   i, j, t, a, k) { k = n[m]; for (i = 1; i <= k; i++) a[i] = v[m, i]
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
      END { off = median("off"); on = median("on")
            printf "   throughput, medians of %d segments without retention and %d with: %.0f items/s without, %.0f items/s with: %.3f (target >= 0.9) %s\n",
                   n["off"], n["on"], off, on, on / off, (on / off >= 0.9 ? "PASS" : "FAIL") }' "$OUT/segments.tsv"
    echo "   sizes (MB, all partitions with indexes and TOAST) after each segment:"
    awk -F'\t' 'NR > 1 { sz[$1, $3] = $5; p[$1, $3] = $4; it[$1] = $2; if ($1 > last) last = $1 }
      END { printf "   %7s %10s %16s %16s %16s %10s\n", "segment", "items", "item_done(parts)", "events(parts)", "failure_log(parts)", "item_live"
            for (s = 1; s <= last; s++)
              printf "   %7d %10d %10.1f (%3d) %10.1f (%3d) %10.1f (%3d) %10.1f\n", s, it[s], sz[s, "item_done"]/1048576, p[s, "item_done"],
                     sz[s, "events"]/1048576, p[s, "events"], sz[s, "failure_log"]/1048576, p[s, "failure_log"], sz[s, "item_live"]/1048576 }' "$OUT/sizes.tsv"
    echo "   dead rows left by retention in the history tables at the end: $(awk -F'\t' -v l="$seg" '$1 == l && $3 != "item_live" {d += $7} END {print d + 0}' "$OUT/sizes.tsv")"
    echo "   partitions dropped: $(awk -F'|' '{s += $2} END {print s + 0}' "$OUT/drops.log" 2>/dev/null); lock timeouts: $(grep -c 'lock timeout' "$OUT/driver.err" 2>/dev/null)"
  } | tee "$OUT/summary.txt"
}

if [ "${SUMMARY_ONLY:-0}" = 1 ]; then summary; exit 0; fi

BASE=$(mktemp -d /tmp/queue-history-bench.XXXXXX)
[ "$(id -u)" = 0 ] && chown postgres: "$BASE"
mkdir -p "$OUT"; [ "$(id -u)" = 0 ] && chown postgres: "$OUT"
PORT=${PORT:-$(pick_port 58520)}
DRIVER=

cleanup() {
  [ -n "$DRIVER" ] && kill "$DRIVER" 2>/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$BASE/data" -m fast stop >/dev/null 2>&1
  rm -rf "$BASE"
}
trap cleanup EXIT

log "cluster in $BASE (port $PORT), results in $OUT"
as_pg "$PGBIN/initdb" -D "$BASE/data" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null || die "initdb failed"
cat >>"$BASE/data/postgresql.conf" <<EOF
listen_addresses = ''
port = $PORT
unix_socket_directories = '$BASE'
shared_buffers = 512MB
shared_preload_libraries = 'pg_cron,queue'
cron.database_name = '$DB'
max_wal_size = 4GB
synchronous_commit = $SYNC
EOF
as_pg "$PGBIN/pg_ctl" -D "$BASE/data" -l "$BASE/server.log" -w start >/dev/null || die "server did not start"
as_pg "$PGBIN/psql" -X -q -h "$BASE" -p "$PORT" -d postgres -c "CREATE DATABASE $DB" || die "CREATE DATABASE failed"
q -c "CREATE EXTENSION queue" || die "CREATE EXTENSION queue failed (make install first)"
q -c "ALTER DATABASE $DB SET queue.history_partition_width = $WIDTH"
# the queue's own retention (7 days) never comes due within the run: the
# "off" segments see no retention at all, the "on" ones the driver's drops
q -c "SELECT queue.create_queue('bq', retention => '7 days', audit => '$AUDIT')" >/dev/null
q -c "SELECT count(*) FROM queue.enqueue_batch('bq', array_fill('{\"job\":\"send_email\"}'::jsonb, ARRAY[$BACKLOG]))" >/dev/null
q -c "CALL queue.run_sweep()"

# the retention driver: run_sweep every SWEEP_EVERY s; drops past KEEP when $1 = on
driver() {
  local mode=$1
  while :; do
    q -c "CALL queue.run_sweep()" >/dev/null 2>>"$OUT/driver.err"
    if [ "$mode" = on ]; then
      q -c "SET lock_timeout = '500ms'" \
        -c "SELECT t.table_name, queue._history_drop(t.table_name,
                      clock_timestamp() + queue._history_keep(t.table_name) - interval '$KEEP')
              FROM queue._history_tables() t" >>"$OUT/drops.log" 2>>"$OUT/driver.err"
    fi
    sleep "$SWEEP_EVERY"
  done
}

sizes() {   # one row per table: name, partitions, bytes (heap + toast + indexes of every partition), rows
  q -F $'\t' -c "
    SELECT t.name, count(c.oid) FILTER (WHERE c.relispartition AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'),
           coalesce(sum(pg_total_relation_size(c.oid)), 0),
           coalesce(sum(s.n_live_tup), 0), coalesce(sum(s.n_dead_tup), 0)
      FROM unnest(ARRAY['item_done', 'events', 'failure_log', 'item_live']) t(name)
      LEFT JOIN pg_class c ON c.relnamespace = 'queue'::regnamespace AND c.relkind = 'r'
                          AND (c.relname = t.name OR c.oid IN (SELECT inhrelid FROM pg_inherits
                                                                WHERE inhparent = ('queue.' || t.name)::regclass))
      LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
     GROUP BY t.name ORDER BY t.name"
}


printf "segment\tmode\tseconds\titems\ttps\titems_total\n" >"$OUT/segments.tsv"
printf "segment\titems_total\ttable\tpartitions\tbytes\tlive_rows\tdead_rows\n" >"$OUT/sizes.tsv"
done_items=0
seg=0
mode=off
START=$(date +%s)
while [ "$done_items" -lt "$ITEMS" ]; do
  if [ "$MAX_SECONDS" -gt 0 ] && [ $(( $(date +%s) - START )) -ge "$MAX_SECONDS" ]; then
    log "stopping after $MAX_SECONDS s (MAX_SECONDS)"; break
  fi
  seg=$((seg + 1))
  driver "$mode" &
  DRIVER=$!
  lg=$OUT/pgbench-$seg.log
  as_pg "$PGBIN/pgbench" -n -h "$BASE" -p "$PORT" -c "$CLIENTS" -j 2 -T "$SEGMENT" -M prepared \
    -f "$HERE/sql/q_cycle.sql" "$DB" >"$lg" 2>&1
  kill "$DRIVER" 2>/dev/null; wait "$DRIVER" 2>/dev/null; DRIVER=
  n=$(awk '/number of transactions actually processed/{split($0, a, ": "); split(a[2], b, "/"); print b[1]; exit}' "$lg")
  tps=$(awk '/^tps = /{printf "%.0f", $3; exit}' "$lg")
  [ -n "$n" ] || die "pgbench failed: $(tail -3 "$lg")"
  done_items=$((done_items + n))
  printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$seg" "$mode" "$SEGMENT" "$n" "$tps" "$done_items" >>"$OUT/segments.tsv"
  sizes | awk -v s="$seg" -v d="$done_items" '{print s "\t" d "\t" $0}' >>"$OUT/sizes.tsv"
  log "segment $seg ($mode): $tps items/s, $done_items items; $(sizes | awk -F'\t' '{printf "%s %d parts %.1f MB  ", $1, $2, $3/1048576}')"
  if [ "$mode" = off ]; then mode=on; else mode=off; fi
done
summary
