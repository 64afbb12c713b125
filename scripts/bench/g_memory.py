"""G-memory: build/bench/mem: N threads in pthread_cond_wait + 1 busy for 3 s
(--quick 1.5 s), VmRSS near the end, with minus without (N = 8, 64; 5
pairs, the two runs of a pair at the same time). Then the peak RSS added,
exit included (ru_maxrss from wait4, through `mem --reap` as in M-window),
of a 2-thread program (main + 1 busy) and of 1,000 blocked threads + 1 busy,
3 pairs each, the median: issue 14's targets, <= 4 MiB and <= 12 MiB. Then
the ring's mapping for
a few WALLPROF_RING_SECONDS x WALLPROF_HZ settings, as the library reports
it: the "ring_bytes" and "ring_samples" of the profile's "wallprof" section
(output/sentry.c; the sizing itself is wp_tick_alloc_ring in
preload/tick.c, not repeated here).
"""

import os
import subprocess

from .common import (LIB, RUN_TIMEOUT, Benchmark, RunError, clean_env, med, parse_line, prog,
                     run_tool, spread, wallprof_section)
from .m_window import run_pair

MEM_THREADS = (8, 64)
MEM_PAIRS = 5
MEM_SECONDS, QUICK_MEM_SECONDS = 3.0, 1.5
RING_CONFIGS = ((30, 101), (60, 101), (30, 1000), (600, 1000))
PEAK_CASES = ((0, 4), (1000, 12))  # blocked threads, target in MiB
PEAK_PAIRS = 3


def mib(b):
    return b / 1048576.0


def bench_g(table, tmpdir, quick):
    secs = QUICK_MEM_SECONDS if quick else MEM_SECONDS
    for n in MEM_THREADS:
        added, base = [], []
        for i in range(MEM_PAIRS):
            # RSS does not depend on timing: the two runs of a pair go side
            # by side at the same moment.
            res = {}
            with_env = clean_env()
            with_env.update(LD_PRELOAD=LIB, WALLPROF_LOG="quiet",
                            WALLPROF_OUTPUT=os.path.join(tmpdir, "m.%p.json"))
            procs = {t: subprocess.Popen([prog("mem"), str(n), str(secs)], cwd=tmpdir,
                                         env=with_env if t == "wallprof" else clean_env(),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for t in ("wallprof", "none")}
            for t, pr in procs.items():
                o, e = pr.communicate(timeout=RUN_TIMEOUT)
                if pr.returncode != 0:
                    raise RunError("mem %d [%s] exited with status %d: %s" % (n, t, pr.returncode, e[-300:]))
                res[t] = parse_line(o, "rss_kb", "mem")
            added.append(res["wallprof"]["rss_kb"] - res["none"]["rss_kb"])
            base.append(res["none"]["rss_kb"])
            for f in os.listdir(tmpdir):
                if f.startswith("m.") and f.endswith(".json"):
                    os.unlink(os.path.join(tmpdir, f))
        a = med(added)
        table.add("G: RSS added, %d threads in cond_wait + 1 busy, %.1f s" % (n, secs),
                  "%.1f MiB median of %d pairs (%s); %.1f MiB without" % (
                      a / 1024, MEM_PAIRS, spread([x / 1024 for x in added], "%.1f"), med(base) / 1024),
                  "report", "info")
    # Peak RSS, the exit's dump included.
    for n, target in PEAK_CASES:
        added = []
        for _ in range(PEAK_PAIRS):
            res = run_pair(n, secs, tmpdir, busy=1)
            added.append((res["wallprof"][2] - res["none"][2]) / 1024.0)
            for f in os.listdir(tmpdir):
                if f.startswith("w."):
                    os.unlink(os.path.join(tmpdir, f))
        a = med(added)
        what = "a 2-thread program (main + 1 busy)" if n == 0 else \
            "%d blocked threads + 1 busy" % n
        table.check("G: peak RSS added, exit included, %s, %.1f s" % (what, secs),
                    "%.1f MiB median of %d pairs (%s; ru_maxrss, side by side)"
                    % (a, PEAK_PAIRS, spread(added, "%.1f")),
                    "<= %d MiB" % target, a <= target)
    # Ring size: what the library reserves for each setting, from the profile.
    for secs, hz in RING_CONFIGS:
        env = {"WALLPROF_RING_SECONDS": str(secs), "WALLPROF_HZ": str(hz)}
        r = run_tool(["mem", 1, 0.3], "wallprof", tmpdir, "rss_kb", extra_env=env, keep_profile=True)
        try:
            wp = wallprof_section(r["profile"])
        finally:
            os.unlink(r["profile"])
        if not wp.get("ring_bytes"):
            raise RunError("ring %d s x %d Hz: the profile's wallprof section has no ring_bytes"
                           % (secs, hz))
        table.add("G: ring mapping, RING_SECONDS=%d x HZ=%d" % (secs, hz),
                  "%.1f MiB, %d records (profile)" % (mib(int(wp["ring_bytes"])),
                                                      int(wp.get("ring_samples", 0))),
                  "-", "info")
    table.notes.append(
        "G: ring mapping and capacity as the library reports them (wallprof.ring_bytes, "
        "ring_samples; held under WALLPROF_RING_MB). Also mapped: per tracked-thread slots "
        "(WALLPROF_MAX_THREADS of them) and a tid map of 4 B x pid_max; all anonymous, only "
        "touched pages count in RSS")


BENCHMARKS = [Benchmark("G-memory", bench_g, ("mem",))]
