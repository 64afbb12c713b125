"""Stacks of blocked threads (test/progs/blocked_stacks.c: one named thread
blocked in each kind of call): never signalled, their samples off-CPU with the
syscall label and the caller chain from the libc function upward, the same
app frames as eu-stack shows."""

import os
import re
import shutil
import signal
import subprocess
import threading
import time

# t_ thread of test/progs/blocked_stacks.c -> (chain name, syscall labels, libc leaf
# names).
# The chain is wpt_<chain>_inner called by wpt_<chain>_outer; a leaf name
# matches a libc function whose name contains it (__poll, ___pthread_cond_wait...).
BLOCKERS = (
    ("t_nanosleep", "nanosleep", ("clock_nanosleep", "nanosleep"), ("nanosleep",)),
    ("t_poll", "poll", ("poll", "ppoll"), ("poll",)),
    ("t_epoll", "epoll", ("epoll_wait", "epoll_pwait", "epoll_pwait2"), ("epoll_wait", "epoll_pwait")),
    ("t_select", "select", ("select", "pselect6"), ("select",)),
    ("t_read", "read", ("read",), ("read",)),
    ("t_cond", "cond", ("futex",), ("pthread_cond_wait",)),
    ("t_mutex", "mutex", ("futex",), ("pthread_mutex_lock",)),
    ("t_sem", "sem", ("futex",), ("sem_wait",)),
    ("t_sigwait", "sigwait", ("rt_sigtimedwait",), ("sigtimedwait",)),
)
BLOCKERS_HZ = 101
BLOCKED_SHARE = 0.8
# A t_ thread runs for a few microseconds before it blocks and after it is
# woken; a tick can catch it running then and legitimately signal it. A
# blocked thread that is signalled gets ~HZ signals a second instead.
STRAY_SIGNALS = 2

EU_STACK_THREADS = ("t_poll", "t_nanosleep", "t_cond")
EU_FRAME_RE = re.compile(r"^#(\d+)\s+0x([0-9a-fA-F]+)\s*(.*?)(?:\s+-\s+(\S+))?\s*$")


def parse_eu_stack(text):
    """tid string -> [(function, module)] leaf first, from `eu-stack -m` output."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^TID (\d+):", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = EU_FRAME_RE.match(line.strip())
        if m and cur is not None:
            fn = m.group(3).strip() or None
            cur.append((fn, m.group(4)))
    return out


def app_chain(frames, exe):
    """From the first wpt_ frame upward, the frames of the executable `exe`."""
    fns = [f for f, _ in frames]
    start = next((i for i, f in enumerate(fns) if f and f.startswith("wpt_")), None)
    if start is None:
        return []
    chain = []
    for fn, mod in frames[start:]:
        if mod and os.path.realpath(mod) != os.path.realpath(exe):
            break
        chain.append(fn)
    return chain


def contains_run(seq, run):
    n = len(run)
    return any(seq[i:i + n] == run for i in range(len(seq) - n + 1))


def tests(rt):
    check, note = rt.check, rt.note

    def _blockers_session(tmp, env_extra, hold_s, while_ready=None):
        """Runs blocked_stacks under the preload; after "ready" calls
        while_ready(proc) (if any), lets `hold_s` seconds of wall time pass
        since "ready" for samples to accumulate, then sends the line and waits
        for the end. Returns (Run, while_ready's result)."""
        argv = [rt.prog("blocked_stacks")]
        proc = subprocess.Popen(argv, cwd=tmp, env=rt.clean_env(env_extra), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        err_chunks = []
        drain = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()),
                                 daemon=True)
        drain.start()
        line, rest, extra = "", b"", None
        try:
            line = rt.read_line(proc, time.monotonic() + 20)
            check(line == "ready\n", "expected 'ready', got %r (rc %s)" % (line, proc.poll()))
            ready_at = time.monotonic()
            if while_ready is not None:
                extra = while_ready(proc)
            left = ready_at + hold_s - time.monotonic()
            if left > 0:
                time.sleep(left)  # wall time for samples to accumulate, not synchronization
            check(proc.poll() is None, "blocked_stacks exited early (rc %s)"
                  % proc.returncode)
            proc.stdin.write(b"go\n")
            proc.stdin.close()
            rc = proc.wait(timeout=rt.RUN_TIMEOUT)
            rest = proc.stdout.read()
        except subprocess.TimeoutExpired:
            raise rt.Failure("blocked_stacks did not exit within %d s after the line"
                             % rt.RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                rt.kill_group(proc)
            drain.join(rt.RUN_TIMEOUT)
        stderr = b"".join(err_chunks).decode(errors="replace")
        r = rt.Run(argv, tmp, proc.pid, rc, line + rest.decode(errors="replace"), stderr)
        check(rc == 0, "blocked_stacks exited with %s" % r.describe())
        check(r.stdout == "ready\nblocked_stacks: done\n", "blocked_stacks stdout %r" % r.stdout)
        return r, extra

    def _describe_sample(obj, s, depth=6):
        fns = rt.stack_functions(obj, s["stack_id"])[:depth]
        return "on_cpu=%s syscall=%r: %s" % (s.get("on_cpu"), s.get("syscall"),
                                             " <- ".join(str(f) for f in fns))

    def _blocked_sample_problem(obj, s, chain, labels, leaves):
        """Why sample `s` is not a proper blocked sample of chain wpt_<chain>_*
        (None when it is)."""
        if s.get("on_cpu") is not False:
            return "on_cpu is %r" % s.get("on_cpu")
        if s.get("syscall") not in labels:
            return "syscall label %r not in %s" % (s.get("syscall"), "/".join(labels))
        frames = rt.stack_frames(obj, s["stack_id"])
        fns = [f.get("function") or "" for f in frames]
        inner, outer = "wpt_%s_inner" % chain, "wpt_%s_outer" % chain
        if inner not in fns:
            return "no %s frame" % inner
        k = fns.index(inner)
        if k + 1 >= len(fns) or fns[k + 1] != outer:
            return "%s is followed by %r, not %s" % (
                inner, fns[k + 1] if k + 1 < len(fns) else None, outer)
        if k == 0:
            return "no libc frame below %s" % inner
        leaf = frames[0]
        if not rt.is_libc_module(leaf.get("module")) or not any(n in fns[0] for n in leaves):
            return "leaf frame %r (module %s) is not libc's %s" % (
                fns[0], os.path.basename(str(leaf.get("module"))), "/".join(leaves))
        for f in frames[1:k]:
            if not rt.is_libc_module(f.get("module")):
                return "non-libc frame %r (%s) between the leaf and %s" % (
                    f.get("function"), os.path.basename(str(f.get("module"))), inner)
        return None

    def check_blocked_thread(obj, thread, chain, labels, leaves, min_samples=50):
        """≥ BLOCKED_SHARE of `thread`'s samples are off-CPU, labelled with one of
        `labels`, have a libc leaf named like one of `leaves` and hold
        wpt_<chain>_inner right below wpt_<chain>_outer. Returns the tid."""
        tids = rt.tids_named(obj, thread)
        check(len(tids) == 1, "expected one thread named %s, got %d" % (thread, len(tids)))
        samples = rt.samples_by_thread(obj).get(tids[0], [])
        check(len(samples) >= min_samples, "%s has only %d samples" % (thread, len(samples)))
        why = {}
        good = 0
        for s in samples:
            p = _blocked_sample_problem(obj, s, chain, labels, leaves)
            if p is None:
                good += 1
            else:
                why.setdefault(p, []).append(s)
        share = good / len(samples)
        note("%s: %d samples, %.0f%% blocked in %s with wpt_%s_inner <- wpt_%s_outer"
             % (thread, len(samples), share * 100, "/".join(labels), chain, chain))
        if share < BLOCKED_SHARE:
            reason, bad = max(why.items(), key=lambda kv: len(kv[1]))
            raise rt.Failure("%s: only %.0f%% of %d samples are proper blocked samples; most "
                             "common problem (%d samples): %s; e.g. %s"
                             % (thread, share * 100, len(samples), len(bad), reason,
                                _describe_sample(obj, bad[0])))
        return tids[0]

    def thread_counters(obj, what):
        """wallprof.threads: tid string -> {"signals": N, "samples": N}."""
        th = rt.wallprof_section(obj).get("threads")
        check(isinstance(th, dict), "%s: no wallprof.threads object (wallprof keys: %s)"
              % (what, sorted(rt.wallprof_section(obj))))
        return {str(k): v for k, v in th.items()}

    def thread_signals(counters, tid, thread, what):
        entry = counters.get(tid)
        check(isinstance(entry, dict) and isinstance(entry.get("signals"), int),
              "%s: wallprof.threads has no signals count for %s (%s): %r"
              % (what, thread, tid, entry))
        return entry["signals"]

    def check_signals_blocked_zero(obj, what):
        n = rt.wallprof_section(obj).get("signals_blocked")
        check(n == 0, "%s: wallprof.signals_blocked is %r, want 0" % (what, n))

    def test_blocked_stacks(tmp):
        """Blocked threads are never signalled; their samples are off-CPU, carry
        the syscall label and the caller chain from the libc function upward."""
        snaps = []

        def two_snapshots(proc):
            # Two snapshots while every t_ thread is blocked: their signal counts
            # must not move in between (no race with start-up or wake-up).
            ready = time.monotonic()
            for n, at in ((1, 0.3), (2, 1.2)):
                time.sleep(max(0, ready + at - time.monotonic()))  # wall time, not synchronization
                os.kill(proc.pid, signal.SIGUSR2)
                path = os.path.join(tmp, "wallprof.%d.%d.json" % (proc.pid, n))
                check(rt.poll_for(path, proc=proc), "snapshot %d did not appear" % n)
                snaps.append(rt.load_profile(path))

        r, _ = _blockers_session(tmp, {"WALLPROF_HZ": str(BLOCKERS_HZ)}, 1.5, two_snapshots)
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        tids = {}
        for thread, chain, labels, leaves in BLOCKERS:
            tids[thread] = check_blocked_thread(obj, thread, chain, labels, leaves)

        # While everything is blocked (the snapshots below) no thread may get a
        # last-resort signal. The exit profile also covers the wake-up and the
        # joins, where a woken thread can block for a moment in an unwrapped
        # futex (thread exit): at most one such signal per blocked thread.
        nsb = rt.wallprof_section(obj).get("signals_blocked")
        check(isinstance(nsb, int) and nsb <= len(BLOCKERS),
              "exit profile: wallprof.signals_blocked is %r, want at most %d (shutdown only)"
              % (nsb, len(BLOCKERS)))
        counters = thread_counters(obj, "exit profile")
        busy = rt.tids_named(obj, "busy")
        check(len(busy) == 1, "no single busy thread")
        # The busy thread is sampled all along: by our signals, or by its
        # own CPU-time timer (wallprof.timers), which sends none.
        nb = thread_signals(counters, busy[0], "busy", "exit profile")
        nbs = counters.get(str(busy[0]), {}).get("samples", 0)
        check(nbs >= 50, "exit profile: the busy thread has only %d samples (%d signals)"
              % (nbs, nb))
        stray = {t: thread_signals(counters, tid, t, "exit profile") for t, tid in tids.items()}
        note("signals: busy %d, blocked threads %s, eintr_retried %r"
             % (nb, stray, rt.wallprof_section(obj).get("eintr_retried")))
        many = {t: n for t, n in stray.items() if n > STRAY_SIGNALS}
        check(not many, "exit profile: blocked threads were signalled: %s (busy got %d)"
              % (many, nb))

        c1, c2 = (thread_counters(s, "snapshot %d" % (i + 1)) for i, s in enumerate(snaps))
        for i, s in enumerate(snaps):
            check_signals_blocked_zero(s, "snapshot %d" % (i + 1))
        moved = {}
        for t, tid in tids.items():
            d = (thread_signals(c2, tid, t, "snapshot 2")
                 - thread_signals(c1, tid, t, "snapshot 1"))
            if d:
                moved[t] = d
        check(not moved, "signals sent to blocked threads between two snapshots 0.9 s apart: %s"
              % moved)
        # ... while the busy thread was sampled all along (by our signals,
        # or by its CPU-time timer, which sends none)
        db = (c2.get(str(busy[0]), {}).get("samples", 0)
              - c1.get(str(busy[0]), {}).get("samples", 0))
        check(db >= 50, "the busy thread has only %d more samples in the second snapshot" % db)

    def test_blocked_stacks_vs_eu_stack(tmp):
        """For blocked threads, the app frames eu-stack shows (wpt_*_inner,
        wpt_*_outer, the start routine) appear in the same order in our stacks."""
        exe = rt.prog("blocked_stacks")
        eu = shutil.which("eu-stack")

        def snap(proc):
            names = {}
            for tid in os.listdir("/proc/%d/task" % proc.pid):
                try:
                    with open("/proc/%d/task/%s/comm" % (proc.pid, tid)) as f:
                        names[tid] = f.read().strip()
                except OSError:
                    pass
            if not eu:
                return names, None, "eu-stack not installed (package elfutils)"
            try:
                p = subprocess.run([eu, "-p", str(proc.pid), "-m"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=30)
            except subprocess.TimeoutExpired:
                return names, None, "eu-stack timed out"
            text = p.stdout.decode(errors="replace")
            if "TID" not in text:
                err = p.stderr.decode(errors="replace").strip().splitlines()
                return names, None, "eu-stack could not attach (rc %d: %s)" % (
                    p.returncode, err[-1] if err else "no output")
            return names, parse_eu_stack(text), None

        r, (names, eu_stacks, skip) = _blockers_session(tmp, {"WALLPROF_HZ": str(BLOCKERS_HZ)},
                                                        1.5, snap)
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        spec = {b[0]: b for b in BLOCKERS}
        tids = {t: check_blocked_thread(obj, *spec[t]) for t in EU_STACK_THREADS}
        if skip:
            print("    note: eu-stack comparison skipped: %s" % skip)
            return
        by_tid = rt.samples_by_thread(obj)
        for thread, tid in tids.items():
            check(names.get(tid) == thread, "tid %s is %r in /proc, %s in the profile"
                  % (tid, names.get(tid), thread))
            frames = eu_stacks.get(tid)
            check(frames, "eu-stack shows no stack for %s (tid %s)" % (thread, tid))
            chain = app_chain(frames, exe)
            check(len(chain) >= 3 and all(chain),
                  "eu-stack: %s: app frames from the first wpt_ frame: %s (stack: %s)"
                  % (thread, chain, [f for f, _ in frames]))
            samples = by_tid.get(tid, [])
            hits = sum(1 for s in samples
                       if contains_run(rt.stack_functions(obj, s["stack_id"]), chain))
            share = hits / len(samples) if samples else 0
            note("%s: eu-stack app chain %s in %.0f%% of our samples"
                 % (thread, " <- ".join(chain), share * 100))
            if share < BLOCKED_SHARE:
                common = {}
                for s in samples:
                    key = " <- ".join(str(f) for f in rt.stack_functions(obj, s["stack_id"])[:6])
                    common[key] = common.get(key, 0) + 1
                top = max(common.items(), key=lambda kv: kv[1]) if common else ("none", 0)
                raise rt.Failure("%s: eu-stack's chain %s is in only %.0f%% of our samples; "
                                 "most common stack: %s (%d)"
                                 % (thread, " <- ".join(chain), share * 100, top[0], top[1]))

    return [
        ("blocked_stacks", test_blocked_stacks),
        ("blocked_stacks_vs_eu_stack", test_blocked_stacks_vs_eu_stack),
    ]
