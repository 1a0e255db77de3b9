# test/ecosystem/bots.sh -- sourced by run.sh: the bot examples of
# examples/ (Python with psycopg2, Node.js with pg, psql alone), each the
# real program against the test cluster: work, retries, LISTEN, a lost
# lease, SIGTERM and a crash.

# start_bot LANG QUEUE WORKER POLL : the example in the background, pid in $BOT
# (each finds the database through the PG* variables, as libpq and pg do)
start_bot() {
	local lang=$1 q=$2 w=$3 poll=$4
	case $lang in
		python) set -- python3 "$REPO/examples/python/bot.py" "$q" "$w" ;;
		node) set -- node "$NODE_DIR/bot.js" "$q" "$w" ;;
		psql) set -- bash "$REPO/examples/psql/bot.sh" "$q" "$w" ;;
	esac
	PGHOST=$TMP PGPORT=$PORT PGDATABASE=postgres PGUSER=postgres QUEUE_POLL=$poll "$@" >>"$LOG/$w.log" 2>&1 &
	BOT=$!
	PIDS+=("$BOT")
}
# wait_exit SECONDS PID : until PID exits; its status in $EXIT (124 if it did not)
wait_exit() {
	local deadline=$((SECONDS + $1))
	while kill -0 "$2" 2>/dev/null && [ $SECONDS -lt "$deadline" ]; do sleep 0.1; done
	if kill -0 "$2" 2>/dev/null; then EXIT=124; else wait "$2"; EXIT=$?; fi
}
enqueue() { sql "SELECT queue.enqueue('$1', '$2')"; }
# item_state QUEUE ID : where an item is, for failure reports
item_state() { sql "SELECT 'item $2: ' || i.state || ' ' || coalesce(i.worker, '-') || ' ' || coalesce(i.progress::text, '') FROM queue.item('$1', $2) i"; }

bot_cases() {
	local lang=$1 q=bots_$1 w0=$1-bot-0 w1=$1-bot-1 w2=$1-bot-2 id poll
	sql "SELECT queue.create_queue('$q', lease_timeout => '2 s', backoff_base => '0.2 s',
	                               backoff_jitter => 0, max_attempts => 3)" >/dev/null

	# an idle bot wakes on LISTEN long before its 30 s poll (the psql one polls)
	poll=30
	[ "$lang" = psql ] && poll=1
	start_bot "$lang" "$q" "$w0" $poll
	b0=$BOT
	sleep 1
	enqueue "$q" '{"n": 0}' >/dev/null
	if wait_for 15 "SELECT count(*) = 1 FROM queue.history WHERE queue_name = '$q' AND payload->>'n' = '0'"; then
		ok "$lang: an idle bot picks up a new item at once ($([ $poll = 1 ] && echo "1 s poll" || echo "LISTEN, 30 s poll"))"
	else
		notok "$lang: an idle bot picks up a new item at once" "$(tail -5 "$LOG/$w0.log")"
	fi
	kill -TERM "$b0"
	wait_exit 10 "$b0"
	is "$lang: an idle bot stops on SIGTERM with status 0" "$EXIT" 0

	enqueue "$q" '{"n": 1, "steps": 3}' >/dev/null
	enqueue "$q" '{"n": 2}' >/dev/null
	enqueue "$q" '{"n": 3, "fail": "transient"}' >/dev/null
	enqueue "$q" '{"n": 4, "fail": "permanent"}' >/dev/null
	start_bot "$lang" "$q" "$w1" 1
	b1=$BOT
	if wait_for 90 "SELECT (SELECT count(*) FROM queue.history WHERE queue_name = '$q') = 4
	                   AND (SELECT count(*) FROM queue.dead_letters WHERE queue_name = '$q') = 1"; then
		ok "$lang: works the queue: three completed, one dead letter"
	else
		notok "$lang: works the queue: three completed, one dead letter" "$(tail -5 "$LOG/$w1.log")"
	fi
	is "$lang: steps checkpointed, result reported" \
		"$(sql "SELECT progress::text || ' ' || (result->>'steps') || ' ' || (result->>'resumed_from') || ' ' || (result->>'worker')
		        FROM queue.history WHERE queue_name = '$q' AND payload->>'n' = '1'")" \
		"{\"step\": 2} 3 0 $w1"
	is "$lang: a transient failure is retried and then completes" \
		"$(sql "SELECT attempts FROM queue.history WHERE queue_name = '$q' AND payload->>'n' = '3'") $(sql "SELECT details->>'error_code' FROM queue.events WHERE queue_name = '$q' AND kind = 'failed' AND attempt = 1 AND item_id = (SELECT item_id FROM queue.history WHERE queue_name = '$q' AND payload->>'n' = '3')")" \
		"2 ERP_TIMEOUT"
	is "$lang: a permanent failure is a dead letter with its error code" \
		"$(sql "SELECT reason || ' ' || error_code FROM queue.dead_letters WHERE queue_name = '$q'")" \
		"permanent BAD_INPUT"

	# a lost lease: another worker takes the item while the bot works on it
	id=$(enqueue "$q" '{"n": 6, "step_seconds": 6}')
	if wait_for 40 "SELECT worker = '$w1' FROM queue.items WHERE queue_name = '$q' AND item_id = $id AND state = 'processing'"; then
		sleep 2.5    # into its 6 s step, past its extend_lease
		# its lease ends and another worker claims the item, in one transaction
		# (so the bot cannot revive the lease in between)
		tok=$(sql "UPDATE queue.item_live SET lease_expires_at = now() - interval '1 s', visible_at = now() - interval '1 s'
		            WHERE queue_name = '$q' AND item_id = $id;
		           SELECT lease_token FROM queue.dequeue('$q', 'thief', lease_timeout => '1 min')")
		if timeout 15 bash -c "until grep -q 'lost the lease of item $id' '$LOG/$w1.log'; do sleep 0.1; done"; then
			ok "$lang: a lost lease (complete false or extend_lease NULL) is noticed and the item dropped"
		else
			notok "$lang: a lost lease (complete false or extend_lease NULL) is noticed and the item dropped" "$(tail -5 "$LOG/$w1.log")"
		fi
		is "$lang: ... the new holder completes it, the bot goes on" \
			"$(sql "SELECT queue.complete('$q', $id, $tok)") $(kill -0 "$b1" 2>/dev/null && echo running)" "t running"
	else
		notok "$lang: the bot claims the slow item" "$(tail -5 "$LOG/$w1.log")" "$(item_state "$q" "$id")"
	fi

	# SIGTERM while working: the step in hand finishes, the item is released
	id=$(enqueue "$q" '{"n": 7, "steps": 6, "step_seconds": 0.5}')
	if wait_for 40 "SELECT (progress->>'step')::int >= 1 FROM queue.items WHERE queue_name = '$q' AND item_id = $id"; then
		kill -TERM "$b1"
		wait_exit 10 "$b1"
		is "$lang: SIGTERM stops the bot with status 0" "$EXIT" 0
		is "$lang: ... after releasing its item: queued again, attempt given back, progress kept" \
			"$(sql "SELECT state || ' ' || attempt || ' ' || ((progress->>'step')::int >= 1) FROM queue.items WHERE queue_name = '$q' AND item_id = $id")" \
			"queued 0 true"
	else
		notok "$lang: the bot checkpoints the long item" "$(tail -5 "$LOG/$w1.log")" "$(item_state "$q" "$id")"
	fi

	# a crash: the bot restarted under its name gets the item back at once
	# (register_worker restart) and resumes from the checkpoint
	start_bot "$lang" "$q" "$w2" 1
	b2=$BOT
	if wait_for 40 "SELECT worker = '$w2' AND (progress->>'step')::int >= 2 FROM queue.items WHERE queue_name = '$q' AND item_id = $id"; then
		kill -KILL "$b2"
		wait "$b2" 2>/dev/null
		start_bot "$lang" "$q" "$w2" 1
		b3=$BOT
		if wait_for 60 "SELECT count(*) = 1 FROM queue.history WHERE queue_name = '$q' AND item_id = $id"; then
			is "$lang: after a kill -9 the restarted bot finishes the item from its last checkpoint" \
				"$(sql "SELECT attempts || ' ' || (result->>'worker') || ' ' || ((result->>'resumed_from')::int >= 2) FROM queue.history WHERE queue_name = '$q' AND item_id = $id") $(sql "SELECT string_agg(error_code, ',') FROM queue.failure_log WHERE queue_name = '$q' AND item_id = $id")" \
				"2 $w2 true worker_restarted"
		else
			notok "$lang: after a kill -9 the restarted bot finishes the item" "$(tail -5 "$LOG/$w2.log")"
		fi
		kill -TERM "$b3"
		wait_exit 10 "$b3"
		is "$lang: ... and stops on SIGTERM with status 0" "$EXIT" 0
	else
		notok "$lang: a second bot resumes the released item" "$(tail -5 "$LOG/$w2.log")"
	fi
	is "$lang: nothing left behind: every item in history or dead letters once" \
		"$(sql "SELECT (SELECT count(*) FROM queue.items WHERE queue_name = '$q') || ' '
		            || (SELECT count(DISTINCT payload->>'n') FROM queue.history WHERE queue_name = '$q') || ' '
		            || (SELECT count(*) FROM queue.dead_letters WHERE queue_name = '$q')")" "0 6 1"
}

# run_bots LANG... : each language's cases at once, in the background (most
# of their time is waiting), then their results in order
run_bots() {
	local lang pids=() line
	for lang in "$@"; do
		(
			T=0
			FAILED=0
			PIDS=()
			bot_cases "$lang"
			for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
		) >"$LOG/bots-$lang.tap" 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}"
	for lang in "$@"; do
		while IFS= read -r line; do
			case $line in
				"ok "*) ok "${line#ok * - }" ;;
				"not ok "*) T=$((T + 1)); FAILED=$((FAILED + 1)); echo "not ok $T - ${line#not ok * - }" ;;
				*) echo "$line" ;;
			esac
		done <"$LOG/bots-$lang.tap"
	done
}

langs=()
if want python || want bots; then
	if python3 -c 'import psycopg2' 2>/dev/null; then
		langs+=(python)
	else
		notok "python: psycopg2 is installed" "run test/deps.sh as root"
	fi
fi
if want node || want bots; then
	NODE_DIR="$TMP/node"
	cp -r "$REPO/examples/node" "$NODE_DIR"
	rm -rf "$NODE_DIR/node_modules"
	if (cd "$NODE_DIR" && npm_config_cache="$TMP/npm-cache" timeout 180 npm ci --no-audit --no-fund --loglevel=error) >"$LOG/npm.log" 2>&1; then
		ok "node: npm ci installs the pinned packages"
		langs+=(node)
	else
		notok "node: npm ci installs the pinned packages" "$(tail -5 "$LOG/npm.log")"
	fi
fi
if want psql || want bots; then
	langs+=(psql)
fi
[ ${#langs[@]} -gt 0 ] && run_bots "${langs[@]}"
