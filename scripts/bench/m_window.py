"""M-window: build/bench/mem: N threads blocked in pthread_cond_wait plus
4 busy ones, for the ring's window + 3 s (N = 1,000 and 10,000; --quick:
1,000 only), under the preload with the defaults (WALLPROF_RING_SECONDS=30,
WALLPROF_RING_MB=64). How many seconds of history the exit profile holds
(its last sample's time minus its first's), against the window asked for,
and the RSS added (the same program bare, run side by side). Issue 14's
targets: >= 29 s of a 30 s window with 10,000 blocked threads, RSS added
<= 64 MiB. Today the ring holds one entry per thread per tick, idle ones
included, so the window shrinks as threads are added.
"""

import json
import os
import subprocess

from .common import (LIB, RUN_TIMEOUT, Benchmark, RunError, clean_env, parse_line, prog,
                     written_profile)

SIZES, QUICK_SIZES = (1000, 10000), (1000,)
BUSY = 4
WINDOW_S = 30


def history_s(path):
    with open(path) as f:
        prof = json.load(f)
    ts = [int(s["elapsed_since_start_ns"]) for s in prof["profile"]["samples"]]
    return (max(ts) - min(ts)) / 1e9 if ts else 0.0, prof.get("wallprof", {})


def bench_m(table, tmpdir, quick):
    secs = WINDOW_S + 3
    for n in (QUICK_SIZES if quick else SIZES):
        env_with = clean_env()
        env_with.update(LD_PRELOAD=LIB, WALLPROF_LOG="info",
                        WALLPROF_OUTPUT=os.path.join(tmpdir, "w.%p.json"))
        cmd = [prog("mem"), str(n), str(secs), str(BUSY)]
        procs = {t: subprocess.Popen(cmd, cwd=tmpdir, env=env_with if t == "wallprof" else clean_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for t in ("wallprof", "none")}
        res = {}
        for t, pr in procs.items():
            o, e = pr.communicate(timeout=RUN_TIMEOUT + secs)
            if pr.returncode != 0:
                raise RunError("window %d [%s] exited with status %d: %s"
                               % (n, t, pr.returncode, e[-300:]))
            res[t] = parse_line(o, "rss_kb", "mem")
            if t == "wallprof":
                path = written_profile(e, cmd, tmpdir)
                try:
                    res["hist"], res["wp"] = history_s(path)
                finally:
                    os.unlink(path)
        added = (res["wallprof"]["hwm_kb"] - res["none"]["hwm_kb"]) / 1024.0
        over = int(res["wp"].get("overwritten", 0))
        table.check("M: window kept, %d blocked + %d busy threads, %d s run" % (n, BUSY, secs),
                    "%.1f s of %d s (%d samples overwritten)" % (res["hist"], WINDOW_S, over),
                    ">= 29 s", res["hist"] >= 29)
        table.check("M: peak RSS added, %d blocked + %d busy threads" % (n, BUSY),
                    "%.1f MiB (VmHWM, side by side)" % added, "<= 64 MiB", added <= 64)


BENCHMARKS = [Benchmark("M-window", bench_m, ("mem",))]
