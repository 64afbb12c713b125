#!/usr/bin/env python3
"""libwallprof benchmarks (run by `make bench`).

Usage: scripts/bench.py [--quick] [--budget SECONDS] [-k NAME]... [--list] [--strict] [-v]

Prints the machine, then ONE table: benchmark, measured figure, target,
PASS/MISS (info: a figure without a target; skip: a tool is missing).
Machines are noisy, so every figure is a ratio or a median of runs made side
by side in this invocation (with/without the preload alternated, the order
flipped every pair), never an absolute time compared across runs; the few
absolute targets (E, F: microseconds in a handler, seconds of a dump) are
medians within this invocation.

Benchmarks (select with -k, a case-insensitive substring of the name):

  A-condvar-overhead   build/bench/condvar: 1 busy thread doing a fixed number
                       of iterations (calibrated to ~3 s here) + 1000 threads
                       blocked on a condition variable, at WALLPROF_HZ=101.
                       Pairs of runs with and without the preload.
                       - busy slowdown: median over pairs of busy_wall_s
                         with / without. Target <= 1.02.
                       - profiler CPU: (proc_cpu_s - busy_cpu_s) with minus the
                         same without, over the with-run's wall_s, as % of one
                         core; median over pairs. Target <= 5 %. Counts the
                         sampler thread and whatever the profiler costs the
                         other threads (signal handlers, kernel work).
                       - sampler thread CPU (read from /proc by the program):
                         information only.
  B-signals-blocked    condvar -d SECONDS with 1 busy thread + N blocked threads
                       (N = 10, 100, 1000), under the preload. From the exit
                       profile's "wallprof" section: signals/s and samples/s.
  B-signals-running    condvar -r 10 -d SECONDS: 10 busy threads, none blocked.

  C-cpubound-vs-tools  build/bench/cpubound: 2 threads on the 2 CPUs, each a fixed
                       number of iterations (calibrated to 2.5 s of CPU; --quick 1.5 s).
                       Rounds of four runs side by side, the order rotated every
                       round: no profiler, libwallprof (preload, 101 Hz), perf record
                       -F 101 -g, gperftools (LD_PRELOAD libprofiler.so.0,
                       CPUPROFILE_FREQUENCY=101); 7 rounds (--quick 5). Each tool's
                       figure is the median over rounds of its busy wall time over the
                       same round's run without a profiler. Target: libwallprof
                       <= 1.01, and <= each other tool. perf and gperftools are
                       installed with apt-get when missing and running as root (else
                       skipped with a note); perf is skipped if `perf record` fails.
  D-mixed-overhead     build/bench/mixed: 64 threads: 4 busy (fixed work, ~1.5 s of
                       wall without the profiler), 1 pipe feeder, 59 waiters cycling
                       nanosleep 1-5 ms / a pipe read / a contended mutex. Pairs
                       with/without (15, --quick 5): busy wall ratio <= 1.02 and the
                       waiters' operations per second, without/with, <= 1.02; the
                       sampler thread's CPU is information.
  E-handler-cost       build/bench/handler (links unwind/unwind.c): its own SIGPROF
                       handler, a thread recursed to depth 10, 50, 200 and spinning,
                       tgkill'ed at 1000 Hz for 2 s (--quick 1 s); handler entry to
                       exit, median and p99, for wp_unwind_capture (target <= 2 us
                       median at depth 50) and, alternating signal by signal, a raw
                       unw_backtrace (information).
  F-dump-ring          build/bench/dump ring (links the core sources): a ring sized
                       as the library sizes it, filled with 30 s x 64 threads x 101 Hz
                       = 193,920 samples of 20-40-frame stacks over ~4,000 addresses in
                       the executable, libc and libdw; times snapshot + wp_sym_open +
                       wp_out_sentry_write (target <= 1 s) and reports the peak
                       extra memory (VmHWM after - VmRSS before). Median of 3.
  F-symbolize-bigcxx   build/bench/bigcxx: a generated C++ program (namespaces,
                       classes, templates, inlined helpers, STL; ~4,000 functions),
                       -O2 -g, cached between runs (sources + compiler hashed; the
                       first build takes ~20 s). dump sym: wp_sym_open + 10,000
                       wp_sym_lookup of distinct addresses spread over its functions
                       (target <= 1 s). Median of 3.
  G-memory             build/bench/mem: N threads in pthread_cond_wait + 1 busy for
                       3 s (--quick 1.5 s), VmRSS near the end, with minus without
                       (N = 8, 64; 5 pairs, the two runs of a pair at the same
                       time). Then the ring's mapping for a few RING_SECONDS x HZ
                       settings: the profile's "ring_bytes" next to the formula
                       of alloc_state.
  H-startup            build/bench/nop (int main(){return 0;}) started 200 times each
                       way, alternating blocks of 20, WALLPROF_LOG=quiet: added
                       milliseconds per start, median of block pairs (target <= 2).
  I-fidelity           build/bench/fidelity: 4 threads that time their own noinline
                       functions (spinning, nanosleep, pipe read, cond wait,
                       clock_nanosleep, poll) for 10 s (--quick 6 s), under the
                       preload. Per thread and function, the share of the thread's
                       samples whose stack holds the function must be within 2
                       percentage points of the measured share; each whole-run
                       thread's sampling rate, (samples - 1) / (last - first), within
                       2 % of WALLPROF_HZ.

--quick shortens every benchmark (fewer A pairs, shorter runs; never fewer
than 5 side-by-side rounds in C, D). --budget (default 540 s): once 60 % of
it is used, the benchmarks not yet run use their quick variant and a note says
so, so `make bench` stays under 10 minutes on a slow or busy machine. The
notes also give each benchmark's seconds and the CPUs that other processes
used meanwhile (from /proc/stat, less this script's own and its children's).

Rates in B are counters over the sampler's lifetime, (ticks + ticks_late)/hz,
not over "duration_ns": duration_ns spans only the samples still in the ring,
and with 1000 threads the ring (sized for 64 threads x 30 s) wraps after about
2 s, while "signals" counts the whole run.

Targets in B follow the design where only running threads get a signal and
blocked threads are sampled from the context they published: signals/s within
[0.9 x hz x R, 1.1 x hz x (R + 1)] for R busy threads (the +1 is the main
thread, blocked in pthread_join, in case that call is not one of the
interposed ones); samples/s >= 0.9 x hz x (every thread but the sampler), so
blocked threads must still be sampled; and signals/s with 1000 blocked
threads over signals/s with 10 blocked <= 1.10.

Exit status: 0 when every benchmark ran (MISS included), 1 with --strict and a
MISS, 2 when a run failed (crash, no profile, bad output).
"""

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(SCRIPTS)
BUILD = os.path.join(ROOT, "build")
LIB = os.path.join(BUILD, "libwallprof.so")
CONDVAR = os.path.join(BUILD, "bench", "condvar")

HZ = 101
RUN_TIMEOUT = 180          # seconds for one program run
TARGET_BUSY_S = 3.0        # fixed work of the busy thread, calibrated to this
PAIRS, QUICK_PAIRS = 7, 3
SPIN_S, QUICK_SPIN_S = 3.0, 1.5
BLOCKED_A = 1000
BLOCKED_B = (10, 100, 1000)
RUNNING_B = 10
MAX_THREADS_DEFAULT = 1024

WROTE_RE = re.compile(r"wallprof: wrote (\S+)")
THREADS_RE = re.compile(r"(\d+) samples, (\d+) threads")


def written_profile(stderr, cmd, tmpdir):
    """The profile path from the library's "wallprof: wrote PATH" line."""
    m = WROTE_RE.search(stderr)
    if not m:
        raise RunError("no profile written by %s: %s" % (" ".join(cmd), stderr.strip()[-500:]))
    path = m.group(1)
    return path if os.path.isabs(path) else os.path.join(tmpdir, path)

VERBOSE = False


class RunError(Exception):
    pass


def log(msg):
    """Progress on stderr, so stdout carries the table only."""
    print("bench: " + msg, file=sys.stderr, flush=True)


# ---- machine ----------------------------------------------------------------

def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load1():
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def library_id():
    """sha256 prefix and mtime of the library, so two tables can be matched
    to the builds they measured."""
    try:
        h = hashlib.sha256()
        with open(LIB, "rb") as f:
            h.update(f.read())
        return "sha256 %s, built %s" % (h.hexdigest()[:12], time.strftime(
            "%Y-%m-%d %H:%M:%S", time.localtime(os.stat(LIB).st_mtime)))
    except OSError:
        return "unreadable"


def machine_lines():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = usable_cpus()
    try:
        load = " ".join("%.2f" % x for x in os.getloadavg())
    except OSError:
        load = "?"
    u = os.uname()
    rev = "?"
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if dirty:
            rev += " + uncommitted changes"
    except (OSError, subprocess.SubprocessError):
        pass
    return [
        "machine: nproc %s (usable %s), %s" % (os.cpu_count(), usable, model),
        "kernel:  %s %s %s, load average %s" % (u.sysname, u.release, u.machine, load),
        "library: %s (%s; tree git %s), python %s" % (
            os.path.relpath(LIB, ROOT), library_id(), rev, platform.python_version()),
    ]


# ---- running the program ------------------------------------------------------

def parse_kv(text):
    """The condvar line: key=value pairs; numbers as floats, "na" as None."""
    out = {}
    for line in text.splitlines():
        if "busy_wall_s=" not in line:
            continue
        for tok in line.split():
            if "=" not in tok:
                continue
            k, v = tok.split("=", 1)
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = None if v == "na" else v
    if "busy_wall_s" not in out:
        raise RunError("no result line in the program's output: %r" % text[-300:])
    return out


def wallprof_section(path):
    """The profile's "wallprof" object. The writer puts it last, so read the
    tail; fall back to the whole document."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 8192))
        tail = f.read().decode("utf-8", "replace")
    i = tail.rfind('"wallprof":')
    if i >= 0:
        try:
            obj, _ = json.JSONDecoder().raw_decode(tail, i + len('"wallprof":'))
            if isinstance(obj, dict) and "signals" in obj:
                return obj
        except ValueError:
            pass
    with open(path) as f:
        return json.load(f)["wallprof"]


def run_condvar(args, preload, tmpdir, extra_env=None):
    """Runs build/bench/condvar ARGS. Returns the parsed result line; with the
    preload also "wallprof" (the profile's section) and "dump_line"."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("WALLPROF_")}
    if preload:
        env["LD_PRELOAD"] = LIB
        env["WALLPROF_HZ"] = str(HZ)
        env["WALLPROF_OUTPUT"] = os.path.join(tmpdir, "p.%p.json")
        env["WALLPROF_LOG"] = "info"
    env.update(extra_env or {})
    cmd = [CONDVAR] + [str(a) for a in args]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, cwd=tmpdir, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RunError("%s timed out after %d s" % (" ".join(cmd), RUN_TIMEOUT))
    elapsed = time.monotonic() - t0
    if p.returncode != 0:
        raise RunError("%s%s exited with status %d: %s" % (
            "LD_PRELOAD " if preload else "", " ".join(cmd), p.returncode, p.stderr.strip()[-500:]))
    res = parse_kv(p.stdout)
    res["process_s"] = elapsed
    if VERBOSE:
        log("%s%s -> %s" % ("[preload] " if preload else "", " ".join(cmd[1:]), p.stdout.strip()))
    if preload:
        path = written_profile(p.stderr, cmd, tmpdir)
        try:
            res["wallprof"] = wallprof_section(path)
        except (OSError, ValueError, KeyError) as e:
            raise RunError("cannot read the wallprof section of %s: %s" % (path, e))
        res["dump_line"] = p.stderr[WROTE_RE.search(p.stderr).start():].splitlines()[0]
        t = THREADS_RE.search(res["dump_line"])
        res["profile_threads"] = int(t.group(2)) if t else None
        os.unlink(path)
        if VERBOSE:
            log("  wallprof " + json.dumps(res["wallprof"]))
    return res


# ---- the table ------------------------------------------------------------------

class Table:
    def __init__(self):
        self.rows = []   # (name, figure, target, status)
        self.notes = []

    def add(self, name, figure, target, status):
        self.rows.append((name, figure, target, status))

    def check(self, name, figure, target, ok):
        self.add(name, figure, target, "PASS" if ok else "MISS")

    def misses(self):
        return sum(1 for r in self.rows if r[3] == "MISS")

    def render(self):
        head = ("benchmark", "measured", "target", "result")
        rows = [head] + self.rows
        w = [max(len(r[i]) for r in rows) for i in range(4)]
        sep = "-+-".join("-" * x for x in w)
        out = [" | ".join(c.ljust(w[i]) for i, c in enumerate(head)), sep]
        for r in self.rows:
            out.append(" | ".join(c.ljust(w[i]) for i, c in enumerate(r)))
        return out


def fmt_range(xs, f):
    return "%s..%s" % (f % min(xs), f % max(xs))


# ---- benchmarks --------------------------------------------------------------------

def calibrate(tmpdir):
    """Iterations of the busy loop for TARGET_BUSY_S here, from short runs
    without the preload and without blocked threads (the fastest of three)."""
    probe = 200_000_000
    best = min(run_condvar([probe, 0], False, tmpdir)["busy_wall_s"] for _ in range(3))
    iters = int(probe * TARGET_BUSY_S / best)
    log("calibrated: %d iterations of the busy loop ~ %.1f s (%.3f ns each)"
        % (iters, TARGET_BUSY_S, best / probe * 1e9))
    return iters


def bench_a(table, tmpdir, quick):
    name = "A-condvar-overhead"
    pairs = QUICK_PAIRS if quick else PAIRS
    iters = calibrate(tmpdir)
    # Warm-up (page cache, first dlopen of the dependencies), not measured.
    run_condvar([iters // 30, 10], True, tmpdir)
    slow, prof, samp, base, untracked = [], [], [], [], 0
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        r = {pre: run_condvar([iters, BLOCKED_A], pre, tmpdir) for pre in order}
        w, b = r[True], r[False]
        slow.append(w["busy_wall_s"] / b["busy_wall_s"])
        base.append(b["busy_wall_s"])
        cpu = (w["proc_cpu_s"] - w["busy_cpu_s"]) - (b["proc_cpu_s"] - b["busy_cpu_s"])
        prof.append(100.0 * cpu / w["wall_s"])
        if w.get("sampler_cpu_s") is not None:
            samp.append(100.0 * w["sampler_cpu_s"] / w["wall_s"])
        untracked = max(untracked, int(w["wallprof"].get("threads_untracked", 0)))
        if w["profile_threads"] is not None and w["profile_threads"] < BLOCKED_A + 2:
            table.notes.append("A pair %d: the profile has %d threads, %d expected"
                               % (i + 1, w["profile_threads"], BLOCKED_A + 2))
        log("A pair %d/%d: slowdown %.3f, profiler CPU %.1f %% of a core, sampler %s"
            % (i + 1, pairs, slow[-1], prof[-1], "%.1f %%" % samp[-1] if samp else "n/a"))
    label = "A: %d blocked + 1 busy, %d Hz" % (BLOCKED_A, HZ)
    lo, hi = min(base), max(base)
    table.notes.append("A: baseline busy_wall_s spread over the %d runs without the preload: %.1f %% "
                       "(max/min - 1); a slowdown target of 2 %% needs a spread well below that"
                       % (pairs, 100.0 * (hi / lo - 1)))
    s = statistics.median(slow)
    table.check(label + ": busy slowdown (with/without)",
                "%.3fx median of %d pairs (%s)" % (s, pairs, fmt_range(slow, "%.3f")),
                "<= 1.020x", s <= 1.02)
    p = statistics.median(prof)
    table.check(label + ": profiler CPU",
                "%.1f %% of a core, median (%s)" % (p, fmt_range(prof, "%.1f")),
                "<= 5 %", p <= 5.0)
    if samp:
        q = statistics.median(samp)
        table.add(label + ": sampler thread CPU (direct)",
                  "%.1f %% of a core, median (%s)" % (q, fmt_range(samp, "%.1f")), "-", "info")
    if untracked:
        table.notes.append("A: %d threads were not tracked (WALLPROF_MAX_THREADS=%d)"
                           % (untracked, MAX_THREADS_DEFAULT))


def rates(res):
    """signals/s and samples/s over the sampler's lifetime, and the threads
    the sampler addressed per on-time tick (signal sent, or skipped because
    the previous one was still undelivered)."""
    wp = res["wallprof"]
    hz = int(wp.get("hz", HZ))
    ticks = int(wp["ticks"])
    life = (ticks + int(wp["ticks_late"])) / hz
    sig = int(wp["signals"]) / life
    smp = int(wp["samples_recorded"]) / life
    asked = (int(wp["signals"]) + int(wp["pending"]) + int(wp["send_failed"])) / max(ticks, 1)
    return wp, hz, life, sig, smp, asked


def bench_b_row(table, tmpdir, quick, running, blocked, label):
    spin = QUICK_SPIN_S if quick else SPIN_S
    res = run_condvar(["-r", running, "-d", spin, 0, blocked], True, tmpdir)
    wp, hz, life, sig, smp, asked = rates(res)
    threads = running + blocked + 1  # + main; the sampler never samples itself
    oversubscribed = running > usable_cpus()
    smp_fig = "%.0f/s (%.2f x hz x %d threads)" % (smp, smp / (hz * threads), threads)
    if not oversubscribed:
        lo, hi = 0.9 * hz * running, 1.1 * hz * (running + 1)
        table.check("%s: signals/s" % label,
                    "%.0f/s (%.2f x hz x %d threads)" % (sig, sig / (hz * threads), threads),
                    "%.0f..%.0f/s" % (lo, hi), lo <= sig <= hi)
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
    log("%s: %.0f signals/s, %.0f samples/s over %.2f s, %.1f threads signalled/tick; ticks %d "
        "late %d pending %d overwritten %d untracked %d; window %.2f s"
        % (label, sig, smp, life, asked, wp["ticks"], wp["ticks_late"], wp["pending"],
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
    return sig


def bench_b_blocked(table, tmpdir, quick):
    sig = {}
    for n in BLOCKED_B:
        sig[n] = bench_b_row(table, tmpdir, quick, 1, n, "B(i): 1 busy + %d blocked" % n)
    lo, hi = min(BLOCKED_B), max(BLOCKED_B)
    ratio = sig[hi] / sig[lo]
    table.check("B(i): signals/s, %d blocked / %d blocked" % (hi, lo), "%.2fx" % ratio,
                "<= 1.10x", ratio <= 1.10)


def bench_b_running(table, tmpdir, quick):
    bench_b_row(table, tmpdir, quick, RUNNING_B, 0, "B(ii): %d busy, 0 blocked" % RUNNING_B)


# ---- shared helpers for C..I ------------------------------------------------

def cpu_snapshot():
    """(monotonic s, busy CPU s of the whole machine from /proc/stat, CPU s of
    this script and its reaped children)."""
    busy = 0.0
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal: all but idle and iowait
        busy = (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    ours = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        ours += r.ru_utime + r.ru_stime
    return time.monotonic(), busy, ours


def foreign_cpus(c0, c1):
    """Average CPUs used by other processes between two snapshots (noise)."""
    wall = c1[0] - c0[0]
    if wall <= 0:
        return 0.0
    return max(0.0, ((c1[1] - c0[1]) - (c1[2] - c0[2])) / wall)


GPERF_LIB = "/usr/lib/x86_64-linux-gnu/libprofiler.so.0"
CPU_TARGET_S, QUICK_CPU_TARGET_S = 2.5, 1.5     # C: fixed work per thread (2 threads)
CPU_ROUNDS, QUICK_CPU_ROUNDS = 7, 5
MIXED_TARGET_S, QUICK_MIXED_TARGET_S = 1.5, 1.2  # D: busy wall time without the profiler
MIXED_PAIRS, QUICK_MIXED_PAIRS = 15, 5
HANDLER_S, QUICK_HANDLER_S = 2.0, 1.0
HANDLER_DEPTHS = (10, 50, 200)
DUMP_RUNS = 3
BIGCXX_FILES, BIGCXX_CLASSES, BIGCXX_METHODS = 4, 25, 20
MEM_THREADS = (8, 64)
MEM_PAIRS = 5
MEM_SECONDS, QUICK_MEM_SECONDS = 3.0, 1.5
RING_CONFIGS = ((30, 101), (60, 101), (30, 1000), (600, 1000))
STARTS, START_BLOCK = 200, 20
FIDELITY_S, QUICK_FIDELITY_S = 10.0, 6.0
FIDELITY_PP = 2.0
FIDELITY_RATE_PCT = 2.0

_state = {}  # calibration and tool checks shared between benchmarks


def prog(name):
    return os.path.join(BUILD, "bench", name)


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith("WALLPROF_") and not k.startswith("CPUPROFILE")}


def parse_line(text, key, what):
    """The first line of `text` holding key=..., as a dict (floats when numeric)."""
    for line in text.splitlines():
        if (key + "=") not in line:
            continue
        out = {}
        for tok in line.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                try:
                    out[k] = float(v)
                except ValueError:
                    out[k] = v
        if key in out:
            return out
    raise RunError("no %s= line in the output of %s: %r" % (key, what, text[-300:]))


def run_tool(args, tool, tmpdir, key, extra_env=None, keep_profile=False, timeout=RUN_TIMEOUT):
    """Runs build/bench/ARGS[0] ARGS[1:] under `tool`: "none", "wallprof"
    (the preload at HZ), "perf" (perf record -F HZ -g) or "gperf" (gperftools'
    CPU profiler at CPUPROFILE_FREQUENCY=HZ). Returns the parsed key= line plus
    "process_s" (wall time of the whole process, start-up and exit included);
    for wallprof "profile" (its path, deleted unless keep_profile)."""
    env = clean_env()
    cmd = [prog(args[0])] + [str(a) for a in args[1:]]
    out_file = None
    if tool == "wallprof":
        env["LD_PRELOAD"] = LIB
        env["WALLPROF_HZ"] = str(HZ)
        env["WALLPROF_OUTPUT"] = os.path.join(tmpdir, "p.%p.json")
        env["WALLPROF_LOG"] = "info"
    elif tool == "perf":
        out_file = os.path.join(tmpdir, "perf.data")
        cmd = ["perf", "record", "-q", "-F", str(HZ), "-g", "-o", out_file, "--"] + cmd
    elif tool == "gperf":
        out_file = os.path.join(tmpdir, "gperf.prof")
        env["LD_PRELOAD"] = GPERF_LIB
        env["CPUPROFILE"] = out_file
        env["CPUPROFILE_FREQUENCY"] = str(HZ)
    env.update(extra_env or {})
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, cwd=tmpdir, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError("%s timed out after %d s" % (" ".join(cmd), timeout))
    elapsed = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RunError("[%s] %s exited with status %d: %s" % (
            tool, " ".join(cmd), p.returncode, p.stderr.strip()[-500:]))
    res = parse_line(p.stdout, key, " ".join(cmd))
    res["process_s"] = elapsed
    # CPU of the whole process tree (perf's own process included), start-up
    # and exit dump included: not inflated by waiting for a CPU.
    res["tree_cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    res["stdout"] = p.stdout
    if VERBOSE:
        log("[%s] %s -> %s" % (tool, " ".join(cmd[-len(args):]), p.stdout.strip()[:300]))
    if out_file:
        if not os.path.exists(out_file) or os.path.getsize(out_file) == 0:
            raise RunError("[%s] %s wrote no profile (%s): %s" % (
                tool, " ".join(cmd), out_file, p.stderr.strip()[-300:]))
        os.unlink(out_file)
    if tool == "wallprof" and (keep_profile or "WALLPROF_LOG" not in (extra_env or {})):
        path = written_profile(p.stderr, cmd, tmpdir)
        res["profile"] = path
        if not keep_profile:
            os.unlink(path)
    return res


def med(xs):
    return statistics.median(xs)


def spread(xs, f="%.3f"):
    return fmt_range(xs, f)


# ---- tools: perf and gperftools -----------------------------------------------

def apt_install(pkg):
    """apt-get install PKG when root (an update first if the plain install
    fails). Returns a note on failure, None on success."""
    if os.geteuid() != 0:
        return "not root: run 'apt-get install %s' to include it" % pkg
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for update in (False, True):
        try:
            if update:
                subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=300)
            p = subprocess.run(["apt-get", "install", "-y", "-qq", pkg], env=env,
                               capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            return "apt-get install %s failed: %s" % (pkg, e)
        if p.returncode == 0:
            log("installed %s" % pkg)
            return None
    return "apt-get install %s failed: %s" % (pkg, (p.stderr or p.stdout).strip()[-200:])


def check_perf(tmpdir):
    """None when `perf record -F HZ -g` works here, else why not."""
    if "perf" in _state:
        return _state["perf"]
    why = None
    if not shutil.which("perf"):
        why = apt_install("linux-perf")
    if why is None and not shutil.which("perf"):
        why = "perf not found after installing linux-perf"
    if why is None:
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
    if "gperf" in _state:
        return _state["gperf"]
    why = None
    if not os.path.exists(GPERF_LIB):
        why = apt_install("libgoogle-perftools4")
        if why is None and not os.path.exists(GPERF_LIB):
            why = "%s missing after installing libgoogle-perftools4" % GPERF_LIB
    _state["gperf"] = why
    return why


def ns_per_iter(tmpdir):
    """Cost of one iteration of the arithmetic chain (shared by cpubound and
    mixed), single thread, no profiler: the fastest of three probes."""
    if "ns_per_iter" not in _state:
        probe = 100_000_000
        best = min(run_tool(["cpubound", probe, 1], "none", tmpdir, "busy_wall_s")["busy_wall_s"]
                   for _ in range(3))
        _state["ns_per_iter"] = best / probe * 1e9
        log("calibrated: %.3f ns per iteration of the arithmetic chain" % _state["ns_per_iter"])
    return _state["ns_per_iter"]


# ---- C: CPU-bound overhead vs perf and gperftools ------------------------------

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
        order = tools[r % len(tools):] + tools[:r % len(tools)]
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


# ---- D: mixed program ------------------------------------------------------------

def bench_d(table, tmpdir, quick):
    pairs = QUICK_MIXED_PAIRS if quick else MIXED_PAIRS
    target = QUICK_MIXED_TARGET_S if quick else MIXED_TARGET_S
    # 4 busy threads share 2 CPUs: each needs target x 2 / 4 s of CPU.
    iters = int(target * 2 / 4 * 1e9 / ns_per_iter(tmpdir))
    run_tool(["mixed", iters // 20, 64], "wallprof", tmpdir, "busy_wall_s")  # warm-up
    slow, thr, base, ops, samp, extra = [], [], [], [], [], []
    for i in range(pairs):
        order = ("wallprof", "none") if i % 2 == 0 else ("none", "wallprof")
        r = {t: run_tool(["mixed", iters, 64], t, tmpdir, "busy_wall_s") for t in order}
        w, b = r["wallprof"], r["none"]
        slow.append(w["busy_wall_s"] / b["busy_wall_s"])
        thr.append(b["ops_per_s"] / w["ops_per_s"])
        base.append(b["busy_wall_s"])
        ops.append(b["ops_per_s"])
        if isinstance(w.get("sampler_cpu_s"), float):
            samp.append(100.0 * w["sampler_cpu_s"] / w["busy_wall_s"])
        # CPU of everything but the busy threads, per second of window.
        extra.append(100.0 * ((w["proc_cpu_s"] - w["busy_cpu_s"]) / w["busy_wall_s"]
                              - (b["proc_cpu_s"] - b["busy_cpu_s"]) / b["busy_wall_s"]))
        log("D pair %d/%d: busy %.3fx, waiters' throughput without/with %.3fx (%.0f vs %.0f ops/s)"
            % (i + 1, pairs, slow[-1], thr[-1], b["ops_per_s"], w["ops_per_s"]))
    label = "D: mixed 64 thr (4 busy, 59 waiting)"
    s, t = med(slow), med(thr)
    table.check(label + ": busy wall ratio", "%.3fx median of %d pairs (%s)" % (
        s, pairs, spread(slow)), "<= 1.020x", s <= 1.02)
    table.check(label + ": waiters' ops/s without/with",
                "%.3fx median (%s); %.0f ops/s without" % (t, spread(thr), med(ops)),
                "<= 1.020x", t <= 1.02)
    if samp:
        q = med(samp)
        table.add(label + ": profiler CPU",
                  "sampler thread %.1f %% of a core (%s), ~%.1f us per thread per tick; "
                  "non-busy CPU +%.1f %% of a core" % (
                      q, spread(samp, "%.1f"), q / 100.0 / (HZ * 65) * 1e6, med(extra)),
                  "-", "info")
    table.notes.append("D: baseline busy wall spread over the %d runs without the preload: %.1f %%; "
                       "4 busy threads share the 2 CPUs, so any CPU the profiler takes comes out of "
                       "their wall time" % (pairs, 100.0 * (max(base) / min(base) - 1)))


# ---- E: per-sample cost in the handler --------------------------------------------

def bench_e(table, tmpdir, quick):
    secs = QUICK_HANDLER_S if quick else HANDLER_S
    for d in HANDLER_DEPTHS:
        p = subprocess.run([prog("handler"), str(d), str(secs), "1000"], capture_output=True,
                           text=True, timeout=RUN_TIMEOUT, cwd=tmpdir)
        if p.returncode != 0:
            raise RunError("handler %d exited with status %d: %s" % (d, p.returncode, p.stderr[-300:]))
        if VERBOSE:
            log("handler %d: %s" % (d, p.stdout.strip()))
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
            table.check(name, fig, "<= 2 us median", cap["median_us"] <= 2.0)
        else:
            table.add(name, fig, "-", "info")
        table.add("E: sample cost in the handler, depth %d: raw unw_backtrace" % d,
                  "median %.2f us, p99 %.2f us (n=%d)" % (raw["median_us"], raw["p99_us"], raw["n"]),
                  "-", "info")
        if cap["min_depth"] < d or cap.get("flags_failed", 0) or cap.get("flags_slow", 0):
            table.notes.append("E depth %d: captured %d..%d frames, %d slow-path, %d failed"
                               % (d, cap["min_depth"], cap["max_depth"], cap["flags_slow"],
                                  cap["flags_failed"]))


# ---- F: dump cost ------------------------------------------------------------------------

def gen_bigcxx_sources():
    """C++ sources of a large binary: namespaces, classes, templates, inlined
    helpers, STL containers. About BIGCXX_FILES x BIGCXX_CLASSES x
    (BIGCXX_METHODS + 6) functions of our own, plus the STL's."""
    files = {}
    decls = []
    for f in range(BIGCXX_FILES):
        out = ["// generated by scripts/bench.py: a large C++ program for the symbolization benchmark\n"
               "#include <algorithm>\n#include <map>\n#include <string>\n#include <vector>\n\n"
               "namespace bench {\nnamespace mod%d {\n\n" % f,
               "template <typename T> static inline T mix(T a, T b) { return (a * 31 + b) ^ (a >> 3); }\n\n"]
        for c in range(BIGCXX_CLASSES):
            ns, cls = "sub%d" % (c % 5), "Widget%d" % c
            out.append("namespace %s {\n" % ns)
            out.append("static inline int helper%d(int x) { int r = x; for (int i = 0; i < (x & 7); i++) "
                       "r = mix(r, i + %d); return r; }\n" % (c, c))
            out.append("class %s {\npublic:\n  explicit %s(int s) : seed_(s) {}\n" % (cls, cls))
            for m in range(BIGCXX_METHODS):
                out.append("  __attribute__((noinline)) int method%d(int x);\n" % m)
            out.append("  template <typename T> __attribute__((noinline)) T convert(T v) "
                       "{ return mix<T>(v, (T)seed_); }\nprivate:\n  int seed_;\n"
                       "  std::vector<int> data_;\n  std::map<int, std::string> names_;\n};\n\n")
            for m in range(BIGCXX_METHODS):
                kind = (c * BIGCXX_METHODS + m) % 4
                out.append("int %s::method%d(int x) {\n" % (cls, m))
                if kind == 0:
                    out.append("  std::vector<int> v;\n  for (int i = 0; i < (x & 15) + 4; i++) "
                               "v.push_back(helper%d(x + i * %d));\n  std::sort(v.begin(), v.end());\n"
                               "  return v[v.size() / 2] + seed_;\n" % (c, m + 1))
                elif kind == 1:
                    out.append("  std::string s = std::to_string(x) + \"-%s-%d\";\n"
                               "  for (char &ch : s) ch = (char)(ch ^ (seed_ & 1));\n"
                               "  return (int)s.size() + helper%d(x);\n" % (cls, m, c))
                elif kind == 2:
                    out.append("  auto it = names_.find(x %% %d);\n  if (it == names_.end()) "
                               "names_.emplace(x %% %d, \"n%d\");\n  return (int)names_.size() + "
                               "convert<int>(x);\n" % (m + 3, m + 3, m))
                else:
                    out.append("  int r = seed_;\n  for (int i = 0; i < 8; i++) r = mix(r, helper%d(x + i));\n"
                               "  data_.push_back(r);\n  return r + (int)data_.size();\n" % c)
                out.append("}\n\n")
            for m in range(4):
                out.append("__attribute__((noinline)) int run%d_%d(int x) { %s w(x); return w.method%d(x) "
                           "+ w.method%d(x + 1) + (int)w.convert<long>(x); }\n"
                           % (c, m, cls, m, (m + 5) % BIGCXX_METHODS))
                decls.append(("mod%d" % f, ns, "run%d_%d" % (c, m)))
            out.append("}  // namespace %s\n\n" % ns)
        out.append("}  // namespace mod%d\n}  // namespace bench\n" % f)
        files["bigcxx_%d.cc" % f] = "".join(out)
    main = ["// generated by scripts/bench.py\n#include <cstdio>\nnamespace bench {\n"]
    for mod, ns, fn in decls:
        main.append("namespace %s { namespace %s { int %s(int); } }\n" % (mod, ns, fn))
    main.append("}\nint (*const table[])(int) = {\n")
    main.append(",\n".join("  bench::%s::%s::%s" % d for d in decls))
    main.append("\n};\nint main(int argc, char **) {\n  long s = 0;\n"
                "  for (unsigned i = 0; i < sizeof(table) / sizeof(*table); i++) s += table[i](argc + (int)i);\n"
                "  std::printf(\"%ld\\n\", s);\n  return 0;\n}\n")
    files["bigcxx_main.cc"] = "".join(main)
    return files


def wait_compile(job):
    name, pr = job
    _, err = pr.communicate()
    if pr.returncode != 0:
        raise RunError("compiling %s failed: %s" % (name, err[-500:]))


def build_bigcxx():
    """build/bench/bigcxx, compiled -O2 -g from generated sources, cached:
    rebuilt only when the sources or the compiler change. Returns (path,
    seconds spent compiling now, 0 when cached)."""
    cxx = os.environ.get("CXX", "c++")
    out_dir = os.path.join(BUILD, "bench", "bigcxx.src")
    exe = os.path.join(BUILD, "bench", "bigcxx")
    stamp = exe + ".stamp"
    files = gen_bigcxx_sources()
    try:
        ver = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RunError("no C++ compiler (%s): %s" % (cxx, e))
    h = hashlib.sha256(ver.encode())
    for n in sorted(files):
        h.update(n.encode() + b"\0" + files[n].encode())
    key = h.hexdigest()
    try:
        with open(stamp) as f:
            if f.read().strip() == key and os.path.exists(exe):
                return exe, 0.0
    except OSError:
        pass
    os.makedirs(out_dir, exist_ok=True)
    log("compiling build/bench/bigcxx (%d files, -O2 -g; cached afterwards)" % len(files))
    t0 = time.monotonic()
    objs, running = [], []
    jobs = max(1, usable_cpus())
    for n in sorted(files):
        src = os.path.join(out_dir, n)
        with open(src, "w") as f:
            f.write(files[n])
        obj = src + ".o"
        objs.append(obj)
        while len(running) >= jobs:
            wait_compile(running.pop(0))
        running.append((n, subprocess.Popen([cxx, "-O2", "-g", "-c", "-o", obj, src],
                                            stderr=subprocess.PIPE, text=True)))
    while running:
        wait_compile(running.pop(0))
    p = subprocess.run([cxx, "-o", exe] + objs, capture_output=True, text=True)
    if p.returncode != 0:
        raise RunError("linking bigcxx failed: %s" % p.stderr[-500:])
    with open(stamp, "w") as f:
        f.write(key + "\n")
    return exe, time.monotonic() - t0


def bench_f_dump(table, tmpdir, quick):
    out = os.path.join(tmpdir, "dump.json")
    runs = []
    for i in range(DUMP_RUNS):
        p = subprocess.run([prog("dump"), "ring", out], capture_output=True, text=True,
                           timeout=RUN_TIMEOUT, cwd=tmpdir)
        if p.returncode != 0:
            raise RunError("dump ring exited with status %d: %s" % (p.returncode, p.stderr[-300:]))
        runs.append(parse_line(p.stdout, "dump_s", "dump ring"))
        if os.path.exists(out):
            os.unlink(out)
        if VERBOSE:
            log("dump ring: " + p.stdout.strip())
    r = runs[0]
    d = med([x["dump_s"] for x in runs])
    table.check("F(a): dump of a full ring (%d samples, %d stacks, %d frames)"
                % (r["samples"], r["stacks"], r["frames"]),
                "%.2f s median of %d (%s); JSON %.0f MB" % (
                    d, DUMP_RUNS, spread([x["dump_s"] for x in runs], "%.2f"), r["bytes"] / 1e6),
                "<= 1 s", d <= 1.0)
    peak = med([x["peak_extra_kb"] for x in runs])
    table.add("F(a): dump peak extra memory (VmHWM - VmRSS before)",
              "%.1f MiB median (%s MiB)" % (peak / 1024, spread([x["peak_extra_kb"] / 1024 for x in runs], "%.1f")),
              "report", "info")
    table.notes.append("F(a): %d-sample ring of %d threads over %d distinct addresses in the "
                       "executable, libc and libdw; split: snapshot %.3f s, symbolize+JSON+write %.3f s, "
                       "close %.3f s (medians)%s" % (
                           r["samples"], 64, r["pool"], med([x["snapshot_s"] for x in runs]),
                           med([x["write_s"] for x in runs]), med([x["close_s"] for x in runs]),
                           "" if r["hwm_reset"] else "; VmHWM could not be reset, peak is over VmHWM before"))


def bench_f_sym(table, tmpdir, quick):
    exe, compile_s = build_bigcxx()
    runs = []
    for i in range(DUMP_RUNS):
        p = subprocess.run([prog("dump"), "sym", exe, "10000"], capture_output=True, text=True,
                           timeout=RUN_TIMEOUT, cwd=tmpdir)
        if p.returncode != 0:
            raise RunError("dump sym exited with status %d: %s" % (p.returncode, p.stderr[-300:]))
        runs.append(parse_line(p.stdout, "sym_s", "dump sym"))
        if VERBOSE:
            log("dump sym: " + p.stdout.strip())
    r = runs[0]
    s = med([x["sym_s"] for x in runs])
    table.check("F(b): wp_sym_open + %d lookups in bigcxx (%.0f MB, %d functions)"
                % (r["addrs"], os.path.getsize(exe) / 1e6, r["funcs"]),
                "%.3f s median of %d (%s)" % (s, DUMP_RUNS, spread([x["sym_s"] for x in runs])),
                "<= 1 s", s <= 1.0)
    table.notes.append("F(b): bigcxx %s; per address %.2f frames (%d inlined frames in all), "
                       "%.1f %% with file:line, %.1f %% resolved" % (
                           "compiled in %.0f s this run" % compile_s if compile_s else "cached",
                           r["frames_per_addr"], r["inlined"], r["with_line_pct"], r["known_pct"]))


# ---- G: memory ---------------------------------------------------------------------

def ring_formula_bytes(hz, secs):
    """preload/sampler.c alloc_state + preload/ring.c plan(): the ring's
    mapping, without the struct wp_ring header (a few KiB)."""
    def r64(x):
        return (x + 63) & ~63

    def pow2(n):
        p = 16
        while p < n:
            p <<= 1
        return p
    samples = min(hz * secs * 64, 4 << 20)
    pcs, stacks, words = 1 << 16, 1 << 16, 1 << 21

    def total(samples, pcs, stacks, words):
        return (r64(samples * 24) + r64(pcs * 16) + r64(pow2(pcs * 2) * 4) + r64(words * 4)
                + 3 * r64(stacks * 4) + r64(pow2(stacks * 2) * 4))
    cap = 64 << 20  # WALLPROF_RING_MB default
    while total(samples, pcs, stacks, words) > cap:
        sb = samples * 24
        tb = total(samples, pcs, stacks, words) - sb
        if samples > 1024 and (sb >= tb or words <= 8192):
            samples //= 2
        elif words > 8192:
            pcs, stacks, words = pcs // 2, stacks // 2, words // 2
        else:
            break
    return total(samples, pcs, stacks, words), samples


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
    # Ring size: what the library reserves for each setting, from the profile.
    for secs, hz in RING_CONFIGS:
        want, want_samples = ring_formula_bytes(hz, secs)
        env = {"WALLPROF_RING_SECONDS": str(secs), "WALLPROF_HZ": str(hz)}
        r = run_tool(["mem", 1, 0.3], "wallprof", tmpdir, "rss_kb", extra_env=env, keep_profile=True)
        try:
            wp = wallprof_section(r["profile"])
        finally:
            os.unlink(r["profile"])
        got = wp.get("ring_bytes")
        if got:
            fig = "%.1f MiB, %d samples (profile); formula %.1f MiB" % (
                mib(int(got)), int(wp.get("ring_samples", 0)), mib(want))
        else:
            fig = "%.1f MiB, %d samples (formula; the profile has no ring_bytes)" % (mib(want), want_samples)
        table.add("G: ring mapping, RING_SECONDS=%d x HZ=%d" % (secs, hz), fig, "-", "info")
        if got and abs(int(got) - want) > 65536:
            table.notes.append("G: ring %d s x %d Hz: the profile says %d bytes, the formula %d"
                               % (secs, hz, int(got), want))
    table.notes.append(
        "G: ring = 24 B x min(HZ x RING_SECONDS x 64, 4Mi) samples + tables for 65536 frames "
        "(16 B + 8 B hash), 65536 stacks (12 B + 8 B hash) and 2Mi frame words (4 B) = 10.75 MiB; "
        "halved (samples or tables, the bigger) until it fits WALLPROF_RING_MB (64). Also mapped: "
        "per tracked-thread slots, MAX_THREADS x (2 x MAX_DEPTH + 24) x 8 B (2.2 MiB at defaults), "
        "and a tid map of 4 B x pid_max; all anonymous, only touched pages count in RSS")


# ---- H: start-up ----------------------------------------------------------------------

def bench_h(table, tmpdir, quick):
    nop = prog("nop")
    envs = {"none": clean_env()}
    envs["wallprof"] = dict(clean_env(), LD_PRELOAD=LIB, WALLPROF_LOG="quiet",
                            WALLPROF_OUTPUT=os.path.join(tmpdir, "s.%p.json"))

    def block(t):
        t0 = time.perf_counter()
        for _ in range(START_BLOCK):
            pid = os.posix_spawn(nop, [nop], envs[t])
            _, st = os.waitpid(pid, 0)
            if st != 0:
                raise RunError("nop [%s] exited with status %d" % (t, st))
        return (time.perf_counter() - t0) / START_BLOCK * 1e3

    block("wallprof"), block("none")  # warm-up
    diffs, base = [], []
    for i in range(STARTS // START_BLOCK):
        order = ("wallprof", "none") if i % 2 == 0 else ("none", "wallprof")
        r = {t: block(t) for t in order}
        diffs.append(r["wallprof"] - r["none"])
        base.append(r["none"])
    d = med(diffs)
    table.check("H: start-up, nop started %d x each way" % STARTS,
                "+%.2f ms per start, median of %d block pairs (%s); %.2f ms without" % (
                    d, len(diffs), spread(diffs, "%.2f"), med(base)),
                "<= 2 ms", d <= 2.0)


# ---- I: fidelity -------------------------------------------------------------------------

def bench_i(table, tmpdir, quick):
    secs = QUICK_FIDELITY_S if quick else FIDELITY_S
    r = run_tool(["fidelity", secs], "wallprof", tmpdir, "tid", keep_profile=True,
                 timeout=secs + RUN_TIMEOUT)
    path = r["profile"]
    try:
        with open(path) as f:
            doc = json.load(f)
    finally:
        os.unlink(path)
    truth, helpers = {}, {}
    for line in r["stdout"].splitlines():
        kv = line.split()
        if not kv:
            continue
        fields = dict(x.split("=", 1) for x in kv[1:] if "=" in x)
        if kv[0] == "thread":
            truth[int(fields["tid"])] = (fields["name"], dict(
                (x.split("=", 1)[1].rsplit(":", 1)[0], float(x.rsplit(":", 1)[1]))
                for x in kv[1:] if x.startswith("fn=")))
        elif kv[0] == "helper":
            helpers[int(fields["tid"])] = fields["name"]
    prof = doc["profile"]
    wp = doc.get("wallprof", {})
    fnames = [f.get("function") or "" for f in prof["frames"]]
    stack_fns = [frozenset(fnames[i] for i in st) for st in prof["stacks"]]
    per = {}
    for s in prof["samples"]:
        per.setdefault(int(s["thread_id"]), []).append(
            (int(s["elapsed_since_start_ns"]), s["stack_id"], bool(s.get("on_cpu"))))
    worst, worst_what, rates = 0.0, "", []
    cpu_ok = cpu_all = 0
    for tid, (name, shares) in sorted(truth.items()):
        ss = per.get(tid, [])
        if len(ss) < 10:
            raise RunError("fidelity: thread %s (%d) has %d samples in the profile" % (name, tid, len(ss)))
        for fn, share in shares.items():
            hits = [x for x in ss if fn in stack_fns[x[1]]]
            got = len(hits) / len(ss)
            diff = 100.0 * (got - share)
            if abs(diff) > abs(worst):
                worst, worst_what = diff, "%s/%s %.1f %% vs %.1f %%" % (name, fn, 100 * got, 100 * share)
            if VERBOSE:
                log("I %s %s: profile %.1f %% measured %.1f %%" % (name, fn, 100 * got, 100 * share))
            on = fn.startswith("spin_")
            cpu_all += len(hits)
            cpu_ok += sum(1 for x in hits if x[2] == on)
    for tid in list(truth) + list(helpers):
        ss = per.get(tid, [])
        if len(ss) >= 2:
            span = (ss[-1][0] - ss[0][0]) / 1e9
            rates.append((100.0 * (len(ss) - 1) / span / HZ,
                          truth[tid][0] if tid in truth else helpers[tid]))
    table.check("I: fidelity, 4 threads x %.0f s: worst share error" % secs,
                "%+.1f pp (%s)" % (worst, worst_what), "within %.0f pp" % FIDELITY_PP,
                abs(worst) <= FIDELITY_PP)
    lo, hi = min(rates), max(rates)
    far = max(rates, key=lambda x: abs(x[0] - 100))
    off = abs(far[0] - 100)
    table.check("I: fidelity: sampling rate per thread (%d threads)" % len(rates),
                "%.1f..%.1f %% of %d Hz (farthest: %s)" % (lo[0], hi[0], HZ, far[1]),
                "within %.0f %%" % FIDELITY_RATE_PCT, off <= FIDELITY_RATE_PCT)
    ticks, late = int(wp.get("ticks", 0)), int(wp.get("ticks_late", 0))
    if ticks + late:
        table.notes.append("I: the sampler ran %d ticks and skipped %d late ones (%.1f %%; it skips "
                           "a tick it wakes up a whole period late, e.g. when other processes hold "
                           "the CPUs)" % (ticks, late, 100.0 * late / (ticks + late)))
    table.add("I: fidelity: on_cpu flag matches spin / blocking functions",
              "%.1f %% of %d samples" % (100.0 * cpu_ok / max(cpu_all, 1), cpu_all), "-", "info")


BENCHMARKS = [
    ("A-condvar-overhead", bench_a),
    ("B-signals-blocked", bench_b_blocked),
    ("B-signals-running", bench_b_running),
    ("C-cpubound-vs-tools", bench_c),
    ("D-mixed-overhead", bench_d),
    ("E-handler-cost", bench_e),
    ("F-dump-ring", bench_f_dump),
    ("F-symbolize-bigcxx", bench_f_sym),
    ("G-memory", bench_g),
    ("H-startup", bench_h),
    ("I-fidelity", bench_i),
]

# Programs each benchmark needs (built by `make bench`).
NEEDS = {
    "A-condvar-overhead": ["condvar"],
    "B-signals-blocked": ["condvar"],
    "B-signals-running": ["condvar"],
    "C-cpubound-vs-tools": ["cpubound", "nop"],
    "D-mixed-overhead": ["mixed", "cpubound"],
    "E-handler-cost": ["handler"],
    "F-dump-ring": ["dump"],
    "F-symbolize-bigcxx": ["dump"],
    "G-memory": ["mem"],
    "H-startup": ["nop"],
    "I-fidelity": ["fidelity"],
}


def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description="libwallprof benchmarks")
    ap.add_argument("--budget", type=int, default=540, metavar="SECONDS",
                    help="once 60%% of this is used, the remaining benchmarks run their quick "
                    "variant (a note says which); 0: never (default %(default)s, so that `make "
                    "bench` stays under 10 minutes with the build)")
    ap.add_argument("--quick", action="store_true",
                    help="shorter variants: %d A pairs instead of %d, %.1f s B runs instead of "
                    "%.1f s, shorter C/D/E/G/I runs" % (QUICK_PAIRS, PAIRS, QUICK_SPIN_S, SPIN_S))
    ap.add_argument("-k", action="append", default=[], metavar="NAME",
                    help="only benchmarks whose name contains NAME (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("-v", action="store_true", help="log every run's output")
    a = ap.parse_args()
    VERBOSE = a.v

    selected = [(n, f) for n, f in BENCHMARKS
                if not a.k or any(k.lower() in n.lower() for k in a.k)]
    if a.list:
        for n, _ in BENCHMARKS:
            print(n)
        return 0
    if not selected:
        print("bench: no benchmark matches %s; see --list" % " ".join(a.k), file=sys.stderr)
        return 2
    need = [LIB] + sorted({prog(p) for n, _ in selected for p in NEEDS.get(n, [])})
    for f in need:
        if not os.path.exists(f):
            print("bench: %s is missing; run 'make bench'" % os.path.relpath(f, ROOT), file=sys.stderr)
            return 2

    header = machine_lines()
    load0 = load1()
    table = Table()
    t0 = time.monotonic()
    tmpdir = tempfile.mkdtemp(prefix="wallprof-bench.")
    failed = []
    per_bench = []
    went_quick = []
    try:
        for n, f in selected:
            log("running %s%s" % (n, " (quick)" if a.quick else ""))
            c0 = cpu_snapshot()
            quick = a.quick
            if not quick and a.budget and time.monotonic() - t0 > 0.6 * a.budget:
                quick = True
                went_quick.append(n)
                log("%s: %.0f s used of the %d s budget; running the quick variant"
                    % (n, time.monotonic() - t0, a.budget))
            try:
                f(table, tmpdir, quick)
            except RunError as e:
                failed.append(n)
                table.add(n, "run failed", "-", "ERROR")
                table.notes.append("%s: %s" % (n, e))
            c1 = cpu_snapshot()
            per_bench.append((n, c1[0] - c0[0], foreign_cpus(c0, c1)))
            log("%s took %.0f s; other processes used %.2f CPUs meanwhile" % per_bench[-1])
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    total = time.monotonic() - t0
    if went_quick:
        table.notes.append("ran in the quick variant to stay within --budget %d s (60 %% of it was "
                           "used before they started; the machine is slow or busy): %s"
                           % (a.budget, ", ".join(went_quick)))
    if per_bench:
        table.notes.append(
            "seconds per benchmark, and the CPUs other processes on the machine used meanwhile "
            "(of %d; not ours nor our children's): %s" % (usable_cpus(), ", ".join(
                "%s %.0f s/%.2f" % (n, s, c) for n, s, c in per_bench)))
    load_end = load1()
    if max(load0, load_end) > usable_cpus():
        table.notes.append("the machine was busy: 1-minute load average %.1f at the start, %.1f at the "
                           "end, for %d CPUs; expect noisy figures" % (load0, load_end, usable_cpus()))

    print("\n".join(header))
    print("settings: WALLPROF_HZ=%d, %s; benchmarks: %s"
          % (HZ, "quick" if a.quick else "full", ", ".join(n for n, _ in selected)))
    print()
    print("\n".join(table.render()))
    for n in table.notes:
        print("note: " + n)
    print()
    print("bench: %d rows, %d MISS, %d failed, %.0f s" % (len(table.rows), table.misses(), len(failed), total))
    if failed:
        return 2
    return 1 if a.strict and table.misses() else 0


if __name__ == "__main__":
    sys.exit(main())
