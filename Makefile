# libwallprof: wall-clock sampling profiler injected with LD_PRELOAD.
#
#   make              build build/libwallprof.so and build/wallprof (the command)
#   make demo         install missing -dev packages (root), build, profile a sample program, summarize
#   make test         install missing -dev packages (root), unit tests (plain + ASan/UBSan), end-to-end tests
#   make unit         build the unit test binaries (build/unit/, build/asan/) and the command
#   make bench        benchmarks, one table (scripts/bench.py; BENCH_ARGS="--quick -k NAME")
#   make soak         soak test (scripts/soak.py; SOAK_SECONDS=600)
#   make install      PREFIX=/usr/local DESTDIR=: the library and the wallprof command
#   make uninstall    remove what `make install` put (same PREFIX and DESTDIR)
#   make format-check C sources and headers against .clang-format (installs clang-format-19, root)
#   make clang-check  the library's and the converter's sources through clang's warnings (make test runs it)
#   make clean

# Which sources go where; the other lists below derive from these four.
# RUNTIME_SRCS: the injected runtime, only in the library.
# SHARED_SRCS: what the library shares with the converter (the raw dump's
#   writer blocks, the index line, output names, build-ids); nothing that
#   needs the symbolizer, JSON or zlib, which run in the converter's process
#   only.
# CORE_SRCS: the converter's stages, archived (once per build variant) for
#   the converter, the unit tests and bench/dump. Only from output/ and
#   symbolize/: the converter compiles nothing of the runtime
#   (scripts/check-layout.py checks it).
# RUNTIME_PARTS: the pieces of the runtime that the unit tests and
#   bench/dump drive outside the library (the ring, the module map, the raw
#   dump's writer), archived for them; never linked into the converter.
RUNTIME_SRCS  := $(wildcard preload/*.c) $(wildcard unwind/*.c)
SHARED_SRCS   := output/raw.c output/event.c output/dsn.c output/dump_queue.c output/write.c output/profile.c symbolize/build_id.c
CORE_SRCS     := $(wildcard symbolize/*.c) $(wildcard output/*.c)
RUNTIME_PARTS := preload/ring.c preload/ring_raw.c preload/modules.c preload/raw_dump.c
# CONVERT_SRCS: the wallprof command's own files (convert/convert.h).
CONVERT_SRCS  := $(wildcard convert/*.c)
# UPLOAD_SRCS: the upload spool and its sender (upload/upload.h), archived
#   for the converter and the unit tests; they load libcurl when a flush
#   first sends (upload/http.c): built with its headers, never linked.
UPLOAD_SRCS   := $(wildcard upload/*.c)

CC      ?= cc
CXX     ?= c++
AR      ?= ar
PYTHON  ?= python3
CLANG_FORMAT ?= clang-format-19
PKGS    := libunwind libunwind-generic libdw jansson
# The library links only what capture needs: libunwind (local walks in the
# handler, remote walks of threads blocked outside the wrappers). libgcc_s
# comes first, named whether or not -fexceptions code references it:
# libunwind.so.8 exports the _Unwind_* API too, and whichever is first in
# the program's global scope is what libgcc_s's own unwinder calls bind to
# (with libunwind's first, no cleanup or destructor runs when a thread is
# cancelled or an exception crosses a library; test/e2e/cancel.py).
LIB_PKGS := libunwind libunwind-generic
BUILD   := build
OBJ     := $(BUILD)/obj
PREFIX  ?= /usr/local
DESTDIR ?=

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CURL_CFLAGS := $(shell pkg-config --cflags libcurl 2>/dev/null)
LIB_LIBS   := -Wl,--push-state,--no-as-needed -lgcc_s -Wl,--pop-state \
              $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null) -lpthread -ldl

WARN    := -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
# -fexceptions: cleanup handlers in the interposed calls run on thread cancellation.
BASE_CFLAGS := -std=gnu11 $(WARN) -fvisibility=hidden -fPIC -fexceptions -D_GNU_SOURCE $(PKG_CFLAGS) $(CURL_CFLAGS)
SAN_FLAGS   := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LIBS    := $(PKG_LIBS) -lz -lpthread -ldl

# The three object variants, each compiled once into build/obj/VARIANT/:
#   lib   what users get: the library, the converter, bench/dump
#   test  the same with the test-only knobs compiled in (-DWP_TEST_HOOKS,
#         preload/test_hooks.h): build/test/libwallprof.so, which the
#         end-to-end tests that set a WALLPROF_TEST_* variable preload, and
#         the plain unit tests (fault injection), which link its core and
#         parts archives
#   asan  the sanitizer unit tests (with the knobs), with their own archives
VARIANT_CFLAGS_lib  := $(BASE_CFLAGS) $(CFLAGS)
VARIANT_CFLAGS_test := $(BASE_CFLAGS) $(CFLAGS) -DWP_TEST_HOOKS
VARIANT_CFLAGS_asan := $(BASE_CFLAGS) $(SAN_FLAGS) -DWP_TEST_HOOKS
# Object of each source: build/obj/VARIANT/path/name.o.
objs = $(patsubst %.c,$(OBJ)/$(1)/%.o,$(2))

LIB_SRCS   := $(sort $(RUNTIME_SRCS) $(SHARED_SRCS))
LIB        := $(BUILD)/libwallprof.so
CONVERT    := $(BUILD)/wallprof
CORE_LIB   := $(OBJ)/lib/libcore.a
CORE_TEST  := $(OBJ)/test/libcore.a
CORE_ASAN  := $(OBJ)/asan/libcore.a
PARTS_LIB  := $(OBJ)/lib/libparts.a
PARTS_TEST := $(OBJ)/test/libparts.a
PARTS_ASAN := $(OBJ)/asan/libparts.a
UPLOAD_LIB  := $(OBJ)/lib/libupload.a
UPLOAD_TEST := $(OBJ)/test/libupload.a
UPLOAD_ASAN := $(OBJ)/asan/libupload.a
TEST_LIB   := $(BUILD)/test/libwallprof.so
TEST_CONVERT := $(BUILD)/test/wallprof

UNIT_SRCS  := $(wildcard test/unit/test_*.c)
UNIT_PLAIN := $(patsubst test/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRCS))
UNIT_ASAN  := $(patsubst test/unit/%.c,$(BUILD)/asan/%,$(UNIT_SRCS))
# Unit tests that also link runtime sources (UNIT_RUNTIME_<test>), in the
# variant of their build (test or asan); such a test defines the runtime
# globals those sources use (wp_rt, the TLS flags), which the library's
# other files define.
UNIT_RUNTIME_TESTS := test_slots test_threads test_threads_stress test_loader_lock
UNIT_RUNTIME_test_slots   := preload/slots.c preload/active.c preload/timers.c
UNIT_RUNTIME_test_threads := preload/slots.c preload/active.c preload/timers.c preload/threads.c
UNIT_RUNTIME_test_threads_stress := preload/slots.c preload/active.c preload/timers.c preload/threads.c
UNIT_RUNTIME_test_loader_lock := preload/loader_lock.c
UNIT_RUNTIME_SRCS  := $(sort $(foreach t,$(UNIT_RUNTIME_TESTS),$(UNIT_RUNTIME_$(t))))

OBJS_lib   := $(call objs,lib,$(sort $(LIB_SRCS) $(CORE_SRCS)) $(CONVERT_SRCS) $(UPLOAD_SRCS) test/bench/dump.c)
OBJS_test  := $(call objs,test,$(sort $(LIB_SRCS) $(CORE_SRCS)) $(UPLOAD_SRCS) $(UNIT_SRCS))
OBJS_asan  := $(call objs,asan,$(sort $(CORE_SRCS) $(RUNTIME_PARTS) $(UNIT_SRCS) $(UNIT_RUNTIME_SRCS)) $(UPLOAD_SRCS))

PROG_LIB := $(wildcard test/progs/lib*.c)
PROG_LIB_CXX := $(wildcard test/progs/lib*.cc)
PROG_C   := $(filter-out $(PROG_LIB),$(wildcard test/progs/*.c))
PROG_CXX := $(filter-out $(PROG_LIB_CXX),$(wildcard test/progs/*.cc))
PROGS    := $(patsubst test/progs/%.c,$(BUILD)/progs/%,$(PROG_C)) \
            $(patsubst test/progs/%.cc,$(BUILD)/progs/%,$(PROG_CXX)) \
            $(patsubst test/progs/%.c,$(BUILD)/progs/%.so,$(PROG_LIB)) \
            $(patsubst test/progs/%.cc,$(BUILD)/progs/%.so,$(PROG_LIB_CXX)) \
            $(BUILD)/progs/blocking_fortify
PROG_CFLAGS := -O2 -g -pthread -fno-omit-frame-pointer -Wall -Wextra -Werror

# Benchmarks: programs under test/bench/, driven by scripts/bench.py.
BENCH_SRCS   := $(wildcard test/bench/*.c)
BENCH_PROGS  := $(patsubst test/bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
BENCH_CFLAGS := -O2 -g -pthread -std=gnu11 -Wall -Wextra -Werror
BENCH_ARGS   ?=

# Soak test, not part of `make test`: build/progs/soak under the preload at
# 1000 Hz for SOAK_SECONDS (thread churn, forks, dlopen, SIGUSR2 snapshots),
# watched for crashes, hangs and memory growth (scripts/soak.py).
SOAK_SECONDS ?= 600
SOAK_ARGS    ?=

# What `make format-check` looks at (not the generated syscall_names.inc).
FORMAT_SRCS := $(sort $(wildcard */*.c */*.h test/*/*.c test/*/*.h))

# Programs compiled and linked in one step (test and bench programs) write
# their header dependencies to build/obj/exe/DIR/NAME.d.
exe_dep      = $(OBJ)/exe/$(patsubst $(BUILD)/%,%,$@).d
EXE_DEPFLAGS = -MMD -MP -MT $@ -MF $(exe_dep)

# ---- Targets ---------------------------------------------------------------

.PHONY: all unit testlib deps demo test bench soak install uninstall format-check clang-check clean
all: $(LIB) $(CONVERT)
unit: $(UNIT_PLAIN) $(UNIT_ASAN) $(CONVERT)
testlib: $(TEST_LIB) $(TEST_CONVERT)

deps:
	@scripts/install-deps.sh

demo: deps
	@$(MAKE) --no-print-directory $(LIB) $(CONVERT) $(BUILD)/progs/demo
	@scripts/demo.sh

test: deps
	@$(MAKE) --no-print-directory $(LIB) testlib unit $(PROGS) $(BENCH_PROGS)
	@$(MAKE) --no-print-directory clang-check
	@$(PYTHON) scripts/check-as-safe.py
	@$(PYTHON) scripts/check-layout.py
	@$(PYTHON) test/run_tests.py

bench: $(LIB) $(CONVERT) $(BENCH_PROGS)
	@scripts/install-deps.sh bench && $(PYTHON) scripts/bench.py $(BENCH_ARGS)

soak: deps
	@$(MAKE) --no-print-directory $(LIB) $(BUILD)/progs/soak $(BUILD)/progs/libwpt_plugin.so
	@$(PYTHON) scripts/soak.py --seconds $(SOAK_SECONDS) $(SOAK_ARGS)

# `wallprof record` finds the library as ../lib/libwallprof.so from its own
# directory, and the library the command as ../bin/wallprof from its own,
# so both must stay under the same PREFIX.
install: $(LIB) $(CONVERT)
	install -D -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libwallprof.so
	install -D -m 755 $(CONVERT) $(DESTDIR)$(PREFIX)/bin/wallprof

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/lib/libwallprof.so $(DESTDIR)$(PREFIX)/bin/wallprof

# Lists the files clang-format would change, with the number of places in
# each; `$(CLANG_FORMAT) -i FILE` applies them.
format-check:
	@scripts/install-deps.sh format
	@n=0; for f in $(FORMAT_SRCS); do \
		out=$$($(CLANG_FORMAT) --dry-run -Werror "$$f" 2>&1) && continue; \
		c=$$(printf '%s\n' "$$out" | grep -c 'clang-format-violations'); \
		if [ "$$c" = 0 ]; then printf '%s\n' "$$out" >&2; exit 2; fi; \
		echo "$$f: $$c changes"; n=$$((n + 1)); \
	done; \
	if [ $$n != 0 ]; then \
		echo "format-check: $$n of $(words $(FORMAT_SRCS)) files differ from .clang-format"; exit 1; \
	fi; \
	echo "format-check: $(words $(FORMAT_SRCS)) files match .clang-format"

# The library's and the converter's sources through clang's warnings too
# (syntax only): it sees some that GCC does not (a variable used in its own
# initializer did reach a commit).
CLANG ?= clang
CLANG_SRCS := $(sort $(RUNTIME_SRCS) $(CORE_SRCS) $(CONVERT_SRCS) $(UPLOAD_SRCS))
clang-check:
	@$(CLANG) -fsyntax-only -std=gnu11 $(WARN) -Wno-unknown-attributes -D_GNU_SOURCE \
		$(PKG_CFLAGS) $(CURL_CFLAGS) $(CLANG_SRCS) && \
		echo "clang-check: $(words $(CLANG_SRCS)) files, no warning"

clean:
	rm -rf $(BUILD)

# ---- Rules -----------------------------------------------------------------

# A recipe that fails leaves no half-written target behind.
.DELETE_ON_ERROR:

# Each variant's compile flags, kept in build/obj/VARIANT/flags and rewritten
# (when make reads this file) only when they change: make CFLAGS=-O0, a new
# flag here. Its objects depend on that file, so they are recompiled then,
# and only then.
FLAGS_FILES := $(OBJ)/lib/flags $(OBJ)/test/flags $(OBJ)/asan/flags
shell_quote = '$(subst ','\'',$(1))'
write_flags = mkdir -p $(dir $(1)) && printf '%s\n' $(call shell_quote,$(2)) | cmp -s - $(1) || \
	printf '%s\n' $(call shell_quote,$(2)) > $(1)
ifneq ($(filter-out clean deps uninstall format-check,$(or $(MAKECMDGOALS),all)),)
$(foreach f,$(FLAGS_FILES),$(shell $(call write_flags,$(f),$(VARIANT_CFLAGS_$(notdir $(f:/flags=))))))
endif
$(FLAGS_FILES): ;

# One object per source and variant; -MMD -MP write its header dependencies
# beside it (the .d files included at the end).
$(OBJS_lib): $(OBJ)/lib/%.o: %.c $(OBJ)/lib/flags
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_lib) -MMD -MP -c -o $@ $<

$(OBJS_test): $(OBJ)/test/%.o: %.c $(OBJ)/test/flags
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_test) -MMD -MP -c -o $@ $<

$(OBJS_asan): $(OBJ)/asan/%.o: %.c $(OBJ)/asan/flags
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_asan) -MMD -MP -c -o $@ $<

# The HTML flame graph's page (output/html/: HTML, CSS, JavaScript) is
# embedded into html.o with the assembler's .incbin; the compiler's header
# dependencies do not see it, so each variant's html.o depends on it here.
HTML_PAGE := $(wildcard output/html/*)
$(foreach v,lib test asan,$(OBJ)/$(v)/output/html.o): $(HTML_PAGE)

# The core and parts archives are rebuilt from scratch when the Makefile
# changes (a source moved in or out of CORE_SRCS or RUNTIME_PARTS leaves no
# stale member behind).
$(CORE_LIB): $(call objs,lib,$(CORE_SRCS))
$(CORE_TEST): $(call objs,test,$(CORE_SRCS))
$(CORE_ASAN): $(call objs,asan,$(CORE_SRCS))
$(PARTS_LIB): $(call objs,lib,$(RUNTIME_PARTS))
$(PARTS_TEST): $(call objs,test,$(RUNTIME_PARTS))
$(PARTS_ASAN): $(call objs,asan,$(RUNTIME_PARTS))
$(UPLOAD_LIB): $(call objs,lib,$(UPLOAD_SRCS))
$(UPLOAD_TEST): $(call objs,test,$(UPLOAD_SRCS))
$(UPLOAD_ASAN): $(call objs,asan,$(UPLOAD_SRCS))
$(CORE_LIB) $(CORE_TEST) $(CORE_ASAN) $(PARTS_LIB) $(PARTS_TEST) $(PARTS_ASAN) \
		$(UPLOAD_LIB) $(UPLOAD_TEST) $(UPLOAD_ASAN): Makefile
	@rm -f $@
	$(AR) rcs $@ $(filter %.o,$^)

# -z now: every libc function the library calls is bound at load time, not
# at its first call, which in a signal handler would run the loader's lazy
# binding on the handler's stack (it saves the vector registers there: 2.8
# KiB with AVX-512; too much on a small alternate signal stack).
$(LIB): $(call objs,lib,$(LIB_SRCS)) Makefile
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_lib) -shared -Wl,-z,defs -Wl,-z,now -Wl,--as-needed -o $@ \
		$(filter %.o,$^) $(LIB_LIBS)

$(TEST_LIB): $(call objs,test,$(LIB_SRCS)) Makefile
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_test) -shared -Wl,-z,defs -Wl,-z,now -Wl,--as-needed -o $@ \
		$(filter %.o,$^) $(LIB_LIBS)

# The test library finds the command beside itself, as an installed one.
$(TEST_CONVERT): $(CONVERT)
	@mkdir -p $(@D)
	ln -sf ../wallprof $@

# The wallprof command: record, report, convert, diff; the library starts it
# on every dump (`wallprof --library`) to convert it in a process of its own.
# It loads libcurl only when it uploads (upload/http.c).
$(CONVERT): $(call objs,lib,$(CONVERT_SRCS)) $(UPLOAD_LIB) $(CORE_LIB)
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_lib) -o $@ $^ $(LIBS)

$(UNIT_PLAIN): $(BUILD)/unit/%: $(OBJ)/test/test/unit/%.o $(PARTS_TEST) $(UPLOAD_TEST) $(CORE_TEST)
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_test) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LIBS)

$(UNIT_ASAN): $(BUILD)/asan/%: $(OBJ)/asan/test/unit/%.o $(PARTS_ASAN) $(UPLOAD_ASAN) $(CORE_ASAN)
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_asan) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LIBS)

# The runtime objects of the unit tests that link some (UNIT_RUNTIME_<test>).
$(foreach t,$(UNIT_RUNTIME_TESTS), \
	$(eval $(BUILD)/unit/$(t): $(call objs,test,$(UNIT_RUNTIME_$(t)))) \
	$(eval $(BUILD)/asan/$(t): $(call objs,asan,$(UNIT_RUNTIME_$(t)))))

$(BUILD)/progs/%: test/progs/%.c
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -std=gnu11 -o $@ $< -lm

# A program that calls libunwind itself (test/e2e/unwind_user.py).
$(BUILD)/progs/unwind_user: test/progs/unwind_user.c
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -std=gnu11 -o $@ $< -lunwind -lpthread

# A program whose own library defines mmap (test/e2e/wrappers.py).
$(BUILD)/progs/mmap_next: test/progs/mmap_next.c $(BUILD)/progs/libmmap_next.so
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -std=gnu11 -o $@ $< -L$(BUILD)/progs -lmmap_next \
		-Wl,-rpath,'$$ORIGIN'

$(BUILD)/progs/lib%.so: test/progs/lib%.cc
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CXX) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -fPIC -shared -o $@ $<

# A C program with a C++ library (test/e2e/cancel.py).
$(BUILD)/progs/cancel_guard: test/progs/cancel_guard.c $(BUILD)/progs/libcancel_guard.so
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -std=gnu11 -o $@ $< -L$(BUILD)/progs -lcancel_guard \
		-Wl,-rpath,'$$ORIGIN'

$(BUILD)/progs/lib%.so: test/progs/lib%.c
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -std=gnu11 -fPIC -shared -o $@ $<

$(BUILD)/progs/%: test/progs/%.cc
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CXX) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -o $@ $<

# A statically linked test program (the launcher's static-binary detection);
# this explicit rule wins over the pattern rule for build/progs/%.
$(BUILD)/progs/launcher_static: test/progs/launcher_static.c
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -std=gnu11 -static -o $@ $<

# blocking.c a second time with _FORTIFY_SOURCE=2 (tests eintr_battery_fortify*):
# its poll, ppoll, read, recv and recvfrom calls become glibc's __*_chk
# variants. The plain build must not use them, whatever the compiler's default.
$(BUILD)/progs/blocking: PROG_CFLAGS += -U_FORTIFY_SOURCE
$(BUILD)/progs/blocking_fortify: test/progs/blocking.c
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(PROG_CFLAGS) $(EXE_DEPFLAGS) -std=gnu11 -D_FORTIFY_SOURCE=2 -o $@ $< -lm

$(BUILD)/bench/%: test/bench/%.c
	@mkdir -p $(@D) $(dir $(exe_dep))
	$(CC) $(BENCH_CFLAGS) $(EXE_DEPFLAGS) -o $@ $<

# Benchmark programs that link parts of the library (explicit rules win over
# the pattern rule above): handler links the unwinder alone, dump the parts
# (ring, modules, raw dump) and core (symbolize, output) archives like the
# unit tests.
$(BUILD)/bench/handler: test/bench/handler.c unwind/unwind.c unwind/unwind.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_CFLAGS) -D_GNU_SOURCE $(PKG_CFLAGS) -o $@ $< unwind/unwind.c -lunwind

$(BUILD)/bench/dump: $(OBJ)/lib/test/bench/dump.o $(PARTS_LIB) $(CORE_LIB)
	@mkdir -p $(@D)
	$(CC) $(VARIANT_CFLAGS_lib) -o $@ $^ $(LIBS)

# Header dependencies written by the compiler (missing ones are not built yet).
-include $(OBJS_lib:.o=.d) $(OBJS_test:.o=.d) $(OBJS_asan:.o=.d) \
	$(patsubst $(BUILD)/%,$(OBJ)/exe/%.d,$(PROGS) $(filter-out %/handler %/dump,$(BENCH_PROGS)))
