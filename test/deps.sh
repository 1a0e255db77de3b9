#!/usr/bin/env bash
# test/deps.sh -- install what building and testing queue needs, when missing.
#
#   test/deps.sh [extra-package ...]
#
# On Debian 12 as root: apt-get installs the PostgreSQL 15 server headers,
# pg_cron, libpq, and Perl's IPC::Run (TAP tests); postgres_exporter,
# PgBouncer, psycopg2, Node.js and npm (the ecosystem suite); plus any extra
# packages named (e.g. postgresql-15-pgq3 for the benchmarks).  As another user it
# only checks and says what is missing.

set -eu

pkgs="postgresql-15 postgresql-server-dev-15 postgresql-15-cron libpq-dev libipc-run-perl make gcc"
# the ecosystem suite: the programs that run around queue
pkgs="$pkgs prometheus-postgres-exporter pgbouncer python3-psycopg2 $*"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js and npm by command: a node from elsewhere (with its own npm) will do
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "missing packages:$missing" >&2
	echo "install them with: sudo apt-get install$missing" >&2
	exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq $missing >/dev/null
