# libwallprof: wall-clock sampling profiler injected with LD_PRELOAD.
#
#   make          build build/libwallprof.so
#   make demo     install missing -dev packages (root), build, profile a sample program, summarize
#   make test     install missing -dev packages (root), unit tests (plain + ASan/UBSan), end-to-end tests
#   make bench    benchmarks, one table (scripts/bench.py; BENCH_ARGS="--quick -k NAME")
#   make clean

CC      ?= cc
CXX     ?= c++
PYTHON  ?= python3
PKGS    := libunwind libunwind-generic libdw jansson
BUILD   := build

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN    := -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
# -fexceptions: cleanup handlers in the interposed calls run on thread cancellation.
BASE_CFLAGS := -std=gnu11 $(WARN) -fvisibility=hidden -fPIC -fexceptions -D_GNU_SOURCE $(PKG_CFLAGS)
LIBS    := $(PKG_LIBS) -lz -lpthread -ldl

# Module sources. preload/ holds the injected runtime; the rest are the
# pure stages that unit tests also build on their own.
PRELOAD_SRCS := $(wildcard preload/*.c) $(wildcard unwind/*.c)
CORE_SRCS    := $(wildcard symbolize/*.c) $(wildcard output/*.c) preload/ring.c preload/modules.c
LIB_SRCS     := $(sort $(PRELOAD_SRCS) $(CORE_SRCS))
HEADERS      := $(wildcard */*.h) $(wildcard */*.inc)

LIB := $(BUILD)/libwallprof.so

UNIT_SRCS  := $(wildcard test/unit/test_*.c)
UNIT_PLAIN := $(patsubst test/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRCS))
UNIT_ASAN  := $(patsubst test/unit/%.c,$(BUILD)/asan/%,$(UNIT_SRCS))
SAN_FLAGS  := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

PROG_LIB := $(wildcard test/progs/lib*.c)
PROG_C   := $(filter-out $(PROG_LIB),$(wildcard test/progs/*.c))
PROG_CXX := $(wildcard test/progs/*.cc)
PROGS    := $(patsubst test/progs/%.c,$(BUILD)/progs/%,$(PROG_C)) \
            $(patsubst test/progs/%.cc,$(BUILD)/progs/%,$(PROG_CXX)) \
            $(patsubst test/progs/%.c,$(BUILD)/progs/%.so,$(PROG_LIB))
PROG_CFLAGS := -O2 -g -pthread -fno-omit-frame-pointer -Wall -Wextra -Werror

.PHONY: all deps demo test unit integration clean
all: $(LIB)

deps:
	@scripts/install-deps.sh

# -z now: every libc function the library calls is bound at load time, not
# at its first call, which in a signal handler would run the loader's lazy
# binding on the handler's stack (it saves the vector registers there: 2.8
# KiB with AVX-512; too much on a small alternate signal stack).
$(LIB): $(LIB_SRCS) $(HEADERS) Makefile
	@mkdir -p $(BUILD)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -shared -Wl,-z,defs -Wl,-z,now -o $@ $(LIB_SRCS) $(LIBS)

$(BUILD)/unit/%: test/unit/%.c $(CORE_SRCS) $(HEADERS) $(wildcard test/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(CORE_SRCS) $(LIBS)

$(BUILD)/asan/%: test/unit/%.c $(CORE_SRCS) $(HEADERS) $(wildcard test/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) -o $@ $< $(CORE_SRCS) $(LIBS)

$(BUILD)/progs/%: test/progs/%.c $(wildcard test/progs/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(PROG_CFLAGS) -std=gnu11 -o $@ $< -lm

$(BUILD)/progs/lib%.so: test/progs/lib%.c
	@mkdir -p $(dir $@)
	$(CC) $(PROG_CFLAGS) -std=gnu11 -fPIC -shared -o $@ $<

$(BUILD)/progs/%: test/progs/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(PROG_CFLAGS) -o $@ $<

unit: $(UNIT_PLAIN) $(UNIT_ASAN)

demo: deps
	@$(MAKE) --no-print-directory $(LIB) $(BUILD)/progs/demo
	@scripts/demo.sh

test: deps
	@$(MAKE) --no-print-directory $(LIB) unit $(PROGS)
	@$(PYTHON) test/run_tests.py

clean:
	rm -rf $(BUILD)

# Benchmarks: programs under test/bench/, driven by scripts/bench.py.
BENCH_SRCS   := $(wildcard test/bench/*.c)
BENCH_PROGS  := $(patsubst test/bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
BENCH_CFLAGS := -O2 -g -pthread -std=gnu11 -Wall -Wextra -Werror
BENCH_ARGS   ?=

.PHONY: bench
bench: $(LIB) $(BENCH_PROGS)
	@$(PYTHON) scripts/bench.py $(BENCH_ARGS)

$(BUILD)/bench/%: test/bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) -o $@ $<

# A statically linked test program (the launcher's static-binary detection);
# this explicit rule wins over the pattern rule for build/progs/%.
$(BUILD)/progs/static_hello: test/progs/static_hello.c
	@mkdir -p $(dir $@)
	$(CC) $(PROG_CFLAGS) -std=gnu11 -static -o $@ $<

# blocking.c a second time with _FORTIFY_SOURCE=2 (tests eintr_battery_fortify*):
# its poll, ppoll, read, recv and recvfrom calls become glibc's __*_chk
# variants. The plain build must not use them, whatever the compiler's default.
PROGS += $(BUILD)/progs/blocking_fortify
$(BUILD)/progs/blocking: PROG_CFLAGS += -U_FORTIFY_SOURCE
$(BUILD)/progs/blocking_fortify: test/progs/blocking.c $(wildcard test/progs/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(PROG_CFLAGS) -std=gnu11 -D_FORTIFY_SOURCE=2 -o $@ $< -lm

# Offline converter of raw dumps (written when the host dies of a fatal
# signal) into Sentry JSON: build/wallprof-convert RAW [-o OUT.json].
CONVERT := $(BUILD)/wallprof-convert
all: $(CONVERT)
unit: $(CONVERT)

$(CONVERT): scripts/wallprof-convert.c $(CORE_SRCS) $(HEADERS) Makefile
	@mkdir -p $(BUILD)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(CORE_SRCS) $(LIBS)

# Soak test, not part of `make test`: build/progs/soak under the preload at
# 1000 Hz for SOAK_SECONDS (thread churn, forks, dlopen, SIGUSR2 snapshots),
# watched for crashes, hangs and memory growth (scripts/soak.py).
SOAK_SECONDS ?= 600
SOAK_ARGS    ?=

.PHONY: soak
soak: deps
	@$(MAKE) --no-print-directory $(LIB) $(BUILD)/progs/soak $(BUILD)/progs/libwpt_plugin.so
	@$(PYTHON) scripts/soak.py --seconds $(SOAK_SECONDS) $(SOAK_ARGS)

# Benchmark programs that link parts of the library (explicit rules win over
# the pattern rule above): handler links the unwinder alone, dump the core
# sources (ring, modules, symbolize, output) like the unit tests.
$(BUILD)/bench/handler: test/bench/handler.c unwind/unwind.c unwind/unwind.h
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) -D_GNU_SOURCE $(PKG_CFLAGS) -o $@ $< unwind/unwind.c -lunwind

$(BUILD)/bench/dump: test/bench/dump.c $(CORE_SRCS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $< $(CORE_SRCS) $(LIBS)
