#!/usr/bin/env bash
# A queue bot with nothing but bash and psql: claim, work step by step, report.
#
#   QUEUE_DSN='host=db dbname=ops user=bot' bash bot.sh invoices [worker-name]
#
# Claims one item at a time, runs its steps (work() stands for the real
# work), saves each finished step with checkpoint() so a retry resumes
# there, extends the lease before each step, and completes the item or
# fails it with an error code.  A lost lease (another worker now holds the
# item) is not an error: the bot drops the item and goes on.  On SIGTERM it
# finishes the step it is in, releases the item (no attempt counted) and
# exits 0.  It polls every QUEUE_POLL seconds while idle (psql cannot wait
# for a NOTIFY); every call is one psql run, its own transaction, so it
# works through PgBouncer in transaction pooling.  Values reach SQL only as
# psql variables (:'name'), never spliced into the text.  Without
# QUEUE_DSN, psql reads PGHOST, PGPORT, PGDATABASE, PGUSER.

set -u
QUEUE=${1:?usage: bot.sh QUEUE [WORKER]}
WORKER=${2:-psql-$(hostname)-$$}
POLL=${QUEUE_POLL:-5}
DSN_ARGS=()
[ -n "${QUEUE_DSN:-}" ] && DSN_ARGS=(-d "$QUEUE_DSN")
stopping=0
trap 'stopping=1' TERM INT

log() { echo "$(date +%H:%M:%S) $WORKER: $*" >&2; }

# q SQL [name=value ...] : one call with psql variables; prints the result row
q() {
	local sql=$1 vars=() v
	shift
	for v in "$@"; do vars+=(-v "$v"); done
	printf '%s\n' "$sql" | psql -X -q -A -t -F $'\t' -v ON_ERROR_STOP=1 "${DSN_ARGS[@]}" \
		-v q="$QUEUE" -v w="$WORKER" "${vars[@]}"
}

# pause SECONDS : sleeps, but a SIGTERM ends the wait
pause() {
	sleep "$1" &
	local pid=$!
	wait "$pid" 2>/dev/null
	kill "$pid" 2>/dev/null
}

# work STEP : the real work of one step goes here.  This one sleeps, and
# fails on request: returns 0, 75 (transient) or 65 (permanent).
work() {
	[ "$fail" = permanent ] && return 65
	[ "$fail" = transient ] && [ "$attempt" = 1 ] && return 75
	sleep "$secs" &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do wait "$pid" 2>/dev/null; done   # SIGTERM: finish the step
	return 0
}

# process : the steps not yet done; sets outcome to done, lost, released or failed
process() {
	local step rc state
	for ((step = first + 1; step <= steps; step++)); do
		if [ $stopping = 1 ]; then
			q "SELECT queue.release(:'q', :'id', :'tok')" id="$id" tok="$tok" >/dev/null
			log "released item $id at step $step"
			outcome=released
			return
		fi
		[ -n "$(q "SELECT queue.extend_lease(:'q', :'id', :'tok')" id="$id" tok="$tok")" ] ||
			{ outcome=lost; return; }
		work "$step"
		rc=$?
		if [ $rc != 0 ]; then
			if [ $rc = 65 ]; then
				state=$(q "SELECT queue.fail(:'q', :'id', :'tok', 'cannot process item', 'BAD_INPUT', permanent => true)" \
					id="$id" tok="$tok")
			else
				state=$(q "SELECT queue.fail(:'q', :'id', :'tok', 'ERP did not answer', 'ERP_TIMEOUT')" \
					id="$id" tok="$tok")
			fi
			log "item $id failed (${state:-lease lost})"
			outcome=${state:+failed}
			outcome=${outcome:-lost}
			return
		fi
		if [ "$step" -lt "$steps" ] &&
			[ "$(q "SELECT queue.checkpoint(:'q', :'id', :'tok', jsonb_build_object('step', :'step'::int))" \
				id="$id" tok="$tok" step="$step")" != t ]; then
			outcome=lost
			return
		fi
	done
	if [ "$(q "SELECT queue.complete(:'q', :'id', :'tok',
	               jsonb_build_object('steps', :'steps'::int, 'resumed_from', :'first'::int, 'worker', :'w'))" \
		id="$id" tok="$tok" steps="$steps" first="$first")" = t ]; then
		outcome=done
	else
		outcome=lost
	fi
}

# restart: the leases a predecessor under this name still holds end now
q "SELECT queue.register_worker(:'w', restart => true)" >/dev/null || log "cannot reach the database yet"
log "working on queue $QUEUE"
while [ $stopping = 0 ]; do
	row=$(q "SELECT item_id, lease_token, attempt, coalesce((payload->>'steps')::int, 1),
	                coalesce(payload->>'fail', '-'), coalesce((payload->>'step_seconds')::numeric, 0.1),
	                coalesce((progress->>'step')::int, 0)
	           FROM queue.dequeue(:'q', :'w')")
	if [ $? != 0 ]; then
		# the item in hand, if any, comes back when its lease runs out
		log "database call failed; retrying in $POLL s"
		pause "$POLL"
		continue
	fi
	if [ -z "$row" ]; then
		pause "$POLL"
		continue
	fi
	IFS=$'\t' read -r id tok attempt steps fail secs first <<<"$row"
	process
	case $outcome in
		lost) log "lost the lease of item $id; another worker has it" ;;
		done) log "completed item $id" ;;
	esac
done
log "stopped"
exit 0
