#!/usr/bin/env python3
"""soak.py: a long run of build/progs/soak under libwallprof (`make soak`).

    scripts/soak.py [--seconds 600] [--hz 1000] [--snapshot-every 5] [--keep]

Runs test/progs/soak.c (thread churn, forks, dlopen/dlclose, blocking calls)
under the preload at --hz for --seconds, sends it SIGUSR2 every
--snapshot-every seconds and watches it:
- crashes: the program must exit 0 (it exits 1 itself on an anomaly: an
  EINTR or a wrong timeout in a blocking call, a child that did not exit 0);
- hangs: it prints a progress line every second; none for --hang-seconds
  (30) is a hang: the threads' kernel stacks are printed and it is killed;
- memory: VmRSS/VmHWM from /proc/PID/status every second; the peak, and
  whether RSS stopped growing: the maximum over the last third of the run at
  most 1.1 x the maximum around the baseline (or no more above it than the
  ring's reserved size: the ring's pages are touched as it fills, which is
  no leak), the baseline one third in;
- output: every snapshot and child profile is complete JSON (checked and
  deleted as they come, so the disk does not fill), every SIGUSR2 gives a
  snapshot, the exit profile passes test/sentry_check.py, no temporary file
  is left.
Prints one summary line
    soak: duration S s, samples N, snapshots K, forks F, threads T, peak RSS X MiB, failures 0
then one line per failure; exits 1 if there was one.
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
PROGRESS_RE = re.compile(r"^(progress|soak: done) (\d+) iterations (\d+) threads (\d+) forks (\d+) "
                         r"dlopens (\d+) anomalies (\d+)$")
WROTE_RE = re.compile(r"wallprof: wrote (\S+)")
RSS_GROWTH = 1.1
EXIT_GRACE = 180  # seconds after the planned end for the exit profile


def log(msg):
    print("soak: " + msg, flush=True)


class Reader(threading.Thread):
    """Collects a pipe's lines with their arrival time."""

    def __init__(self, pipe, on_line):
        super().__init__(daemon=True)
        self.pipe = pipe
        self.on_line = on_line

    def run(self):
        for raw in iter(self.pipe.readline, b""):
            self.on_line(raw.decode(errors="replace").rstrip("\n"))


def read_status(pid):
    """(VmRSS, VmHWM) in KiB, or None once the process is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            text = f.read()
    except OSError:
        return None
    vals = {}
    for key in ("VmRSS", "VmHWM"):
        m = re.search(r"^%s:\s+(\d+) kB" % key, text, re.M)
        vals[key] = int(m.group(1)) if m else 0
    if not vals["VmRSS"]:
        return None  # a zombie
    return vals["VmRSS"], vals["VmHWM"]


def kernel_stacks(pid):
    """What each thread is doing, from /proc (for a hang report)."""
    out = []
    for task in sorted(glob.glob("/proc/%d/task/*" % pid)):
        def rd(name):
            try:
                with open(os.path.join(task, name)) as f:
                    return f.read().strip()
            except OSError:
                return "?"
        out.append("  tid %s %-16s state %s wchan %s syscall %s" % (
            os.path.basename(task), rd("comm"), rd("stat").split(") ")[-1][:1], rd("wchan"),
            rd("syscall").split(" ")[0]))
    return out


def load_json(path):
    with open(path) as f:
        return json.load(f)


def sample_count(obj):
    return len(((obj or {}).get("profile") or {}).get("samples") or [])


def sentry_errors(obj):
    path = os.path.join(ROOT, "test", "sentry_check.py")
    if not os.path.exists(path):
        return []
    spec = importlib.util.spec_from_file_location("sentry_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.check(obj))


def main():
    ap = argparse.ArgumentParser(description="libwallprof soak test")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--hz", type=int, default=1000)
    ap.add_argument("--snapshot-every", type=float, default=5.0)
    ap.add_argument("--hang-seconds", type=float, default=30.0)
    ap.add_argument("--ring-seconds", type=int, default=30,
                    help="WALLPROF_RING_SECONDS for the run (default 30, the library's)")
    ap.add_argument("--ring-mb", type=int, default=8,
                    help="WALLPROF_RING_MB (default 8): the ring's pages are touched as it "
                         "fills, so RSS grows until it wraps; a small ring wraps early and "
                         "growth after that is growth elsewhere (0: the library's default)")
    ap.add_argument("--lib", default=os.path.join(BUILD, "libwallprof.so"))
    ap.add_argument("--prog", default=os.path.join(BUILD, "progs", "soak"))
    ap.add_argument("--plugin", default=os.path.join(BUILD, "progs", "libwpt_plugin.so"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    for path in (args.lib, args.prog, args.plugin):
        if not os.path.exists(path):
            print("soak: %s is missing; run 'make soak'" % path, file=sys.stderr)
            return 2
    os.makedirs(BUILD, exist_ok=True)
    work = tempfile.mkdtemp(prefix="soak-", dir=BUILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALLPROF_")}
    env.update({
        "LD_PRELOAD": os.path.abspath(args.lib),
        "WALLPROF_HZ": str(args.hz),
        "WALLPROF_RING_SECONDS": str(args.ring_seconds),
        "WALLPROF_LOG": "info",
        "WALLPROF_OUTPUT": os.path.join(work, "wallprof.%p.json"),
        "TMPDIR": work,  # fallbacks land where we look
    })
    if args.ring_mb:
        env["WALLPROF_RING_MB"] = str(args.ring_mb)
    log("%s for %.0f s at %d Hz, snapshot every %.0f s, ring %s, in %s"
        % (os.path.relpath(args.prog, ROOT), args.seconds, args.hz, args.snapshot_every,
           "%d MB" % args.ring_mb if args.ring_mb else "default", os.path.relpath(work, ROOT)))

    failures = []     # one line per failure
    details = []      # lines printed under them (kernel stacks, program output)
    infos = []        # lines printed after the summary
    lock = threading.Lock()
    state = {"last_progress": None, "done": None, "other_stderr": [], "wrote": 0}

    def on_stdout(line):
        m = PROGRESS_RE.match(line)
        with lock:
            if m:
                state["last_progress"] = time.monotonic()
                stats = dict(zip(("iterations", "threads", "forks", "dlopens", "anomalies"),
                                 map(int, m.groups()[2:])))
                stats["seconds"] = int(m.group(2))
                state["stats"] = stats
                if m.group(1) == "soak: done":
                    state["done"] = stats
            else:
                state["other_stderr"].append("stdout: " + line)

    def on_stderr(line):
        with lock:
            if WROTE_RE.search(line):
                state["wrote"] += 1
            elif not line.startswith("wallprof: "):
                state["other_stderr"].append(line)
            elif "no samples" not in line:
                state.setdefault("notices", []).append(line)

    t0 = time.monotonic()
    proc = subprocess.Popen([args.prog, args.plugin, "%g" % args.seconds], cwd=work, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    readers = [Reader(proc.stdout, on_stdout), Reader(proc.stderr, on_stderr)]
    for r in readers:
        r.start()
    state["last_progress"] = t0
    pid = proc.pid
    main_snap_re = re.compile(r"^wallprof\.%d\.(\d+)\.json$" % pid)
    child_re = re.compile(r"^wallprof\.(\d+)\.json$")
    rss = []          # (seconds since start, VmRSS KiB)
    hwm = 0
    sent = 0
    snapshots = {}    # n -> samples
    ring_kib = [0]    # the ring's reserved memory (wallprof.ring_bytes)
    children = 0
    bad_files = []
    next_snap = t0 + args.snapshot_every
    stop_snaps = t0 + max(0.0, args.seconds - 5)
    deadline = t0 + args.seconds + EXIT_GRACE
    hung = False

    def sweep():
        """Checks and deletes finished snapshot and child profiles."""
        nonlocal children
        for name in sorted(os.listdir(work)):
            path = os.path.join(work, name)
            m = main_snap_re.match(name)
            c = child_re.match(name)
            if not m and not (c and int(c.group(1)) != pid):
                continue
            try:
                obj = load_json(path)
            except (OSError, ValueError) as e:
                bad_files.append("%s: %s" % (name, e))
                obj = None
            if m:
                snapshots[int(m.group(1))] = sample_count(obj)
                w = (obj or {}).get("wallprof") or {}
                if isinstance(w.get("ring_bytes"), int):
                    ring_kib[0] = w["ring_bytes"] // 1024
            else:
                children += 1
            os.unlink(path)

    next_tick = t0
    while True:
        next_tick += 1.0
        time.sleep(max(0.0, next_tick - time.monotonic()))  # the 1 s sampling period
        now = time.monotonic()
        if proc.poll() is not None:
            break
        st = read_status(pid)
        if st:
            rss.append((now - t0, st[0]))
            hwm = max(hwm, st[1])
        if now >= next_snap and now < stop_snaps:
            try:
                os.kill(pid, signal.SIGUSR2)
                sent += 1
            except OSError:
                pass
            next_snap += args.snapshot_every
        sweep()
        with lock:
            quiet_for = now - state["last_progress"]
        if quiet_for > args.hang_seconds or now > deadline:
            hung = True
            why = ("no progress line for %.0f s" % quiet_for if quiet_for > args.hang_seconds
                   else "still running %.0f s after its planned end" % (now - t0 - args.seconds))
            failures.append("hang: %s" % why)
            details.extend(kernel_stacks(pid))
            os.killpg(pid, signal.SIGKILL)
            proc.wait()
            break
    rc = proc.wait()
    for r in readers:
        r.join(10)
    duration = time.monotonic() - t0
    sweep()

    # The exit status, the program's own checks.
    if not hung:
        if rc < 0:
            failures.append("crash: killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name))
        elif rc != 0:
            failures.append("the program exited with status %d" % rc)
    done = state.get("done")
    stats = done or state.get("stats") or {}
    if not hung and not done:
        failures.append("no 'soak: done' line")
    if stats.get("anomalies"):
        failures.append("the program saw %d anomalies (its stderr below)" % stats["anomalies"])
    for line in state["other_stderr"][:20]:
        details.append("  program: %s" % line)
    if state["other_stderr"] and not stats.get("anomalies"):
        failures.append("the program printed unexpected lines (below)")

    # The files.
    samples = 0
    final = os.path.join(work, "wallprof.%d.json" % pid)
    if not hung:
        if not os.path.exists(final):
            failures.append("no exit profile %s" % os.path.basename(final))
        else:
            try:
                obj = load_json(final)
                samples = sample_count(obj)
                errs = sentry_errors(obj)
                if errs:
                    failures.append("exit profile fails sentry_check: %s"
                                    % "; ".join(str(e) for e in errs[:3]))
                w = obj.get("wallprof") or {}
                losses = {k: w.get(k) for k in ("dropped_full", "overwritten", "threads_untracked",
                                                "send_failed", "pending", "unwind_failed")
                          if w.get(k)}
                if losses:
                    infos.append("exit profile loss counters: %s" % losses)
            except ValueError as e:
                failures.append("exit profile is not JSON: %s" % e)
    for b in bad_files:
        failures.append("not complete JSON: %s" % b)
    missing = sorted(set(range(1, sent + 1)) - set(snapshots))
    if not hung and missing:
        failures.append("%d of %d snapshots missing: %s" % (len(missing), sent,
                                                           " ".join(map(str, missing[:10]))))
    left = [f for f in os.listdir(work) if ".tmp" in f]
    if left:
        failures.append("temporary files left: %s" % " ".join(left[:5]))

    # Memory. RSS swings with each snapshot (symbolization, JSON), so the
    # baseline is the highest RSS within a snapshot period of the baseline
    # time, compared with the highest RSS in the last third.
    with open(os.path.join(work, "rss.tsv"), "w") as f:
        f.write("seconds\tVmRSS_KiB\n")
        for t, r in rss:
            f.write("%.1f\t%d\n" % (t, r))
    peak_kib = max([hwm] + [r for _, r in rss])
    slope_note = None
    # The ring's pages are touched as it fills (a run-length record may
    # stand for many ticks: whether it wrapped cannot be told from the
    # counters), which growth within its reserved size allows for.
    half = max(args.snapshot_every, 2.0)
    base_at = args.seconds / 3
    rss_note = ("too short to judge RSS growth (the baseline is at %.0f s; run at least %.0f s)"
                % (base_at, (base_at + half) / 0.8))
    if base_at + half <= args.seconds * 0.8 and rss:
        base = [r for t, r in rss if base_at - half <= t <= base_at + half]
        tail = [r for t, r in rss if t >= max(base_at + half, args.seconds * 2 / 3)]
        if base and tail:
            grow = max(tail) / max(base)
            pts = [(t, r) for t, r in rss if t >= max(base_at + half, args.seconds * 2 / 3)]
            if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
                mt = sum(t for t, _ in pts) / len(pts)
                mr = sum(r for _, r in pts) / len(pts)
                var = sum((t - mt) ** 2 for t, _ in pts)
                slope = sum((t - mt) * (r - mr) for t, r in pts) / var * 60 if var else 0.0
                slope_note = "RSS trend over the last third: %+.0f KiB/min" % slope
            # The sample array wraps first; the ring's frame and stack tables
            # are touched as new stacks come until compaction recycles them,
            # so growth within the ring's reserved size (WALLPROF_RING_MB)
            # is the ring filling up, not a leak.
            within_ring = ring_kib[0] and max(tail) - max(base) <= ring_kib[0]
            ok = grow <= RSS_GROWTH or within_ring
            rss_note = ("RSS at most %.1f MiB around %.0f s, at most %.1f "
                        "MiB in the last third (x%.2f; the ring reserves %.1f MiB): %s"
                        % (max(base) / 1024, base_at, max(tail) / 1024, grow,
                           ring_kib[0] / 1024,
                           "stable" if grow <= RSS_GROWTH else
                           "bounded by the ring" if ok else "STILL GROWING"))
            if not ok:
                failures.append("memory: " + rss_note)

    print("soak: duration %.0f s, samples %d, snapshots %d, forks %d, threads %d, peak RSS %.1f MiB, "
          "failures %d" % (duration, samples, len(snapshots), stats.get("forks", 0),
                           stats.get("threads", 0), peak_kib / 1024,
                           len(failures)), flush=True)
    log("%s" % rss_note)
    if slope_note:
        log(slope_note)
    for line in infos:
        log(line)
    log("%d iterations, %d dlopen/dlclose, %d child profiles, %d SIGUSR2 sent, %d wallprof "
        "'wrote' lines" % (stats.get("iterations", 0), stats.get("dlopens", 0), children, sent,
                           state["wrote"]))
    if snapshots:
        log("samples per snapshot: min %d, max %d" % (min(snapshots.values()),
                                                      max(snapshots.values())))
    for line in state.get("notices", [])[:5]:
        log("library notice: %s" % line)
    for f in failures:
        print("soak: FAIL %s" % f, flush=True)
    for line in details:
        print(line, flush=True)
    if failures or args.keep:
        log("work directory kept: %s" % os.path.relpath(work, ROOT))
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
