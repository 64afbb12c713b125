"""E-handler-cost: build/bench/handler (links unwind/unwind.c): its own
SIGPROF handler, a thread recursed to depth 10, 50, 200 and spinning,
tgkill'ed at 1000 Hz for 2 s (--quick 1 s); handler entry to exit, median
and p99, for wp_unwind_capture (target <= 1 us median at depth 50, issue 14) and,
alternating signal by signal, a raw unw_backtrace (information).
"""

import subprocess

from .common import RUN_TIMEOUT, Benchmark, RunError, parse_line, prog, vlog

HANDLER_S, QUICK_HANDLER_S = 2.0, 1.0
HANDLER_DEPTHS = (10, 50, 200)


def bench_e(table, tmpdir, quick):
    secs = QUICK_HANDLER_S if quick else HANDLER_S
    for d in HANDLER_DEPTHS:
        p = subprocess.run([prog("handler"), str(d), str(secs), "1000"], capture_output=True,
                           text=True, timeout=RUN_TIMEOUT, cwd=tmpdir)
        if p.returncode != 0:
            raise RunError("handler %d exited with status %d: %s" % (d, p.returncode, p.stderr[-300:]))
        vlog("handler %d: %s" % (d, p.stdout.strip()))
        lines = [l for l in p.stdout.splitlines() if l.startswith("kind=")]
        kinds = {}
        for l in lines:
            kv = parse_line(l, "kind", "handler")
            kinds[kv["kind"]] = kv
        cap, raw = kinds.get("capture"), kinds.get("unw_backtrace")
        if not cap or not raw or not cap.get("n"):
            raise RunError("handler %d: no measurements: %r" % (d, p.stdout[-300:]))
        fig = "median %.2f us, p99 %.2f us (n=%d, %d frames)" % (
            cap["median_us"], cap["p99_us"], cap["n"], cap["min_depth"])
        name = "E: sample cost in the handler, depth %d: wp_unwind_capture" % d
        if d == 50:
            table.check(name, fig, "<= 1 us median", cap["median_us"] <= 1.0)
        else:
            table.add(name, fig, "-", "info")
        table.add("E: sample cost in the handler, depth %d: raw unw_backtrace" % d,
                  "median %.2f us, p99 %.2f us (n=%d)" % (raw["median_us"], raw["p99_us"], raw["n"]),
                  "-", "info")
        if cap["min_depth"] < d or cap.get("flags_failed", 0) or cap.get("flags_slow", 0):
            table.notes.append("E depth %d: captured %d..%d frames, %d slow-path, %d failed"
                               % (d, cap["min_depth"], cap["max_depth"], cap["flags_slow"],
                                  cap["flags_failed"]))


BENCHMARKS = [Benchmark("E-handler-cost", bench_e, ("handler",))]
