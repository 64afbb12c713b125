"""C-cpubound-vs-tools: build/bench/cpubound: 2 threads on the 2 CPUs, each a
fixed number of iterations (calibrated to 2.5 s of CPU; --quick 1.5 s).
Rounds of four runs side by side, the order rotated every round: no
profiler, libwallprof (preload, 101 Hz), perf record -F 101 -g, gperftools
(LD_PRELOAD libprofiler.so.0, CPUPROFILE_FREQUENCY=101); 15 rounds (--quick
7), about 3 minutes (--quick 1). Each tool's wall ratio is its busy wall
time over the same round's run without a profiler, median over rounds.
Against each other tool, the figure is the per-round difference of ratios
(libwallprof's ratio minus the tool's, in the same round), its median over
rounds and its interquartile range (and min..max): a drift of the
machine's speed between rounds then weighs on both sides alike. The
difference of the two tools' medians is printed beside it; the target is
on the per-round figure.
Targets: libwallprof <= 1.005 (issue 14), and a median difference <= 0 against each
other tool (libwallprof cheaper or equal); when the interquartile range
holds 0 a note calls it a tie within the machine's noise. perf (linux-perf)
and gperftools (libgoogle-perftools4) come from `scripts/install-deps.sh
bench` (run by `make bench`); a missing one is skipped with a note giving
the install command, and perf is skipped if `perf record` fails.
"""

import os
import shutil
import statistics
import subprocess

from .common import (GPERF_LIB, HZ, Benchmark, _state, install_hint, iqr, log, med, ns_per_iter,
                     prog, rotation, run_tool, spread)

CPU_TARGET_S, QUICK_CPU_TARGET_S = 2.5, 1.5     # fixed work per thread (2 threads)
CPU_ROUNDS, QUICK_CPU_ROUNDS = 15, 7


def check_perf(tmpdir):
    """None when `perf record -F HZ -g` works here, else why not."""
    if "perf" in _state:
        return _state["perf"]
    why = None
    if not shutil.which("perf"):
        why = "perf " + install_hint("linux-perf")
    else:
        out = os.path.join(tmpdir, "perf-check.data")
        try:
            p = subprocess.run(["perf", "record", "-q", "-F", str(HZ), "-g", "-o", out, "--",
                                prog("nop")], capture_output=True, text=True, timeout=60)
            if p.returncode != 0 or not os.path.exists(out):
                why = "perf record does not work on this machine: %s" % p.stderr.strip()[-200:]
        except (OSError, subprocess.SubprocessError) as e:
            why = "perf record does not work on this machine: %s" % e
        if os.path.exists(out):
            os.unlink(out)
    _state["perf"] = why
    return why


def check_gperf():
    if "gperf" not in _state:
        _state["gperf"] = None if os.path.exists(GPERF_LIB) else \
            "%s %s" % (GPERF_LIB, install_hint("libgoogle-perftools4"))
    return _state["gperf"]


def bench_c(table, tmpdir, quick):
    rounds = QUICK_CPU_ROUNDS if quick else CPU_ROUNDS
    per_thread_s = QUICK_CPU_TARGET_S if quick else CPU_TARGET_S
    iters = int(per_thread_s * 1e9 / ns_per_iter(tmpdir))
    tools = ["none", "wallprof"]
    skipped = {}
    for t, why in (("perf", check_perf(tmpdir)), ("gperf", check_gperf())):
        if why:
            skipped[t] = why
            table.notes.append("C: %s skipped: %s" % (t, why))
        else:
            tools.append(t)
    label = "C: cpubound 2 thr x %.1f s CPU" % per_thread_s
    # Warm-up, not measured: page cache, first loads of the tools.
    for t in tools:
        run_tool(["cpubound", iters // 20, 2], t, tmpdir, "busy_wall_s")
    wall = {t: [] for t in tools}
    proc = {t: [] for t in tools}
    cpu = {t: [] for t in tools}
    own = {t: [] for t in tools}  # the busy threads' own CPU time, over the same without
    samp = []
    for r in range(rounds):
        order = rotation(tools, r)
        res = {t: run_tool(["cpubound", iters, 2], t, tmpdir, "busy_wall_s") for t in order}
        for t in tools:
            cpu[t].append(res[t]["tree_cpu_s"] / res["none"]["tree_cpu_s"])
            own[t].append(res[t]["busy_cpu_s"] / res["none"]["busy_cpu_s"])
            wall[t].append(res[t]["busy_wall_s"] / res["none"]["busy_wall_s"])
            proc[t].append(res[t]["process_s"] / res["none"]["process_s"])
        if isinstance(res["wallprof"].get("sampler_cpu_s"), float):
            samp.append(100.0 * res["wallprof"]["sampler_cpu_s"] / res["wallprof"]["busy_wall_s"])
        log("C round %d/%d (%s): %s; baseline %.2f s" % (
            r + 1, rounds, " ".join(order),
            " ".join("%s %.3f" % (t, wall[t][-1]) for t in tools if t != "none"),
            res["none"]["busy_wall_s"]))
    names = {"wallprof": "libwallprof (preload, %d Hz)" % HZ,
             "perf": "perf record -F %d -g" % HZ,
             "gperf": "gperftools CPUPROFILE_FREQUENCY=%d" % HZ}
    m = {t: med(wall[t]) for t in tools if t != "none"}
    for t in ("wallprof", "perf", "gperf"):
        if t in skipped:
            table.add("%s: %s wall ratio" % (label, names[t]), "skipped (see note)", "-", "skip")
            continue
        fig = "%.3fx median of %d rounds (%s); CPU %.3fx; process wall %.3fx" % (
            m[t], rounds, spread(wall[t]), med(cpu[t]), med(proc[t]))
        if t == "wallprof":
            table.check("%s: %s wall ratio" % (label, names[t]), fig, "<= 1.005x", m[t] <= 1.005)
            table.add("%s: libwallprof's CPU" % label,
                      "sampler thread %s of a core; busy threads' own CPU %.3fx" % (
                          "%.1f %% (%s)" % (med(samp), spread(samp, "%.1f")) if samp else "n/a",
                          med(own[t])), "-", "info")
        else:
            table.add("%s: %s wall ratio" % (label, names[t]), fig, "-", "info")
    others = [t for t in ("perf", "gperf") if t in m]
    for t in others:
        # Per round: libwallprof's ratio minus the tool's, both over the same
        # round's run without a profiler (the extra busy wall time, as a
        # fraction of the bare run's, that libwallprof costs beyond the tool).
        diff = [w - o for w, o in zip(wall["wallprof"], wall[t])]
        d = med(diff)
        q = statistics.quantiles(diff, n=4)
        short = names[t].split(" ")[0]
        table.check("%s: libwallprof minus %s, wall ratio per round" % (label, short),
                    "%+.3f median of %d rounds (IQR %s; min..max %s); difference of the "
                    "medians %+.3f" % (d, rounds, iqr(diff, "%+.3f"), spread(diff, "%+.3f"),
                                       m["wallprof"] - m[t]),
                    "<= 0 (libwallprof cheaper or equal)", d <= 0)
        if q[0] <= 0 <= q[2]:
            table.notes.append(
                "C: libwallprof minus %s: the interquartile range of the per-round differences "
                "(%s) holds 0, so the two are tied within this machine's noise whichever side "
                "the median (%+.3f) falls on; compare several runs before reading much into "
                "this row's %s" % (short, iqr(diff, "%+.3f"), d, "PASS" if d <= 0 else "MISS"))
    if others:
        table.notes.append("C: libwallprof minus a tool: in each round, libwallprof's busy wall ratio "
                           "minus the tool's (both over that round's run without a profiler); the "
                           "median over rounds, IQR the first and third quartiles, min..max all "
                           "rounds. CPU: user+system time of the whole process tree (the tool's "
                           "own process, start-up and exit dump included) over the same without a "
                           "profiler, median over rounds; unlike wall time it does not grow while "
                           "other processes hold the CPUs. process wall: the whole run, start to "
                           "exit, as seen from outside. busy threads' own CPU: their CLOCK_THREAD_CPUTIME_ID "
                           "(signal handlers included) over the same without")
    if "gperf" in m:
        table.notes.append("C: gperftools' timer is ITIMER_PROF (process CPU time), so with 2 busy "
                           "threads it takes about 2 x %d samples per wall second" % HZ)


BENCHMARKS = [Benchmark("C-cpubound-vs-tools", bench_c, ("cpubound", "nop"))]
