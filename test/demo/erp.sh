#!/bin/sh
# test/demo/erp.sh -- the "ERP call" each demo bot runs once per invoice.
#
# queue-worker pipes the invoice JSON to stdin.  This script stands in for
# a slow, flaky ERP:
#   - an invoice without a customer is rejected for good
#       (stderr "BAD_INVOICE: ...", exit 65: a permanent failure);
#   - while the outage flag file exists, every call fails at once
#       (stderr "ERP_TIMEOUT: ...", exit 75 = EX_TEMPFAIL: retried later);
#   - otherwise about 2 % of calls time out (picked from the item id and
#       attempt, so a retry usually succeeds), also exit 75;
#   - one invoice marked "slow" takes 15 s, longer than the 6 s lease,
#       so the bot has to keep its lease alive;
#   - the rest book in ERP_LATENCY seconds and print the ERP document as
#       JSON on stdout, which becomes the item's result; an invoice of a
#       statement run (booked in order) also gives the booking's start and
#       end on this machine's clock, so the report can check the order.
# The last stderr line starts with an error code ("ERP_TIMEOUT: ..."),
# which queue-worker records as the failure's error_code.
# Shell built-ins only, apart from sleep (and date for statement runs):
# the demo runs thousands of these.

IFS= read -r payload || true
flag=${ERP_OUTAGE_FLAG:-/nonexistent}
latency=${ERP_LATENCY:-0.1}

case $payload in
*'"malformed": true'*)
	echo "validating invoice $QUEUE_ITEM_ID" >&2
	echo "BAD_INVOICE: no customer number, the ERP refuses the document" >&2
	exit 65
	;;
esac

if [ -e "$flag" ]; then
	echo "ERP_TIMEOUT: ERP unreachable (outage), no answer" >&2
	exit 75
fi

if [ $(((QUEUE_ITEM_ID * 7919 + QUEUE_ATTEMPT * 104729) % 100)) -lt 2 ]; then
	sleep 0.05
	echo "ERP_TIMEOUT: no answer within the deadline" >&2
	exit 75
fi

started=
case $payload in
*'"statement_run": "'*) started=$(date +%s.%N) ;;
esac

case $payload in
*'"slow": true'*)
	# short sleeps, so nothing outlives a killed bot for long
	i=0
	while [ $i -lt 15 ]; do sleep 1; i=$((i + 1)); done
	;;
*)
	# ERP_LATENCY=0 (the demo's setting) saves a process per call
	[ "$latency" = 0 ] || sleep "$latency"
	;;
esac

if [ -n "$started" ]; then
	printf '{"erp_document": "DOC-%s", "attempt": %s, "started": %s, "finished": %s}\n' \
		"$QUEUE_ITEM_ID" "$QUEUE_ATTEMPT" "$started" "$(date +%s.%N)"
else
	printf '{"erp_document": "DOC-%s", "attempt": %s}\n' "$QUEUE_ITEM_ID" "$QUEUE_ATTEMPT"
fi
