# Makefile for the queue extension (PGXS)
#
#   make             build the extension and its tools
#   make install     install them into the PostgreSQL found by $(PG_CONFIG)
#   make test        install build dependencies, then run every test on
#                    throw-away clusters (pg_regress, isolation, TAP, tools,
#                    and the ecosystem: postgres_exporter, PgBouncer, bots)
#   make demo        run the bot-fleet demo on a throw-away cluster
#   make test-citus  build Citus from CITUS_SRC (default: shared/deps/ next to
#                    the repository) and run the tests on a Citus cluster
#   make bench       run the benchmark suite (see test/bench/README.md)

EXTENSION = queue
EXTVERSION = 0.2.0
# The release this version updates from (its install script is frozen).
PREVVERSION = 0.1.0

MODULE_big = queue
OBJS = \
	src/queue.o \
	src/statement_scope.o \
	src/distributed.o \
	src/validate.o \
	src/config.o \
	src/access.o \
	src/enqueue.o \
	src/dequeue.o \
	src/item_lookup.o \
	src/index_entries.o \
	src/claim_direct.o \
	src/complete_direct.o \
	src/enqueue_direct.o \
	src/ack.o \
	src/breaker.o \
	src/worker.o \
	src/flow.o \
	src/notify.o \
	src/estimate.o

# The install script is assembled from the topic files under schema/, in
# name order; the upgrade script from the previous release from the parts
# under upgrade/PREV--CUR/.  Released install scripts (queue--X.Y.Z.sql)
# and older upgrade scripts are committed as written.
SCHEMA_PARTS = $(sort $(wildcard schema/*.sql))
UPGRADE_PARTS = $(sort $(wildcard upgrade/$(PREVVERSION)--$(EXTVERSION)/*.sql))
UPGRADE_built = $(EXTENSION)--$(PREVVERSION)--$(EXTVERSION).sql
DATA_built = $(EXTENSION)--$(EXTVERSION).sql $(UPGRADE_built)
DATA = $(filter-out $(DATA_built), $(wildcard $(EXTENSION)--*--*.sql) $(wildcard $(EXTENSION)--*.sql))

PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

# pg_regress: every sql/*.sql, in name order, each in a fresh database
# with the extension loaded; a temporary instance preloads pg_cron.
REGRESS ?= $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --load-extension=queue --temp-instance=./tmp_check --temp-config=test/regress.conf

# Isolation specs: test/specs/*.spec with expected output in test/expected.
ISOLATION ?= $(patsubst test/specs/%.spec,%,$(sort $(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test --load-extension=queue --temp-instance=./tmp_check_iso --temp-config=test/regress.conf

# TAP tests (crash recovery, concurrency, faults, tools).
TAP_TESTS = 1
PROVE_TESTS ?= test/t/*.pl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
else
# Without the server headers only `make test` and `make demo` work: they
# install the build dependencies first.
all install installcheck:
	@echo "PostgreSQL server development files not found (pg_config: $(PG_CONFIG))."
	@echo "Run 'make test' or 'make demo', which install them, or: apt-get install postgresql-server-dev-15"
	@exit 1
endif

# Custom targets follow the PGXS include.

# Each TAP file's time in the log (PGXS empties PROVE_FLAGS, so after it).
PROVE_FLAGS = --timer -j2

# Every object includes the one shared header: rebuild them all when it
# changes (PGXS tracks header dependencies only for a PostgreSQL built
# with --enable-depend, which Debian's is not), so that an incremental
# build never links objects compiled against an older struct layout.
$(OBJS): src/queue.h

$(EXTENSION)--$(EXTVERSION).sql: $(SCHEMA_PARTS)
	( echo '/* $(EXTENSION)--$(EXTVERSION).sql */'; \
	  echo ''; \
	  echo '-- complain if script is sourced in psql, rather than via CREATE EXTENSION'; \
	  printf '%s\n' '\echo Use "CREATE EXTENSION $(EXTENSION)" to load this file. \quit'; \
	  for f in $(SCHEMA_PARTS); do echo ''; echo "-- source: $$f"; cat $$f; done ) > $@

$(UPGRADE_built): $(UPGRADE_PARTS)
	( echo '/* $(UPGRADE_built) */'; \
	  echo ''; \
	  echo '-- complain if script is sourced in psql, rather than via ALTER EXTENSION'; \
	  printf '%s\n' '\echo Use "ALTER EXTENSION $(EXTENSION) UPDATE TO '"'"'$(EXTVERSION)'"'"'" to load this file. \quit'; \
	  for f in $(UPGRADE_PARTS); do echo ''; echo "-- source: $$f"; cat $$f; done ) > $@

all: $(DATA_built) tools

.PHONY: tools tools-asan install-tools test test-citus demo bench checkver

tools:
	@for d in tools/*/; do [ ! -f $$d/Makefile ] || $(MAKE) -C $$d PG_CONFIG=$(PG_CONFIG) || exit 1; done

# The tools again, under AddressSanitizer and UBSan, as tools/*/*-asan.
tools-asan:
	@for d in tools/*/; do [ ! -f $$d/Makefile ] || $(MAKE) -C $$d PG_CONFIG=$(PG_CONFIG) asan || exit 1; done

install: install-tools
install-tools: tools
	@for d in tools/*/; do [ ! -f $$d/Makefile ] || $(MAKE) -C $$d PG_CONFIG=$(PG_CONFIG) install || exit 1; done

clean: clean-tools
clean-tools:
	@for d in tools/*/; do [ -f $$d/Makefile ] && $(MAKE) -C $$d clean; done; true

# One version in one place: the control file must agree with EXTVERSION.
checkver:
	@grep -q "default_version = '$(EXTVERSION)'" $(EXTENSION).control || \
	  { echo "queue.control default_version differs from EXTVERSION $(EXTVERSION)"; exit 1; }

test: checkver
	test/run-tests.sh

test-citus: checkver
	PG_CONFIG=$(PG_CONFIG) test/citus/run.sh

demo:
	PG_CONFIG='$(PG_CONFIG)' test/demo/run.sh

bench:
	test/bench/run.sh
