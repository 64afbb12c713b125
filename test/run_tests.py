#!/usr/bin/env python3
"""libwallprof test driver (run by `make test`).

Runs every unit test binary (build/unit/test_*, build/asan/test_*) and the
end-to-end tests: sample programs from test/progs/ run under the preload in a
fresh temporary directory, and assertions are made on the profile they leave
(presence, ratios and ranges, never exact counts) and on the program's own
behaviour (same exit code and stdout as without the preload).

Usage: test/run_tests.py [-k SUBSTRING] [--list] [-v]
Prints "PASS name" or "FAIL name: reason" per test, then "N passed, M failed";
exits 1 when a test failed.
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TEST_DIR)
BUILD = os.path.join(ROOT, "build")
LIB = os.path.join(BUILD, "libwallprof.so")
PROGS = os.path.join(BUILD, "progs")
PROG_SRC = os.path.join(TEST_DIR, "progs")

RUN_TIMEOUT = 60       # seconds for one program run
UNIT_TIMEOUT = 300     # seconds for one unit test binary (ASan is slow)
POLL_TIMEOUT = 10.0    # seconds to wait for a snapshot file to appear
POLL_STEP = 0.02
DEFAULT_HZ = 101
DEFAULT_RING_SECONDS = 30

# "wallprof: wrote PATH (...)", for snapshots too.
WROTE_RE = re.compile(r"wallprof: wrote (\S+)")

VERBOSE = False


class Failure(Exception):
    """A test assertion failed; the message is the one-line reason, `details`
    optional lines printed under it."""

    def __init__(self, reason, details=None):
        super().__init__(reason)
        self.details = details or []


def check(cond, reason):
    if not cond:
        raise Failure(reason)


def note(msg):
    if VERBOSE:
        print("    " + msg)


# ---------------------------------------------------------------------------
# Running programs


class Run:
    """Outcome of one program run."""

    def __init__(self, argv, cwd, pid, rc, stdout, stderr):
        self.argv = argv
        self.cwd = cwd
        self.pid = pid
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr

    def wallprof_lines(self):
        return [l for l in self.stderr.splitlines() if "wallprof:" in l]

    def other_stderr(self):
        """stderr without the library's own lines."""
        return [l for l in self.stderr.splitlines() if "wallprof:" not in l]

    def wrote_paths(self):
        """Paths from the "wallprof: wrote PATH" lines, absolute, in order."""
        out = []
        for m in WROTE_RE.finditer(self.stderr):
            path = m.group(1).rstrip(",;:")
            out.append(os.path.join(self.cwd, path))
        return out

    def profile_path(self):
        """The exit profile: the last "wrote" line, else wallprof.<pid>.json in cwd."""
        paths = self.wrote_paths()
        if paths:
            return paths[-1]
        path = os.path.join(self.cwd, "wallprof.%d.json" % self.pid)
        return path if os.path.exists(path) else None

    def __iter__(self):
        """Unpacks as (rc, stdout, stderr, profile path)."""
        return iter((self.rc, self.stdout, self.stderr, self.profile_path()))

    def describe(self):
        err = self.stderr.strip().splitlines()
        tail = " | ".join(err[-3:]) if err else "(empty)"
        return "rc=%s, stderr: %s" % (self.rc, tail)


def prog(name):
    path = os.path.join(PROGS, name)
    check(os.access(path, os.X_OK), "%s not built" % os.path.relpath(path, ROOT))
    return path


def clean_env(extra=None, preload=True):
    """The caller's environment without WALLPROF_* (so defaults apply), plus
    LD_PRELOAD when asked and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALLPROF_")}
    env.pop("LD_PRELOAD", None)
    if preload:
        check(os.path.exists(LIB), "build/libwallprof.so not built")
        env["LD_PRELOAD"] = LIB
    if extra:
        env.update(extra)
    return env


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def run_prog(argv, cwd, env_extra=None, preload=True, stdin_data=None, timeout=RUN_TIMEOUT):
    """Runs argv to completion; returns a Run. A timeout is a test failure."""
    env = clean_env(env_extra, preload)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(stdin_data.encode() if stdin_data else None, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise Failure("%s did not finish within %d s" % (" ".join(argv), timeout))
    return Run(argv, cwd, proc.pid, proc.returncode,
               out.decode(errors="replace"), err.decode(errors="replace"))


def run_under_preload(argv, env_extra=None, cwd=None, **kw):
    """Runs argv under LD_PRELOAD=build/libwallprof.so with `env_extra` added.
    Returns a Run, which also unpacks as (rc, stdout, stderr, profile path)."""
    return run_prog(argv, cwd, env_extra, preload=True, **kw)


def run_plain(argv, cwd, **kw):
    return run_prog(argv, cwd, None, preload=False, **kw)


def poll_for(path, timeout=POLL_TIMEOUT, proc=None):
    """Waits until `path` exists (it appears by rename, so it is complete).
    Polls every POLL_STEP; returns False on timeout or if `proc` exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        if proc is not None and proc.poll() is not None:
            return os.path.exists(path)
        time.sleep(POLL_STEP)  # polling an observable condition, not synchronization
    return os.path.exists(path)


# ---------------------------------------------------------------------------
# Profiles


def load_profile(path):
    check(path is not None, "no profile written")
    check(os.path.exists(path), "profile %s does not exist" % path)
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:
        raise Failure("profile %s is not JSON: %s" % (os.path.basename(path), e))


def exit_profile(run):
    """Loads the exit profile of a run; fails when there is none."""
    path = run.profile_path()
    check(path is not None, "no profile written (%s)" % run.describe())
    return load_profile(path)


_sentry_check = None


def sentry_errors(obj):
    """Errors from test/sentry_check.py check(obj)."""
    global _sentry_check
    if _sentry_check is None:
        path = os.path.join(TEST_DIR, "sentry_check.py")
        check(os.path.exists(path), "test/sentry_check.py is missing")
        spec = importlib.util.spec_from_file_location("sentry_check", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _sentry_check = mod
    return list(_sentry_check.check(obj))


def check_valid(obj, what="profile"):
    errors = sentry_errors(obj)
    check(not errors, "%s fails sentry_check (%d errors): %s"
          % (what, len(errors), "; ".join(str(e) for e in errors[:3])))


def profile_part(obj):
    check(isinstance(obj.get("profile"), dict), "no \"profile\" object")
    return obj["profile"]


def thread_names(obj):
    """tid string -> thread name."""
    meta = profile_part(obj).get("thread_metadata") or {}
    return {str(tid): (m or {}).get("name", "") for tid, m in meta.items()}


def samples_by_thread(obj):
    """tid string -> samples of that thread, in file order."""
    out = {}
    for s in profile_part(obj).get("samples", []):
        out.setdefault(str(s["thread_id"]), []).append(s)
    return out


def tids_named(obj, name):
    return [tid for tid, n in thread_names(obj).items() if n == name]


def thread_samples(obj, name):
    """Samples of the one thread called `name`; fails if there is not exactly one."""
    tids = tids_named(obj, name)
    check(len(tids) == 1, "expected one thread named %r, thread_metadata has %d (names: %s)"
          % (name, len(tids), sorted(set(thread_names(obj).values()))))
    return samples_by_thread(obj).get(tids[0], [])


def stack_frames(obj, stack_id):
    """Frame objects of a stack, leaf first."""
    p = profile_part(obj)
    return [p["frames"][i] for i in p["stacks"][stack_id]]


def stack_functions(obj, stack_id):
    """Function names of a stack, leaf first (None for unknown frames)."""
    return [f.get("function") for f in stack_frames(obj, stack_id)]


def share_with_function(obj, samples, function):
    if not samples:
        return 0.0
    hits = sum(1 for s in samples if function in stack_functions(obj, s["stack_id"]))
    return hits / len(samples)


def on_cpu_share(samples):
    return sum(1 for s in samples if s.get("on_cpu") is True) / len(samples) if samples else 0.0


def sample_rate(samples):
    """Samples per second between the first and the last sample."""
    times = sorted(int(s["elapsed_since_start_ns"]) for s in samples)
    check(len(times) >= 3, "too few samples (%d) to measure a rate" % len(times))
    span = (times[-1] - times[0]) / 1e9
    check(span > 0, "all samples have the same time")
    return (len(times) - 1) / span


def wallprof_section(obj):
    w = obj.get("wallprof")
    check(isinstance(w, dict), "no \"wallprof\" section")
    return w


def mark_line(src, mark):
    """1-based line number of the line holding `/* MARK:<mark> */` in test/progs/src."""
    with open(os.path.join(PROG_SRC, src)) as f:
        for n, line in enumerate(f, 1):
            if "MARK:%s " % mark in line or "MARK:%s*" % mark in line:
                return n
    raise Failure("MARK:%s not found in %s" % (mark, src))


def is_libc_module(module):
    base = os.path.basename(module or "")
    return base.startswith("libc.so") or base.startswith("libc-")


# ---------------------------------------------------------------------------
# End-to-end tests. Each gets a fresh temporary directory as `tmp`.

THREADS_SECONDS = "2.0"
THREADS_STDOUT = "threads: done\n"


def run_threads(tmp, env_extra=None, seconds=THREADS_SECONDS):
    r = run_under_preload([prog("threads"), seconds], env_extra, cwd=tmp)
    check(r.rc == 0, "threads exited with %s" % r.describe())
    check(r.stdout == THREADS_STDOUT, "threads stdout %r" % r.stdout)
    return r, exit_profile(r)


def test_valid(tmp):
    _, obj = run_threads(tmp)
    check_valid(obj)
    check(obj.get("platform") == "native", "platform is %r" % obj.get("platform"))
    w = wallprof_section(obj)
    check(w.get("snapshot") == 0, "exit profile has snapshot=%r" % w.get("snapshot"))
    check(obj.get("transaction", {}).get("active_thread_id") == w.get("pid"),
          "transaction.active_thread_id %r != pid %r"
          % (obj.get("transaction", {}).get("active_thread_id"), w.get("pid")))


def test_functions_on_threads(tmp):
    _, obj = run_threads(tmp)
    names = thread_names(obj)
    for want in ("busy", "sleeper", "piper"):
        check(want in names.values(), "no thread named %r in thread_metadata (have %s)"
              % (want, sorted(set(names.values()))))
    by_tid = samples_by_thread(obj)
    for tid, name in names.items():
        check(not (name.startswith("wallprof") and by_tid.get(tid)),
              "profiler thread %r (%s) has %d samples" % (name, tid, len(by_tid.get(tid, []))))
    for thread, fn in (("busy", "wpt_burn_cpu"), ("sleeper", "wpt_nap"), ("piper", "wpt_wait_pipe")):
        samples = thread_samples(obj, thread)
        check(len(samples) >= 50, "thread %s has only %d samples" % (thread, len(samples)))
        share = share_with_function(obj, samples, fn)
        note("%s: %d samples, %.0f%% with %s" % (thread, len(samples), share * 100, fn))
        if share < 0.8:
            common = {}
            for s in samples:
                key = " <- ".join(str(f) for f in stack_functions(obj, s["stack_id"])[:4])
                common[key] = common.get(key, 0) + 1
            top = max(common.items(), key=lambda kv: kv[1])
            raise Failure("%s in only %.0f%% of %d %s samples; most common stack: %s (%d)"
                          % (fn, share * 100, len(samples), thread, top[0], top[1]))


def test_wall_balance(tmp):
    _, obj = run_threads(tmp)
    busy = thread_samples(obj, "busy")
    sleeper = thread_samples(obj, "sleeper")
    piper = thread_samples(obj, "piper")
    nb, ns = len(busy), len(sleeper)
    note("busy %d, sleeper %d, piper %d samples" % (nb, ns, len(piper)))
    check(nb and ns, "busy has %d and sleeper %d samples" % (nb, ns))
    check(min(nb, ns) / max(nb, ns) >= 0.8,
          "busy (%d) and sleeper (%d) sample counts differ by more than 20%%" % (nb, ns))
    check(on_cpu_share(busy) >= 0.85, "busy is on-CPU in only %.0f%% of samples"
          % (on_cpu_share(busy) * 100))
    for name, samples in (("sleeper", sleeper), ("piper", piper)):
        check(samples, "%s has no samples" % name)
        off = 1 - on_cpu_share(samples)
        check(off >= 0.85, "%s is off-CPU in only %.0f%% of samples" % (name, off * 100))


def _check_rate(tmp, hz):
    env = {"WALLPROF_HZ": str(hz)} if hz != DEFAULT_HZ else None
    _, obj = run_threads(tmp, env)
    check(wallprof_section(obj).get("hz") == hz, "wallprof.hz is %r, want %d"
          % (wallprof_section(obj).get("hz"), hz))
    rate = sample_rate(thread_samples(obj, "sleeper"))
    note("sleeper rate at %d Hz: %.1f" % (hz, rate))
    check(0.85 * hz <= rate <= 1.05 * hz,
          "sleeper sampled at %.1f/s, want %d Hz (%.0f..%.0f)" % (rate, hz, 0.85 * hz, 1.05 * hz))


def test_rate(tmp):
    _check_rate(tmp, DEFAULT_HZ)


def test_rate_200hz(tmp):
    _check_rate(tmp, 200)


def test_lines_and_inline(tmp):
    _, obj = run_threads(tmp)
    step_line = mark_line("threads.c", "inline_step")
    call_line = mark_line("threads.c", "inline_call")
    p = profile_part(obj)
    frames = p["frames"]

    inl = [i for i, f in enumerate(frames) if f.get("function") == "wpt_inline_step"]
    check(inl, "no frame with function wpt_inline_step")
    seen = sorted({(f.get("filename"), f.get("lineno"), f.get("inlined")) for f in
                   (frames[i] for i in inl)}, key=str)
    good = [i for i in inl if frames[i].get("inlined") is True
            and frames[i].get("filename") == "threads.c" and frames[i].get("lineno") == step_line]
    check(good, "no wpt_inline_step frame with inlined=true, threads.c:%d; seen "
          "(filename, lineno, inlined): %s" % (step_line, seen[:5]))

    good = set(good)
    outer_seen = set()
    found = False
    for st in p["stacks"]:
        for k in range(len(st) - 1):
            if st[k] in good:
                outer = frames[st[k + 1]]
                outer_seen.add((outer.get("function"), outer.get("lineno")))
                if outer.get("function") == "wpt_burn_cpu" and outer.get("lineno") == call_line:
                    found = True
    check(found, "the frame after the inlined wpt_inline_step is not wpt_burn_cpu at line %d; "
          "seen (function, lineno): %s" % (call_line, sorted(outer_seen, key=str)[:5]))

    burn = [f for f in frames if f.get("function") == "wpt_burn_cpu"]
    check(any((f.get("abs_path") or "").endswith("test/progs/threads.c") for f in burn),
          "no wpt_burn_cpu frame with abs_path .../test/progs/threads.c (seen %s)"
          % sorted({str(f.get("abs_path")) for f in burn}))
    check(all(f.get("in_app") is True for f in burn), "a wpt_burn_cpu frame is not in_app")
    libc = [f for f in frames if is_libc_module(f.get("module"))]
    check(libc, "no frame from libc (modules: %s)"
          % sorted({str(f.get("module")) for f in frames})[:5])
    check(all(f.get("in_app") is False for f in libc), "a libc frame has in_app != false")


def test_demangled(tmp):
    r = run_under_preload([prog("cxx")], cwd=tmp)
    check(r.rc == 0, "cxx exited with %s" % r.describe())
    obj = exit_profile(r)
    fns = {f.get("function") for f in profile_part(obj)["frames"]}
    check("wpt::Worker::spin(int)" in fns, "no frame wpt::Worker::spin(int); spin-like: %s"
          % sorted(str(f) for f in fns if f and "spin" in f))


def _read_line(proc, deadline):
    """Reads one line from proc.stdout before `deadline` (monotonic)."""
    buf = b""
    fd = proc.stdout.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")


def _check_snapshot(tmp, pid, n, proc):
    path = os.path.join(tmp, "wallprof.%d.%d.json" % (pid, n))
    check(poll_for(path, proc=proc), "snapshot %d: %s did not appear within %.0f s"
          % (n, os.path.basename(path), POLL_TIMEOUT))
    obj = load_profile(path)
    check_valid(obj, "snapshot %d" % n)
    w = wallprof_section(obj)
    check(w.get("snapshot") == n, "snapshot %d has wallprof.snapshot=%r" % (n, w.get("snapshot")))
    for name in ("busy", "sleeper"):
        check(thread_samples(obj, name), "snapshot %d has no samples of %s" % (n, name))
    return path


def _snapshot_session(tmp, env_extra, sig, count):
    """Runs the snapshot program under the preload, takes `count` snapshots
    with signal `sig` after "ready", then lets it finish. Returns the Run
    and the snapshot paths."""
    proc = subprocess.Popen([prog("snapshot")], cwd=tmp, env=clean_env(env_extra),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    err_chunks = []
    drain = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    drain.start()
    line, rest = "", b""
    snaps = []
    try:
        line = _read_line(proc, time.monotonic() + 20)
        check(line == "ready\n", "expected 'ready', got %r (rc %s)" % (line, proc.poll()))
        for n in range(1, count + 1):
            os.kill(proc.pid, sig)
            snaps.append(_check_snapshot(tmp, proc.pid, n, proc))
            check(proc.poll() is None, "program exited (rc %s) after snapshot %d"
                  % (proc.returncode, n))
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        rc = proc.wait(timeout=RUN_TIMEOUT)  # it prints one short line: no pipe stall
        rest = proc.stdout.read()
    except subprocess.TimeoutExpired:
        raise Failure("snapshot did not exit within %d s" % RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            _kill(proc)
        drain.join(RUN_TIMEOUT)
    stderr = b"".join(err_chunks).decode(errors="replace")
    r = Run([prog("snapshot")], tmp, proc.pid, rc, line + rest.decode(errors="replace"), stderr)
    check(rc == 0, "snapshot exited with %s" % r.describe())
    check(r.stdout == "ready\nsnapshot: done\n", "snapshot stdout %r" % r.stdout)
    for path in snaps:
        check(os.path.basename(path) in stderr, "stderr does not mention %s"
              % os.path.basename(path))
    obj = exit_profile(r)
    check_valid(obj, "exit profile")
    check(wallprof_section(obj).get("snapshot") == 0, "exit profile has snapshot=%r"
          % wallprof_section(obj).get("snapshot"))
    check(os.path.basename(r.profile_path()) == "wallprof.%d.json" % r.pid,
          "exit profile is %s" % os.path.basename(r.profile_path()))
    return r, snaps


def test_snapshot(tmp):
    _snapshot_session(tmp, None, signal.SIGUSR2, 2)


def test_snapshot_usr1(tmp):
    _snapshot_session(tmp, {"WALLPROF_SNAPSHOT_SIGNAL": "USR1"}, signal.SIGUSR1, 1)


IDENTICAL_CASES = (
    (["exitcode"], 7),
    (["exitcode", "return"], 3),
    (["threads", "1.0"], 0),
    (["cxx"], 0),
)


def test_identical_behaviour(tmp):
    for argv, want_rc in IDENTICAL_CASES:
        full = [prog(argv[0])] + argv[1:]
        label = " ".join(argv)
        plain = run_plain(full, tmp)
        check(plain.rc == want_rc, "%s without preload: rc %s, want %d" % (label, plain.rc, want_rc))
        pre = run_under_preload(full, cwd=tmp)
        check(pre.rc == plain.rc, "%s: rc %s under preload, %s without (%s)"
              % (label, pre.rc, plain.rc, pre.describe()))
        check(pre.stdout == plain.stdout, "%s: stdout differs under preload: %r vs %r"
              % (label, pre.stdout[-200:], plain.stdout[-200:]))
        check(pre.other_stderr() == plain.other_stderr(), "%s: stderr differs besides wallprof "
              "lines: %r" % (label, pre.other_stderr()[:3]))
        check(len(pre.wallprof_lines()) == 1, "%s: %d wallprof stderr lines, want 1: %r"
              % (label, len(pre.wallprof_lines()), pre.wallprof_lines()[:3]))
        check(pre.wrote_paths(), "%s: no 'wallprof: wrote' line" % label)
        check_valid(exit_profile(pre), "%s profile" % label)


def test_own_usr2(tmp):
    r = run_under_preload([prog("ownusr2")], cwd=tmp)
    check(r.rc == 0 and r.stdout == "handled 3\n", "ownusr2: rc %s, stdout %r (%s)"
          % (r.rc, r.stdout, r.describe()))
    check(any("snapshot" in l for l in r.wallprof_lines()),
          "no wallprof stderr line about snapshots: %r" % r.wallprof_lines())
    check_valid(exit_profile(r))


BAD_CONFIG = (
    ("WALLPROF_HZ", "abc"),
    ("WALLPROF_HZ", "0"),
    ("WALLPROF_HZ", "999999"),
    ("WALLPROF_RING_SECONDS", "-5"),
    ("WALLPROF_MAX_DEPTH", "zz"),
)


def test_bad_config(tmp):
    argv = [prog("exitcode"), "return"]
    plain = run_plain(argv, tmp)
    for var, value in BAD_CONFIG:
        label = "%s=%s" % (var, value)
        r = run_under_preload(argv, {var: value}, cwd=tmp)
        check(r.rc == plain.rc and r.stdout == plain.stdout,
              "%s: program behaved differently (rc %s vs %s)" % (label, r.rc, plain.rc))
        lines = [l for l in r.stderr.splitlines() if l.startswith("wallprof: ") and var in l]
        check(lines, "%s: no stderr line starting 'wallprof: ' naming %s; stderr: %r"
              % (label, var, r.wallprof_lines()))
        obj = exit_profile(r)
        check_valid(obj, "%s profile" % label)
        w = wallprof_section(obj)
        check(w.get("hz") == DEFAULT_HZ, "%s: wallprof.hz is %r, want %d"
              % (label, w.get("hz"), DEFAULT_HZ))
        if var == "WALLPROF_RING_SECONDS":
            check(w.get("ring_seconds") == DEFAULT_RING_SECONDS, "%s: ring_seconds is %r"
                  % (label, w.get("ring_seconds")))
        if var == "WALLPROF_MAX_DEPTH":
            d = w.get("max_depth")
            check(isinstance(d, int) and d > 0, "%s: max_depth is %r" % (label, d))


def test_output_template(tmp):
    sub = os.path.join(tmp, "sub")
    os.mkdir(sub)
    r = run_under_preload([prog("exitcode")], {"WALLPROF_OUTPUT": os.path.join(sub, "prof-%p.json")},
                          cwd=tmp)
    check(r.rc == 7, "exitcode: %s" % r.describe())
    want = os.path.join(sub, "prof-%d.json" % r.pid)
    check(os.path.exists(want), "%s not written; sub/ has %s, stderr: %r"
          % (os.path.relpath(want, tmp), sorted(os.listdir(sub)), r.wallprof_lines()))
    check(r.profile_path() == want, "stderr names %r, want %r" % (r.profile_path(), want))
    check_valid(load_profile(want))
    check(not glob.glob(os.path.join(tmp, "wallprof.*")), "a default-named file was written too")


def test_quiet(tmp):
    r = run_under_preload([prog("exitcode")], {"WALLPROF_LOG": "quiet"}, cwd=tmp)
    check(r.rc == 7, "exitcode: %s" % r.describe())
    check(not r.wallprof_lines(), "quiet run printed %r" % r.wallprof_lines())
    path = os.path.join(tmp, "wallprof.%d.json" % r.pid)
    check(os.path.exists(path), "profile %s not written; cwd has %s"
          % (os.path.basename(path), sorted(os.listdir(tmp))))
    check_valid(load_profile(path))


def test_dlclosed_plugin(tmp):
    """A plugin dlclose'd before exit still resolves (module map recorded at
    capture time)."""
    plugin = os.path.join(PROGS, "libwpt_plugin.so")
    r = run_under_preload([prog("plugin"), plugin], cwd=tmp)
    check(r.rc == 0, "plugin: %s" % r.describe())
    check("plugin: unloaded" in r.stdout, "the plugin was not unloaded: %r" % r.stdout)
    obj = exit_profile(r)
    check_valid(obj)
    frames = profile_part(obj)["frames"]
    hits = [f for f in frames if f.get("function") == "wpt_plugin_work"]
    check(hits, "no frame wpt_plugin_work; functions: %s"
          % sorted({str(f.get("function")) for f in frames})[:12])
    check(all(str(f.get("module", "")).endswith("libwpt_plugin.so") for f in hits),
          "wpt_plugin_work frames have module %s" % {f.get("module") for f in hits})
    check(any(h.get("filename") == "libwpt_plugin.c" and h.get("lineno") for h in hits),
          "wpt_plugin_work has no file:line")
    images = obj.get("debug_meta", {}).get("images", [])
    check(any(i.get("code_file", "").endswith("libwpt_plugin.so") and i.get("debug_id")
              for i in images), "no debug image for the unloaded plugin")
    fns = {f.get("function") for f in frames}
    check("wpt_after_unload" in fns, "no samples after the unload")


E2E_TESTS = [
    ("valid", test_valid),
    ("functions_on_threads", test_functions_on_threads),
    ("wall_balance", test_wall_balance),
    ("rate", test_rate),
    ("rate_200hz", test_rate_200hz),
    ("lines_and_inline", test_lines_and_inline),
    ("demangled", test_demangled),
    ("snapshot", test_snapshot),
    ("snapshot_usr1", test_snapshot_usr1),
    ("identical_behaviour", test_identical_behaviour),
    ("own_usr2", test_own_usr2),
    ("bad_config", test_bad_config),
    ("output_template", test_output_template),
    ("quiet", test_quiet),
    ("dlclosed_plugin", test_dlclosed_plugin),
]


# ---------------------------------------------------------------------------
# Driver


def unit_tests():
    """(name, function) for every built unit test binary."""
    out = []
    for kind in ("unit", "asan"):
        for path in sorted(glob.glob(os.path.join(BUILD, kind, "test_*"))):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                out.append(("%s/%s" % (kind, os.path.basename(path)),
                            lambda tmp, path=path: run_unit(path, tmp)))
    return out


def run_unit(path, tmp):
    """Runs one unit test binary from the source root (fixtures are found
    relative to it), with TMPDIR pointing at the test's temporary directory."""
    env = clean_env(preload=False)
    env["TMPDIR"] = tmp
    try:
        p = subprocess.run([path], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=UNIT_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise Failure("did not finish within %d s" % UNIT_TIMEOUT)
    if p.returncode != 0:
        lines = p.stdout.decode(errors="replace").strip().splitlines()
        raise Failure("exit status %d%s" % (p.returncode, (": " + lines[-1]) if lines else ""),
                      lines[-20:])


def run_one(name, fn):
    tmp = tempfile.mkdtemp(prefix="wallprof-test-")
    t0 = time.monotonic()
    details = []
    try:
        fn(tmp)
        ok, reason = True, None
    except Failure as e:
        ok, reason, details = False, str(e), e.details
    except Exception as e:  # a bug in the test or a malformed profile
        ok, reason = False, "%s: %s" % (type(e).__name__, e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    reason = " ".join((reason or "").split())
    if len(reason) > 600:
        reason = reason[:600] + "..."
    if ok:
        print("PASS %s" % name)
    else:
        print("FAIL %s: %s" % (name, reason))
        for line in details:
            line = "".join(c if c.isprintable() else "?" for c in line)
            print("    " + (line[:300] + "..." if len(line) > 300 else line))
    note("%.1f s" % (time.monotonic() - t0))
    sys.stdout.flush()
    return ok


def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description="libwallprof test suite")
    ap.add_argument("-k", metavar="SUBSTRING", help="only tests whose name contains SUBSTRING")
    ap.add_argument("--list", action="store_true", help="list test names and exit")
    ap.add_argument("-v", action="store_true", help="print measurements and timings")
    args = ap.parse_args()
    VERBOSE = args.v

    tests = unit_tests() + E2E_TESTS
    if args.k:
        tests = [(n, f) for n, f in tests if args.k in n]
    if args.list:
        for n, _ in tests:
            print(n)
        return 0
    passed = failed = 0
    for name, fn in tests:
        if run_one(name, fn):
            passed += 1
        else:
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
