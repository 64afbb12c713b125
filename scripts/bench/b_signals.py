"""B-signals-blocked: condvar -d SECONDS with 1 busy thread + N blocked
threads (N = 10, 100, 1000), under the preload. From the exit profile's
"wallprof" section: running samples/s (taken in a handler on the running
thread: by our signal, or by the thread's own CPU-time timer, fresh or
held: signals + from_timer + held), signals/s alone, and samples/s.
B-signals-running: condvar -r 10 -d SECONDS: 10 busy threads, none blocked.

Rates are counters over the sampler's lifetime, (ticks + ticks_late)/hz, not
over "duration_ns": duration_ns spans only the samples still in the ring
(the whole run here, but not in general), while "signals" counts the whole
run.

Targets follow the design where only running threads are sampled in a
handler and blocked threads from the context they published: running
samples/s within [0.9 x hz x R, 1.1 x hz x (R + 1)] for R busy threads (the
+1 is the main thread, blocked in pthread_join, in case that call is not
one of the interposed ones); samples/s >= 0.9 x hz x (every thread but the
sampler), so blocked threads must still be sampled; and running samples/s
with 1000 blocked threads over those with 10 blocked <= 1.10. A busy
thread gets its CPU-time timer after its third busy tick, so most of its
samples come from the timer and signals/s alone is small.
"""

from .common import HZ, MAX_THREADS_DEFAULT, Benchmark, log, run_condvar, usable_cpus

SPIN_S, QUICK_SPIN_S = 3.0, 1.5
BLOCKED_B = (10, 100, 1000)
RUNNING_B = 10


def rates(res):
    """signals/s, running samples/s (signals + from_timer + held) and
    samples/s over the sampler's lifetime, and the threads the sampler
    addressed per on-time tick (signal sent, or skipped because the
    previous one was still undelivered)."""
    wp = res["wallprof"]
    hz = int(wp.get("hz", HZ))
    ticks = int(wp["ticks"])
    life = (ticks + int(wp["ticks_late"])) / hz
    sig = int(wp["signals"]) / life
    run = (int(wp["signals"]) + int(wp["from_timer"]) + int(wp["held"])) / life
    smp = int(wp["samples_recorded"]) / life
    asked = (int(wp["signals"]) + int(wp["pending"]) + int(wp["send_failed"])) / max(ticks, 1)
    return wp, hz, life, sig, run, smp, asked


def bench_b_row(table, tmpdir, quick, running, blocked, label):
    spin = QUICK_SPIN_S if quick else SPIN_S
    res = run_condvar(["-r", running, "-d", spin, 0, blocked], True, tmpdir)
    wp, hz, life, sig, run, smp, asked = rates(res)
    threads = running + blocked + 1  # + main; the sampler never samples itself
    oversubscribed = running > usable_cpus()
    smp_fig = "%.0f/s (%.2f x hz x %d threads)" % (smp, smp / (hz * threads), threads)
    if not oversubscribed:
        lo, hi = 0.9 * hz * running, 1.1 * hz * (running + 1)
        table.check("%s: running samples/s" % label,
                    "%.0f/s (%.2f x hz x %d threads; signals %.0f/s)"
                    % (run, run / (hz * threads), threads, sig),
                    "%.0f..%.0f/s" % (lo, hi), lo <= run <= hi)
        need = 0.9 * hz * threads
        table.check("%s: samples/s" % label, smp_fig, ">= %.0f/s" % need, smp >= need)
    else:
        # More spinning threads than CPUs: a thread waiting for a CPU has
        # not run since its last sample, so it needs no new signal (its last
        # stack stands); a signal it has not taken yet covers the ticks that
        # pass meanwhile. What must hold: every thread is still accounted
        # every tick, and never more than one signal per thread per tick.
        need = 0.9 * hz * threads
        table.check("%s: samples/s" % label, smp_fig, ">= %.0f/s" % need, smp >= need)
        table.check("%s: signals per tick" % label,
                    "%.1f (%.0f/s), pending %d" % (asked, sig, int(wp["pending"])),
                    "<= %d (one per thread)" % threads, asked <= threads)
    log("%s: %.0f signals/s, %.0f running samples/s, %.0f samples/s over %.2f s, %.1f threads "
        "signalled/tick; ticks %d late %d pending %d overwritten %d untracked %d; window %.2f s"
        % (label, sig, run, smp, life, asked, wp["ticks"], wp["ticks_late"], wp["pending"],
           wp["overwritten"], wp["threads_untracked"], int(wp["duration_ns"]) / 1e9))
    if res["profile_threads"] is not None and res["profile_threads"] < threads:
        table.notes.append("%s: the profile has %d threads, %d expected (main + busy + blocked)"
                           % (label, res["profile_threads"], threads))
    if int(wp.get("threads_untracked", 0)):
        table.notes.append("%s: %d threads not tracked (WALLPROF_MAX_THREADS=%d)"
                           % (label, int(wp["threads_untracked"]), MAX_THREADS_DEFAULT))
    if int(wp.get("ticks_late", 0)):
        table.notes.append("%s: the sampler overran: %d of %d ticks late"
                           % (label, int(wp["ticks_late"]), int(wp["ticks"]) + int(wp["ticks_late"])))
    return run


def bench_b_blocked(table, tmpdir, quick):
    run = {}
    for n in BLOCKED_B:
        run[n] = bench_b_row(table, tmpdir, quick, 1, n, "B(i): 1 busy + %d blocked" % n)
    lo, hi = min(BLOCKED_B), max(BLOCKED_B)
    ratio = run[hi] / run[lo]
    table.check("B(i): running samples/s, %d blocked / %d blocked" % (hi, lo), "%.2fx" % ratio,
                "<= 1.10x", ratio <= 1.10)


def bench_b_running(table, tmpdir, quick):
    bench_b_row(table, tmpdir, quick, RUNNING_B, 0, "B(ii): %d busy, 0 blocked" % RUNNING_B)


BENCHMARKS = [
    Benchmark("B-signals-blocked", bench_b_blocked, ("condvar",)),
    Benchmark("B-signals-running", bench_b_running, ("condvar",)),
]
