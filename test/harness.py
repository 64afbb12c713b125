"""Helpers shared by the end-to-end tests (test/e2e/*.py) and the driver
(test/run_tests.py): running programs with and without the preload, reading
the profiles they leave, checking them against Sentry's rules
(test/sentry_check.py), and the failure/note plumbing.

Each test/e2e module defines tests(rt) and returns its (name, function)
pairs; `rt` is this module. A test function takes the test's fresh
temporary directory and raises Failure (check() does) when an assertion
fails.
"""

import importlib.util
import json
import os
import re
import select
import signal
import subprocess
import time

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TEST_DIR)
BUILD = os.path.join(ROOT, "build")
LIB = os.path.join(BUILD, "libwallprof.so")
# The test build: the same library with the WALLPROF_TEST_* knobs compiled
# in (-DWP_TEST_HOOKS). A run that sets one of them gets it; every other run
# profiles with the library users get.
TEST_LIB = os.path.join(BUILD, "test", "libwallprof.so")
PROGS = os.path.join(BUILD, "progs")
PROG_SRC = os.path.join(TEST_DIR, "progs")

RUN_TIMEOUT = 60       # seconds for one program run
POLL_TIMEOUT = 10.0    # seconds to wait for a snapshot file to appear
POLL_STEP = 0.02
DEFAULT_HZ = 101
DEFAULT_RING_SECONDS = 30

# "wallprof: wrote PATH (...)", for snapshots too.
WROTE_RE = re.compile(r"^wallprof: wrote (\S+)", re.M)  # a whole line, never text inside one

VERBOSE = False  # set by the driver's -v


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
        lib = TEST_LIB if any(k.startswith("WALLPROF_TEST_") for k in (extra or {})) else LIB
        check(os.path.exists(lib), "%s not built" % os.path.relpath(lib, ROOT))
        env["LD_PRELOAD"] = lib
    if extra:
        env.update(extra)
    return env


def kill_group(proc):
    """SIGKILL to the process group of `proc` (started with
    start_new_session), then waits for it."""
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
        kill_group(proc)
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


def run_bounded(argv, cwd, env_extra=None, preload=True, timeout=RUN_TIMEOUT):
    """Like run_prog, but a timeout is not a failure: the program is killed
    and the Run has rc None and whatever it printed so far."""
    env = clean_env(env_extra, preload)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = proc.communicate()
        rc = None
    return Run(argv, cwd, proc.pid, rc, out.decode(errors="replace"), err.decode(errors="replace"))


def read_line(proc, deadline):
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


def tool(argv, what, timeout=60):
    """Runs a build or inspection tool (cc, readelf, eu-stack); returns its
    output, stdout and stderr together. A missing tool or a failure is a
    test failure naming `what`."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
    except FileNotFoundError:
        raise Failure("%s: %s is not installed" % (what, argv[0]))
    out = p.stdout.decode(errors="replace")
    check(p.returncode == 0, "%s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                    out.strip()[-300:]))
    return out


def elf_facts(path):
    """(its GNU build-id in hex or None, whether a section of it is
    compressed) for an ELF file, from readelf."""
    notes = tool(["readelf", "-nW", path], "readelf -n")
    m = re.search(r"Build ID: ([0-9a-f]+)", notes)
    sections = tool(["readelf", "-SW", path], "readelf -S")
    compressed = any(re.match(r"\s*\[\s*\d+\]", l) and re.search(r"\s[A-Z]*C[A-Z]*\s+\d+\s+\d+\s+\d+\s*$", l)
                     for l in sections.splitlines())
    return (m.group(1) if m else None), compressed


def keep_raw_run(argv, cwd, env_extra=None):
    """Runs `argv` under the preload with no converter to be found, so that
    its exit's raw dump stays; returns (run, the dump's path)."""
    env = {"WALLPROF_CONVERTER": os.path.join(cwd, "no-such-converter")}
    env.update(env_extra or {})
    r = run_bounded(argv, cwd, env_extra=env)
    raw = os.path.join(cwd, "wallprof.%d.raw" % r.pid)
    check(os.path.exists(raw), "no raw dump kept: %s" % r.describe())
    return r, raw


def convert_frames(raw, out, env_extra):
    """`wallprof convert RAW -o OUT` in a clean environment (no preload)
    plus `env_extra`: the profile's frames and the run's stderr lines."""
    p = subprocess.run([os.path.join(BUILD, "wallprof"), "convert", raw, "-o", out],
                       env=clean_env(env_extra, preload=False), capture_output=True, text=True,
                       timeout=RUN_TIMEOUT)
    check(p.returncode == 0, "wallprof convert %s: exit %d: %s" % (raw, p.returncode,
                                                                   p.stderr.strip()[-300:]))
    return profile_part(load_profile(out))["frames"], p.stderr.splitlines()
