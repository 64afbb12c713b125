"""Shared helpers of the benchmarks: paths, running a program with or
without a profiler, side-by-side ordering and medians, the table, and the
machine's description and load."""

import hashlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable, NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, "build")
LIB = os.path.join(BUILD, "libwallprof.so")
CONDVAR = os.path.join(BUILD, "bench", "condvar")

HZ = 101
RUN_TIMEOUT = 180          # seconds for one program run
MAX_THREADS_DEFAULT = 1024

WROTE_RE = re.compile(r"wallprof: wrote (\S+)")
THREADS_RE = re.compile(r"(\d+) samples, (\d+) threads")

VERBOSE = False  # -v: set by the driver
_state = {}      # calibration and tool checks shared between benchmarks


class RunError(Exception):
    pass


class Benchmark(NamedTuple):
    name: str                         # selected with -k (a substring)
    run: Callable                     # run(table, tmpdir, quick)
    needs: tuple = ()                 # programs under build/bench/ it runs


def log(msg):
    """Progress on stderr, so stdout carries the table only."""
    print("bench: " + msg, file=sys.stderr, flush=True)


def vlog(msg):
    """log() with -v only."""
    if VERBOSE:
        log(msg)


def prog(name):
    return os.path.join(BUILD, "bench", name)


def install_hint(pkgs):
    """The exact command that installs the Debian packages PKGS (a benchmark
    never runs apt-get itself: `make bench` runs scripts/install-deps.sh bench)."""
    return "not installed; run as root: apt-get install -y %s (or scripts/install-deps.sh bench)" % pkgs


# ---- statistics and side-by-side order ---------------------------------------

def med(xs):
    return statistics.median(xs)


def fmt_range(xs, f):
    return "%s..%s" % (f % min(xs), f % max(xs))


def spread(xs, f="%.3f"):
    return fmt_range(xs, f)


def iqr(xs, f="%.3f"):
    """The interquartile range, for many runs whose extremes are noise."""
    q = statistics.quantiles(xs, n=4)
    return "%s..%s" % (f % q[0], f % q[2])


def pair_order(i, first, second):
    """The two runs of pair i, the order flipped every pair, so a drift of
    the machine's speed weighs on both sides alike."""
    return (first, second) if i % 2 == 0 else (second, first)


def rotation(kinds, r):
    """Round r of runs of several kinds side by side, the order rotated every round."""
    k = r % len(kinds)
    return kinds[k:] + kinds[:k]


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


# ---- the library's output -----------------------------------------------------

def written_profile(stderr, cmd, tmpdir):
    """The profile path from the library's "wallprof: wrote PATH" line."""
    m = WROTE_RE.search(stderr)
    if not m:
        raise RunError("no profile written by %s: %s" % (" ".join(cmd), stderr.strip()[-500:]))
    path = m.group(1)
    return path if os.path.isabs(path) else os.path.join(tmpdir, path)


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


# ---- running the programs -------------------------------------------------------

def clean_env():
    return {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith("WALLPROF_") and not k.startswith("CPUPROFILE")}


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
    vlog("%s%s -> %s" % ("[preload] " if preload else "", " ".join(cmd[1:]), p.stdout.strip()))
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
        vlog("  wallprof " + json.dumps(res["wallprof"]))
    return res


GPERF_LIB = "/usr/lib/x86_64-linux-gnu/libprofiler.so.0"


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
    vlog("[%s] %s -> %s" % (tool, " ".join(cmd[-len(args):]), p.stdout.strip()[:300]))
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


def timed_spawns(path, argv, env, n):
    """Starts PATH n times one after the other (posix_spawn, no shell) and
    returns the milliseconds per start, waiting included."""
    t0 = time.perf_counter()
    for _ in range(n):
        pid = os.posix_spawn(path, argv, env)
        _, st = os.waitpid(pid, 0)
        if st != 0:
            raise RunError("%s exited with wait status %d" % (" ".join(argv), st))
    return (time.perf_counter() - t0) / n * 1e3
