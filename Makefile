# coraine - build, run, test. See README.md.
#
#   make            release build (-O2 -g)          -> build/release/coraine
#   make run        deps, build, start on port 1026 (corDB in RAM, foreground)
#   make test       deps, build, unit + functional tests
#   make asan       ASan+UBSan build                -> build/asan/coraine
#   make tsan       ThreadSanitizer build           -> build/tsan/coraine
#   make unit       unit tests (cmocka)
#   make functional functional tests (pytest) against build/release/coraine
#   make functional-mongoc  the same on --database mongoc (FerretDB, built with go)
#   make fuzz       libFuzzer targets (clang)       -> build/fuzz/fuzz_*
#   make perf       benchmark programs              -> build/release/perf/*
#   make crash      corDB crash loop (kill -9 against --dbSync always; CRASH_ITERATIONS=100)
#   make faultshim  the LD_PRELOAD fault injector of the disk tests -> build/<variant>/faultshim.so
#   make install    /usr/local/bin/coraine

VARIANT ?= release
BUILD   := build/$(VARIANT)
CC      ?= gcc
ifeq ($(CC),cc)
CC      := gcc
endif

PKGS    := libmicrohttpd libcurl libpcre2-8 libmosquitto icu-i18n icu-uc libpq libmongoc-1.0
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(shell geos-config --clibs 2>/dev/null)

GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
WARN    := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
BASE_CFLAGS := -std=c17 -D_GNU_SOURCE -pthread -g $(WARN) $(PKG_CFLAGS) -Isrc \
               -DCR_GIT_COMMIT='"$(GIT_COMMIT)"'

ifeq ($(VARIANT),release)
OPT     := -O2
endif
ifeq ($(VARIANT),asan)
OPT     := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDEXTRA := -fsanitize=address,undefined
endif
ifeq ($(VARIANT),tsan)
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
LDEXTRA := -fsanitize=thread
endif
ifeq ($(VARIANT),debug)
OPT     := -O0
endif
ifeq ($(VARIANT),pgo-gen)
OPT     := -O2 -fprofile-generate -fprofile-update=atomic
LDEXTRA := -fprofile-generate
endif
CFLAGS  ?=
ALL_CFLAGS := $(BASE_CFLAGS) $(OPT) $(CFLAGS) -DCR_CFLAGS='"$(strip $(OPT) $(CFLAGS))"'
LDLIBS  := $(PKG_LIBS) -lm -lpthread

SRCS    := $(shell find src -name '*.c' | sort)
LIBSRCS := $(filter-out src/main.c,$(SRCS))
LIBOBJS := $(patsubst %.c,$(BUILD)/%.o,$(LIBSRCS)) $(BUILD)/src/ld/core_context.o
DEPS    := $(patsubst %.c,$(BUILD)/%.d,$(SRCS))
CORE_CONTEXT := src/ld/ngsi-ld-core-context-v1.8.jsonld

UNIT_SRCS := $(wildcard test/unit/test_*.c)
UNIT_BINS := $(patsubst test/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRCS))

.PHONY: all run test asan tsan unit functional functional-mongoc fuzz perf install deps clean tools crash faultshim
all: $(BUILD)/coraine tools

# ---- tools/: the notification receiver (tests and benchmarks use it)
TOOL_SRCS := $(wildcard tools/*.c)
TOOL_BINS := $(patsubst tools/%.c,$(BUILD)/tools/%,$(TOOL_SRCS))
tools: $(TOOL_BINS)
$(BUILD)/tools/%: tools/%.c $(BUILD)/libcoraine.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDEXTRA) -o $@ $< $(BUILD)/libcoraine.a $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/src/ld/core_context.o: src/ld/core_context.S $(CORE_CONTEXT)
	@mkdir -p $(dir $@)
	$(CC) -c -DCORE_CONTEXT_FILE='"$(CURDIR)/$(CORE_CONTEXT)"' $< -o $@

$(BUILD)/libcoraine.a: $(LIBOBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/coraine: $(BUILD)/src/main.o $(BUILD)/libcoraine.a
	$(CC) $(ALL_CFLAGS) $(LDEXTRA) -o $@ $^ $(LDLIBS)

$(BUILD)/unit/%: test/unit/%.c $(BUILD)/libcoraine.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDEXTRA) -o $@ $< $(BUILD)/libcoraine.a $(LDLIBS) -lcmocka

-include $(DEPS)

deps:
	@scripts/deps.sh

run: deps all
	$(BUILD)/coraine -fg --port 1026

asan:
	$(MAKE) VARIANT=asan all

tsan:
	$(MAKE) VARIANT=tsan all

unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

functional: all faultshim
	CORAINE_BIN=$(CURDIR)/$(BUILD)/coraine CORAINE_FAULTSHIM=$(CURDIR)/$(BUILD)/faultshim.so \
	    python3 -m pytest -q test/functional

# ---- the functional suite on --database mongoc, against FerretDB (test/functional/ferret.py builds it)
functional-mongoc: all faultshim
	CORAINE_TEST_DATABASE=mongoc CORAINE_BIN=$(CURDIR)/$(BUILD)/coraine \
	    CORAINE_FAULTSHIM=$(CURDIR)/$(BUILD)/faultshim.so python3 -m pytest -q test/functional

# ---- corDB on disk: fault injection (LD_PRELOAD) and the crash loop
faultshim: $(BUILD)/faultshim.so
$(BUILD)/faultshim.so: test/crash/faultshim.c
	@mkdir -p $(dir $@)
	$(CC) -std=c17 -D_GNU_SOURCE -O2 -g $(WARN) -fPIC -shared -o $@ $< -ldl

CRASH_ITERATIONS ?= 100
crash: all
	CORAINE_BIN=$(CURDIR)/$(BUILD)/coraine python3 test/crash/crash_loop.py --iterations $(CRASH_ITERATIONS)

test: deps
	$(MAKE) all
	$(MAKE) unit
	$(MAKE) functional

# ---- fuzzing (clang + libFuzzer); each target links the library sources built with clang
FUZZ_SRCS := $(wildcard test/fuzz/fuzz_*.c)
FUZZ_BINS := $(patsubst test/fuzz/%.c,build/fuzz/%,$(FUZZ_SRCS))
fuzz:
	$(MAKE) VARIANT=fuzzlib CC=clang OPT="-O1 -fsanitize=fuzzer-no-link,address,undefined" build/fuzzlib/libcoraine.a
	$(MAKE) $(FUZZ_BINS)
build/fuzz/%: test/fuzz/%.c build/fuzzlib/libcoraine.a
	@mkdir -p build/fuzz
	clang $(BASE_CFLAGS) -O1 -fsanitize=fuzzer,address,undefined -o $@ $< build/fuzzlib/libcoraine.a $(LDLIBS)

# ---- benchmarks
PERF_SRCS := $(wildcard test/perf/*.c)
PERF_BINS := $(patsubst test/perf/%.c,$(BUILD)/perf/%,$(PERF_SRCS))
perf: $(PERF_BINS)
$(BUILD)/perf/json_bench: test/perf/json_bench.c $(BUILD)/libcoraine.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libcoraine.a $(LDLIBS) -ljansson -lcjson
$(BUILD)/perf/%: test/perf/%.c $(BUILD)/libcoraine.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libcoraine.a $(LDLIBS)

install: all
	install -m 0755 $(BUILD)/coraine /usr/local/bin/coraine

clean:
	rm -rf build
