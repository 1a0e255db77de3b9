#!/usr/bin/env bash
# test/citus/run.sh -- queue on a Citus cluster, behind `make test-citus`.
#
# Builds Citus from CITUS_SRC (a source directory or a `git archive`
# tarball; default: citus-*.tar.gz under shared/deps/ next to the
# repository) into the PostgreSQL of PG_CONFIG, unless a Citus is already
# installed there (CITUS_REBUILD=1 builds anyway; a build from an archive
# is cached in CITUS_CACHE, default /var/tmp/queue-citus-cache, under the
# archive's checksum and the PostgreSQL), installs queue, starts a
# coordinator and two workers on free loopback ports, distributes queue
# with queue.distribute(), runs the cases of test/citus/cases.sh and the
# regress subset listed in test/citus/regress.txt against the coordinator,
# then stops everything.  Output is TAP; exit status 0 only if all passed.
#
#   test/citus/run.sh                 everything
#   test/citus/run.sh --find-source   print the Citus source found, or fail
#   test/citus/run.sh CASE            only the cases whose name contains CASE
#   KEEP_TMP=1                        keep the cluster folder (logs)

set -u

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
command -v "$PG_CONFIG" >/dev/null 2>&1 || PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
BINDIR=$($PG_CONFIG --bindir)

# Build dependencies of Citus on Debian 12.
CITUS_DEPS="libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev \
libpam0g-dev libreadline-dev zlib1g-dev libxml2-dev libicu-dev libldap-dev libxslt1-dev libssl-dev"

find_source() {
	local c d
	if [ -n "${CITUS_SRC:-}" ]; then
		[ -e "$CITUS_SRC" ] && { echo "$CITUS_SRC"; return 0; }
		return 1
	fi
	for d in "$REPO/../shared/deps" "$REPO/../../shared/deps" "$REPO/shared/deps"; do
		for c in "$d"/citus-*.tar.gz; do
			[ -f "$c" ] && { (cd "$(dirname "$c")" && echo "$(pwd)/$(basename "$c")"); return 0; }
		done
	done
	return 1
}

if [ "${1:-}" = "--find-source" ]; then
	find_source
	exit $?
fi

# ------------------------------------------------------------ build (root)

if [ "${1:-}" != "--cluster" ]; then
	SRC=$(find_source) || {
		echo "Bail out! no Citus source: set CITUS_SRC to a citus directory or archive"
		exit 2
	}
	LIBDIR=$($PG_CONFIG --pkglibdir)
	SHAREDIR=$($PG_CONFIG --sharedir)
	if [ -f "$LIBDIR/citus.so" ] && [ -f "$SHAREDIR/extension/citus.control" ] &&
		[ -z "${CITUS_REBUILD:-}" ]; then
		echo "# Citus already installed in $($PG_CONFIG --bindir)/..: build skipped"
	else
		[ "$(id -u)" = 0 ] && { "$REPO/test/deps.sh" $CITUS_DEPS || exit 1; }
		# A build from an archive is kept, installed into a staging tree,
		# in CITUS_CACHE under the archive's checksum and the PostgreSQL it
		# was built for: the next run on another installation of the same
		# PostgreSQL (a fresh clone, a fresh test copy) copies it in.
		CACHE=
		if [ -f "$SRC" ]; then
			key=$( { sha256sum <"$SRC"; $PG_CONFIG --version; $PG_CONFIG --pkglibdir; } | sha256sum | cut -c1-16)
			CACHE=${CITUS_CACHE:-/var/tmp/queue-citus-cache}/$key
		fi
		if [ -n "$CACHE" ] && [ -f "$CACHE/done" ] && [ -z "${CITUS_REBUILD:-}" ]; then
			echo "# Citus from the build cache $CACHE"
			cp -a "$CACHE/stage/." / || { echo "Bail out! copying $CACHE failed"; exit 1; }
		else
			BUILD=$(mktemp -d /tmp/citus-build.XXXXXX)
			echo "# building Citus from $SRC in $BUILD"
			if [ -d "$SRC" ]; then
				cp -a "$SRC/." "$BUILD/citus/" 2>/dev/null || { mkdir -p "$BUILD/citus" && cp -a "$SRC/." "$BUILD/citus/"; }
			else
				mkdir -p "$BUILD/citus" && tar xzf "$SRC" -C "$BUILD/citus" --strip-components=1
			fi
			# not in a directory named src: Citus's configure then fails
			(cd "$BUILD/citus" && ./configure PG_CONFIG="$PG_CONFIG" >"$BUILD/configure.log" 2>&1 &&
				make -j2 with_llvm=no >"$BUILD/make.log" 2>&1 &&
				make with_llvm=no install >"$BUILD/install.log" 2>&1) || {
				echo "Bail out! Citus build failed, logs in $BUILD"
				tail -n 30 "$BUILD"/*.log
				exit 1
			}
			if [ -n "$CACHE" ]; then
				rm -rf "$CACHE" && mkdir -p "$CACHE" &&
					make -C "$BUILD/citus" with_llvm=no install DESTDIR="$CACHE/stage" >/dev/null 2>&1 &&
					touch "$CACHE/done" || rm -rf "$CACHE"
			fi
			rm -rf "$BUILD"
		fi
	fi
	if [ "$(id -u)" = 0 ]; then
		make -s -C "$REPO" PG_CONFIG="$PG_CONFIG" >/dev/null &&
			make -s -C "$REPO" PG_CONFIG="$PG_CONFIG" install >/dev/null || { echo "Bail out! queue install failed"; exit 1; }
		# the cluster runs as the postgres OS user, from a copy it can read
		make -s -C "$REPO" PG_CONFIG="$PG_CONFIG" tools >/dev/null 2>&1
		COPY=$(mktemp -d /tmp/queue-citus-tree.XXXXXX)
		mkdir -p "$COPY/test" "$COPY/tools"
		cp -a "$REPO/test/citus" "$COPY/test/" && cp -a "$REPO/sql" "$REPO/expected" "$COPY/"
		# the tools, for the case that points them at the coordinator
		cp "$REPO/tools/queue-worker/queue-worker" "$REPO/tools/queue-top/queue-top" "$COPY/tools/" 2>/dev/null
		chown -R postgres "$COPY"
		runuser -u postgres -- env PG_CONFIG="$PG_CONFIG" KEEP_TMP="${KEEP_TMP:-}" \
			bash "$COPY/test/citus/run.sh" --cluster "$@"
		st=$?
		rm -rf "$COPY"
		exit $st
	fi
	set -- --cluster "$@"
fi
shift

# ------------------------------------------------------- cluster (non-root)

FILTER=${1:-}
BASE=$(mktemp -d "${TMPDIR:-/tmp}/queue-citus.XXXXXX")
# shellcheck source=test/citus/cluster.sh
. "$REPO/test/citus/cluster.sh"

cleanup() {
	citus_stop
	if [ -z "${KEEP_TMP:-}" ]; then rm -rf "$BASE"; else echo "# kept $BASE"; fi
}
trap cleanup EXIT

citus_start 2 || { echo "Bail out! cluster did not start, logs in $BASE"; KEEP_TMP=1; exit 1; }
echo "# coordinator on port $COORD_PORT, workers on ${WORKER_PORTS[*]}"

# shellcheck source=test/citus/cases.sh
. "$REPO/test/citus/cases.sh"
