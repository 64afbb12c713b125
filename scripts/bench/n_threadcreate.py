"""N-thread-create: build/bench/threadcreate: 20,000 threads, two at a time,
each returning at once, created and joined; the program times that loop
itself (CLOCK_MONOTONIC, so start-up and the exit dump are not in it). Pairs
of runs bare and under the preload (WALLPROF_HZ=101, the default), the
order flipped every pair; 9 pairs (--quick 5), about 20 s. The figure is
the median over pairs of the loop's seconds with over without, with the
spread, and the microseconds each thread creation adds: the median of the
pairs' differences over 20,000. Issue 14 (point 3) asks for thread creation's
cost before and after threads are known from their start: each
pthread_create goes through the library's wrapper (a start record from a
fixed pool, the new thread's slot claimed at its first instruction, its end
reported by a key destructor), and the sampler looks at the threads that
ran since the last tick. Target: ratio <= 1.10. A bare creation+join costs
about 30 us on the 2-vCPU machine of docs/PERFORMANCE.md, so 10 % is about
3 us per thread, ample for that bookkeeping; the first step of issue 14
measured 0.63 s bare and 0.68 s preloaded (1.08x) by hand, within the
noise of three runs, so the target holds that figure rather than
tightening it before a quiet run shows the real cost.
"""

from .common import Benchmark, RunError, log, med, pair_order, run_tool, spread

THREADS, PARALLEL = 20000, 2
PAIRS, QUICK_PAIRS = 9, 5
RATIO_TARGET = 1.10


def bench_n(table, tmpdir, quick):
    pairs = QUICK_PAIRS if quick else PAIRS
    args = ["threadcreate", THREADS, PARALLEL]

    def seconds(tool):
        r = run_tool(args, tool, tmpdir, "seconds")
        if int(r.get("threads", 0)) != THREADS or r["seconds"] <= 0:
            raise RunError("threadcreate [%s]: unexpected line %r" % (tool, r["stdout"].strip()))
        return r["seconds"]

    seconds("none"), seconds("wallprof")  # warm-up, not measured
    ratio, added_us, base = [], [], []
    for i in range(pairs):
        r = {t: seconds(t) for t in pair_order(i, "wallprof", "none")}
        ratio.append(r["wallprof"] / r["none"])
        added_us.append((r["wallprof"] - r["none"]) / THREADS * 1e6)
        base.append(r["none"])
        log("N pair %d/%d: %.3f s with, %.3f s without: %.3fx"
            % (i + 1, pairs, r["wallprof"], r["none"], ratio[-1]))
    q = med(ratio)
    table.check("N: thread creation, %d threads %d at a time, create+join loop wall ratio"
                % (THREADS, PARALLEL),
                "%.3fx median of %d pairs (%s); %+.2f us per thread (%s); %.3f s without (%s)" % (
                    q, pairs, spread(ratio), med(added_us), spread(added_us, "%+.2f"),
                    med(base), spread(base)),
                "<= %.2fx" % RATIO_TARGET, q <= RATIO_TARGET)


BENCHMARKS = [Benchmark("N-thread-create", bench_n, ("threadcreate",))]
