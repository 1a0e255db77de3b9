#!/usr/bin/env bash
# test/bench/run.sh - benchmark suite for the queue extension, side by side with
# the raw SQL floor (plain table + FOR UPDATE SKIP LOCKED) and PgQ.
#
#   test/bench/run.sh [PART...]        (make bench = test/bench/run.sh)
#
# PARTs (default: $BENCH, which defaults to "throughput"):
#   throughput  pgbench scenarios x clients x reps, sync on and off, one table (msg/s)
#   backlog     claim latency p50/p99 and stats() time at standing backlogs (LAT_LEVELS)
#   snapshot    throughput while a REPEATABLE READ session sits idle with its snapshot, and after
#   bloat       size of the live tables after BLOAT_MSGS items cycled, against the first 100k
#   memory      backend memory growth over MEM_CALLS calls in one session
#   batch       enqueue_batch of 10,000 items, items/s
#   flow        flow control: full cycle with groups / capped keys against none, head-of-line, blocked groups
#   extras      backlog snapshot bloat memory batch
#   all         throughput + extras
#   start|stop  only start a cluster (kept, prints its port) / stop the one in $BASE
#
# Every run starts its own throw-away cluster under /tmp (durability at defaults)
# and writes its results under $OUT. See test/bench/README.md for the knobs.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SQL=$HERE/sql
PG_CONFIG=${PG_CONFIG:-pg_config}
PGBIN=${PGBIN:-$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)}
STAMP=$(date +%Y%m%d-%H%M%S)

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then     # smoke-test sizes; any knob set explicitly still wins
  : "${DURATION:=5}" "${REPS:=1}" "${SYNC_OFF_REPS:=1}" "${DEPTH_CLAIM1:=50000}" "${DEPTH_CLAIM100:=200000}"
  : "${LAT_LEVELS:=10000 100000}" "${LAT_CALLS:=1000}" "${SNAP_BEFORE:=15}" "${SNAP_HOLD:=30}" "${SNAP_AFTER:=30}"
  : "${BLOAT_MSGS:=300000}" "${BLOAT_POINTS:=100000 200000 300000}" "${MEM_CALLS:=60000}" "${BATCH_CALLS:=5}" "${BATCH_REPS:=1}"
fi
DURATION=${DURATION:-20}                    # pgbench -T
REPS=${REPS:-3}                             # repetitions (median reported)
CLIENTS=${CLIENTS:-"1 4 16"}
JOBS=${JOBS:-2}
PROTO=${PROTO:-prepared}
DEFAULT_SCENARIOS="raw_produce pgq_insert q_enqueue raw_claim1 q_claim1 raw_claim100 q_claim100
 raw_cycle q_cycle q_loop raw_prodcons pgq_cycle q_prodcons"
SCENARIOS=$(echo ${SCENARIOS:-$DEFAULT_SCENARIOS})
SYNC_OFF=${SYNC_OFF:-1}                     # 1: every scenario once more with synchronous_commit=off
SYNC_OFF_REPS=${SYNC_OFF_REPS:-1}
SYNC_OFF_SCENARIOS=$(echo ${SYNC_OFF_SCENARIOS:-$SCENARIOS})
BACKLOG=${BACKLOG:-1000}                    # standing backlog at the start of the cycle / loop runs
DEPTH_CLAIM1=${DEPTH_CLAIM1:-200000}        # pre-fill of the consume-only single-item runs
DEPTH_CLAIM100=${DEPTH_CLAIM100:-1000000}   # pre-fill of the consume-only claim-100 runs
PRODCONS_CONSUMERS=${PRODCONS_CONSUMERS:-1} # consumers in *_prodcons (clients 0..n-1), as pgq_cycle has 1
PRODCONS_BATCH=${PRODCONS_BATCH:-100}
PRELOAD=${PRELOAD:-pg_cron,queue}          # queue preloaded: notifications of busy producers go via its notifier
QUEUE_OPTS=${QUEUE_OPTS:-}                  # extra create_queue arguments for 'bq', e.g. "notify => false"
# backlog part
LAT_LEVELS=${LAT_LEVELS:-"10000 1000000 10000000"}
LAT_CALLS=${LAT_CALLS:-5000}
LAT_RAW=${LAT_RAW:-1}                       # also measure the raw floor's claim at the same depths
STATS_CALLS=${STATS_CALLS:-50}
# snapshot part
SNAP_TARGETS=${SNAP_TARGETS:-"q_cycle raw_cycle"}
SNAP_CLIENTS=${SNAP_CLIENTS:-4}
SNAP_BEFORE=${SNAP_BEFORE:-60}
SNAP_HOLD=${SNAP_HOLD:-300}
SNAP_AFTER=${SNAP_AFTER:-120}
SNAP_INTERVAL=${SNAP_INTERVAL:-5}
# bloat part
BLOAT_TARGETS=${BLOAT_TARGETS:-queue}       # queue and/or raw
BLOAT_MSGS=${BLOAT_MSGS:-5000000}
BLOAT_POINTS=${BLOAT_POINTS:-"100000 500000 1000000 2000000 3000000 4000000 5000000"}
BLOAT_CLIENTS=${BLOAT_CLIENTS:-4}
BLOAT_SYNC=${BLOAT_SYNC:-off}               # only makes the test finish sooner; MVCC garbage is the same
BLOAT_HISTORY_RE=${BLOAT_HISTORY_RE:-'histor|event|dead|metric|alert|archive|audit|done|processed|log'}
# memory part
MEM_CALLS=${MEM_CALLS:-1000000}
MEM_SYNC=${MEM_SYNC:-off}
# batch part
BATCH_SIZE=${BATCH_SIZE:-10000}
BATCH_CALLS=${BATCH_CALLS:-20}
BATCH_REPS=${BATCH_REPS:-3}
HB_RATE=${HB_RATE:-200}                     # heartbeat part: heartbeats per second beside the cycle
HB_CLIENTS=${HB_CLIENTS:-4}                 # heartbeat part: clients running the full cycle
HB_T=${HB_T:-$DURATION}                     # heartbeat part: seconds per run
HB_REPS=${HB_REPS:-$REPS}
# flow part
FLOW_GROUPS=${FLOW_GROUPS:-10000}           # groups of the grouped cycle
FLOW_KEYS=${FLOW_KEYS:-1000}                # capped limit keys of the keyed cycle
FLOW_CAP=${FLOW_CAP:-4}                     # each key's max_in_flight
FLOW_HOL_KEYS=${FLOW_HOL_KEYS:-9}           # keys flowing beside the throttled one
FLOW_BLOCKED=${FLOW_BLOCKED:-"100 1000 10000 100000"}   # blocked groups for the claim latency

KEEP=${KEEP:-0}                             # 1: keep the cluster running and its data at the end
QUIET_WAIT=${QUIET_WAIT:-0}                 # >0: before each run wait up to this many s for an idle box
QUIET_PCT=${QUIET_PCT:-25}
OUT=${OUT:-/tmp/queue-bench-results/$STAMP}
DB=bench

PAYLOAD='{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
qf() { q -f "$1"; }
pgb() { "$PGBIN/pgbench" -n -M "$PROTO" -j "$JOBS" "$@"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "NA"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# ---------------------------------------------------------------- prerequisites
ensure_packages() {
  local missing="" p
  for p in postgresql-15-pgq3 postgresql-15-cron; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  [ -z "$missing" ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing$missing"
    apt-get install -y -q $missing >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1; apt-get install -y -q $missing >/dev/null; } \
      || log "WARN: apt-get install$missing failed"
  else
    log "WARN: missing packages:$missing (install them with apt as root)"
  fi
}

# ---------------------------------------------------------------- cluster
pick_port() {   # [first port]
  local p
  for p in $(seq "${1:-58432}" 58999) $(seq 58000 58431); do
    ss -Hltn "sport = :$p" 2>/dev/null | grep -q . && continue
    [ -e "/tmp/.s.PGSQL.$p" ] && continue
    echo "$p"; return
  done
  die "no free port in 58000-58999"
}

STARTED=0
start_cluster() {
  if [ -z "${BASE:-}" ]; then BASE=$(mktemp -d /tmp/queue-bench.XXXXXX); fi
  PGDATA=$BASE/data
  PORT=${PORT:-$(pick_port 58432)}
  export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=$DB
  mkdir -p "$BASE"; [ "$(id -u)" = 0 ] && chown postgres: "$BASE"
  log "initdb $PGDATA (port $PORT)"
  as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null || die "initdb failed"
  cat >>"$PGDATA/postgresql.conf" <<EOF
# ---- test/bench/run.sh
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$BASE'
shared_buffers = 1GB
shared_preload_libraries = '$PRELOAD'
cron.database_name = '$DB'
max_connections = 100
max_wal_size = 4GB            # no WAL-forced checkpoints in the middle of a run
# durability at defaults: fsync = on, synchronous_commit = on, full_page_writes = on
EOF
  as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$BASE/server.log" -w start >/dev/null || { tail "$BASE/server.log"; die "server did not start"; }
  STARTED=1
  q -d postgres -c "CREATE DATABASE $DB" || die "CREATE DATABASE failed"
  q -c "CREATE EXTENSION IF NOT EXISTS pg_cron" 2>/dev/null || log "WARN: pg_cron not available"
  q -c "CREATE EXTENSION IF NOT EXISTS pgq" 2>/dev/null || log "WARN: pgq not available: pgq_* scenarios will fail"
  if q -c "CREATE EXTENSION queue" 2>"$BASE/queue.err"; then HAVE_QUEUE=1; else
    HAVE_QUEUE=0; log "NOTE: CREATE EXTENSION queue failed ($(head -1 "$BASE/queue.err")): queue scenarios are SKIPPED (run make install first)"
  fi
  q -c "CREATE TABLE bench_payloads AS SELECT array_agg('$PAYLOAD'::jsonb) AS a FROM generate_series(1, $BATCH_SIZE)"
}

stop_cluster() {
  [ -n "${HOLDER_PID:-}" ] && kill "$HOLDER_PID" 2>/dev/null
  [ -n "${BG_PID:-}" ] && kill "$BG_PID" 2>/dev/null
  if [ "$STARTED" = 1 ] && [ "$KEEP" != 1 ]; then
    as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast stop >/dev/null 2>&1
    cp "$BASE/server.log" "$OUT/server.log" 2>/dev/null
    rm -rf "$BASE"
    STARTED=0
  elif [ "$STARTED" = 1 ]; then
    log "cluster kept: PGDATA=$PGDATA port=$PORT  (stop: $PGBIN/pg_ctl -D $PGDATA stop)"
  fi
}

machine_notes() {
  {
    echo "date: $(date -Is)"
    echo "nproc: $(nproc)"
    echo "mem: $(free -g | awk '/Mem:/{print $2" GiB"}')"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    echo "kernel: $(uname -r)"
    echo "server: $(q -c 'SELECT version()')"
    echo "pgbench: $("$PGBIN/pgbench" --version)"
    for s in shared_buffers fsync synchronous_commit wal_level max_wal_size autovacuum autovacuum_naptime \
             autovacuum_vacuum_scale_factor shared_preload_libraries full_page_writes; do
      echo "$s: $(q -c "SHOW $s")"
    done
    echo "extensions: $(q -c "SELECT string_agg(extname||' '||extversion, ', ' ORDER BY extname) FROM pg_extension")"
    echo "queue source: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') $(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo '(uncommitted changes)')"
    echo "params: PARTS='$PARTS' DURATION=$DURATION REPS=$REPS CLIENTS='$CLIENTS' JOBS=$JOBS PROTO=$PROTO BACKLOG=$BACKLOG SYNC_OFF=$SYNC_OFF QUEUE_OPTS='$QUEUE_OPTS'"
  } >"$OUT/machine.txt"
}

# ---------------------------------------------------------------- CPU accounting (shared box)
# foreign% = CPU used during a run by processes other than this cluster and our pgbench/psql.
HZ=$(getconf CLK_TCK)
sys_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
mine_jiffies() {
  local pm
  pm=$(head -1 "$PGDATA/postmaster.pid" 2>/dev/null) || { echo 0; return; }
  {
    sed 's/^.*) //' "/proc/$pm/stat" | awk '{print $12+$13+$14+$15}'
    for f in $(pgrep -P "$pm" | sed 's|.*|/proc/&/stat|'); do sed 's/^.*) //' "$f" 2>/dev/null | awk '{print $12+$13}'; done
    sed 's/^.*) //' "/proc/$$/stat" | awk '{print $14+$15}'
  } | awk '{s += $1} END {print s + 0}'
}
busy_pct() { local b0 b1; b0=$(sys_busy); sleep "$1"; b1=$(sys_busy); awk -v d=$((b1 - b0)) -v hz="$HZ" -v t="$1" 'BEGIN{printf "%.0f", 100*d/hz/t}'; }
quiet_gate() {
  local waited=0 b; b=$(busy_pct 1)
  while [ "$QUIET_WAIT" -gt 0 ] && [ "$b" -gt "$QUIET_PCT" ] && [ "$waited" -lt "$QUIET_WAIT" ]; do
    b=$(busy_pct 2); waited=$((waited + 2))
  done
  echo "$b"
}

# ---------------------------------------------------------------- families: reset, fill, counters
vacuum_queue() {   # VACUUM ANALYZE every table of the extension
  q -c "SELECT format('VACUUM (ANALYZE) %s', c.oid::regclass) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'queue' AND c.relkind IN ('r', 'p', 'm')" | while read -r stmt; do q -c "$stmt"; done
}

reset_family() {   # fresh, empty queue of the family
  case $1 in
    raw)   qf "$SQL/raw_setup.sql" >/dev/null;;
    pgq)   qf "$SQL/pgq_setup.sql" >/dev/null;;
    queue*) q -v opts="${QUEUE_OPTS:+, $QUEUE_OPTS}" -f "$SQL/q_setup.sql" >/dev/null 2>"$OUT/logs/q_setup.err" || { log "q_setup.sql failed: $(head -3 "$OUT/logs/q_setup.err")"; return 1; };;
  esac
  case $1 in   # flow control families: the limits of their keys
    queue_keys) q -c "SELECT count(queue.set_limit('bq', 'k' || g, max_in_flight => $FLOW_CAP)) FROM generate_series(1, $FLOW_KEYS) g" >/dev/null;;
    queue_hol|queue_hol0)
      q -c "SELECT count(queue.set_limit('bq', 'o' || g, max_in_flight => 50)) FROM generate_series(1, $FLOW_HOL_KEYS) g" >/dev/null
      q -c "SELECT queue.set_limit('bq', 'hot', rate => 1, per => '1 hour')" >/dev/null;;
  esac
}

fill() {   # fill FAMILY N: add N ready items (bulk, only used for pre-filling)
  local fam=$1 n=$2
  [ "$n" -gt 0 ] || return 0
  case $fam in
    raw)   q -c "INSERT INTO rq (queue, priority, payload) SELECT 'q1', g % 4, '$PAYLOAD'::jsonb FROM generate_series(1, $n) g";;
    queue) q -c "DO \$\$ DECLARE left_ bigint := $n; k int; BEGIN
                   WHILE left_ > 0 LOOP
                     k := least(left_, 10000);
                     PERFORM queue.enqueue_batch('bq', (SELECT array_agg('$PAYLOAD'::jsonb) FROM generate_series(1, k)));
                     COMMIT;
                     left_ := left_ - k;
                   END LOOP; END \$\$";;
    queue_*) fill_keyed "$fam" "$n";;
  esac
}

# the pre-fill of the flow control families: items with their group or key
fill_keyed() {   # FAMILY N
  local keys
  case $1 in
    queue_groups) keys="group_keys => (SELECT array_agg('g' || (1 + (random() * ($FLOW_GROUPS - 1))::int)) FROM generate_series(1, k))";;
    queue_keys)   keys="limit_keys => (SELECT array_agg('k' || (1 + (random() * ($FLOW_KEYS - 1))::int)) FROM generate_series(1, k))";;
    queue_hol0)   keys="limit_keys => (SELECT array_agg('o' || (1 + g % $FLOW_HOL_KEYS)) FROM generate_series(1, k) g)";;
    queue_hol)    fill_keyed queue_hol0 "$2"   # the flowing keys' backlog, and nine times as many of the throttled key
                  keys="limit_keys => (SELECT array_agg('hot'::text) FROM generate_series(1, k))"; set -- "$1" $(( $2 * 9 ));;
  esac
  q -c "DO \$\$ DECLARE left_ bigint := $2; k int; BEGIN
          WHILE left_ > 0 LOOP
            k := least(left_, 10000);
            PERFORM queue.enqueue_batch('bq', (SELECT array_agg('$PAYLOAD'::jsonb) FROM generate_series(1, k)), $keys);
            COMMIT;
            left_ := left_ - k;
          END LOOP; END \$\$" >/dev/null
}

settle() {   # vacuum + checkpoint before a measured run
  case $1 in
    raw)   q -c "VACUUM ANALYZE rq";;
    queue*) vacuum_queue;;
    pgq)   :;;
  esac
  q -c "CHECKPOINT"
}

counters() {   # prints "produced consumed depth" (monotonic produced/consumed counters)
  case $1 in
    raw)   q -c "SELECT s.v, s.v - d.n, d.n FROM (SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS v FROM rq_id_seq) s,
                        (SELECT count(*) AS n FROM rq) d" | tr '|' ' ';;
    pgq)   q -c "SELECT pgq.seq_getval(queue_event_seq),
                        (SELECT coalesce(sum(t.tick_event_seq), 0) FROM pgq.subscription s
                           JOIN pgq.tick t ON t.tick_queue = s.sub_queue AND t.tick_id = s.sub_last_tick
                          WHERE s.sub_queue = queue_id),
                        pgq.seq_getval(queue_event_seq) - (SELECT max(t.tick_event_seq) FROM pgq.subscription s
                           JOIN pgq.tick t ON t.tick_queue = s.sub_queue AND t.tick_id = s.sub_last_tick
                          WHERE s.sub_queue = queue_id)
                   FROM pgq.queue WHERE queue_name = 'bq'" | tr '|' ' ';;
    queue*) q -c "SELECT h.n + l.n + d.n, h.n, l.n
                   FROM (SELECT count(*) AS n FROM queue.history WHERE queue_name = 'bq') h,
                        (SELECT count(*) AS n FROM queue.items WHERE queue_name = 'bq') l,
                        (SELECT count(*) AS n FROM queue.dead_letters WHERE queue_name = 'bq') d" 2>/dev/null | tr '|' ' ' \
             || echo "NA NA NA";;
  esac
}

# ---------------------------------------------------------------- scenarios
# sets FAM SCRIPT ARGS METRIC (produced|consumed) DEPTH MPT (messages per pgbench transaction, fallback count)
scenario_def() {
  ARGS=""; DEPTH=0; MPT=1
  case $1 in
    raw_produce)  FAM=raw;   SCRIPT=raw_produce.sql;     METRIC=produced;;
    raw_claim1)   FAM=raw;   SCRIPT=raw_claim1.sql;      METRIC=consumed; DEPTH=$DEPTH_CLAIM1;;
    raw_claim100) FAM=raw;   SCRIPT=raw_claim_batch.sql; METRIC=consumed; DEPTH=$DEPTH_CLAIM100; ARGS="-D batch=100"; MPT=100;;
    raw_cycle)    FAM=raw;   SCRIPT=raw_cycle.sql;       METRIC=consumed; DEPTH=$BACKLOG;;
    raw_loop)     FAM=raw;   SCRIPT=raw_loop.sql;        METRIC=consumed; DEPTH=$BACKLOG; ARGS="-D id=0";;
    raw_prodcons) FAM=raw;   SCRIPT=raw_prodcons.sql;    METRIC=consumed; ARGS="-D batch=$PRODCONS_BATCH -D consumers=$PRODCONS_CONSUMERS"; MPT=0;;
    pgq_insert)   FAM=pgq;   SCRIPT=pgq_insert.sql;      METRIC=produced;;
    pgq_cycle)    FAM=pgq;   SCRIPT=pgq_cycle.sql;       METRIC=consumed; MPT=0;;
    q_enqueue)    FAM=queue; SCRIPT=q_enqueue.sql;       METRIC=produced;;
    q_claim1)     FAM=queue; SCRIPT=q_claim1.sql;        METRIC=consumed; DEPTH=$DEPTH_CLAIM1;;
    q_claim100)   FAM=queue; SCRIPT=q_claim_batch.sql;   METRIC=consumed; DEPTH=$DEPTH_CLAIM100; ARGS="-D batch=100"; MPT=100;;
    q_cycle)      FAM=queue; SCRIPT=q_cycle.sql;         METRIC=consumed; DEPTH=$BACKLOG;;
    q_loop)       FAM=queue; SCRIPT=q_loop.sql;          METRIC=consumed; DEPTH=$BACKLOG; ARGS="-D item_id=0 -D lease_token=0";;
    q_prodcons)   FAM=queue; SCRIPT=q_prodcons.sql;      METRIC=consumed; ARGS="-D batch=$PRODCONS_BATCH -D consumers=$PRODCONS_CONSUMERS"; MPT=0;;
    q_cycle_group) FAM=queue_groups; SCRIPT=q_cycle_group.sql; METRIC=consumed; DEPTH=$BACKLOG; ARGS="-D groups=$FLOW_GROUPS";;
    q_cycle_key)  FAM=queue_keys; SCRIPT=q_cycle_key.sql;   METRIC=consumed; DEPTH=$BACKLOG; ARGS="-D keys=$FLOW_KEYS";;
    q_hol_base)   FAM=queue_hol0; SCRIPT=q_cycle_hol.sql;   METRIC=consumed; DEPTH=$BACKLOG; ARGS="-D keys=$FLOW_HOL_KEYS";;
    q_hol)        FAM=queue_hol;  SCRIPT=q_cycle_hol.sql;   METRIC=consumed; DEPTH=$BACKLOG; ARGS="-D keys=$FLOW_HOL_KEYS";;
    *) log "unknown scenario $1"; return 1;;
  esac
}

# run_one SCENARIO CLIENTS REP LABEL -> one row in $OUT/raw.tsv
# A consume-only run that empties its pre-fill is repeated once with twice the items it consumed,
# and later runs of that scenario keep the larger pre-fill (DEPTH_SEEN).
declare -A DEPTH_SEEN
run_one() {
  local sc=$1 c=$2 rep=$3 label=$4 retry=${5:-0} before after lg tps lat prod cons msgs note="" idle j0 b0 t0 foreign
  scenario_def "$sc" || return
  [ "${DEPTH_SEEN[$sc]:-0}" -gt "$DEPTH" ] && DEPTH=${DEPTH_SEEN[$sc]}
  case $FAM in queue*) [ "$HAVE_QUEUE" != 1 ] && return;; esac
  reset_family "$FAM" || { printf "%s\t%s\t%s\t%s\tNA\tNA\tNA\tNA\tNA\tNA\t%s\tSETUP_FAILED\t0\t0\n" "$label" "$sc" "$c" "$rep" "$DURATION" >>"$OUT/raw.tsv"; return; }
  fill "$FAM" "$DEPTH" >/dev/null
  settle "$FAM" >/dev/null
  before=$(counters "$FAM")
  lg="$OUT/logs/$label-$sc-c$c-r$rep.log"
  idle=$(quiet_gate)
  j0=$(mine_jiffies); b0=$(sys_busy); t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  pgb -c "$c" -T "$DURATION" -r $ARGS -f "$SQL/$SCRIPT" "$DB" >"$lg" 2>&1
  sleep 0.5
  foreign=$(awk -v b=$(( $(sys_busy) - b0 )) -v m=$(( $(mine_jiffies) - j0 )) -v hz="$HZ" -v t0="$t0" -v t1="$(date +%s.%N)" \
            'BEGIN{f = 100 * (b - m) / hz / (t1 - t0); if (f < 0) f = 0; printf "%.0f", f}')
  after=$(counters "$FAM")
  tps=$(awk '/^tps = /{print $3; exit}' "$lg"); lat=$(awk '/^latency average = /{print $4; exit}' "$lg")
  grep -qi "aborted\|error" "$lg" && note="ERRORS(see $(basename "$lg"))"
  read -r p0 c0 _ <<<"$before"; read -r p1 c1 d1 <<<"$after"
  if [ "$p0" = NA ] || [ "$p1" = NA ]; then
    prod=NA; cons=NA; d1=NA
    msgs=$(awk -v t="${tps:-0}" -v m="$MPT" 'BEGIN{printf "%.0f", t*m}')
    note="$note COUNT_FROM_TPS"
  else
    prod=$((p1 - p0)); cons=$((c1 - c0))
    [ "$METRIC" = produced ] && msgs=$prod || msgs=$cons
    msgs=$(awk -v m="$msgs" -v d="$DURATION" 'BEGIN{printf "%.0f", m/d}')
    if [ "$DEPTH" -gt "$BACKLOG" ] && [ "$d1" -eq 0 ]; then
      DEPTH_SEEN[$sc]=$(( cons * 2 > DEPTH * 2 ? cons * 2 : DEPTH * 2 ))
      if [ "$retry" = 0 ]; then
        log "$label $sc c=$c rep=$rep drained its $DEPTH items: again with ${DEPTH_SEEN[$sc]}"
        run_one "$sc" "$c" "$rep" "$label" 1; return
      fi
      note="$note DRAINED(raise DEPTH_CLAIM*)"
    fi
  fi
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$label" "$sc" "$c" "$rep" "${tps:-NA}" "${lat:-NA}" \
    "$prod" "$cons" "$msgs" "$d1" "$DURATION" "$note" "$idle" "$foreign" >>"$OUT/raw.tsv"
  log "$label $sc c=$c rep=$rep msg/s=$msgs tps=$tps lat=${lat}ms produced=$prod consumed=$cons depth=$d1 foreign_cpu=$foreign% $note"
}

run_set() {   # LABEL REPS SCENARIO...   (interleaved: rep > clients > scenario, so the ratios compare neighbours)
  local label=$1 reps=$2 rep c sc; shift 2
  for rep in $(seq 1 "$reps"); do
    for c in $CLIENTS; do
      for sc in "$@"; do run_one "$sc" "$c" "$rep" "$label"; done
    done
  done
}

summarize_throughput() {
  {
  echo
  echo "== throughput: msg/s = items produced (producer scenarios) or completed/acked (all others) per second"
  echo "   median (min..max) over reps; foreign% = CPU of other processes on the box during the runs (100 = one core)"
  awk -F'\t' '
    { k=$1"|"$2"|"$3; n[k]++; m[k,n[k]]=$9; t[k,n[k]]=$5; l[k,n[k]]=$6; fo[k,n[k]]=$14
      if (!(k in seen)) { seen[k]=1; order[++o]=k }; if ($12 != "") note[k]=note[k]" "$12 }
    function med(a,k,cnt,   i,j,v,tmp){ for(i=1;i<=cnt;i++) v[i]=a[k,i]+0; for(i=1;i<=cnt;i++)for(j=i+1;j<=cnt;j++) if(v[j]<v[i]){tmp=v[i];v[i]=v[j];v[j]=tmp}
        mn=v[1]; mx=v[cnt]; return (cnt%2)? v[(cnt+1)/2] : (v[cnt/2]+v[cnt/2+1])/2 }
    END {
      printf "%-8s %-13s %3s %4s %9s %9s %9s %9s %8s %8s  %s\n","commit","scenario","c","reps","msg/s","min","max","tps","lat_ms","foreign%","notes"
      for(i=1;i<=o;i++){ k=order[i]; split(k,p,"|"); c=n[k]
        mm=med(m,k,c); a=mn; b=mx; tm=med(t,k,c); lm=med(l,k,c); fm=med(fo,k,c)
        printf "%-8s %-13s %3s %4d %9.0f %9.0f %9.0f %9.0f %8.3f %8.0f %s\n",p[1],p[2],p[3],c,mm,a,b,tm,lm,fm,note[k] }
    }' "$OUT/raw.tsv"
  echo
  echo "== queue against the raw floor and PgQ (medians of this run; ratio = queue msg/s / baseline msg/s)"
  awk -F'\t' '
    { k=$1"|"$2"|"$3; n[k]++; v[k,n[k]]=$9+0; labels[$1]=1; cl[$3]=1
      if ($12 ~ /DRAINED/) flag[k]=flag[k] " drained:" $2; if ($12 ~ /ERRORS|FAILED/) flag[k]=flag[k] " errors:" $2 }
    function med(k,   cnt,i,j,w,tmp){ cnt=n[k]; if(!cnt) return -1; for(i=1;i<=cnt;i++) w[i]=v[k,i]; for(i=1;i<=cnt;i++)for(j=i+1;j<=cnt;j++) if(w[j]<w[i]){tmp=w[i];w[i]=w[j];w[j]=tmp}
        return (cnt%2)? w[(cnt+1)/2] : (w[cnt/2]+w[cnt/2+1])/2 }
    function fmt(x) { return x < 0 ? "-" : sprintf("%.0f", x) }
    function rat(a,b) { return (a < 0 || b <= 0) ? "-" : sprintf("%.2f", a/b) }
    END {
      # queue scenario | raw baseline | PgQ baseline | target on (raw|pgq) | minimum ratio | clients the target applies to
      ns = split("q_enqueue|raw_produce|pgq_insert|||;q_claim1|raw_claim1|||;q_claim100|raw_claim100||raw|1.0|all;q_cycle|raw_cycle|pgq_cycle|raw|0.8|all;q_loop|raw_cycle|pgq_cycle|raw|1.2|16;q_prodcons|raw_prodcons|pgq_cycle|pgq|0.8|16", S, ";")
      printf "%-8s %-11s %3s %9s  %-13s %9s %7s  %-11s %9s %7s  %-16s %s\n","commit","queue","c","msg/s","raw baseline","msg/s","q/raw","PgQ","msg/s","q/PgQ","target","verdict"
      nc=0; for (c in cl) cc[++nc]=c+0
      for(i=1;i<=nc;i++)for(j=i+1;j<=nc;j++) if(cc[j]<cc[i]){tmp=cc[i];cc[i]=cc[j];cc[j]=tmp}
      nl = split("default syncoff", L, " ")
      for (li=1; li<=nl; li++) { lab=L[li]; if (!(lab in labels)) continue
        for (si=1; si<=ns; si++) { split(S[si], f, "|")
          for (ci=1; ci<=nc; ci++) { c=cc[ci]
            qv=med(lab"|"f[1]"|"c); if (qv < 0) continue
            rv=(f[2]!="") ? med(lab"|"f[2]"|"c) : -1; pv=(f[3]!="") ? med(lab"|"f[3]"|"c) : -1
            tgt="-"; verdict=""
            if (f[4] != "" && (f[6] == "all" || f[6]+0 == c)) {
              tgt = "q/" f[4] ">=" f[5]; base = (f[4] == "raw") ? rv : pv
              if (base <= 0) verdict = "no baseline"; else verdict = (qv/base >= f[5]+0) ? "PASS" : "FAIL"
            }
            verdict = verdict flag[lab"|"f[1]"|"c] flag[lab"|"f[2]"|"c] flag[lab"|"f[3]"|"c]
            printf "%-8s %-11s %3d %9s  %-13s %9s %7s  %-11s %9s %7s  %-16s %s\n", lab, f[1], c, fmt(qv), (f[2]==""?"-":f[2]), fmt(rv), rat(qv,rv), (f[3]==""?"-":f[3]), fmt(pv), rat(qv,pv), tgt, verdict
          }
        }
      }
    }' "$OUT/raw.tsv"
  echo "   commit: default = synchronous_commit on; syncoff = synchronous_commit off (PGOPTIONS)."
  echo "   q_loop is held against raw_cycle (the target); q_prodcons mirrors pgq_cycle (every client produces, client 0 consumes)."
  } | tee -a "$OUT/summary.txt"
}

part_throughput() {
  log "throughput: scenarios [$SCENARIOS] clients [$CLIENTS] reps $REPS, -T $DURATION"
  [ "$HAVE_QUEUE" = 1 ] || log "NOTE: the q_* scenarios are skipped (queue extension not installed)"
  # shellcheck disable=SC2086
  run_set default "$REPS" $SCENARIOS
  if [ "$SYNC_OFF" = 1 ]; then
    log "throughput with synchronous_commit=off ($SYNC_OFF_REPS rep)"
    export PGOPTIONS="-c synchronous_commit=off"
    # shellcheck disable=SC2086
    run_set syncoff "$SYNC_OFF_REPS" $SYNC_OFF_SCENARIOS
    unset PGOPTIONS
  fi
  summarize_throughput
}

# ---------------------------------------------------------------- backlog: claim latency + stats()
# psql \timing around each claim: enqueue one (untimed), dequeue one (timed), complete it (untimed),
# so the standing backlog stays at its level. Prints "p50 p99 mean" in ms.
claim_latency() {   # FAMILY CALLS
  local fam=$1 n=$2 f=$OUT/logs/lat-$1.sql
  {
    echo '\set QUIET on'
    for _ in $(seq 1 "$n"); do
      if [ "$fam" = queue ]; then
        echo "SELECT queue.enqueue('bq', '$PAYLOAD'::jsonb) \\g /dev/null"
        echo '\timing on'
        echo "SELECT item_id, lease_token FROM queue.dequeue('bq', 'lat') \\gset"
        echo '\timing off'
        echo "SELECT queue.complete('bq', :item_id, :lease_token) \\g /dev/null"
      else
        echo "INSERT INTO rq (queue, priority, payload) VALUES ('q1', 2, '$PAYLOAD'::jsonb);"
        echo '\timing on'
        echo "WITH c AS (UPDATE rq SET vt = now() + interval '30 seconds', attempts = attempts + 1 WHERE id IN (SELECT id FROM rq WHERE queue = 'q1' AND vt <= now() ORDER BY priority, id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, payload) SELECT id FROM c \\gset"
        echo '\timing off'
        echo "DELETE FROM rq WHERE id = :id;"
      fi
    done
  } >"$f"
  "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -f "$f" 2>"$f.err" | awk '/^Time: /{print $2}' | sort -g | \
    awk -v want="$n" '{v[NR]=$1; s+=$1} END {if (NR < want) {print "ERR ERR ERR"; exit}; i50=int(NR*0.50); i99=int(NR*0.99); if(i50<1)i50=1; if(i99<1)i99=1; printf "%.3f %.3f %.3f\n", v[i50], v[i99], s/NR}'
}

stats_time() {   # CALLS [queue_name|NULL] -> "median max" ms
  local n=$1 arg=$2 f=$OUT/logs/stats.sql
  { echo '\timing on'; for _ in $(seq 1 "$n"); do echo "SELECT * FROM queue.stats($arg) \\g /dev/null"; done; } >"$f"
  "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -f "$f" 2>>"$OUT/logs/stats.err" | awk '/^Time: /{print $2}' | sort -g | \
    awk -v want="$n" '{v[NR]=$1} END {if (NR < want) print "ERR ERR"; else printf "%.3f %.3f\n", v[int((NR+1)/2)], v[NR]}'
}

part_backlog() {
  [ "$HAVE_QUEUE" = 1 ] || { log "SKIP backlog: queue extension not installed"; return; }
  local t=$OUT/backlog.tsv lvl have=0 have_raw=0 lat rlat st sta t0 t1 first_lat="" last_lat="" last_st=""
  printf "depth\tq_claim_p50_ms\tq_claim_p99_ms\tq_claim_mean_ms\traw_claim_p50_ms\traw_claim_p99_ms\traw_claim_mean_ms\tstats_q_median_ms\tstats_q_max_ms\tstats_all_median_ms\tstats_all_max_ms\tfill_items_per_s\n" >"$t"
  reset_family queue || return; reset_family raw
  for lvl in $LAT_LEVELS; do
    log "backlog: filling queue to $lvl items"
    local add=$((lvl - have)) rate
    t0=$(date +%s.%N); fill queue "$add" >/dev/null; t1=$(date +%s.%N); have=$lvl
    rate=$(awk -v n="$add" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", n/(b-a)}')
    settle queue >/dev/null
    q -c "SELECT * FROM queue.stats('bq')" >/dev/null 2>&1   # warm the cache once
    lat=$(claim_latency queue "$LAT_CALLS")
    st=$(stats_time "$STATS_CALLS" "'bq'"); sta=$(stats_time "$STATS_CALLS" "")
    rlat="NA NA NA"
    if [ "$LAT_RAW" = 1 ]; then
      fill raw $((lvl - have_raw)) >/dev/null; have_raw=$lvl; settle raw >/dev/null
      rlat=$(claim_latency raw "$LAT_CALLS")
    fi
    printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$lvl" "$(echo $lat | tr ' ' '\t')" "$(echo $rlat | tr ' ' '\t')" \
      "$(echo $st | tr ' ' '\t')" "$(echo $sta | tr ' ' '\t')" "$rate" | tr -s '\t' >>"$t"
    log "backlog $lvl: queue claim p50/p99/mean $lat ms; raw claim $rlat ms; stats('bq') median/max $st ms; stats() $sta ms"
    [ -z "$first_lat" ] && first_lat=$(echo $lat | awk '{print $1}')
    last_lat=$(echo $lat | awk '{print $1}'); last_st=$(echo $st | awk '{print $1}')
  done
  {
    echo
    echo "== backlog: claim latency (single session, psql round trip, $LAT_CALLS claims per level) and stats() time ($STATS_CALLS calls)"
    column -t "$t"
    awk -v a="$first_lat" -v b="$last_lat" -v s="$last_st" -v l1="${LAT_LEVELS%% *}" -v l2="${LAT_LEVELS##* }" 'BEGIN{
      if (a+0 > 0 && b+0 > 0) printf "   claim p50 at %s vs %s: %.2fx  (target <= 1.20x) %s\n", l2, l1, b/a, (b/a <= 1.2 ? "PASS" : "FAIL")
      else printf "   claim latency: no measurement (see logs/lat-queue.sql.err)\n"
      if (s ~ /^[0-9.]+$/) printf "   stats(q) median at %s: %s ms  (target < 5 ms) %s\n", l2, s, (s+0 < 5 ? "PASS" : "FAIL")
      else printf "   stats(q): no measurement (see logs/stats.err)\n" }'
  } | tee -a "$OUT/summary.txt"
}

# ---------------------------------------------------------------- snapshot held open
part_snapshot() {
  local tg fam total lg hs he t0 held_xmin res
  for tg in $SNAP_TARGETS; do
    scenario_def "$tg" || continue
    fam=$FAM
    if [ "$fam" = queue ] && [ "$HAVE_QUEUE" != 1 ]; then log "SKIP snapshot $tg: queue not installed"; continue; fi
    reset_family "$fam" || continue; fill "$fam" "$BACKLOG" >/dev/null; settle "$fam" >/dev/null
    total=$((SNAP_BEFORE + SNAP_HOLD + SNAP_AFTER)); lg=$OUT/logs/snapshot-$tg.log
    log "snapshot $tg: ${SNAP_BEFORE}s free, ${SNAP_HOLD}s with an idle REPEATABLE READ snapshot, ${SNAP_AFTER}s after (c=$SNAP_CLIENTS)"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    pgb -c "$SNAP_CLIENTS" -T "$total" -P "$SNAP_INTERVAL" $ARGS -f "$SQL/$SCRIPT" "$DB" >"$lg" 2>&1 &
    BG_PID=$!
    sleep "$SNAP_BEFORE"
    hs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    { printf 'BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 1;\n'; sleep "$SNAP_HOLD"; printf 'COMMIT;\n'; } \
      | PGAPPNAME=bench_snapshot_holder "$PGBIN/psql" -X -q -o /dev/null -f - &
    HOLDER_PID=$!
    sleep 2
    held_xmin=$(q -c "SELECT state || ', backend_xmin ' || coalesce(backend_xmin::text, 'NULL') FROM pg_stat_activity WHERE application_name = 'bench_snapshot_holder'")
    log "snapshot holder: $held_xmin"
    wait "$HOLDER_PID"; HOLDER_PID=""
    he=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    wait "$BG_PID"; BG_PID=""
    res=$(awk -v hs="$hs" -v he="$he" -v iv="$SNAP_INTERVAL" '
      /^progress: / { t=$2+0; r=$4+0
        if (t <= hs) { if (t > iv) { fs+=r; fn++ } }
        else if (t - iv >= hs && t <= he) { hsum+=r; hn++; if (t > he - 60) { ls+=r; ln++ } }
        else if (t - iv >= he) { after[++an]=r; at[an]=t } }
      END {
        free = fn ? fs/fn : 0; held = hn ? hsum/hn : 0; last = ln ? ls/ln : 0; rec = "never"
        for (i=1; i<=an; i++) { m=0; k=0; for (j=i; j<=an && j<i+3; j++) { m+=after[j]; k++ }
                                if (m/k >= 0.9*free) { rec = sprintf("%.0f", at[i]-iv-he); if (rec < 0) rec = 0; break } }
        as=0; for (i=(an>=12?an-11:1); i<=an; i++) { as+=after[i]; ac++ }
        printf "%.0f %.0f %.0f %.0f %s\n", free, held, last, (ac?as/ac:0), rec }' "$lg")
    read -r free held last aft rec <<<"$res"
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$tg" "$SNAP_CLIENTS" "$free" "$held" "$last" "$aft" "$rec" "$held_xmin" >>"$OUT/snapshot.tsv"
    log "snapshot $tg: free $free tps, held mean $held, held last 60 s $last, after $aft, back at 90% of free after: ${rec} (s)"
  done
  [ -f "$OUT/snapshot.tsv" ] || return
  {
    echo
    echo "== snapshot: pgbench tps (= msg/s) with c=$SNAP_CLIENTS; a REPEATABLE READ session sits idle in transaction for ${SNAP_HOLD}s"
    printf "%-11s %3s %9s %9s %12s %9s %9s %-9s %s\n" scenario c free held held_last60 after recov_s held/free verdict
    awk -F'\t' '{ w = ($5 < $4 ? $5 : $4); ratio = ($3 > 0 ? w/$3 : 0)
       v = (ratio >= 0.5 && $7 != "never" && $7+0 <= 60) ? "PASS" : "FAIL"
       printf "%-11s %3s %9s %9s %12s %9s %9s %-9.2f %s\n", $1, $2, $3, $4, $5, $6, $7, ratio, v }' "$OUT/snapshot.tsv"
    echo "   free = mean before the snapshot (first interval skipped); held/free uses the lower of the held mean and its last minute; target >= 0.50"
    echo "   recov_s = seconds after COMMIT until the rate (mean of 3 intervals of ${SNAP_INTERVAL}s) is back at >= 90% of free; target <= 60"
  } | tee -a "$OUT/summary.txt"
}

# ---------------------------------------------------------------- bloat
rel_sizes() {   # FAMILY -> rows "table heap toast_and_fsm index total live dead autovac"
  local where
  case $1 in
    queue) where="n.nspname = 'queue'";;
    raw)   where="c.relname = 'rq' AND n.nspname = 'public'";;
  esac
  q -F $'\t' -c "SELECT c.relname, pg_relation_size(c.oid), pg_table_size(c.oid) - pg_relation_size(c.oid), pg_indexes_size(c.oid),
                        pg_total_relation_size(c.oid), coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), coalesce(s.autovacuum_count, 0)
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
                  WHERE $where AND c.relkind = 'r' ORDER BY 1"
}

part_bloat() {
  local tg script per done_ p lg t sec
  for tg in $BLOAT_TARGETS; do
    case $tg in queue) script=q_cycle.sql;; raw) script=raw_cycle.sql;; *) log "unknown bloat target $tg"; continue;; esac
    if [ "$tg" = queue ] && [ "$HAVE_QUEUE" != 1 ]; then log "SKIP bloat queue: not installed"; continue; fi
    reset_family "$tg" || continue; fill "$tg" "$BACKLOG" >/dev/null; settle "$tg" >/dev/null
    t=$OUT/bloat-$tg.tsv
    printf "items_cycled\tsec\ttable\theap_bytes\ttoast_fsm_vm_bytes\tindex_bytes\ttotal_bytes\tn_live\tn_dead\tautovacuum_count\n" >"$t"
    done_=0
    for p in $BLOAT_POINTS; do
      [ "$p" -gt "$BLOAT_MSGS" ] && break
      per=$(( (p - done_) / BLOAT_CLIENTS ))
      lg=$OUT/logs/bloat-$tg-$p.log
      local s0; s0=$(date +%s.%N)
      PGOPTIONS="-c synchronous_commit=$BLOAT_SYNC" pgb -c "$BLOAT_CLIENTS" -t "$per" -f "$SQL/$script" "$DB" >"$lg" 2>&1
      sec=$(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')
      done_=$p
      sleep 1
      rel_sizes "$tg" | awk -v p="$p" -v s="$sec" '{print p "\t" s "\t" $0}' >>"$t"
      log "bloat $tg: $p items cycled (${sec}s, $(awk '/^tps = /{printf "%.0f", $3; exit}' "$lg") msg/s): live tables $(awk -F'\t' -v p="$p" -v re="$BLOAT_HISTORY_RE" '$1==p && $3 !~ re {s+=$7} END{printf "%.1f MB", s/1048576}' "$t")"
    done
    {
      echo
      echo "== bloat ($tg): $done_ items cycled with $script, c=$BLOAT_CLIENTS, synchronous_commit=$BLOAT_SYNC, default autovacuum"
      echo "   sizes in kB (table + toast + indexes); 'live' = tables whose name does not match /$BLOAT_HISTORY_RE/"
      local first=${BLOAT_POINTS%% *}
      awk -F'\t' -v first="$first" -v last="$done_" -v re="$BLOAT_HISTORY_RE" '
        NR > 1 { kind = ($3 ~ re) ? "history" : "live"; sz[$3, $1] = $7; k[$3] = kind; pts[$1] = 1
                 if (kind == "live") lv[$1] += $7; dead[$3] = $9; av[$3] = $10 }
        END {
          printf "   %-28s %-8s %12s %12s %8s %9s %8s\n", "table", "kind", "at " first, "at " last, "ratio", "n_dead", "autovac"
          for (t in k) printf "   %-28s %-8s %12.0f %12.0f %8s %9s %8s\n", t, k[t], sz[t, first]/1024, sz[t, last]/1024,
                              (sz[t, first] > 0 ? sprintf("%.2f", sz[t, last]/sz[t, first]) : "-"), dead[t], av[t]
          r = (lv[first] > 0) ? lv[last]/lv[first] : 0
          printf "   live tables + indexes: %.0f kB after %s, %.0f kB after %s: %.2fx  (target < 3x) %s\n", lv[first]/1024, first, lv[last]/1024, last, r, (r < 3 ? "PASS" : "FAIL") }' "$t"
    } | tee -a "$OUT/summary.txt"
  done
}

# ---------------------------------------------------------------- memory
mem_sample() {   # PID -> "VmRSS_kB RssAnon_kB contexts_bytes"
  local pid=$1 rss anon ctx n0
  rss=$(awk '/^VmRSS:/{print $2}' "/proc/$pid/status"); anon=$(awk '/^RssAnon:/{print $2}' "/proc/$pid/status")
  n0=$(grep -c "\[$pid\].*Grand total" "$BASE/server.log")
  q -c "SELECT pg_log_backend_memory_contexts($pid)" >/dev/null
  ctx=NA
  for _ in $(seq 1 20); do
    if [ "$(grep -c "\[$pid\].*Grand total" "$BASE/server.log")" -gt "$n0" ]; then
      ctx=$(grep "\[$pid\].*Grand total" "$BASE/server.log" | tail -1 | sed 's/.*Grand total: \([0-9]*\) bytes.*/\1/'); break
    fi
    sleep 0.2
  done
  echo "$rss $anon $ctx"
}

wait_sleeping() {   # wait until the pgbench session sits in pg_sleep; prints its pid
  local pid=""
  for _ in $(seq 1 14400); do
    pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' AND wait_event = 'PgSleep' LIMIT 1")
    [ -n "$pid" ] && { echo "$pid"; return 0; }
    kill -0 "$BG_PID" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

part_memory() {
  [ "$HAVE_QUEUE" = 1 ] || { log "SKIP memory: queue extension not installed"; return; }
  reset_family queue || return; fill queue "$BACKLOG" >/dev/null; settle queue >/dev/null
  local loops=$(( (MEM_CALLS + 2) / 3 )) warm lg=$OUT/logs/memory.log pid s1 s2
  warm=$(( loops / 100 )); [ "$warm" -lt 1000 ] && warm=1000; [ "$warm" -ge "$loops" ] && warm=$((loops / 2))
  log "memory: one session, $loops loops of enqueue+dequeue+complete ($((loops * 3)) calls), first sample after $warm loops"
  PGOPTIONS="-c synchronous_commit=$MEM_SYNC" pgb -c 1 -t "$loops" -D n=0 -D warm="$warm" -D total="$loops" -D pause=6 \
    -f "$SQL/q_memory.sql" "$DB" >"$lg" 2>&1 &
  BG_PID=$!
  pid=$(wait_sleeping) || { log "memory: session ended early, see $lg"; wait "$BG_PID"; BG_PID=""; return; }
  s1=$(mem_sample "$pid")
  sleep 7
  pid=$(wait_sleeping) || { log "memory: session ended early, see $lg"; wait "$BG_PID"; BG_PID=""; return; }
  s2=$(mem_sample "$pid")
  wait "$BG_PID"; BG_PID=""
  read -r r1 a1 c1 <<<"$s1"; read -r r2 a2 c2 <<<"$s2"
  {
    echo
    echo "== memory: one backend, $((loops * 3)) calls (enqueue, dequeue, complete), synchronous_commit=$MEM_SYNC; $(awk -v n="$loops" '/^tps = /{ if ($3 > 0 && n/$3 > 12) printf "%.0f loops/s", n/(n/$3 - 12); exit}' "$lg")"
    printf "   %-34s %14s %14s %12s\n" "" "after $warm" "after $loops" "growth"
    awk -v a="$r1" -v b="$r2" 'BEGIN{printf "   %-34s %11d kB %11d kB %9.1f MB\n", "VmRSS (incl. touched shared mem)", a, b, (b-a)/1024}'
    awk -v a="$a1" -v b="$a2" 'BEGIN{printf "   %-34s %11d kB %11d kB %9.1f MB  (target < 10 MB) %s\n", "RssAnon (private)", a, b, (b-a)/1024, ((b-a)/1024 < 10 ? "PASS" : "FAIL")}'
    if [ "$c1" != NA ] && [ "$c2" != NA ]; then
      awk -v a="$c1" -v b="$c2" 'BEGIN{printf "   %-34s %11.0f kB %11.0f kB %9.1f MB  (target < 10 MB) %s\n", "memory contexts (Grand total)", a/1024, b/1024, (b-a)/1048576, ((b-a)/1048576 < 10 ? "PASS" : "FAIL")}'
    fi
  } | tee -a "$OUT/summary.txt"
  printf "loops\tvmrss_kb\trssanon_kb\tcontexts_bytes\n%s\t%s\t%s\t%s\n%s\t%s\t%s\t%s\n" "$warm" "$r1" "$a1" "$c1" "$loops" "$r2" "$a2" "$c2" >"$OUT/memory.tsv"
}

# ---------------------------------------------------------------- enqueue_batch
part_batch() {
  local fam script rep lg tps rates
  : >"$OUT/batch.tsv"
  for fam in queue raw; do
    if [ "$fam" = queue ] && [ "$HAVE_QUEUE" != 1 ]; then log "SKIP batch queue: not installed"; continue; fi
    [ "$fam" = queue ] && script=q_batch.sql || script=raw_batch.sql
    for rep in $(seq 1 "$BATCH_REPS"); do
      reset_family "$fam" || continue; settle "$fam" >/dev/null
      lg=$OUT/logs/batch-$fam-r$rep.log
      pgb -c 1 -t "$BATCH_CALLS" -f "$SQL/$script" "$DB" >"$lg" 2>&1
      tps=$(awk '/^tps = /{print $3; exit}' "$lg")
      printf "%s\t%s\t%s\t%.0f\n" "$fam" "$rep" "${tps:-0}" "$(awk -v t="${tps:-0}" -v n="$BATCH_SIZE" 'BEGIN{print t*n}')" >>"$OUT/batch.tsv"
      log "batch $fam rep $rep: $(awk -v t="${tps:-0}" -v n="$BATCH_SIZE" 'BEGIN{printf "%.0f", t*n}') items/s ($BATCH_CALLS calls of $BATCH_SIZE)"
    done
  done
  {
    echo
    echo "== enqueue_batch: $BATCH_CALLS calls of $BATCH_SIZE items, one session, synchronous_commit on; median of $BATCH_REPS"
    local q r
    q=$(awk -F'\t' '$1=="queue" {print $4}' "$OUT/batch.tsv" | median)
    r=$(awk -F'\t' '$1=="raw" {print $4}' "$OUT/batch.tsv" | median)
    [ "$q" != NA ] && awk -v q="$q" 'BEGIN{printf "   queue.enqueue_batch          %8.0f items/s\n", q}'
    [ "$r" != NA ] && awk -v r="$r" 'BEGIN{printf "   raw INSERT ... SELECT unnest %8.0f items/s  (floor)\n", r}'
    [ "$q" != NA ] && [ "$r" != NA ] &&
      awk -v q="$q" -v r="$r" 'BEGIN{printf "   enqueue_batch / raw INSERT   %8.2fx  (target >= 0.75x) %s\n", q/r, (q >= 0.75*r ? "PASS" : "FAIL")}'
  } | tee -a "$OUT/summary.txt"
  [ "$HAVE_QUEUE" = 1 ] && batch_conflict
}

# enqueue_batch of 100,000 keyed items with one key held by a live item
# against the same batch without: the held key must not make it slower
# (it once matched ids pairwise: 31 s against 4.5 s).
batch_conflict() {
  local rep out plain=() held=() p h
  reset_family queue || return
  for rep in $(seq 1 "$BATCH_REPS"); do
    out=$(qf "$SQL/q_batch_conflict.sql") || { log "batch conflict rep $rep failed"; continue; }
    plain+=("${out%%|*}"); held+=("${out##*|}")
    log "batch conflict rep $rep: plain ${out%%|*} ms, one key held ${out##*|} ms"
  done
  printf "%s\n" "${plain[@]}" >"$OUT/batch_conflict_plain.txt"; printf "%s\n" "${held[@]}" >"$OUT/batch_conflict_held.txt"
  p=$(printf "%s\n" "${plain[@]}" | median); h=$(printf "%s\n" "${held[@]}" | median)
  [ "$p" = NA ] && return
  awk -v p="$p" -v h="$h" 'BEGIN{printf "   100,000 keyed items, one key held %8.0f ms vs %.0f ms without: %.2fx  (target <= 1.5x) %s\n", h, p, h/p, (h/p <= 1.5 ? "PASS" : "FAIL")}' \
    | tee -a "$OUT/summary.txt"
}

# ---------------------------------------------------------------- heartbeats beside the cycle
# The full cycle (q_cycle.sql) alone and with HB_RATE heartbeats a second
# of 200 bots running beside it: a heartbeat must not make every backend
# drop its caches and replan (it once did: a statement trigger on the
# worker registry fired for INSERT ... ON CONFLICT).
part_heartbeat() {
  [ "$HAVE_QUEUE" = 1 ] || { log "SKIP heartbeat: queue not installed"; return; }
  local rep mode lg tps hb_pid beats alone beside
  : >"$OUT/heartbeat.tsv"
  for rep in $(seq 1 "$HB_REPS"); do
    for mode in alone beside; do
      reset_family queue || continue; settle queue >/dev/null
      hb_pid=
      if [ "$mode" = beside ]; then
        pgb -c 2 -R "$HB_RATE" -T $((HB_T + 2)) -f "$SQL/q_heartbeat.sql" "$DB" \
          >"$OUT/logs/heartbeat-beats-r$rep.log" 2>&1 &
        hb_pid=$!
        sleep 1
      fi
      lg=$OUT/logs/heartbeat-cycle-$mode-r$rep.log
      pgb -c "$HB_CLIENTS" -T "$HB_T" -f "$SQL/q_cycle.sql" "$DB" >"$lg" 2>&1
      beats=0
      if [ -n "$hb_pid" ]; then
        wait "$hb_pid"
        beats=$(awk '/^tps = /{print $3; exit}' "$OUT/logs/heartbeat-beats-r$rep.log")
      fi
      tps=$(awk '/^tps = /{print $3; exit}' "$lg")
      printf "%s\t%s\t%s\t%s\n" "$mode" "$rep" "${tps:-0}" "${beats:-0}" >>"$OUT/heartbeat.tsv"
      log "heartbeat $mode rep $rep: ${tps:-0} cycles/s (${beats:-0} heartbeats/s beside)"
    done
  done
  alone=$(awk -F'\t' '$1=="alone" {print $3}' "$OUT/heartbeat.tsv" | median)
  beside=$(awk -F'\t' '$1=="beside" {print $3}' "$OUT/heartbeat.tsv" | median)
  beats=$(awk -F'\t' '$1=="beside" {print $4}' "$OUT/heartbeat.tsv" | median)
  {
    echo
    echo "== full cycle (enqueue, dequeue, complete), $HB_CLIENTS clients, -T $HB_T, median of $HB_REPS"
    awk -v a="$alone" -v b="$beside" -v h="$beats" 'BEGIN{printf "   alone %10.0f cycles/s; with %.0f heartbeats/s beside %10.0f cycles/s: %.2fx  (target >= 0.85x) %s\n", a, h, b, (a > 0 ? b/a : 0), (a > 0 && b/a >= 0.85 ? "PASS" : "FAIL")}'
  } | tee -a "$OUT/summary.txt"
}

# ---------------------------------------------------------------- flow control
# The full cycle with every item in one of FLOW_GROUPS groups, and with every
# item under one of FLOW_KEYS keys capped at FLOW_CAP, against the plain
# cycle; the head-of-line figure: the cycle of FLOW_HOL_KEYS capped keys while
# a throttled key holds 90 % of the backlog, against the same without it;
# and the claim latency with FLOW_BLOCKED groups blocked behind their heads.
flow_ratio() {   # LABEL SCENARIO BASE -> one line per client count
  local c a b
  for c in $CLIENTS; do
    a=$(awk -F'\t' -v l=flow -v s="$2" -v c="$c" '$1==l && $2==s && $3==c {print $9}' "$OUT/raw.tsv" | median)
    b=$(awk -F'\t' -v l=flow -v s="$3" -v c="$c" '$1==l && $2==s && $3==c {print $9}' "$OUT/raw.tsv" | median)
    awk -v n="$1" -v c="$c" -v a="$a" -v b="$b" 'BEGIN{ if (a+0 > 0 && b+0 > 0)
      printf "   %-34s c=%-3s %8.0f vs %8.0f msg/s: %.2fx  (target >= 0.80x) %s\n", n, c, a, b, a/b, (a/b >= 0.8 ? "PASS" : "FAIL");
      else printf "   %-34s c=%-3s no measurement\n", n, c }'
  done
}

blocked_groups() {   # N: N groups with their head processing and one member waiting
  local n=$1
  reset_family queue || return 1
  q -c "DO \$\$ DECLARE left_ bigint := $n; k int; base bigint := 0; BEGIN
          WHILE left_ > 0 LOOP
            k := least(left_, 25000);
            PERFORM queue.enqueue_batch('bq', (SELECT array_agg('$PAYLOAD'::jsonb) FROM generate_series(1, 2 * k)),
                                        group_keys => (SELECT array_agg('g' || (base + (g % k))) FROM generate_series(1, 2 * k) g));
            COMMIT;
            base := base + k; left_ := left_ - k;
          END LOOP; END \$\$" >/dev/null
  q -c "DO \$\$ BEGIN
          LOOP
            EXIT WHEN (SELECT count(*) FROM queue.dequeue('bq', 'holder', 10000, lease_timeout => '1 day')) = 0;
            COMMIT;
          END LOOP; END \$\$" >/dev/null
  settle queue >/dev/null
}

part_flow() {
  [ "$HAVE_QUEUE" = 1 ] || { log "SKIP flow: queue extension not installed"; return; }
  local n lat first="" last="" t=$OUT/flow_latency.tsv
  log "flow: cycles with $FLOW_GROUPS groups and $FLOW_KEYS keys (cap $FLOW_CAP) against none; clients [$CLIENTS] reps $REPS, -T $DURATION"
  run_set flow "$REPS" q_cycle q_cycle_group q_cycle_key q_hol_base q_hol
  printf "blocked_groups\tclaim_p50_ms\tclaim_p99_ms\tclaim_mean_ms\n" >"$t"
  for n in $FLOW_BLOCKED; do
    log "flow: $n blocked groups"
    blocked_groups "$n" || continue
    lat=$(claim_latency queue "$LAT_CALLS")
    printf "%s\t%s\n" "$n" "$(echo $lat | tr ' ' '\t')" >>"$t"
    log "flow: $n blocked groups: claim p50/p99/mean $lat ms"
    [ -z "$first" ] && first=$(echo $lat | awk '{print $1}')
    last=$(echo $lat | awk '{print $1}')
  done
  {
    echo
    echo "== flow control: full cycle (enqueue + dequeue + complete), msg/s, median of $REPS, -T $DURATION"
    flow_ratio "$FLOW_GROUPS groups vs no keys" q_cycle_group q_cycle
    flow_ratio "$FLOW_KEYS keys capped at $FLOW_CAP vs no keys" q_cycle_key q_cycle
    flow_ratio "throttled key holding 90% vs none" q_hol q_hol_base
    echo "   claim latency with blocked groups (psql round trip, $LAT_CALLS claims of plain items):"
    column -t "$t" | sed 's/^/   /'
    awk -v a="$first" -v b="$last" -v l1="${FLOW_BLOCKED%% *}" -v l2="${FLOW_BLOCKED##* }" 'BEGIN{
      if (a+0 > 0 && b+0 > 0) printf "   claim p50 with %s blocked groups vs %s: %.2fx  (target <= 1.20x) %s\n", l2, l1, b/a, (b/a <= 1.2 ? "PASS" : "FAIL") }'
  } | tee -a "$OUT/summary.txt"
}

# ---------------------------------------------------------------- main
# (everything runs inside main, so that editing this file during a run cannot change the run)
main() {
  PARTS=${*:-${BENCH:-throughput}}
  PARTS=$(echo "$PARTS" | sed -e 's/\ball\b/throughput extras/' -e 's/\bextras\b/backlog snapshot bloat memory batch heartbeat/' \
                             -e 's/\blatency\b/backlog/' -e 's/\bstats\b/backlog/' -e 's/\benqueue_batch\b/batch/')
  [ -x "$PGBIN/pgbench" ] || die "no pgbench in $PGBIN (set PGBIN or PG_CONFIG)"

  if [ "$PARTS" = stop ]; then
    [ -n "${BASE:-}" ] || die "set BASE to the folder printed by 'run.sh start'"
    as_pg "$PGBIN/pg_ctl" -D "$BASE/data" -m fast stop; return
  fi

  ensure_packages
  mkdir -p "$OUT/logs"; [ "$(id -u)" = 0 ] && chown -R postgres: "$OUT" 2>/dev/null
  : >"$OUT/raw.tsv"; : >"$OUT/summary.txt"
  if [ "$PARTS" = start ]; then
    KEEP=1; start_cluster
    echo "BASE=$BASE PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=$DB"; return 0
  fi
  trap 'stop_cluster' EXIT
  trap 'log interrupted; exit 130' INT TERM
  start_cluster
  machine_notes
  log "parts: $PARTS; results in $OUT"
  local part
  for part in $PARTS; do
    case $part in
      throughput|backlog|snapshot|bloat|memory|batch|heartbeat|flow) "part_$part";;
      *) log "unknown part '$part' (throughput backlog snapshot bloat memory batch heartbeat flow extras all)";;
    esac
  done
  echo
  echo "results in $OUT (summary.txt, raw.tsv, machine.txt, logs/)"
}

main "$@"; exit $?
