# Sourced by per_call.sh and cpu_per_item.sh: the shared harness's place,
# the payload compare.sh uses, compare.sh's full cycle, and a database
# holding both sides of the comparison.  Needs $port and $here set.
#
#   pair_db NAME   (re)create database NAME with the queue extension, queue
#                  bq and the raw floor's table rq, 1,000 items standing in
#                  each, analyzed
shared=${SHARED_BENCH:-$here/../../../shared/bench}
[ -f "$shared/sql/raw_cycle.sql" ] || { echo "shared bench not found (set SHARED_BENCH)" >&2; exit 1; }
PAY='{"job":"send_email","user_id":123456,"args":{"to":"someone@example.com","template":"welcome","locale":"en"}}'
P="psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $port -U postgres"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# compare.sh's full cycle
cat >"$work/q_cycle.sql" <<SQL
SELECT queue.enqueue('bq', '$PAY'::jsonb);
SELECT item_id, lease_token FROM queue.dequeue('bq', 'bench' || :client_id) \gset
SELECT queue.complete('bq', :item_id, :lease_token);
SQL

pair_db() {
	$P -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null 2>&1
	$P -d "$1" -c "CREATE EXTENSION queue" -c "SELECT queue.create_queue('bq')" >/dev/null
	$P -d "$1" -c "SELECT count(*) FROM queue.enqueue_batch('bq', (SELECT array_agg('$PAY'::jsonb) FROM generate_series(1, 1000)))" >/dev/null
	$P -d "$1" -f "$shared/sql/raw_setup.sql" >/dev/null 2>&1
	$P -d "$1" -c "INSERT INTO rq (queue, payload) SELECT 'q1', '$PAY' FROM generate_series(1, 1000)" -c "VACUUM ANALYZE" >/dev/null
}
