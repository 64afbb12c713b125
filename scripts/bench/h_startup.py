"""H-startup: build/bench/nop (int main(){return 0;}) started 200 times each
way, alternating blocks of 20, WALLPROF_LOG=quiet: added milliseconds per
start, median of block pairs (target <= 2).
"""

import os

from .common import LIB, Benchmark, clean_env, med, pair_order, prog, spread, timed_spawns

STARTS, START_BLOCK = 200, 20


def bench_h(table, tmpdir, quick):
    nop = prog("nop")
    envs = {"none": clean_env()}
    envs["wallprof"] = dict(clean_env(), LD_PRELOAD=LIB, WALLPROF_LOG="quiet",
                            WALLPROF_OUTPUT=os.path.join(tmpdir, "s.%p.json"))

    def block(t):
        return timed_spawns(nop, [nop], envs[t], START_BLOCK)

    block("wallprof"), block("none")  # warm-up
    diffs, base = [], []
    for i in range(STARTS // START_BLOCK):
        r = {t: block(t) for t in pair_order(i, "wallprof", "none")}
        diffs.append(r["wallprof"] - r["none"])
        base.append(r["none"])
    d = med(diffs)
    table.check("H: start-up, nop started %d x each way" % STARTS,
                "+%.2f ms per start, median of %d block pairs (%s); %.2f ms without" % (
                    d, len(diffs), spread(diffs, "%.2f"), med(base)),
                "<= 2 ms", d <= 2.0)


BENCHMARKS = [Benchmark("H-startup", bench_h, ("nop",))]
