#!/usr/bin/env bash
# test/run-tests.sh -- every test of queue, behind `make test`.
#
# Installs missing build dependencies (test/deps.sh), builds and installs
# the extension and its tools, then runs, each on throw-away PostgreSQL
# instances with pg_cron preloaded:
#   1. pg_regress      sql/*.sql against expected/*.out
#   2. isolation       test/specs/*.spec against test/expected/*.out
#   3. TAP             test/t/*.pl (crash recovery, concurrency, faults)
#   4. tools           test/worker/run.sh (queue-worker, queue-top)
#   5. tools-asan      the same, against builds of the tools under
#                      AddressSanitizer and UndefinedBehaviorSanitizer
#   6. demo            test/demo/clone.sh: the demo's short path from a
#                      clone in a 0700 folder (as root; skipped otherwise)
#   7. ecosystem       test/ecosystem/run.sh (postgres_exporter, PgBouncer,
#                      the bot examples in Python, Node.js and psql)
#   8. citus           test/citus/run.sh: on a Citus cluster, when the Citus
#                      source is found (CITUS_SRC or shared/deps/ next to the
#                      repository); said to be skipped otherwise
# initdb refuses to run as root, so as root the suites run as the postgres
# OS user in a scratch copy of the tree.  Exits non-zero if any test
# failed; failing diffs and logs are printed.
#
#   SUITES="regress isolation tap tools tools-asan demo ecosystem citus"   choose suites
#   (default: all)
#   SUITE_TIMEOUT=1200   seconds a suite may take before it is stopped and
#                        counted as failed

set -u

REPO=$(cd "$(dirname "$0")/.." && pwd)
SUITES=${SUITES:-"regress isolation tap tools tools-asan demo ecosystem citus"}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-1200}
cd "$REPO"

test/deps.sh || exit 1
if ! command -v pg_config >/dev/null 2>&1; then
	export PATH="/usr/lib/postgresql/15/bin:$PATH"
fi
PG_CONFIG=${PG_CONFIG:-pg_config}

make -s PG_CONFIG="$PG_CONFIG" >/dev/null || { echo "build failed"; make PG_CONFIG="$PG_CONFIG"; exit 1; }
if [ "$(id -u)" = 0 ]; then
	make -s PG_CONFIG="$PG_CONFIG" install >/dev/null || { echo "install failed"; exit 1; }
fi

# Where the suites run: the tree itself, or a copy the postgres user owns.
RUN_AS=()
WORK="$REPO"
if [ "$(id -u)" = 0 ]; then
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/queue-test.XXXXXX")
	cp -a "$REPO/." "$WORK/"
	chown -R postgres "$WORK"
	RUN_AS=(runuser -u postgres --)
fi

passed=0
failed=0
failed_suites=
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/queue-test-logs.XXXXXX")
chmod 777 "$LOGDIR"

# Count "... ok" / "... FAILED" lines of pg_regress-style output.
count_regress() {
	local log=$1
	local ok bad
	ok=$(grep -cE '^(ok|test|     |[a-z_0-9]+ )?.*\.\.\. ok' "$log" || true)
	bad=$(grep -cE '\.\.\. FAILED' "$log" || true)
	passed=$((passed + ok))
	failed=$((failed + bad))
}

# suite_start NAME COMMAND...: runs COMMAND in the background, its output
# in $LOGDIR/NAME.log; suite_end NAME waits for it, prints the log and
# counts its results.  run_suite does both, one suite after the other.
declare -A suite_pid suite_began
suite_start() {
	local name=$1
	shift
	local log="$LOGDIR/$name.log"
	local as=("${RUN_AS[@]}")
	# the demo suite starts as root itself, like `make demo`
	[ "$name" = demo ] && as=()
	suite_began[$name]=$SECONDS
	# as postgres, from the copy: a clone under /root (0700) is no folder
	# postgres may stand in, and every command would say so in the log
	# a suite that hangs fails on its own after SUITE_TIMEOUT seconds
	# (SIGTERM, then SIGKILL), so a run always ends with a report
	(if [ ${#as[@]} -gt 0 ]; then cd "$WORK" || exit 1; fi
		timeout -k 30 "$SUITE_TIMEOUT" "${as[@]}" "$@") >"$log" 2>&1 &
	suite_pid[$name]=$!
}

suite_end() {
	local name=$1
	local log="$LOGDIR/$name.log"
	local status=0
	[ -n "${suite_pid[$name]:-}" ] || return 0
	wait "${suite_pid[$name]}" || status=$?
	unset "suite_pid[$name]"
	echo "=== $name ($((SECONDS - ${suite_began[$name]})) s)"
	cat "$log"
	[ "$status" = 124 ] && echo "not ok - suite $name did not end within ${SUITE_TIMEOUT} s (SUITE_TIMEOUT) and was stopped"
	case $name in
		regress | isolation) count_regress "$log" ;;
		tap)
			# "[hh:mm:ss] test/t/x.pl .. ok  123 ms" with prove --timer
			t_ok=$(grep -cE '^(\[[0-9:]+\] )?test/t/.* ok' "$log" || true)
			t_bad=$(grep -cE '^(\[[0-9:]+\] )?test/t/.* (Failed|Dubious|No subtests)' "$log" || true)
			passed=$((passed + t_ok)); failed=$((failed + t_bad)) ;;
		tools | tools-asan | demo | ecosystem | citus)
			t_ok=$(grep -cE '^ok ' "$log" || true)
			# a known gap (TAP "# TODO") is reported, not counted as failed
			t_bad=$(grep -E '^not ok ' "$log" | grep -vc '# TODO' || true)
			passed=$((passed + t_ok)); failed=$((failed + t_bad)) ;;
	esac
	if [ "$status" != 0 ]; then
		failed_suites="$failed_suites $name"
		# a suite that failed without a counted failure still fails the run
		[ "$failed" = 0 ] && failed=1
		for d in "$WORK/regression.diffs" "$WORK/output_iso/regression.diffs"; do
			[ -s "$d" ] && { echo "--- $d"; head -c 20000 "$d"; }
		done
		for l in "$WORK"/tmp_check/log/*; do
			[ -f "$l" ] && grep -l -E 'not ok|Failed test' "$l" >/dev/null 2>&1 &&
				{ echo "--- $l"; tail -n 40 "$l"; }
		done
	fi
}

run_suite() {
	suite_start "$@"
	suite_end "$1"
}

MK=(make -C "$WORK" PG_CONFIG="$PG_CONFIG" installcheck)
for s in $SUITES; do
	case $s in
		regress)
			# pg_regress and the isolation tester run side by side, each
			# on its own temporary instance (isolation on another port)
			suite_start regress "${MK[@]}" ISOLATION= TAP_TESTS=
			case " $SUITES " in *" isolation "*) ;; *) suite_end regress ;; esac ;;
		isolation)
			suite_start isolation "${MK[@]}" REGRESS= TAP_TESTS= EXTRA_REGRESS_OPTS=--port=58432
			[ -n "${suite_pid[regress]:-}" ] && suite_end regress
			suite_end isolation ;;
		tap) run_suite tap "${MK[@]}" REGRESS= ISOLATION= ;;
		tools)
			# mostly waiting (leases, signals, timeouts): it runs beside
			# tools-asan when both are asked for, each on its own cluster
			[ -x test/worker/run.sh ] && suite_start tools bash "$WORK/test/worker/run.sh"
			case " $SUITES " in *" tools-asan "*) ;; *) suite_end tools ;; esac ;;
		tools-asan)
			make -s -C "$WORK" PG_CONFIG="$PG_CONFIG" tools-asan >/dev/null ||
				{ echo "sanitizer build failed"; make -C "$WORK" PG_CONFIG="$PG_CONFIG" tools-asan; exit 1; }
			[ "$WORK" != "$REPO" ] && chown -R postgres "$WORK/tools"
			suite_start tools-asan env SANITIZED=1 \
				WORKER="$WORK/tools/queue-worker/queue-worker-asan" TOP="$WORK/tools/queue-top/queue-top-asan" \
				bash "$WORK/test/worker/run.sh"
			[ -n "${suite_pid[tools]:-}" ] && suite_end tools
			suite_end tools-asan ;;
		demo) run_suite demo env PG_CONFIG="$PG_CONFIG" bash "$REPO/test/demo/clone.sh" ;;
		ecosystem) run_suite ecosystem bash "$WORK/test/ecosystem/run.sh" ;;
		citus)
			# builds Citus as root, then runs the cluster as postgres itself
			if src=$(test/citus/run.sh --find-source); then
				as=("${RUN_AS[@]}")
				RUN_AS=()
				run_suite citus env PG_CONFIG="$PG_CONFIG" bash "$REPO/test/citus/run.sh"
				RUN_AS=("${as[@]}")
			else
				echo "=== citus: SKIPPED (no Citus source; set CITUS_SRC to a Citus source directory or"
				echo "    archive, or put citus-*.tar.gz in shared/deps/ next to the repository)"
			fi ;;
		*) echo "unknown suite $s"; exit 2 ;;
	esac
done
# a suite still running in the background (tools listed after tools-asan)
for s in "${!suite_pid[@]}"; do suite_end "$s"; done

[ "$WORK" != "$REPO" ] && [ -z "$failed_suites" ] && rm -rf "$WORK"
echo
[ -n "$failed_suites" ] && echo "failed suites:$failed_suites (logs in $LOGDIR)"
echo "tests: $passed passed, $failed failed"
[ -z "$failed_suites" ]
