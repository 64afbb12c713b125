"""L-short-threads: build/bench/shortthreads: 20,000 threads (--quick
5,000), two at a time, each spinning WORK_MS = 0.05 ms of its own CPU time in
short_work(), under the preload at 1000 Hz. The share of their CPU time the
profile attributes to short_work: on-CPU samples with short_work on the
stack, divided by the rate, over the CPU time the program measured. Also
how many distinct threads the profile has samples of. Issue 14's target:
>= 90 % (threads found from their first tick). A thread created through
pthread_create is known from its first instruction; what it loses is the
time between the sampler's tick and the signal landing, which a thread of
0.05 ms often does not outlive.
"""

import json
import os

from .common import Benchmark, RunError, run_tool

THREADS, QUICK_THREADS = 20000, 5000
WORK_MS = 0.05
HZ_SHORT = 1000


def bench_l(table, tmpdir, quick):
    n = QUICK_THREADS if quick else THREADS
    r = run_tool(["shortthreads", n, WORK_MS], "wallprof", tmpdir, "cpu_s",
                 extra_env={"WALLPROF_HZ": str(HZ_SHORT)}, keep_profile=True)
    try:
        with open(r["profile"]) as f:
            prof = json.load(f)
    finally:
        os.unlink(r["profile"])
    frames = prof["profile"]["frames"]
    stacks = prof["profile"]["stacks"]
    in_work = set()
    for i, st in enumerate(stacks):
        if any(frames[k].get("function") == "short_work" for k in st):
            in_work.add(i)
    hits = [s for s in prof["profile"]["samples"] if s["stack_id"] in in_work and s.get("on_cpu")]
    cpu_s = float(r["cpu_s"])
    if cpu_s <= 0:
        raise RunError("shortthreads measured no CPU time")
    share = len(hits) / float(HZ_SHORT) / cpu_s
    threads = len({s["thread_id"] for s in hits})
    table.check("L: %d short threads (%.2f ms of CPU each), share of their CPU in the profile"
                % (n, WORK_MS), "%.0f %% (%d samples for %.2f s of CPU; %d threads seen)" % (
                    100 * share, len(hits), cpu_s, threads), ">= 90 %", share >= 0.90)


BENCHMARKS = [Benchmark("L-short-threads", bench_l, ("shortthreads",))]
