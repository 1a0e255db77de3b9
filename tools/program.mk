# tools/program.mk -- shared build of the libpq client tools (outside PGXS).
#
# A tool's Makefile sets PROGRAM, VERSION_MACRO and optionally SRCS (the
# tool's own .c files; default $(PROGRAM).c), then includes this file.
# Every tool also links the shared code in tools/common/.
#   make                 build ./$(PROGRAM)
#   make asan            build ./$(PROGRAM)-asan under AddressSanitizer and
#                        UndefinedBehaviorSanitizer (what `make test` runs
#                        the tool tests with, a second time)
#   make install         copy it to $(PG_CONFIG) --bindir (or BINDIR=...)
#   make clean
# The version is the extension's, read from queue.control (one place).

PG_CONFIG ?= pg_config
PG_INCLUDEDIR := $(shell $(PG_CONFIG) --includedir)
PG_LIBDIR := $(shell $(PG_CONFIG) --libdir)
BINDIR ?= $(or $(shell $(PG_CONFIG) --bindir),/usr/local/bin)

TOOLS_DIR := $(dir $(lastword $(MAKEFILE_LIST)))
VERSION ?= $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(TOOLS_DIR)../queue.control)

CC ?= cc
CFLAGS ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Werror -D$(VERSION_MACRO)='"$(VERSION)"'
override CPPFLAGS += -I$(PG_INCLUDEDIR)
LDLIBS = -L$(PG_LIBDIR) -lpq -lm

.PHONY: all asan install clean

all: $(PROGRAM)

SRCS ?= $(PROGRAM).c
COMMON_SRCS := $(wildcard $(TOOLS_DIR)common/*.c)
HEADERS := $(wildcard *.h) $(wildcard $(TOOLS_DIR)common/*.h)
override CPPFLAGS += -I$(TOOLS_DIR)common

$(PROGRAM): $(SRCS) $(COMMON_SRCS) $(HEADERS)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $(SRCS) $(COMMON_SRCS) $(LDFLAGS) $(LDLIBS)

SANITIZE_FLAGS = -O1 -g -fno-omit-frame-pointer \
	-fsanitize=address,undefined -fno-sanitize-recover=all

asan: $(PROGRAM)-asan

$(PROGRAM)-asan: $(SRCS) $(COMMON_SRCS) $(HEADERS)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SANITIZE_FLAGS) -o $@ $(SRCS) $(COMMON_SRCS) $(LDFLAGS) $(LDLIBS)

install: $(PROGRAM)
	install -d $(DESTDIR)$(BINDIR)
	install -m 755 $(PROGRAM) $(DESTDIR)$(BINDIR)/$(PROGRAM)

clean:
	rm -f $(PROGRAM) $(PROGRAM)-asan
