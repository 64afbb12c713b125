#!/usr/bin/env python3
"""libwallprof benchmarks (run by `make bench`).

Usage: scripts/bench.py [--quick] [--budget SECONDS] [-k NAME]... [--list] [--strict] [-v]

Prints the machine, then ONE table: benchmark, measured figure, target,
PASS/MISS (info: a figure without a target; skip: a tool is missing).
Machines are noisy, so every figure is a ratio or a median of runs made side
by side in this invocation (with/without the preload alternated, the order
flipped every pair), never an absolute time compared across runs; the few
absolute targets (E, F: microseconds in a handler, seconds of a dump) are
medians within this invocation.

The benchmarks live in scripts/bench/, one module each (its docstring says
what it measures and its target), with the helpers they share in
scripts/bench/common.py. Select with -k, a case-insensitive substring of the
name (--list):

  A-condvar-overhead      1 busy + 1000 blocked threads: slowdown, profiler CPU
  B-signals-blocked       signals/s and samples/s, 1 busy + 10/100/1000 blocked
  B-signals-running       the same, 10 busy threads
  C-cpubound-vs-tools     CPU-bound slowdown next to perf and gperftools
  D-mixed-overhead        64 threads, busy and waiting: slowdown, waiters' ops/s
  E-handler-cost          microseconds per sample in the handler, by depth
  F-dump-ring             seconds and memory to dump a full ring
  F-symbolize-bigcxx      symbolizing a large C++ program
  G-memory                RSS added; the ring's size as the library reports it
  H-startup               ms added per start of a nop program (blocks of 20)
  I-fidelity              shares of time per function and rate per thread
  J-startup-dynamic       ms added per start of /bin/true (single runs)
  K-make-follow-children  `make -j2` of the project with children profiled
  L-short-threads         share of 20,000 short threads' CPU time in the profile
  M-window                seconds of history kept with 1,000 / 10,000 blocked threads
  N-thread-create         20,000 threads created two at a time: wall ratio, us added each
  O-sampler-cost          sampler CPU per running thread per tick, 1/4/16 busy threads

Tools the benchmarks compare against (perf, gperftools) and git for K come
from `scripts/install-deps.sh bench`, which `make bench` runs first; no
benchmark installs anything: a missing tool skips its row, and a note gives
the install command.

--quick shortens every benchmark (fewer A pairs, shorter runs; never fewer
than 5 side-by-side rounds in C, D). --budget (default 540 s): once 60 % of
it is used, the benchmarks not yet run use their quick variant and a note says
so, so `make bench` stays under 10 minutes on a slow or busy machine. The
notes also give each benchmark's seconds and the CPUs that other processes
used meanwhile (from /proc/stat, less this script's own and its children's).

Exit status: 0 when every benchmark ran (MISS included), 1 with --strict and a
MISS, 2 when a run failed (crash, no profile, bad output).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

# scripts/ is on sys.path (this script's directory): `bench` is the package
# scripts/bench/, not this file. No __pycache__ left in the tree.
sys.dont_write_bytecode = True
from bench import (a_condvar, b_signals, c_tools, common, d_mixed, e_handler, f_bigcxx, f_dump,
                   g_memory, h_startup, i_fidelity, j_startup_dynamic, k_make, l_short, m_window,
                   n_threadcreate, o_sampler)
from bench.common import (HZ, LIB, ROOT, RunError, Table, cpu_snapshot, foreign_cpus, load1, log,
                          machine_lines, prog, usable_cpus)

MODULES = (a_condvar, b_signals, c_tools, d_mixed, e_handler, f_dump, f_bigcxx, g_memory,
           h_startup, i_fidelity, j_startup_dynamic, k_make, l_short, m_window, n_threadcreate,
           o_sampler)
BENCHMARKS = [b for m in MODULES for b in m.BENCHMARKS]


def main():
    ap = argparse.ArgumentParser(description="libwallprof benchmarks")
    ap.add_argument("--budget", type=int, default=540, metavar="SECONDS",
                    help="once 60%% of this is used, the remaining benchmarks run their quick "
                    "variant (a note says which); 0: never (default %(default)s, so that `make "
                    "bench` stays under 10 minutes with the build)")
    ap.add_argument("--quick", action="store_true",
                    help="shorter variants: %d A pairs instead of %d, %.1f s B runs instead of "
                    "%.1f s, shorter C/D/E/G/I runs, %d K pair instead of %d" % (
                        a_condvar.QUICK_PAIRS, a_condvar.PAIRS, b_signals.QUICK_SPIN_S,
                        b_signals.SPIN_S, k_make.QUICK_PAIRS, k_make.PAIRS))
    ap.add_argument("-k", action="append", default=[], metavar="NAME",
                    help="only benchmarks whose name contains NAME (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("-v", action="store_true", help="log every run's output")
    a = ap.parse_args()
    common.VERBOSE = a.v

    selected = [b for b in BENCHMARKS
                if not a.k or any(k.lower() in b.name.lower() for k in a.k)]
    if a.list:
        for b in BENCHMARKS:
            print(b.name)
        return 0
    if not selected:
        print("bench: no benchmark matches %s; see --list" % " ".join(a.k), file=sys.stderr)
        return 2
    need = [LIB] + sorted({prog(p) for b in selected for p in b.needs})
    for f in need:
        if not os.path.exists(f):
            print("bench: %s is missing; run 'make bench'" % os.path.relpath(f, ROOT), file=sys.stderr)
            return 2

    header = machine_lines()
    load0 = load1()
    table = Table()
    t0 = time.monotonic()
    tmpdir = tempfile.mkdtemp(prefix="wallprof-bench.")
    failed = []
    per_bench = []
    went_quick = []
    try:
        for b in selected:
            n = b.name
            log("running %s%s" % (n, " (quick)" if a.quick else ""))
            c0 = cpu_snapshot()
            quick = a.quick
            if not quick and a.budget and time.monotonic() - t0 > 0.6 * a.budget:
                quick = True
                went_quick.append(n)
                log("%s: %.0f s used of the %d s budget; running the quick variant"
                    % (n, time.monotonic() - t0, a.budget))
            try:
                b.run(table, tmpdir, quick)
            except RunError as e:
                failed.append(n)
                table.add(n, "run failed", "-", "ERROR")
                table.notes.append("%s: %s" % (n, e))
            c1 = cpu_snapshot()
            per_bench.append((n, c1[0] - c0[0], foreign_cpus(c0, c1)))
            log("%s took %.0f s; other processes used %.2f CPUs meanwhile" % per_bench[-1])
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    total = time.monotonic() - t0
    if went_quick:
        table.notes.append("ran in the quick variant to stay within --budget %d s (60 %% of it was "
                           "used before they started; the machine is slow or busy): %s"
                           % (a.budget, ", ".join(went_quick)))
    if per_bench:
        table.notes.append(
            "seconds per benchmark, and the CPUs other processes on the machine used meanwhile "
            "(of %d; not ours nor our children's): %s" % (usable_cpus(), ", ".join(
                "%s %.0f s/%.2f" % (n, s, c) for n, s, c in per_bench)))
    load_end = load1()
    if max(load0, load_end) > usable_cpus():
        table.notes.append("the machine was busy: 1-minute load average %.1f at the start, %.1f at the "
                           "end, for %d CPUs; expect noisy figures" % (load0, load_end, usable_cpus()))

    print("\n".join(header))
    print("settings: WALLPROF_HZ=%d, %s; benchmarks: %s"
          % (HZ, "quick" if a.quick else "full", ", ".join(b.name for b in selected)))
    print()
    print("\n".join(table.render()))
    for n in table.notes:
        print("note: " + n)
    print()
    print("bench: %d rows, %d MISS, %d failed, %.0f s" % (len(table.rows), table.misses(), len(failed), total))
    if failed:
        return 2
    return 1 if a.strict and table.misses() else 0


if __name__ == "__main__":
    sys.exit(main())
