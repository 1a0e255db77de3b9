# test/ecosystem/exporter.sh -- sourced by run.sh: the real postgres_exporter
# with contrib/postgres_exporter/queue.yaml, scraped over HTTP.

# scrape PORT FILE : GET /metrics into FILE
scrape() {
	python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=20).read().decode())' \
		"$1" >"$2"
}
# start_exporter ROLE : an exporter connecting as ROLE; its port in $EXP_PORT
start_exporter() {
	EXP_PORT=$(free_port)
	DATA_SOURCE_NAME="host=$TMP port=$PORT user=$1 dbname=postgres sslmode=disable" \
		"$EXPORTER" --web.listen-address="127.0.0.1:$EXP_PORT" \
		--extend.query-path="$REPO/contrib/postgres_exporter/queue.yaml" \
		--log.level=warn >"$LOG/exporter-$1.log" 2>&1 &
	PIDS+=($!)
	wait_port 15 "$EXP_PORT" || notok "exporter: $1's exporter listens" "$(cat "$LOG/exporter-$1.log")"
}
# sample FILE NAME LABELS : the value of one sample (labels as written, server left out)
sample() {
	grep -E "^$2\{" "$1" | sed -E 's/,?server="[^"]*"//' | grep -F "{$3}" | awk '{print $2}'
}
# queues_in FILE : the queue label values present, sorted, space-separated
queues_in() {
	grep -oE '^queue_[a-z_]+\{[^}]*queue="[^"]*"' "$1" | sed -E 's/.*queue="([^"]*)"/\1/' | sort -u | tr '\n' ' '
}

EXPORTER=$(command -v prometheus-postgres-exporter || command -v postgres_exporter || true)
if [ -z "$EXPORTER" ]; then
	notok "exporter: prometheus-postgres-exporter is installed" "run test/deps.sh as root"
else
	sql "
	CREATE ROLE exp_reader LOGIN IN ROLE queue_reader;
	CREATE ROLE exp_tenant LOGIN IN ROLE queue_reader;
	CREATE ROLE exp_other LOGIN IN ROLE queue_reader;
	CREATE ROLE exp_nobody LOGIN;
	SELECT queue.create_queue('exp_open', max_attempts => 3);
	SELECT queue.create_queue('exp_paused');
	SELECT queue.create_queue('exp_tenant_q');
	SELECT queue.create_queue('exp_other_q');
	SELECT queue.grant_queue('exp_tenant_q', 'exp_tenant', 'reader');
	SELECT queue.grant_queue('exp_other_q', 'exp_other', 'reader');
	SELECT queue.enqueue('exp_open', jsonb_build_object('n', g)) FROM generate_series(1, 12) g;
	SELECT queue.enqueue('exp_open', '{\"later\": true}', run_at => now() + interval '1 h');
	SELECT queue.enqueue('exp_paused', '{}');
	SELECT queue.pause('exp_paused', 'ERP maintenance');
	SELECT queue.enqueue('exp_tenant_q', '{}') FROM generate_series(1, 2);
	SELECT queue.enqueue('exp_other_q', '{}');
	" >/dev/null
	# three completed, two dead, one retrying, one held, two processing
	sql "SELECT count(queue.complete('exp_open', item_id, lease_token)) FROM queue.dequeue('exp_open', 'exp-bot', 3)" >/dev/null
	sql "SELECT count(queue.fail('exp_open', item_id, lease_token, 'bad customer', 'BAD_CUSTOMER', permanent => true))
	       FROM queue.dequeue('exp_open', 'exp-bot', 2)" >/dev/null
	sql "SELECT count(queue.fail('exp_open', item_id, lease_token, 'ERP timeout', 'ERP_TIMEOUT', retry_in => '1 h'))
	       FROM queue.dequeue('exp_open', 'exp-bot', 1)" >/dev/null
	sql "SELECT queue.hold('exp_open', (SELECT max(item_id) - 1 FROM queue.items WHERE queue_name = 'exp_open' AND state = 'queued'))" >/dev/null
	sql "SELECT count(*) FROM queue.dequeue('exp_open', 'exp-bot', 2)" >/dev/null
	# a snapshot, then one more completion: counters add live rows to the totals
	sql "SELECT queue.snapshot_metrics(); SELECT count(*) FROM queue.sweep();" >/dev/null
	sql "SELECT count(queue.complete('exp_open', item_id, lease_token)) FROM queue.dequeue('exp_open', 'exp-bot-2', 1)" >/dev/null

	start_exporter exp_reader
	READER_PORT=$EXP_PORT
	scrape "$READER_PORT" "$LOG/reader.metrics"
	"$BINDIR/psql" -X -A -t -d "$DSN user=exp_reader" -c "SELECT queue.prometheus()" >"$LOG/reader.expected"
	python3 "$HERE/prom_compare.py" "$LOG/reader.metrics" "$LOG/reader.expected" >"$LOG/reader.compare" 2>&1
	is "exporter: a queue_reader role's scrape equals queue.prometheus(): names, types, help, labels, values" \
		"$?" 0
	[ "$FAILED" -gt 0 ] && sed 's/^/#   /' "$LOG/reader.compare"
	is "exporter: every family is scraped" \
		"$(grep -E '^# TYPE queue_' "$LOG/reader.metrics" | awk '{print $3 ":" $4}' | sort | tr '\n' ' ')" \
		"queue_alerts_open:gauge queue_dead_letters_open:gauge queue_dead_letters_total:counter queue_failed_last_hour:gauge queue_failed_total:counter queue_items:gauge queue_oldest_queued_age_seconds:gauge queue_paused:gauge queue_processed_last_hour:gauge queue_processed_total:counter queue_run_seconds:gauge queue_wait_seconds:gauge "
	is "exporter: queue_items by state (queued, scheduled, processing, on_hold)" \
		"$(for s in queued scheduled processing on_hold; do sample "$LOG/reader.metrics" queue_items "queue=\"exp_open\",state=\"$s\""; done | tr '\n' ' ')" \
		"2 2 2 1 "
	is "exporter: queue_paused is 1 for the paused queue, 0 for the other" \
		"$(sample "$LOG/reader.metrics" queue_paused 'queue="exp_paused",state=""') $(sample "$LOG/reader.metrics" queue_paused 'queue="exp_open",state=""')" \
		"1 0"
	is "exporter: dead letters open, and their total by reason" \
		"$(sample "$LOG/reader.metrics" queue_dead_letters_open 'queue="exp_open"') $(sample "$LOG/reader.metrics" queue_dead_letters_total 'queue="exp_open",reason="permanent"')" \
		"2 2"
	is "exporter: processed and failed, last hour and totals" \
		"$(for m in queue_processed_last_hour queue_processed_total queue_failed_last_hour queue_failed_total; do sample "$LOG/reader.metrics" $m 'queue="exp_open"'; done | tr '\n' ' ')" \
		"4 4 3 3 "
	is "exporter: open alerts by kind" \
		"$(sample "$LOG/reader.metrics" queue_alerts_open 'kind="dead_letters",queue="exp_open"')" 1
	like "exporter: wait and run quantiles" \
		"$(grep -E '^queue_(wait|run)_seconds\{' "$LOG/reader.metrics" | grep exp_open | sed -E 's/\} .*//; s/,?server="[^"]*"//' | sort)" \
		'queue_run_seconds\{quantile="0.5",queue="exp_open" queue_run_seconds\{quantile="0.95",queue="exp_open" queue_wait_seconds\{quantile="0.5",queue="exp_open" queue_wait_seconds\{quantile="0.95",queue="exp_open"$'
	echo "# exporter: a scrape of the 2 queues it may read took $(grep -E '^pg_exporter_last_scrape_duration_seconds ' "$LOG/reader.metrics" | awk '{print $2}') s"
	is "exporter: the exporter's scrape reported no error" \
		"$(grep -E '^pg_exporter_last_scrape_error ' "$LOG/reader.metrics" | awk '{print $2}')" 0
	is "exporter: a reader without grants sees the open queues only" \
		"$(queues_in "$LOG/reader.metrics")" "exp_open exp_paused "

	start_exporter exp_tenant
	scrape "$EXP_PORT" "$LOG/tenant.metrics"
	"$BINDIR/psql" -X -A -t -d "$DSN user=exp_tenant" -c "SELECT queue.prometheus()" >"$LOG/tenant.expected"
	python3 "$HERE/prom_compare.py" "$LOG/tenant.metrics" "$LOG/tenant.expected" >"$LOG/tenant.compare" 2>&1
	is "exporter: a tenant's scrape equals its queue.prometheus()" "$?" 0
	is "exporter: a reader granted one closed queue sees it and the open ones, not another tenant's" \
		"$(queues_in "$LOG/tenant.metrics")" "exp_open exp_paused exp_tenant_q "

	start_exporter exp_nobody
	scrape "$EXP_PORT" "$LOG/nobody.metrics"
	is "exporter: a role without queue_reader gets no queue metric" \
		"$(grep -c '^queue_' "$LOG/nobody.metrics")" 0

	# counters survive retention: history purged, totals kept
	before=$(sample "$LOG/reader.metrics" queue_processed_total 'queue="exp_open"')
	# (retention keeps an hour of outcomes for the windows that count them:
	# the history is aged past it first)
	sql "SELECT queue.snapshot_metrics();
	     UPDATE queue.item_done SET completed_at = completed_at - interval '2 hours' WHERE queue_name = 'exp_open';
	     SELECT queue.alter_queue('exp_open', retention => '1 s');" >/dev/null
	sleep 1.2
	sql "SELECT count(*) FROM queue.sweep()" >/dev/null
	scrape "$READER_PORT" "$LOG/reader2.metrics"
	is "exporter: retention purged the history" \
		"$(sql "SELECT count(*) FROM queue.history WHERE queue_name = 'exp_open'")" 0
	is "exporter: queue_processed_total stays where it was after retention" \
		"$(sample "$LOG/reader2.metrics" queue_processed_total 'queue="exp_open"')" "$before"
fi
