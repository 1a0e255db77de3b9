# test/citus/cases.sh -- the cases of test/citus/run.sh, sourced by it
# once the cluster runs (cpsql/wpsql, BASE, COORD_PORT, WORKER_PORTS).

NTEST=0
NFAIL=0

# Known gaps: checks that fail on Citus today, reported as TAP TODO (not
# counted as failures) with the reason; README "Scale-out" lists them.
declare -A TODO=(
)

ok() {
	NTEST=$((NTEST + 1))
	local todo=${TODO[$2]:-}
	if [ "$1" = 0 ]; then
		echo "ok $NTEST - $2${todo:+ # TODO $todo}"
	elif [ -n "$todo" ]; then
		echo "not ok $NTEST - $2 # TODO $todo"
	else
		NFAIL=$((NFAIL + 1))
		echo "not ok $NTEST - $2"
		[ -n "${3:-}" ] && printf '%s\n' "$3" | sed 's/^/#   /' | head -n 40
	fi
}

# is WANT GOT NAME
is() {
	if [ "$2" = "$1" ]; then ok 0 "$3"; else ok 1 "$3" "expected: $1
got:      $2"; fi
}

want_case() { [ -z "$FILTER" ] || [[ "$1" == *"$FILTER"* ]]; }

# The node (host:port) holding queue $1's shards.
queue_node() {
	cpsql -c "SELECT n.nodename || ':' || n.nodeport
	            FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid
	           WHERE p.shardid = get_shard_id_for_distribution_column('queue.item_live', '$1')"
}

# A queue name whose shards are on worker $1 (1-based), from prefix $2.
queue_on_worker() {
	local want="127.0.0.1:${WORKER_PORTS[$(($1 - 1))]}" i
	for i in $(seq 1 200); do
		[ "$(queue_node "$2$i")" = "$want" ] && { echo "$2$i"; return 0; }
	done
	return 1
}

# ------------------------------------------------------------ distribute

case_distribute() {
	is f "$(cpsql -c 'CREATE EXTENSION queue' -c 'SELECT queue.distributed()')" \
		"before distribute(): distributed() is false"
	out=$(cpsql -c 'SELECT action, count(*) FROM queue.distribute(shard_count => 8) GROUP BY 1 ORDER BY 1' 2>&1)
	ok $? "distribute() on the coordinator" "$out"
	echo "$out" | sed 's/^/# /'
	is t "$(cpsql -c 'SELECT queue.distributed()')" "after distribute(): distributed() is true"
	is "" "$(cpsql -c 'SELECT * FROM queue.distribute()')" "distribute() again changes nothing"
	# every table of the schema is a Citus table: per-queue ones colocated
	is "0" "$(cpsql -c "SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'queue'::regnamespace
	                      AND c.relkind = 'r' AND c.oid NOT IN (SELECT logicalrelid FROM pg_dist_partition)")" \
		"no queue table left local"
	is "1" "$(cpsql -c "SELECT count(DISTINCT colocationid) FROM pg_dist_partition
	                     WHERE logicalrelid::text LIKE 'queue.%' AND partmethod = 'h'")" \
		"the per-queue tables share one colocation group"
	is "t" "$(wpsql 1 -c 'SELECT queue.distributed()')" "a worker sees the same"
	# sequences: each worker draws from its own range
	is "t" "$(wpsql 1 -c "SELECT last_value >= (1::bigint << 48) FROM queue.lease_token_seq")" \
		"worker sequences moved to their own range"
}

# --------------------------------------------------------------- smoke

case_api() {
	local out
	out=$(cpsql 2>&1 <<-'SQL'
		-- Citus's notices (sweep() creates the history partitions)
		SET client_min_messages = warning;
		SELECT queue.create_queue('smoke', max_attempts => 3, audit => 'all');
		SELECT queue.create_queue('smoke_cap', max_in_flight => 2);
		SELECT queue.register_worker('smoke-bot');
		SELECT count(*) FROM (SELECT queue.enqueue('smoke', jsonb_build_object('n', g), dedup_key => 'k' || g)
		                        FROM generate_series(1, 6) g) e;
		SELECT count(*) FROM queue.enqueue_batch('smoke', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[]);
		SELECT count(*) FROM queue.enqueue_batch('smoke_cap', array_fill('{}'::jsonb, ARRAY[5]));
		-- claim, complete, fail, release, extend, checkpoint
		CREATE TEMP TABLE got AS SELECT * FROM queue.dequeue('smoke', 'smoke-bot', 5);
		SELECT count(*) FROM got;
		SELECT queue.complete('smoke', item_id, lease_token, '{"ok": true}') FROM got ORDER BY item_id LIMIT 1;
		SELECT queue.fail('smoke', item_id, lease_token, 'boom') FROM got ORDER BY item_id OFFSET 1 LIMIT 1;
		SELECT queue.release('smoke', item_id, lease_token) IS NOT NULL FROM got ORDER BY item_id OFFSET 2 LIMIT 1;
		SELECT queue.extend_lease('smoke', item_id, lease_token, '10 min') > now() FROM got ORDER BY item_id OFFSET 3 LIMIT 1;
		SELECT queue.checkpoint('smoke', item_id, lease_token, '{"step": 2}') FROM got ORDER BY item_id OFFSET 3 LIMIT 1;
		SELECT queue.complete_batch('smoke', array_agg(item_id), array_agg(lease_token)) FROM (SELECT * FROM got ORDER BY item_id OFFSET 3) g;
		SELECT count(*) FROM queue.dequeue('smoke_cap', 'smoke-bot', 5);
		SELECT state, count(*) FROM queue.items WHERE queue_name = 'smoke' GROUP BY 1 ORDER BY 1;
		SELECT count(*) FROM queue.history WHERE queue_name = 'smoke';
		SELECT queued, processing FROM queue.stats('smoke');
		SELECT count(*) > 0 FROM queue.sweep();
		SELECT queue.snapshot_metrics() >= 2;
		SELECT count(*) FROM queue.metrics_history WHERE queue_name = 'smoke';
		SQL
	)
	local want="


6
2
5
5
t
retrying
t
t
t
2
2
queued|4
scheduled|1
3
4|0
t
t
1"
	is "$want" "$out" "API calls on distributed queues (the statements route to each queue's node)"
	is ok "$(cpsql -c "SELECT status FROM queue.health('smoke')" 2>&1)" "health() across nodes"
	# sweep() made the history's partitions of the coming days on the
	# coordinator: Citus distributed them with their parents
	is "0" "$(cpsql -c "SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'queue'::regnamespace
	                      AND c.relkind IN ('r', 'p') AND c.oid NOT IN (SELECT logicalrelid FROM pg_dist_partition)")" \
		"partitions made by sweep() are distributed"
	is "t" "$(cpsql -c "SELECT count(*) >= 2 AND count(p.logicalrelid) = count(*)
	                      FROM pg_inherits i LEFT JOIN pg_dist_partition p ON p.logicalrelid = i.inhrelid
	                     WHERE i.inhparent = 'queue.item_done'::regclass")" \
		"the history's partitions are distributed tables"
	local tok
	tok=$(cpsql -c "SELECT count(DISTINCT lease_token >> 48) FROM queue.item_live WHERE lease_token IS NOT NULL")
	is 1 "$tok" "lease tokens drawn on the node holding the queue"
}

# ------------------------------------------------- single-shard proof

# Runs $2 (SQL) on the coordinator with citus.log_remote_commands and
# citus.log_local_commands on, on every node: the coordinator's client
# then sees every command it sent ("on server N") and, forwarded, every
# command a node ran or sent while serving the call ("from N").  Passes
# when all of them name the node holding queue $1, and only it.
one_node() {
	local q=$1 sql=$2 name=$3 node sent nodes
	node=$(queue_node "$q" 2>/dev/null)
	# a sign of life older than 30 s is written to worker_registry, a
	# reference table, on every node: keep the bot's fresh
	cpsql -c "SET client_min_messages = warning" -c "SELECT queue.heartbeat('ss-bot')" >/dev/null 2>&1
	sent=$(cpsql -c "SET client_min_messages = notice" -c "$sql" 2>&1 >/dev/null)
	nodes=$(printf '%s\n' "$sent" |
		sed -n -e 's/.*on server [^@]*@\([^ ]*\) connectionId.*/\1/p' -e 's/^DETAIL:  from \([^ ]*\)$/\1/p' |
		sort -u)
	if [ "$nodes" = "$node" ] && ! printf '%s\n' "$sent" | grep -q '^ERROR'; then
		ok 0 "$name: one node"
	else
		ok 1 "$name: one node" "expected only $node; got: $(echo $nodes)
$sent"
	fi
}

case_single_shard() {
	local q tok id
	for p in "$COORD_PORT" "${WORKER_PORTS[@]}"; do
		"$BINDIR/psql" -h "$BASE" -p "$p" -U postgres -d postgres -qAtX \
			-c "ALTER SYSTEM SET citus.log_remote_commands = on" \
			-c "ALTER SYSTEM SET citus.log_local_commands = on" -c "SELECT pg_reload_conf()" >/dev/null
	done
	q=$(queue_on_worker 2 ss_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SELECT queue.create_queue('$q', audit => 'all')" \
		-c "SELECT queue.register_worker('ss-bot')" >/dev/null 2>&1
	sleep 0.5
	one_node "$q" "SELECT queue.enqueue('$q', '{\"n\": 1}')" "enqueue"
	one_node "$q" "SELECT queue.enqueue_batch('$q', ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[])" "enqueue_batch"
	one_node "$q" "SELECT queue.enqueue_batch('$q', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['s1', 's1'])" \
		"enqueue_batch with dedup keys"
	cpsql -c "SELECT queue.heartbeat('ss-bot')" >/dev/null 2>&1
	one_node "$q" "SELECT queue.dequeue('$q', 'ss-bot', 1)" "dequeue"
	one_node "$q" "SELECT * FROM queue.dequeue('$q', 'ss-bot', 3)" "dequeue of a batch (FROM clause)"
	read -r id tok <<<"$(cpsql -F ' ' -c "SET client_min_messages = warning" -c "SELECT item_id, lease_token FROM queue.item_live WHERE queue_name = '$q' AND lease_token IS NOT NULL ORDER BY item_id LIMIT 1")"
	one_node "$q" "SELECT queue.extend_lease('$q', $id, $tok, '5 min')" "extend_lease"
	one_node "$q" "SELECT queue.checkpoint('$q', $id, $tok, '{\"s\": 1}')" "checkpoint"
	one_node "$q" "SELECT queue.complete('$q', $id, $tok)" "complete"
	read -r id tok <<<"$(cpsql -F ' ' -c "SET client_min_messages = warning" -c "SELECT item_id, lease_token FROM queue.item_live WHERE queue_name = '$q' AND lease_token IS NOT NULL ORDER BY item_id LIMIT 1")"
	one_node "$q" "SELECT queue.fail('$q', $id, $tok, 'boom')" "fail"
	read -r id tok <<<"$(cpsql -F ' ' -c "SET client_min_messages = warning" -c "SELECT item_id, lease_token FROM queue.item_live WHERE queue_name = '$q' AND lease_token IS NOT NULL ORDER BY item_id LIMIT 1")"
	one_node "$q" "SELECT queue.release('$q', $id, $tok)" "release"
	read -r id tok <<<"$(cpsql -F ' ' -c "SET client_min_messages = warning" -c "SELECT array_agg(item_id), array_agg(lease_token) FROM queue.item_live WHERE queue_name = '$q' AND lease_token IS NOT NULL")"
	one_node "$q" "SELECT queue.complete_batch('$q', '$id', '$tok')" "complete_batch"
	id=$(cpsql -c "SET client_min_messages = warning" -c "SELECT min(item_id) FROM queue.history WHERE queue_name = '$q'")
	one_node "$q" "SELECT * FROM queue.item('$q', $id)" "item"
	# the lease calls are still signs of life: a stale last_seen is written
	read -r id tok <<<"$(cpsql -F ' ' -c "SET client_min_messages = warning" -c "SELECT item_id, lease_token FROM queue.dequeue('$q', 'ss-bot', 1)")"
	cpsql -c "SET client_min_messages = warning" \
		-c "UPDATE queue.worker_registry SET last_seen = now() - interval '1 min' WHERE worker = 'ss-bot'" \
		-c "SELECT queue.release('$q', $id, $tok)" >/dev/null 2>&1
	is t "$(cpsql -c "SET client_min_messages = warning" -c "SELECT last_seen > now() - interval '10 s' FROM queue.worker_registry WHERE worker = 'ss-bot'")" \
		"a lease call refreshes a stale last_seen"
	for p in "$COORD_PORT" "${WORKER_PORTS[@]}"; do
		"$BINDIR/psql" -h "$BASE" -p "$p" -U postgres -d postgres -qAtX \
			-c "ALTER SYSTEM RESET citus.log_remote_commands" \
			-c "ALTER SYSTEM RESET citus.log_local_commands" -c "SELECT pg_reload_conf()" >/dev/null
	done
}

# heartbeat's connection rule (src/worker.c) with delegated claims: the
# session that claimed keeps its lease renewed; once the worker's
# heartbeats come from another session, that lease is left to expire.
case_heartbeat() {
	local q out
	q=$(queue_on_worker 1 hb_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q')" -c "SELECT queue.enqueue('$q', '{}')" >/dev/null
	out=$(cpsql -c "SELECT queue.register_worker('hb-bot')" -c "SELECT count(*) FROM queue.dequeue('$q', 'hb-bot')" \
		-c "SELECT queue.heartbeat('hb-bot')" 2>&1)
	is "$(printf '\n1\n1')" "$out" "heartbeat renews the lease claimed (delegated) on its own session"
	is 0 "$(cpsql -c "SELECT queue.heartbeat('hb-bot')" 2>&1)" \
		"heartbeat from another session leaves the delegated claim's lease alone"
}

# A producer's enqueue_batch whose dedup keys are held by items a bot is
# processing never deadlocks with that bot's heartbeat or its restart on a
# distributed queue (test/specs/dedup_batch_vs_heartbeat.spec on one
# server): x (key kb) and y (key ka) are the bot's; another producer holds
# y in an open transaction, the batch (ka, kb) waits for it, and the bot's
# heartbeat, then its restart, comes in between.  Both calls succeed.
case_key_holders() {
	local q call out i=0 bot other batch
	q=$(queue_on_worker 1 kh_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q')" >/dev/null
	for call in "queue.heartbeat('kh-bot')" "queue.register_worker('kh-bot', restart => true)"; do
		i=$((i + 1))
		cpsql -c "SELECT queue.enqueue('$q', '{\"n\": \"x\"}', dedup_key => 'kb$i')" \
			-c "SELECT queue.enqueue('$q', '{\"n\": \"y\"}', dedup_key => 'ka$i')" >/dev/null
		# the bot claims both, and makes its call from the same session later
		cpsql -c "SELECT count(*) FROM queue.dequeue('$q', 'kh-bot', 2)" -c "SELECT pg_sleep(1.5)" \
			-c "SELECT $call" >"$BASE/kh_bot.out" 2>&1 &
		bot=$!
		sleep 0.3
		cpsql -c "BEGIN" -c "SELECT count(*) FROM queue.enqueue_batch('$q', ARRAY['{}']::jsonb[], dedup_keys => ARRAY['ka$i'])" \
			-c "SELECT pg_sleep(2.5)" -c "COMMIT" >"$BASE/kh_other.out" 2>&1 &
		other=$!
		sleep 0.5
		cpsql -c "SELECT count(*) FROM queue.enqueue_batch('$q', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['ka$i', 'kb$i'])" \
			>"$BASE/kh_batch.out" 2>&1 &
		batch=$!
		wait $bot $other $batch
		out=$(cat "$BASE/kh_bot.out" "$BASE/kh_batch.out")
		is "" "$(printf '%s\n' "$out" | grep -A2 'ERROR')" \
			"an enqueue_batch of keys a bot's items hold and the bot's $call: no deadlock"
		is 2 "$(cat "$BASE/kh_batch.out")" "the batch returns the holders' ids ($call)"
	done
}

# sweep() when Citus spreads a statement over several connections to a
# node: it does so by itself when a node answers slowly (slow start), and
# citus.force_max_query_parallelization makes it do so every time.  A
# statement over every shard that joins a reference table may then meet
# placements of one node written over two connections, which Citus refuses
# ("cannot perform query with placements that were modified over multiple
# connections"); sweep() must not depend on the node's speed.
case_sweep_connections() {
	local a b out
	a=$(queue_on_worker 1 sc_) || { ok 1 "a queue name on worker 1"; return; }
	b=$(queue_on_worker 2 sc_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SET client_min_messages = warning" \
		-c "SELECT queue.create_queue('$a', max_attempts => 1, lease_timeout => '1 s')" -c "SELECT queue.create_queue('$b')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$a', array_fill('{}'::jsonb, ARRAY[3]))" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$b', array_fill('{}'::jsonb, ARRAY[3]))" \
		-c "SELECT count(*) FROM queue.dequeue('$a', 'sc-bot', 3)" -c "SELECT count(*) FROM queue.dequeue('$b', 'sc-bot', 1)" \
		-c "SELECT queue.create_queue('sc_gone')" -c "SELECT queue.drop_queue('sc_gone')" >/dev/null
	sleep 1.2
	# (the partitions' upkeep, which sweep() does last in its transaction,
	# is refused after such reads and left to the next call: its warnings
	# are not looked at here; run_sweep() does it in a transaction of its own)
	out=$(cpsql -c "SET client_min_messages = warning" -c "SET citus.force_max_query_parallelization = on" \
		-c "SELECT queue_name, dead_lettered FROM queue.sweep() WHERE queue_name IN ('$a', '$b') ORDER BY queue_name = '$b'" 2>&1 |
		grep -v -e '^WARNING:  maintenance of the partitions' -e '^DETAIL:  SQLSTATE 25001')
	is "$a|3
$b|0" "$out" "sweep() over several connections per node, with a dropped queue's rows to clear"
	out=$(cpsql -c "SET client_min_messages = warning" -c "SET citus.force_max_query_parallelization = on" \
		-c "CALL queue.run_sweep()" -c "SELECT queue.snapshot_metrics() >= 2" 2>&1)
	is t "$out" "run_sweep() and snapshot_metrics() over several connections per node"
}

# Ordered groups on a distributed queue (sql/group_life.sql on one
# server): a dequeue that dead-letters the group's head it meets (expired,
# or a lost lease on its last attempt) hands out the group's next member in
# the same call, and the group still has one head.
case_group_move_on() {
	local q out
	gmpsql() { local u=$1; shift; "$BINDIR/psql" -h "$BASE" -p "$COORD_PORT" -U "$u" -d postgres -qAtX "$@"; }
	q=$(queue_on_worker 2 gm_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SET client_min_messages = warning" \
		-c "CREATE ROLE gm_producer LOGIN IN ROLE queue_producer" -c "CREATE ROLE gm_worker LOGIN IN ROLE queue_worker" \
		-c "SELECT queue.create_queue('$q', max_attempts => 1)" >/dev/null
	gmpsql gm_producer -c "SELECT queue.enqueue('$q', '{\"n\": 1}', group_key => 'a', expires_at => clock_timestamp() + interval '300 ms')" \
		-c "SELECT queue.enqueue('$q', '{\"n\": 2}', group_key => 'a')" -c "SELECT queue.enqueue('$q', '{\"n\": 3}', group_key => 'a')" >/dev/null
	sleep 0.5
	is 2 "$(gmpsql gm_worker -c "SELECT payload->>'n' FROM queue.dequeue('$q', 'gm-w', batch_size => 10)" 2>&1)" \
		"a dequeue that buries an expired group head hands out the next member"
	is "1|expired" "$(cpsql -c "SELECT payload->>'n', reason FROM queue.dead_letters WHERE queue_name = '$q'" 2>&1)" \
		"the expired head is a dead letter"
	# member 2's lease runs out on its last attempt
	cpsql -c "UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
	           WHERE queue_name = '$q' AND payload->>'n' = '2'" >/dev/null
	is 3 "$(gmpsql gm_worker -c "SELECT payload->>'n' FROM queue.dequeue('$q', 'gm-w', batch_size => 10)" 2>&1)" \
		"a dequeue that buries a spent group head hands out the next member"
	gmpsql gm_producer -c "SELECT queue.enqueue('$q', '{\"n\": 4}', group_key => 'a')" >/dev/null
	is "" "$(gmpsql gm_worker -c "SELECT payload->>'n' FROM queue.dequeue('$q', 'gm-w', batch_size => 10)" 2>&1)" \
		"the group has one head: nothing more while member 3 is processing"
	is "3|processing|
4|queued|blocked_by_group" "$(cpsql -c "SELECT payload->>'n', state, waiting FROM queue.items WHERE queue_name = '$q' ORDER BY item_id" 2>&1)" \
		"the next member waits behind the head"
}

# set_limit / drop_limit on a distributed queue, and the cap they set
# holding in dequeue.
case_flow() {
	local q out
	q=$(queue_on_worker 2 fl_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SELECT queue.create_queue('$q')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[3]), limit_keys => ARRAY['k', 'k', 'k'])" >/dev/null
	out=$(cpsql -c "SELECT queue.set_limit('$q', 'k', max_in_flight => 1)" \
		-c "SELECT queue.set_limit('$q', NULL, rate => 100, per => '1 s')" 2>&1)
	ok $? "set_limit on a distributed queue" "$out"
	is 1 "$(cpsql -c "SELECT count(*) FROM queue.dequeue('$q', 'fl-bot', 3)" 2>&1)" \
		"a per-key max_in_flight holds on a distributed queue"
	out=$(cpsql -c "SELECT queue.drop_limit('$q', 'k')" 2>&1)
	ok $? "drop_limit on a distributed queue" "$out"
	is 2 "$(cpsql -c "SELECT count(*) FROM queue.dequeue('$q', 'fl-bot', 3)" 2>&1)" \
		"drop_limit frees the key's items on a distributed queue"
}

# An expired lease nobody re-claimed counts as a failed outcome when sweep
# (or hold / cancel) meets it; the item stays claimable and its holder's
# late complete still succeeds.
case_lost_lease() {
	local q out id tok id2 tok2
	q=$(queue_on_worker 1 ll_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q', lease_timeout => '1 s', audit => 'all')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[2]))" >/dev/null
	read -r id tok <<<"$(cpsql -F ' ' -c "SELECT item_id, lease_token FROM queue.dequeue('$q', 'll-bot', 1)")"
	read -r id2 tok2 <<<"$(cpsql -F ' ' -c "SELECT item_id, lease_token FROM queue.dequeue('$q', 'll-bot', 1)")"
	sleep 1.5
	out=$(cpsql -c "SET client_min_messages = warning" \
		-c "SELECT recovered FROM queue.sweep() WHERE queue_name = '$q'" 2>&1)
	is 2 "$out" "sweep counts the expired leases of a distributed queue"
	is "2|2" "$(cpsql -c "SELECT failed_1h, queued FROM queue.stats('$q')" 2>&1)" \
		"the lost leases are failed outcomes and the items claimable"
	is t "$(cpsql -c "SELECT queue.complete('$q', $id, $tok)" 2>&1)" \
		"a late complete of a lost lease nobody took over succeeds"
	is t "$(cpsql -c "SELECT queue.hold('$q', $id2)" 2>&1)" "hold of an item whose lease ran out"
}

# enqueue_batch's dedup on a distributed queue: a key a live item holds
# returns that item's id and inserts nothing; a key repeated in the batch
# yields the first one's id twice.
case_dedup() {
	local q id out
	q=$(queue_on_worker 1 dd_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q')" >/dev/null
	id=$(cpsql -c "SELECT queue.enqueue('$q', '{}', dedup_key => 'a')")
	out=$(cpsql -c "SELECT string_agg(CASE WHEN x = $id THEN 'holder' ELSE 'new' END, ',' ORDER BY o)
	                  FROM queue.enqueue_batch('$q', ARRAY['{}', '{}', '{}', '{}']::jsonb[],
	                                           dedup_keys => ARRAY['b', 'a', NULL, 'b']) WITH ORDINALITY AS t(x, o)" 2>&1)
	is "new,holder,new,new" "$out" "enqueue_batch on a distributed queue: a live key returns its holder"
	is "3|3" "$(cpsql -c "SELECT count(*), count(DISTINCT dedup_key) + count(*) FILTER (WHERE dedup_key IS NULL)
	                       FROM queue.item_live WHERE queue_name = '$q'" 2>&1)" \
		"enqueue_batch on a distributed queue: one item per key"
	is "2|t" "$(cpsql -c "SELECT count(DISTINCT x), bool_and(x IS NOT NULL)
	                       FROM queue.enqueue_batch('$q', ARRAY['{}', '{}', '{}']::jsonb[],
	                                                dedup_keys => ARRAY['c', 'c', 'a']) x" 2>&1)" \
		"enqueue_batch on a distributed queue: a repeated key yields the first one's id"
	# a holder past its expires_at holds nothing: it becomes an expired
	# dead letter and the key goes to the new item
	id=$(cpsql -c "SELECT queue.enqueue('$q', '{}', dedup_key => 'e', expires_at => now() + interval '1 s')")
	cpsql -c "SELECT queue.enqueue('$q', '{}', dedup_key => 'f', expires_at => now() + interval '1 s')" >/dev/null
	sleep 1.2
	is t "$(cpsql -c "SELECT queue.enqueue('$q', '{}', dedup_key => 'e') <> $id" 2>&1)" \
		"enqueue on a distributed queue: a key held by an expired item goes to a new item"
	is 1 "$(cpsql -c "SELECT count(*) FROM queue.enqueue_batch('$q', ARRAY['{}']::jsonb[], dedup_keys => ARRAY['f'])" 2>&1)" \
		"enqueue_batch on a distributed queue: a key held by an expired item goes to a new item"
	is "expired|2" "$(cpsql -c "SELECT reason, count(*) FROM queue.dead_letters WHERE queue_name = '$q' GROUP BY 1" 2>&1)" \
		"the expired holders became expired dead letters"
}

# The views and tables of SPEC's reader role, read by login roles in the
# group roles on distributed queues, per-queue grants included.
case_readers() {
	local a b out
	rpsql() { local u=$1; shift; "$BINDIR/psql" -h "$BASE" -p "$COORD_PORT" -U "$u" -d postgres -qAtX "$@"; }
	a=$(queue_on_worker 1 rd_) || { ok 1 "a queue name on worker 1"; return; }
	b=$(queue_on_worker 2 rd_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SET client_min_messages = warning" \
		-c "CREATE ROLE cr_reader LOGIN IN ROLE queue_reader" -c "CREATE ROLE cr_admin LOGIN IN ROLE queue_admin" \
		-c "SELECT queue.create_queue('$a', audit => 'all')" -c "SELECT queue.create_queue('$b', audit => 'all')" \
		-c "SELECT queue.grant_queue('$b', 'cr_admin', 'reader')" \
		-c "SELECT queue.set_limit('$a', 'k', max_in_flight => 2)" -c "SELECT queue.set_limit('$b', 'k', max_in_flight => 2)" \
		-c "SELECT queue.enqueue('$a', '{}')" -c "SELECT queue.enqueue('$b', '{}')" \
		-c "SELECT queue.enqueue('$a', '{}')" -c "SELECT queue.enqueue('$b', '{}')" >/dev/null 2>&1
	cpsql -c "SELECT queue.complete('$a', item_id, lease_token) FROM queue.dequeue('$a', 'rd-bot')" \
		-c "SELECT queue.complete('$b', item_id, lease_token) FROM queue.dequeue('$b', 'rd-bot')" >/dev/null 2>&1
	local sql="SELECT (SELECT string_agg(queue_name, ',' ORDER BY queue_name) FROM queue.queues WHERE queue_name IN ('$a', '$b'))
	                  || ' ' || (SELECT string_agg(queue_name || ':' || state, ',' ORDER BY queue_name) FROM queue.items WHERE queue_name IN ('$a', '$b'))
	                  || ' ' || (SELECT string_agg(queue_name, ',' ORDER BY queue_name) FROM queue.history WHERE queue_name IN ('$a', '$b'))
	                  || ' ' || (SELECT string_agg(queue_name || ':' || limit_key, ',' ORDER BY queue_name) FROM queue.limits WHERE queue_name IN ('$a', '$b'))
	                  || ' ' || (SELECT count(*) FROM queue.schedules WHERE queue_name IN ('$a', '$b'))
	                  || ' ' || (SELECT count(DISTINCT queue_name) FROM queue.events WHERE queue_name IN ('$a', '$b'))"
	is "$a $a:queued $a $a:k 0 1" "$(rpsql cr_reader -c "$sql" 2>&1)" \
		"a queue_reader login reads the views on distributed queues, without a queue it is not granted"
	is "$(printf '%s\n' "$a" "$b" | sort | paste -sd,) $(printf '%s:queued\n' "$a" "$b" | sort | paste -sd,) $(printf '%s\n' "$a" "$b" | sort | paste -sd,) $(printf '%s:k\n' "$a" "$b" | sort | paste -sd,) 0 2" \
		"$(rpsql cr_admin -c "$sql" 2>&1)" "a queue_admin login reads the views on distributed queues"
	# an item waiting for its key's cap says why (items calls a function
	# per such row, which reads the queue's flow state)
	cpsql -c "SELECT queue.set_limit('$a', 'lk', max_in_flight => 1)" \
		-c "SELECT queue.enqueue('$a', '{}', limit_key => 'lk')" -c "SELECT queue.enqueue('$a', '{}', limit_key => 'lk')" \
		-c "SELECT count(*) FROM queue.dequeue('$a', 'rd-bot', 5)" >/dev/null 2>&1
	is "limit_full" "$(rpsql cr_reader -c "SELECT string_agg(waiting, ',') FROM queue.items WHERE queue_name = '$a'" 2>&1)" \
		"the items view says why an item of a distributed queue waits"
	is "limit_full" "$(cpsql -c "SELECT string_agg(waiting, ',') FROM queue.items WHERE queue_name = '$a'" 2>&1)" \
		"the items view says why an item of a distributed queue waits (owner)"
}

# health() and sweep() on a distributed queue whose oldest item is past
# half its sla while every worker holding its items is at capacity: the
# capacity_short rule counts each holder's leases over all queues.
case_capacity() {
	local q out
	q=$(queue_on_worker 1 cs_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q', sla => '2 s')" \
		-c "SELECT queue.register_worker('cs-bot', capacity => 1)" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[2]))" \
		-c "SELECT count(*) FROM queue.dequeue('$q', 'cs-bot')" >/dev/null 2>&1
	sleep 1.2
	is "warning|capacity short: all 1 worker holding its items is at capacity; no item was processed in the last hour to size the shortfall" \
		"$(cpsql -c "SELECT status, r FROM queue.health('$q'), unnest(reasons) r WHERE r LIKE 'capacity%'" 2>&1)" \
		"health() of a distributed queue names a capacity shortfall"
	out=$(cpsql -c "SELECT queue_name FROM queue.sweep() WHERE queue_name = '$q'" 2>&1)
	is "$q" "$out" "sweep() of a distributed queue with a capacity shortfall"
	is "capacity_short" "$(cpsql -c "SELECT string_agg(kind, ',' ORDER BY kind) FROM queue.alerts
	                                  WHERE queue_name = '$q' AND kind LIKE 'capacity%' AND cleared_at IS NULL" 2>&1)" \
		"sweep() raises capacity_short for a distributed queue"
	cpsql -c "SELECT queue.drop_queue('$q', force => true)" >/dev/null 2>&1
}

# The workers view on distributed queues, read by login roles in the group
# roles: a worker's leases and 24 h results over queues on both workers,
# counting only the queues the caller may read.
case_workers() {
	local a b sql
	wkpsql() { local u=$1; shift; "$BINDIR/psql" -h "$BASE" -p "$COORD_PORT" -U "$u" -d postgres -qAtX "$@"; }
	a=$(queue_on_worker 1 wk_) || { ok 1 "a queue name on worker 1"; return; }
	b=$(queue_on_worker 2 wk_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SET client_min_messages = warning" \
		-c "CREATE ROLE wk_reader LOGIN IN ROLE queue_reader" -c "CREATE ROLE wk_admin LOGIN IN ROLE queue_admin" \
		-c "CREATE ROLE wk_other NOLOGIN" \
		-c "SELECT queue.create_queue('$a')" -c "SELECT queue.create_queue('$b')" \
		-c "SELECT queue.grant_queue('$b', 'wk_other', 'reader')" \
		-c "SELECT queue.register_worker('wk-bot')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$a', array_fill('{}'::jsonb, ARRAY[3]))" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$b', array_fill('{}'::jsonb, ARRAY[3]))" \
		-c "SELECT queue.complete('$b', item_id, lease_token) FROM queue.dequeue('$b', 'wk-bot')" \
		-c "SELECT queue.fail('$a', item_id, lease_token, 'boom') FROM queue.dequeue('$a', 'wk-bot')" \
		-c "SELECT count(*) FROM queue.dequeue('$a', 'wk-bot')" >/dev/null 2>&1
	sql="SELECT worker, status, in_flight, completed_24h, failed_24h, mean_run_time IS NOT NULL, success_rate
	       FROM queue.workers WHERE worker = 'wk-bot'"
	is "wk-bot|active|1|1|1|t|0.5000" "$(wkpsql wk_admin -c "$sql" 2>&1)" \
		"a queue_admin login reads queue.workers over distributed queues"
	is "wk-bot|active|1|0|1|f|0.0000" "$(wkpsql wk_reader -c "$sql" 2>&1)" \
		"a queue_reader login reads queue.workers, counting only the queues it may read"
}

# One statement reading a view (queues, items, history, limits,
# schedules, workers) together with a distributed table filtered to one
# queue (dead_letters, events): Citus routes the whole statement to the
# queue's node, the view's function with it.
case_mixed() {
	local q sql
	mxpsql() { local u=$1; shift; "$BINDIR/psql" -h "$BASE" -p "$COORD_PORT" -U "$u" -d postgres -qAtX "$@"; }
	q=$(queue_on_worker 2 mx_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SET client_min_messages = warning" \
		-c "CREATE ROLE mx_reader LOGIN IN ROLE queue_reader" \
		-c "SELECT queue.create_queue('$q', audit => 'all')" \
		-c "SELECT queue.set_limit('$q', 'k', max_in_flight => 1)" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[3]))" \
		-c "SELECT queue.complete('$q', item_id, lease_token) FROM queue.dequeue('$q', 'mx-bot')" \
		-c "SELECT queue.fail('$q', item_id, lease_token, 'boom', permanent => true) FROM queue.dequeue('$q', 'mx-bot')" >/dev/null 2>&1
	sql="SELECT (SELECT count(*) FROM queue.queues WHERE queue_name = '$q'),
	            (SELECT count(*) FROM queue.items WHERE queue_name = '$q'),
	            (SELECT count(*) FROM queue.history WHERE queue_name = '$q'),
	            (SELECT count(*) FROM queue.limits WHERE queue_name = '$q'),
	            (SELECT count(*) FROM queue.schedules WHERE queue_name = '$q'),
	            (SELECT count(*) FROM queue.workers WHERE worker = 'mx-bot'),
	            (SELECT count(*) FROM queue.dead_letters WHERE queue_name = '$q'),
	            (SELECT count(*) FROM queue.events WHERE queue_name = '$q' AND kind = 'enqueued')"
	is "1|1|1|1|0|1|1|3" "$(cpsql -c "$sql" 2>&1)" \
		"one statement reads the views with a distributed table of one queue (owner)"
	is "1|1|1|1|0|1|1|3" "$(mxpsql mx_reader -c "$sql" 2>&1)" \
		"one statement reads the views with a distributed table of one queue (queue_reader login)"
}

# An API call per row of a query over dead_letters of one queue, or with
# such a query as its argument: Citus routes the statement whole to the
# queue's node, the calls with it.
case_per_row() {
	local q
	prpsql() { local u=$1; shift; "$BINDIR/psql" -h "$BASE" -p "$COORD_PORT" -U "$u" -d postgres -qAtX "$@"; }
	q=$(queue_on_worker 1 pr_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SET client_min_messages = warning" \
		-c "CREATE ROLE pr_admin LOGIN IN ROLE queue_admin" -c "CREATE ROLE pr_reader LOGIN IN ROLE queue_reader" \
		-c "SELECT queue.create_queue('$q', audit => 'all')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[4]))" >/dev/null 2>&1
	is "true,true,true,true" "$(prpsql pr_admin -c "SELECT string_agg(queue.cancel('$q', item_id)::text, ',') FROM queue.items WHERE queue_name = '$q'" 2>&1)" \
		"cancel per row of the items view of a distributed queue"
	is "dead" "$(prpsql pr_reader -c "SELECT (queue.item('$q', (SELECT min(item_id) FROM queue.dead_letters WHERE queue_name = '$q'))).state" 2>&1)" \
		"item() of an id read from dead_letters of a distributed queue, in one statement"
	is "t" "$(prpsql pr_admin -c "SELECT queue.review('$q', (SELECT min(item_id) FROM queue.dead_letters WHERE queue_name = '$q'), 'rejected')" 2>&1)" \
		"review() of an id read from dead_letters of a distributed queue, in one statement"
	is "t" "$(prpsql pr_admin -c "SELECT queue.replay('$q', (SELECT max(item_id) FROM queue.dead_letters WHERE queue_name = '$q')) > 0" 2>&1)" \
		"replay() of an id read from dead_letters of a distributed queue, in one statement"
	is "2" "$(prpsql pr_admin -c "SELECT count(queue.replay('$q', item_id)) FROM queue.dead_letters WHERE queue_name = '$q' AND review_status = 'new'" 2>&1)" \
		"replay() per row of dead_letters of a distributed queue"
	is "queued|3" "$(prpsql pr_reader -c "SELECT state, count(*) FROM queue.items WHERE queue_name = '$q' GROUP BY 1" 2>&1)" \
		"the replayed items are queued"
}

# drop_queue of a queue on a worker removes its rows there.
case_drop() {
	local q out
	q=$(queue_on_worker 2 dq_) || { ok 1 "a queue name on worker 2"; return; }
	cpsql -c "SELECT queue.create_queue('$q')" -c "SELECT queue.set_limit('$q', 'k', max_in_flight => 1)" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[3]))" >/dev/null 2>&1
	out=$(cpsql -c "SELECT queue.drop_queue('$q', force => true)" 2>&1)
	ok $? "drop_queue(force) of a distributed queue" "$out"
	is 0 "$(cpsql -c "SELECT (SELECT count(*) FROM queue.item_live WHERE queue_name = '$q')
	                       + (SELECT count(*) FROM queue.flow_limit WHERE queue_name = '$q')")" \
		"drop_queue left none of its rows"
}

# queue-worker and queue-top pointed at the coordinator.
case_tools() {
	local dsn="host=$BASE port=$COORD_PORT dbname=postgres user=postgres" out
	if [ ! -x "$REPO/tools/queue-worker" ] || [ ! -x "$REPO/tools/queue-top" ]; then
		echo "ok $((NTEST + 1)) # SKIP the tools are not built"
		NTEST=$((NTEST + 1))
		return
	fi
	cpsql -c "SELECT queue.create_queue('tw')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('tw', array_fill('{\"a\": 1}'::jsonb, ARRAY[20]))" >/dev/null
	out=$(timeout 60 "$REPO/tools/queue-worker" -d "$dsn" -q tw -e "cat >/dev/null" -c 4 -m 20 -i 5s 2>&1)
	ok $? "queue-worker against the coordinator" "$out"
	is 20 "$(cpsql -c "SELECT count(*) FROM queue.history WHERE queue_name = 'tw'")" \
		"queue-worker completed every item through the coordinator"
	out=$(timeout 30 "$REPO/tools/queue-top" -d "$dsn" --once --no-color 2>&1)
	if printf '%s\n' "$out" | grep -q '^tw ' && ! printf '%s\n' "$out" | grep -q 'unavailable'; then
		ok 0 "queue-top --once against the coordinator shows the queues and their health"
	else
		ok 1 "queue-top --once against the coordinator shows the queues and their health" "$out"
	fi
}

# LISTEN on the coordinator hears an enqueue made through the coordinator
# into a queue living on a worker.
case_listen() {
	local q out
	q=$(queue_on_worker 1 ln_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q')" >/dev/null
	cpsql -c "LISTEN queue_$q" -c "SELECT pg_sleep(2)" -c "SELECT 'after'" >"$BASE/listen.out" 2>&1 &
	local pid=$!
	sleep 0.7
	cpsql -c "SELECT queue.enqueue('$q', '{}')" >/dev/null
	wait $pid
	out=$(grep -c "Asynchronous notification \"queue_$q\"" "$BASE/listen.out")
	is 1 "$out" "LISTEN on the coordinator wakes on an enqueue into a queue on a worker"
}

# ------------------------------------------------------- concurrency

# bot QUEUES... : a session that claims and completes, one item at a time,
# round the queues, until all are empty; prints "queue item token ok".
bot_script() {
	local rounds=$1
	shift
	local q
	for _ in $(seq 1 "$rounds"); do
		for q in "$@"; do
			echo "SELECT '$q', d.item_id, d.lease_token, queue.complete('$q', d.item_id, d.lease_token) FROM queue.dequeue('$q', 'bot-$$', 1) d;"
		done
	done
}

case_no_double_claim() {
	local qs=() i n=200 pids=() out
	for i in 1 2 3 4; do qs+=("ndc_$i"); done
	for q in "${qs[@]}"; do
		cpsql -c "SELECT queue.create_queue('$q')" \
			-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[$n]))" >/dev/null
	done
	for i in $(seq 1 8); do
		bot_script 120 "${qs[@]}" >"$BASE/ndc_bot$i.sql"
		cpsql -F ' ' -f "$BASE/ndc_bot$i.sql" >"$BASE/ndc_bot$i.out" 2>"$BASE/ndc_bot$i.err" &
		pids+=($!)
	done
	wait "${pids[@]}"
	out=$(cat "$BASE"/ndc_bot*.out | awk '{print $1, $2}' | sort | uniq -d | head)
	is "" "$out" "8 bots on 4 distributed queues: no item claimed twice"
	is "$((4 * n))" "$(cat "$BASE"/ndc_bot*.out | grep -c ' t$')" "every item completed once"
	is "0" "$(cpsql -c "SELECT count(*) FROM queue.items WHERE queue_name LIKE 'ndc\_%'")" "nothing left live"
	is "$((4 * n))" "$(cpsql -c "SELECT count(*) FROM queue.history WHERE queue_name LIKE 'ndc\_%'")" \
		"history holds each item once"
	is "" "$(cat "$BASE"/ndc_bot*.err)" "no bot saw an error"
}

# kill -9 of the worker node holding a queue while bots work on it; after
# its restart nothing is lost and every item is processed.
case_kill9() {
	local q n=300 pids=() i w port dir out
	q=$(queue_on_worker 1 k9_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q', lease_timeout => '2 s')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[$n]))" >/dev/null
	for i in 1 2 3 4; do
		bot_script 400 "$q" >"$BASE/k9_bot$i.sql"
		cpsql -F ' ' -f "$BASE/k9_bot$i.sql" >"$BASE/k9_bot$i.out" 2>/dev/null &
		pids+=($!)
	done
	sleep 1.5
	dir="$BASE/worker1"
	kill -KILL "$(head -n 1 "$dir/postmaster.pid")"
	wait "${pids[@]}"
	sleep 1
	# its backends notice the postmaster's death and exit: then it starts
	for _ in $(seq 1 20); do
		"$BINDIR/pg_ctl" -D "$dir" -l "$dir.log" -w start >/dev/null 2>&1 && break
		sleep 1
	done
	"$BINDIR/pg_isready" -q -h "$BASE" -p "${WORKER_PORTS[0]}"
	ok $? "worker restarted after kill -9"
	# what was claimed by the killed sessions comes back when its lease ends
	sleep 3
	bot_script $n "$q" >"$BASE/k9_after.sql"
	for _ in 1 2 3; do
		cpsql -F ' ' -f "$BASE/k9_after.sql" >>"$BASE/k9_after.out" 2>/dev/null
		[ "$(cpsql -c "SELECT count(*) FROM queue.items WHERE queue_name = '$q'")" = 0 ] && break
		sleep 3
	done
	is "0" "$(cpsql -c "SELECT count(*) FROM queue.items WHERE queue_name = '$q'")" "kill -9: nothing left live"
	is "$n" "$(cpsql -c "SELECT count(*) FROM queue.history WHERE queue_name = '$q'")" \
		"kill -9: every item processed, none lost"
	is "0" "$(cpsql -c "SELECT count(*) FROM queue.dead_letters WHERE queue_name = '$q'")" "kill -9: none dead-lettered"
}

# citus_move_shard_placement of a queue's shard while bots work on it.
case_shard_move() {
	local q n=600 pids=() i shard from to out
	q=$(queue_on_worker 1 mv_) || { ok 1 "a queue name on worker 1"; return; }
	cpsql -c "SELECT queue.create_queue('$q', lease_timeout => '3 s')" \
		-c "SELECT count(*) FROM queue.enqueue_batch('$q', array_fill('{}'::jsonb, ARRAY[$n]))" >/dev/null
	shard=$(cpsql -c "SELECT get_shard_id_for_distribution_column('queue.item_live', '$q')")
	for i in 1 2 3 4; do
		bot_script 600 "$q" >"$BASE/mv_bot$i.sql"
		cpsql -F ' ' -f "$BASE/mv_bot$i.sql" >"$BASE/mv_bot$i.out" 2>"$BASE/mv_bot$i.err" &
		pids+=($!)
	done
	# and a producer adding more while the shard moves
	( for i in $(seq 1 100); do echo "SELECT queue.enqueue('$q', '{\"late\": $i}');"; done ) >"$BASE/mv_prod.sql"
	cpsql -f "$BASE/mv_prod.sql" >"$BASE/mv_prod.out" 2>"$BASE/mv_prod.err" &
	pids+=($!)
	sleep 0.5
	out=$(cpsql -c "SELECT citus_move_shard_placement($shard, '127.0.0.1', ${WORKER_PORTS[0]},
	                   '127.0.0.1', ${WORKER_PORTS[1]}, shard_transfer_mode => 'force_logical')" 2>&1)
	ok $? "shard of $q moved from worker 1 to worker 2 under load" "$out"
	wait "${pids[@]}"
	is "127.0.0.1:${WORKER_PORTS[1]}" "$(queue_node "$q")" "the queue now lives on worker 2"
	sleep 3.5
	bot_script $((n + 100)) "$q" >"$BASE/mv_after.sql"
	cpsql -F ' ' -f "$BASE/mv_after.sql" >"$BASE/mv_after.out" 2>&1
	is "0" "$(cpsql -c "SELECT count(*) FROM queue.items WHERE queue_name = '$q'")" "after the move: nothing left live"
	is "$((n + $(grep -c '^[0-9]' "$BASE/mv_prod.out")))" \
		"$(cpsql -c "SELECT count(*) FROM queue.history WHERE queue_name = '$q'")" \
		"after the move: every item enqueued was processed once"
	is "" "$(cat "$BASE"/mv_bot*.out "$BASE/mv_after.out" | awk '$4 == "t" {print $2}' | sort | uniq -d | head)" \
		"after the move: no item completed twice"
	echo "# errors seen by clients during the move: $(cat "$BASE"/mv_bot*.err "$BASE/mv_prod.err" | grep -c ERROR)"
}

# ------------------------------------------------------------ regress

# pg_regress on the coordinator with the subset of test/citus/regress.txt.
case_regress() {
	local tests pgr
	tests=$(grep -v '^#' "$REPO/test/citus/regress.txt" | awk 'NF {print $1}')
	pgr="$($PG_CONFIG --pkglibdir)/pgxs/src/test/regress/pg_regress"
	# the database settings pg_regress gives the databases it creates
	for p in "$COORD_PORT" "${WORKER_PORTS[@]}"; do
		"$BINDIR/psql" -h "$BASE" -p "$p" -U postgres -d postgres -qAtX \
			-c "ALTER DATABASE postgres SET datestyle = 'Postgres, MDY'" \
			-c "ALTER DATABASE postgres SET timezone = 'PST8PDT'" \
			-c "ALTER DATABASE postgres SET intervalstyle = 'postgres_verbose'" >/dev/null
	done
	mkdir -p "$BASE/regress"
	cp -r "$REPO/sql" "$REPO/expected" "$BASE/regress/"
	(cd "$BASE/regress" && "$pgr" --use-existing --host="$BASE" --port="$COORD_PORT" --user=postgres \
		--dbname=postgres --inputdir=. --outputdir=. $tests) >"$BASE/regress.log" 2>&1
	local st=$?
	sed 's/^/# /' "$BASE/regress.log" | grep -E 'ok|FAILED|failed'
	[ $st = 0 ] || head -c 20000 "$BASE/regress/regression.diffs" | sed 's/^/#   /'
	ok $st "regress subset on the coordinator ($(echo $tests | wc -w) tests)"
}

for c in distribute api single_shard heartbeat key_holders sweep_connections group_move_on flow lost_lease dedup readers capacity workers mixed per_row drop tools listen no_double_claim regress kill9 shard_move; do
	# distribute always runs: the others need it
	if [ $c = distribute ] || want_case $c; then
		echo "# case $c"
		case_$c
	fi
done

echo "1..$NTEST"
[ $NFAIL = 0 ] || { echo "# $NFAIL of $NTEST failed (logs in $BASE)"; KEEP_TMP=1; exit 1; }
exit 0
