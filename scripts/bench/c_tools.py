"""C-cpubound-vs-tools: build/bench/cpubound: 2 threads on the 2 CPUs, each a
fixed number of iterations (calibrated to 2.5 s of CPU; --quick 1.5 s).
Rounds of four runs side by side, the order rotated every round: no
profiler, libwallprof (preload, 101 Hz), perf record -F 101 -g, gperftools
(LD_PRELOAD libprofiler.so.0, CPUPROFILE_FREQUENCY=101); 7 rounds (--quick
5). Each tool's figure is the median over rounds of its busy wall time over
the same round's run without a profiler. Target: libwallprof <= 1.01, and <=
each other tool. perf (linux-perf) and gperftools (libgoogle-perftools4) come
from `scripts/install-deps.sh bench` (run by `make bench`); a missing one is
skipped with a note giving the install command, and perf is skipped if
`perf record` fails.
"""

import os
import shutil
import subprocess

from .common import (GPERF_LIB, HZ, Benchmark, _state, install_hint, log, med, ns_per_iter,
                     prog, rotation, run_tool, spread)

CPU_TARGET_S, QUICK_CPU_TARGET_S = 2.5, 1.5     # fixed work per thread (2 threads)
CPU_ROUNDS, QUICK_CPU_ROUNDS = 7, 5


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
            table.check("%s: %s wall ratio" % (label, names[t]), fig, "<= 1.010x", m[t] <= 1.01)
            table.add("%s: libwallprof's CPU" % label,
                      "sampler thread %s of a core; busy threads' own CPU %.3fx" % (
                          "%.1f %% (%s)" % (med(samp), spread(samp, "%.1f")) if samp else "n/a",
                          med(own[t])), "-", "info")
        else:
            table.add("%s: %s wall ratio" % (label, names[t]), fig, "-", "info")
    others = [t for t in ("perf", "gperf") if t in m]
    if others:
        ok = all(m["wallprof"] <= m[t] for t in others)
        table.check("%s: libwallprof vs %s" % (label, " / ".join(others)),
                    "%.3fx vs %s" % (m["wallprof"], " / ".join("%.3fx" % m[t] for t in others)),
                    "libwallprof <= each", ok)
        if not ok:
            noise = (max(wall["wallprof"]) - min(wall["wallprof"])) / 2
            gap = max(m["wallprof"] - m[t] for t in others)
            if gap <= noise:
                table.notes.append("C: libwallprof's median is above another tool's by %.3f, less "
                                   "than half the spread of its own rounds (%.3f): a tie within "
                                   "this machine's noise" % (gap, noise))
        paired = ", ".join("wallprof/%s per round %.3f (%s)" % (
            t, med([w / o for w, o in zip(wall["wallprof"], wall[t])]),
            spread([w / o for w, o in zip(wall["wallprof"], wall[t])])) for t in others)
        table.notes.append("C: %s. CPU: user+system time of the whole process tree (the tool's "
                           "own process, start-up and exit dump included) over the same without a "
                           "profiler, median over rounds; unlike wall time it does not grow while "
                           "other processes hold the CPUs. process wall: the whole run, start to "
                           "exit, as seen from outside. busy threads' own CPU: their CLOCK_THREAD_CPUTIME_ID "
                           "(signal handlers included) over the same without" % paired)
    if "gperf" in m:
        table.notes.append("C: gperftools' timer is ITIMER_PROF (process CPU time), so with 2 busy "
                           "threads it takes about 2 x %d samples per wall second" % HZ)


BENCHMARKS = [Benchmark("C-cpubound-vs-tools", bench_c, ("cpubound", "nop"))]
