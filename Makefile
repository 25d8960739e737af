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
#   make soak       10 minutes of mixed load on a disk store (SOAK_SECONDS=600) -> doc/reliability.md
#   make faultshim  the LD_PRELOAD fault injector of the disk tests -> build/<variant>/faultshim.so
#   make install    /usr/local/bin/coraine
#   make pgo        profile-guided build, trained by test/perf/pgoTrain.sh -> build/pgo/coraine
#   make install_pgo  build/pgo/coraine -> /usr/local/bin, its tune.env -> /opt/coraine/etc
#   make tune WORKLOAD=file.json  the build and settings for one workload (doc/tuning.md)
#   make tune-smoke the same on test/perf/tune/workload.example.json, a few seconds per step
#   make tune-compare WORKLOAD=f  out of the box / tuned profile / tuned, 3 runs (doc/tuning.md's input)
#   make pgo-bench  the PGO builds against plain -O2, alternated (test/perf/pgo_bench.py)
#   make perf-report  doc/performance.md's generated sections, doc/tuning.md, build/perf/report.html
#                   from test/perf/results/*.csv (test/perf/report.py)

VARIANT ?= release
BUILD   := build/$(VARIANT)
CC      ?= gcc
ifeq ($(CC),cc)
CC      := gcc
endif

PKGS    := libmicrohttpd gnutls libcurl libpcre2-8 libmosquitto icu-i18n icu-uc libpq libcrypto libmongoc-1.0
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(shell geos-config --clibs 2>/dev/null)

GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
WARN    := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
BASE_CFLAGS := -std=c17 -D_GNU_SOURCE -pthread -g $(WARN) $(PKG_CFLAGS) -Isrc \
               -DCR_GIT_COMMIT='"$(GIT_COMMIT)"'
# The objects that print the commit (/version, /metrics, --version) are rebuilt when it changes: a
# stamp file rewritten only when its text differs from the commit being built (the rule is at the end,
# after the default goal).
GIT_STAMP := $(BUILD)/git-commit
$(shell mkdir -p $(BUILD); [ "$$(cat $(GIT_STAMP) 2>/dev/null)" = "$(GIT_COMMIT)" ] || echo "$(GIT_COMMIT)" > $(GIT_STAMP))

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
# make pgo: -fprofile-use reads the .gcda files the training left beside each
# object of build/pgo-gen; code the training never ran is optimised as without
# a profile (-fprofile-partial-training).
# -dumpdir: GCC names a file's profile by its auxiliary base name, which the
# driver takes from -o (build/pgo-gen/src/x/y vs build/pgo/src/x/y), and
# hashes that name into the profile id of every static function. Compiled with
# their own -o and no -dumpdir, the pgo objects found no profile for any
# static function (-Wmissing-profile, once silenced here) and GCC then warned
# "Missing counts for called function" for each one a profiled function calls
# (202 warnings with pgoTrain.sh; the others went silently without profile). PGO_DUMPDIR
# gives the pgo objects the auxiliary name of the pgo-gen object of the same
# source, so both the .gcda file and the static functions' ids are found; the
# .d and .o files still follow -o. Not on the link line: with -flto the profile
# is read when each object is compiled and travels in its LTO bytecode.
PGO_LTO      ?= 1
PGO_TRAINING ?= pgoTrain
ifeq ($(VARIANT),pgo-nolto)
PGO_LTO := 0
endif
ifneq ($(filter pgo pgo-nolto,$(VARIANT)),)
OPT     := -O2 -fprofile-use -fprofile-partial-training
PGO_DUMPDIR = -dumpdir build/pgo-gen/$(dir $<)
BUILD_DEFS := -DCR_PGO -DCR_PGO_TRAINING='"$(PGO_TRAINING)"'
ifeq ($(PGO_LTO),1)
OPT     += -flto=auto
AR      := gcc-ar
BUILD_DEFS += -DCR_LTO
endif
endif
CFLAGS  ?=
ALL_CFLAGS := $(BASE_CFLAGS) $(OPT) $(CFLAGS) $(BUILD_DEFS) -DCR_CFLAGS='"$(strip $(OPT) $(CFLAGS))"'
LDLIBS  := $(PKG_LIBS) -lm -lpthread

SRCS    := $(shell find src -name '*.c' | sort)
LIBSRCS := $(filter-out src/main.c,$(SRCS))
LIBOBJS := $(patsubst %.c,$(BUILD)/%.o,$(LIBSRCS)) $(BUILD)/src/ld/core_context.o
DEPS    := $(patsubst %.c,$(BUILD)/%.d,$(SRCS))
CORE_CONTEXT := src/ld/ngsi-ld-core-context-v1.8.jsonld

UNIT_SRCS := $(wildcard test/unit/test_*.c)
UNIT_BINS := $(patsubst test/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRCS))

.PHONY: all run test asan tsan unit functional functional-mongoc fuzz perf install deps clean tools crash faultshim \
        pgo pgo-nolto install_pgo tune tune-smoke tune-compare pgo-bench perf-report
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
	$(CC) $(ALL_CFLAGS) $(PGO_DUMPDIR) -MMD -MP -c $< -o $@

$(BUILD)/src/ld/core_context.o: src/ld/core_context.S $(CORE_CONTEXT)
	@mkdir -p $(dir $@)
	$(CC) -c -DCORE_CONTEXT_FILE='"$(CURDIR)/$(CORE_CONTEXT)"' $< -o $@

$(BUILD)/libcoraine.a: $(LIBOBJS)
	@rm -f $@
	$(AR) rcs $@ $^

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

# the soak test (test/soak/soak.py): 10 minutes of mixed load, results into doc/reliability.md
SOAK_SECONDS ?= 600
.PHONY: soak
soak: all
	python3 test/soak/soak.py --duration $(SOAK_SECONDS) --bin $(CURDIR)/$(BUILD)/coraine --report doc/reliability.md

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

# ---- make pgo, make tune (test/perf/pgoTrain.sh, test/perf/tune/, doc/tuning.md)
# The instrumented build (build/pgo-gen) is trained by PGO_TRAIN with the
# release build's receiver and responders (their own code must not enter
# the profile); build/pgo is then rebuilt from scratch on the .gcda files left
# in build/pgo-gen (PGO_DUMPDIR above says why they are not copied). Knobs: PGO_TRAIN_DURATION
# (seconds per shape), PGO_LTO=0|1 (measured: doc/tuning.md).
PGO_TRAIN ?= test/perf/pgoTrain.sh
PGO_TRAIN_ARGS ?=
PREFIX  ?= /usr/local
pgo:
	$(MAKE) VARIANT=release all perf
	$(MAKE) VARIANT=pgo-gen build/pgo-gen/coraine
	find build/pgo-gen -name '*.gcda' -delete
	$(PGO_TRAIN) $(CURDIR)/build/pgo-gen/coraine $(PGO_TRAIN_ARGS)
	rm -rf build/pgo
	$(MAKE) VARIANT=pgo PGO_TRAINING='$(PGO_TRAINING)' build/pgo/coraine
	printf '# make pgo: the out-of-the-box settings\nTUNE_DBLOCKPREFER=reads\nTUNE_ALLOCATOR=glibc\n' >build/pgo/tune.env
	@echo "pgo: build/pgo/coraine (trained by $(PGO_TRAINING))"

install_pgo:
	@test -x build/pgo/coraine || { echo "install_pgo: run make pgo (or make tune) first"; exit 1; }
	install -D -m 0755 build/pgo/coraine $(DESTDIR)$(PREFIX)/bin/coraine
	install -D -m 0644 build/pgo/tune.env $(DESTDIR)/opt/coraine/etc/tune.env

# make tune: check the file first (fails in a second), then make pgo trained on
# it, then measure its knobs (tuneMeasure.sh writes tune-result.json and
# build/pgo/tune.env). Knobs: TUNE_REPEATS, TUNE_TRAIN_DURATION,
# TUNE_BROKER_CPUS, TUNE_LOAD_CPUS, TUNE_DURATION, TUNE_WARMUP.
TUNE_RESULT ?= tune-result.json
tune:
	@test -n "$(WORKLOAD)" || { echo "tune: WORKLOAD=file.json is required (test/perf/tune/workload.example.json)"; exit 2; }
	$(eval TUNE_T0 := $(shell date +%s))
	python3 test/perf/tune/tuneGen.py check $(WORKLOAD) --bin $(CURDIR)/build/release/coraine
	$(MAKE) pgo PGO_TRAIN=test/perf/tune/tuneTrain.sh PGO_TRAIN_ARGS='$(abspath $(WORKLOAD))' \
	    PGO_TRAINING='workload:$(notdir $(WORKLOAD))'
	TUNE_STARTED=$(TUNE_T0) test/perf/tune/tuneMeasure.sh $(abspath $(WORKLOAD)) $(CURDIR)/build/pgo/coraine $(TUNE_RESULT)

tune-smoke:
	TUNE_REPEATS=1 TUNE_TRAIN_DURATION=2 TUNE_DURATION=2 TUNE_WARMUP=1 PGO_TRAIN_DURATION=1 \
	    $(MAKE) tune WORKLOAD=test/perf/tune/workload.example.json TUNE_RESULT=build/tune-smoke-result.json
	python3 test/perf/tune/tuneResult.py --validate build/tune-smoke-result.json

# What make tune is worth on WORKLOAD (doc/tuning.md): make pgo's build kept as
# build/pgo-general, make tune's in build/pgo, then tuneCompare.py's three ways
# (TUNE_COMPARE_RUNS runs each, alternated) and, for a workload on corDB in RAM,
# both builds' instructions per request of its create and PATCH (ingest_callgrind.py:
# the profiles compared without the machine's noise; other stores say why they are left out).
TUNE_NAME = $(basename $(notdir $(WORKLOAD)))
TUNE_COMPARE_RUNS ?= 5
tune-compare:
	@test -n "$(WORKLOAD)" || { echo "tune-compare: WORKLOAD=file.json is required"; exit 2; }
	$(MAKE) pgo
	install -D -m 0755 build/pgo/coraine build/pgo-general/coraine
	$(MAKE) tune WORKLOAD=$(WORKLOAD) TUNE_RESULT=test/perf/results/tune_$(TUNE_NAME)-result.json
	python3 test/perf/tune/tuneCompare.py $(WORKLOAD) --general build/pgo-general/coraine \
	    --tuned build/pgo/coraine --result test/perf/results/tune_$(TUNE_NAME)-result.json --runs $(TUNE_COMPARE_RUNS)
	python3 test/perf/tune/ingest_callgrind.py --workload $(WORKLOAD) --bin build/pgo-general/coraine \
	    --bin build/pgo/coraine --csv test/perf/results/callgrind_$(TUNE_NAME).csv || \
	    echo "tune-compare: no instruction counts for $(TUNE_NAME) (above: why)"

# the same profile without -flto (build/pgo-nolto): what LTO adds, for pgo-bench
pgo-nolto:
	@test -d build/pgo-gen || { echo "pgo-nolto: run make pgo first"; exit 1; }
	rm -rf build/pgo-nolto
	$(MAKE) VARIANT=pgo-nolto PGO_TRAINING='$(PGO_TRAINING)' build/pgo-nolto/coraine

# doc/performance.md's <!-- report:NAME --> sections, doc/tuning.md and build/perf/report.html (SVG
# plots) from the CSVs committed in test/perf/results/
perf-report:
	python3 test/perf/report.py

PGO_BENCH_ARGS ?=
pgo-bench:
	python3 test/perf/pgo_bench.py $(PGO_BENCH_ARGS)
	python3 test/perf/callgrind_requests.py --bin build/release/coraine --bin build/pgo/coraine \
	    $(if $(wildcard build/pgo-nolto/coraine),--bin build/pgo-nolto/coraine) \
	    --shapes retrieve,query,create,patch -n 2000 -r 200 --csv test/perf/results/pgo_callgrind.csv

clean:
	rm -rf build

# see GIT_STAMP
$(BUILD)/src/main.o $(BUILD)/src/api/admin.o $(BUILD)/src/api/metrics.o: $(GIT_STAMP)
