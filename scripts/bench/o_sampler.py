"""O-sampler-cost: build/bench/busy: R threads spinning for SPIN_S = 3 s of
wall time (R = 0, 1, 4, 16, 32; --quick 0, 1 and 4) while the main thread
sleeps, under the preload at the default 101 Hz. With R = 0 every thread of
the program is parked (main asleep in nanosleep): the sampler rests, waking
about ten times a second, and the row gives its CPU per tick and the share
of ticks it slept through ("ticks_rested"). The program reads the sampler
thread's CPU time (the thread named "wallprof", /proc/self/task/TID/
schedstat) before starting the threads and after joining them. Per R:
the sampler's CPU in microseconds per tick, sampler CPU / (wall x hz), and
that divided by R (per running thread per tick); median of RUNS runs (the
order of the R rotated every round), min..max in parentheses. Information,
no target. From the exit profile's "wallprof" section (Sentry JSON, small
here): how the running threads' samples were taken, as shares of their
samples (the main thread's excluded): "from_timer" (the capture of the
thread's own CPU-time timer), "held" (a recent timer capture reused for a
period the timer did not fire in) and "signals" (a signal from the
sampler), summed over the runs; the signals per tick and the batches of
them sent after a wait ("signal_batches": a tick with more signals to
send than the larger of the program's CPUs (its affinity), 8 and a quarter
of the last tick's signals spreads them over its period; with CPU-time
timers, busy threads take few signals). Both are counted over every tick,
those before the threads start and after they end included; and "ticks_late"
(ticks the sampler woke a whole period late and skipped) as a share of
all ticks, which the per-tick figure, counted over wall x hz, does not
see.
"""

import os

from .common import (HZ, Benchmark, RunError, log, med, rotation, run_tool, spread,
                     wallprof_section)

THREADS, QUICK_THREADS = (0, 1, 4, 16, 32), (0, 1, 4)
SPIN_S = 3.0
RUNS = 3


def bench_o(table, tmpdir, quick):
    sizes = QUICK_THREADS if quick else THREADS
    per_tick = {r: [] for r in sizes}
    ctr = {r: dict(from_timer=0, held=0, signals=0, samples=0, ticks=0, ticks_late=0,
                   signal_batches=0, ticks_rested=0)
           for r in sizes}
    for rnd in range(RUNS):
        for r in rotation(list(sizes), rnd):
            res = run_tool(["busy", r, SPIN_S], "wallprof", tmpdir, "wall_s", keep_profile=True)
            try:
                w = wallprof_section(res["profile"])
            except (OSError, ValueError, KeyError) as e:
                raise RunError("cannot read the wallprof section of %s: %s" % (res["profile"], e))
            finally:
                os.unlink(res["profile"])
            if not isinstance(res.get("sampler_cpu_s"), float):
                raise RunError("busy %d: no sampler thread found (sampler_cpu_s=%s)"
                               % (r, res.get("sampler_cpu_s")))
            per_tick[r].append(res["sampler_cpu_s"] / (res["wall_s"] * HZ) * 1e6)
            # The running threads' samples: all but the main thread's (tid = pid).
            main = (w.get("threads") or {}).get(str(w.get("pid")), {}).get("samples", 0)
            c = ctr[r]
            c["samples"] += int(w.get("samples", 0)) - int(main)
            for k in ("from_timer", "held", "signals", "ticks", "ticks_late", "signal_batches",
                      "ticks_rested"):
                c[k] += int(w.get(k, 0))
            log("O %d busy, run %d/%d: sampler %.1f ms over %.2f s = %.1f us per tick" % (
                r, rnd + 1, RUNS, res["sampler_cpu_s"] * 1e3, res["wall_s"], per_tick[r][-1]))
    for r in sizes:
        c = ctr[r]
        s = max(1, c["samples"])
        t = max(1, c["ticks"] + c["ticks_late"])
        if r == 0:
            table.add("O: sampler CPU per tick, every thread parked (main asleep), %.0f s at %d Hz"
                      % (SPIN_S, HZ),
                      "%.1f us per tick (%s), median of %d; %.0f %% of ticks slept through "
                      "(ticks_rested); %.0f %% late" % (
                          med(per_tick[r]), spread(per_tick[r], "%.1f"), RUNS,
                          100.0 * c["ticks_rested"] / max(1, c["ticks"]),
                          100.0 * c["ticks_late"] / t),
                      "-", "info")
            continue
        per_thr = [x / r for x in per_tick[r]]
        table.add("O: sampler CPU per running thread per tick, %d busy thread%s, %.0f s at %d Hz"
                  % (r, "" if r == 1 else "s", SPIN_S, HZ),
                  "%.1f us (%s); %.1f us per tick (%s), median of %d; running threads' samples: "
                  "%.0f %% timer, %.0f %% held, %.0f %% signalled; %.1f signals and %.2f "
                  "batches after a wait per tick; %.0f %% of ticks late" % (
                      med(per_thr), spread(per_thr, "%.1f"), med(per_tick[r]),
                      spread(per_tick[r], "%.1f"), RUNS, 100.0 * c["from_timer"] / s,
                      100.0 * c["held"] / s, 100.0 * c["signals"] / s,
                      c["signals"] / max(1, c["ticks"]), c["signal_batches"] / max(1, c["ticks"]),
                      100.0 * c["ticks_late"] / t),
                  "-", "info")


BENCHMARKS = [Benchmark("O-sampler-cost", bench_o, ("busy",))]
