#!/usr/bin/env bash
# test/demo/clone.sh -- `make demo` works from a clone postgres cannot enter.
#
# As root: copies this tree into a fresh `mktemp -d` (mode 0700, like
# /root), runs the demo's short path there (DEMO_SHORT=1 make demo: the
# real set-up, build, install, cluster, bots and report, with 300
# invoices and no outage), and checks that it reached its report with
# every invoice accounted for and left nothing running or behind.
# Output is TAP; as another user it skips.

set -u

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}

if [ "$(id -u)" != 0 ]; then
	echo "1..0 # SKIP the clone test runs as root"
	exit 0
fi

T=0
FAILED=0
check() {
	T=$((T + 1))
	if [ "$2" = 0 ]; then echo "ok $T - $1"; else FAILED=$((FAILED + 1)); echo "not ok $T - $1"; fi
}

HOMEDIR=$(mktemp -d)
trap 'rm -rf "$HOMEDIR"' EXIT
chmod 700 "$HOMEDIR"
mkdir "$HOMEDIR/queue"
tar -C "$REPO" --exclude=./.demo --exclude=./tmp_check --exclude=./tmp_check_iso --exclude=./.git \
	-cf - . | tar -C "$HOMEDIR/queue" -xf -
LOG="$HOMEDIR/demo.log"

(cd "$HOMEDIR/queue" && DEMO_SHORT=1 PG_CONFIG="$PG_CONFIG" make -s demo) >"$LOG" 2>&1
rc=$?
check "clone: make demo from a clone under a 0700 folder exits 0" "$rc"
grep -q 'demo finished' "$LOG"
check "clone: the demo reached its end" "$?"
grep -A3 'all_accounted_for' "$LOG" | grep -Eq '\| t *$'
check "clone: every invoice is accounted for" "$?"
ls "$HOMEDIR"/queue/.demo/logs/bot-1.log >/dev/null 2>&1
check "clone: the bots' logs are in the clone's .demo/logs" "$?"
scratch=$(grep -o '/tmp/queue-demo\.[A-Za-z0-9]*' "$LOG" | head -1)
[ -n "$scratch" ] && [ ! -e "$scratch" ]
check "clone: the scratch folder ($scratch) is gone" "$?"
[ -n "$scratch" ] && ! pgrep -f -- "$scratch" >/dev/null
check "clone: no cluster or bot of the demo is left running" "$?"

echo "1..$T"
if [ "$FAILED" != 0 ]; then
	echo "# $FAILED of $T failed; the demo's output:"
	sed 's/^/#   /' "$LOG" | tail -60
	exit 1
fi
