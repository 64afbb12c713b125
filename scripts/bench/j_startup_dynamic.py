"""J-startup-dynamic: /bin/true, a trivial dynamically linked program,
started 200 times each way one run at a time, bare and under
LD_PRELOAD=build/libwallprof.so (WALLPROF_LOG=quiet), the two runs of a pair
side by side and their order flipped every pair. Reports the median over
pairs of the added milliseconds (target <= 2 ms, as H) and of the ratio
with/without. H times blocks of 20 starts of build/bench/nop; this one times
single starts of a program of the system. (build/progs/demo is not used:
it takes no argument and runs for about 3 s.)
"""

import os

from .common import (LIB, Benchmark, RunError, clean_env, iqr, log, med, pair_order,
                     timed_spawns)

PROGRAM = "/bin/true"
PAIRS = 200       # also with --quick: 400 starts take about a second
WARMUP = 10


def bench_j(table, tmpdir, quick):
    if not os.access(PROGRAM, os.X_OK):
        raise RunError("%s is missing" % PROGRAM)
    envs = {"none": clean_env(),
            "wallprof": dict(clean_env(), LD_PRELOAD=LIB, WALLPROF_LOG="quiet",
                             WALLPROF_OUTPUT=os.path.join(tmpdir, "j.%p.json"))}
    for t in envs:  # warm-up: page cache, the library's first load
        timed_spawns(PROGRAM, [PROGRAM], envs[t], WARMUP)
    ms = {"none": [], "wallprof": []}
    for i in range(PAIRS):
        for t in pair_order(i, "wallprof", "none"):
            ms[t].append(timed_spawns(PROGRAM, [PROGRAM], envs[t], 1))
    for f in os.listdir(tmpdir):
        if f.startswith("j.") and f.endswith(".json"):
            os.unlink(os.path.join(tmpdir, f))
    added = [w - b for w, b in zip(ms["wallprof"], ms["none"])]
    ratio = [w / b for w, b in zip(ms["wallprof"], ms["none"])]
    d, r = med(added), med(ratio)
    log("J: %s +%.2f ms per start, %.2fx (%.2f vs %.2f ms)"
        % (PROGRAM, d, r, med(ms["wallprof"]), med(ms["none"])))
    table.check("J: start-up, %s, %d alternating runs each way" % (PROGRAM, PAIRS),
                "+%.2f ms per run, median of %d pairs (IQR %s); %.2fx (IQR %s); %.2f ms without"
                % (d, PAIRS, iqr(added, "%.2f"), r, iqr(ratio, "%.2f"), med(ms["none"])),
                "<= 2 ms", d <= 2.0)


BENCHMARKS = [Benchmark("J-startup-dynamic", bench_j)]
