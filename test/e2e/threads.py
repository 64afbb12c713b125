"""Thread life cycles under the profiler (test/progs/threads.c): heavy
thread churn, threads that block every signal, a thread renamed while it
runs."""

import os
import re
import time

CHURN_N = 20000
CHURN_BATCH = 50
CHURN_MAX_RATIO = 2.0
CHURN_SLACK_S = 0.3      # absolute slack on top of the ratio (start-up, dump)
CHURN_TIMEOUT = 30
SIGBLOCK_TIMEOUT = 15
DTOR_TIMEOUT = 15


def tests(rt):
    check, note = rt.check, rt.note

    def fn_share(obj, samples, fn):
        if not samples:
            return 0.0
        return sum(1 for s in samples if fn in rt.stack_functions(obj, s["stack_id"])) / len(samples)

    def timed(argv, tmp, preload, env_extra=None, timeout=60):
        t0 = time.monotonic()
        r = rt.run_bounded(argv, tmp, env_extra, preload=preload, timeout=timeout)
        return r, time.monotonic() - t0

    def test_churn(tmp):
        """20,000 short-lived threads (some named): the program completes as
        without the profiler, at most ~2x slower, and the profile is valid."""
        argv = [rt.prog("threads"), "churn", str(CHURN_N), str(CHURN_BATCH)]
        want = "churn: %d threads, %d ok\n" % (CHURN_N, CHURN_N)
        # Alternate plain and preload runs, keep the best of each: less noise
        # from the machine than a single pair.
        plain_t, pre_t, r = [], [], None
        for _ in range(2):
            p, tp = timed(argv, tmp, False, timeout=CHURN_TIMEOUT)
            check(p.rc == 0 and p.stdout == want, "without the preload: stdout %r, %s (test "
                  "program?)" % (p.stdout, p.describe()))
            plain_t.append(tp)
            q, tq = timed(argv, tmp, True, timeout=CHURN_TIMEOUT)
            check(q.rc is not None, "under the preload churn did not finish within %d s (stdout "
                  "%r, stderr %s)" % (CHURN_TIMEOUT, q.stdout, q.stderr[-300:]))
            check(q.rc == 0, "under the preload: %s" % q.describe())
            check(q.stdout == want, "under the preload stdout %r, want %r" % (q.stdout, want))
            pre_t.append(tq)
            r = q
        tp, tq = min(plain_t), min(pre_t)
        note("churn: plain %.2f s, preload %.2f s (x%.2f)" % (tp, tq, tq / tp))
        check(tq <= CHURN_MAX_RATIO * tp + CHURN_SLACK_S,
              "churn took %.2f s under the preload, %.2f s without (more than %.1fx + %.1f s)"
              % (tq, tp, CHURN_MAX_RATIO, CHURN_SLACK_S))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        main = rt.samples_by_thread(obj).get(str(r.pid), [])
        check(len(main) >= 10, "the main thread has only %d samples" % len(main))
        w = rt.wallprof_section(obj)
        note("churn: %d threads in the profile, wallprof counters: ticks %s pending %s "
             "send_failed %s unwind_failed %s threads_untracked %s"
             % (len(rt.profile_part(obj).get("thread_metadata") or {}), w.get("ticks"),
                w.get("pending"), w.get("send_failed"), w.get("unwind_failed"),
                w.get("threads_untracked")))

    def test_stale_pending(tmp):
        """While our signal is pending and the thread does not run, the
        ticks belong to where the signal finds it, not to the thread's
        previous stack: "stale" spins 50 ms, then waits 100 ms with every
        signal blocked in a raw nanosleep (no wrapper), 8 times."""
        argv = [rt.prog("threads"), "stale"]
        r = rt.run_bounded(argv, tmp, timeout=SIGBLOCK_TIMEOUT)
        check(r.rc == 0 and r.stdout == "stale: done\n", "stale: %s" % r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        ss = rt.thread_samples(obj, "stale")
        check(len(ss) >= 60, "the stale thread has only %d samples" % len(ss))
        masked = fn_share(obj, ss, "wpt_stale_masked")
        spin = fn_share(obj, ss, "wpt_stale_spin")
        note("stale: %d samples, %.0f%% in wpt_stale_masked (67%% of the time), %.0f%% in "
             "wpt_stale_spin (33%%)" % (len(ss), masked * 100, spin * 100))
        check(masked >= 0.5 and spin <= 0.45,
              "masked waits got %.0f%% of the samples and the spin before them %.0f%% "
              "(the wait is 67%% of the time)" % (masked * 100, spin * 100))

    def test_sigblock(tmp):
        """A thread blocking every signal while it spins (xz -T2's workers do)
        is profiled like any other: the sampling signal stays deliverable
        while the program reads back the mask it set; one blocking every
        signal in nanosleep is still sampled, off-CPU, with the syscall
        label."""
        argv = [rt.prog("threads"), "sigblock"]
        want = "sigblock: spin done (mask as set), sleep interrupted 0 times\n"
        r = rt.run_bounded(argv, tmp, timeout=SIGBLOCK_TIMEOUT)
        check(r.rc is not None, "sigblock did not finish within %d s (stdout %r)"
              % (SIGBLOCK_TIMEOUT, r.stdout))
        check(r.rc == 0, "sigblock: %s" % r.describe())
        check(r.stdout == want, "sigblock stdout %r, want %r" % (r.stdout, want))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        spin = rt.thread_samples(obj, "spinblk") if rt.tids_named(obj, "spinblk") else []
        note("spinblk (all signals blocked, spinning): %d samples, %.0f%% in wpt_blocked_spin; "
             "pending %s, send_failed %s"
             % (len(spin), fn_share(obj, spin, "wpt_blocked_spin") * 100, w.get("pending"),
                w.get("send_failed")))
        # 1 s of spinning at 101 Hz: about 100 samples, nearly all in the spin
        # (before the fix: 0 samples, every tick lost as pending).
        check(len(spin) >= 70, "spinblk (every signal blocked, spinning 1 s) has %d samples "
              "(pending %r, send_failed %r)" % (len(spin), w.get("pending"), w.get("send_failed")))
        in_spin = fn_share(obj, spin, "wpt_blocked_spin")
        check(in_spin >= 0.8, "only %.0f%% of spinblk's samples are in wpt_blocked_spin"
              % (in_spin * 100))
        sleep = rt.thread_samples(obj, "sleepblk")
        check(len(sleep) >= 40, "sleepblk (blocked in nanosleep) has only %d samples"
              % len(sleep))
        good = [s for s in sleep if s.get("on_cpu") is False
                and s.get("syscall") in ("nanosleep", "clock_nanosleep")
                and "wpt_blocked_sleep" in rt.stack_functions(obj, s["stack_id"])]
        share = len(good) / len(sleep)
        if share < 0.8:
            bad = next(s for s in sleep if s not in good)
            raise rt.Failure("only %.0f%% of %d sleepblk samples are off-CPU in nanosleep with "
                             "wpt_blocked_sleep; e.g. on_cpu=%r syscall=%r stack %s"
                             % (share * 100, len(sleep), bad.get("on_cpu"), bad.get("syscall"),
                                rt.stack_functions(obj, bad["stack_id"])[:5]))

    def test_rawpoll(tmp):
        """A thread blocked in a system call no wrapper publishes, of a kind
        the kernel ends with EINTR after any handler (a raw poll, as Go's
        runtime issues): never signalled, so all four 500 ms polls time out
        as without the profiler (before: EINTR at the first tick); its
        samples come from /proc without a signal: off-CPU, labelled poll."""
        argv = [rt.prog("threads"), "rawpoll"]
        want = "rawpoll: 4 of 4 raw polls timed out\n"
        r = rt.run_bounded(argv, tmp, {"WALLPROF_HZ": "1000"}, timeout=SIGBLOCK_TIMEOUT)
        check(r.rc == 0, "rawpoll: %s" % r.describe())
        check(r.stdout == want, "rawpoll stdout %r, want %r" % (r.stdout, want))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        raw = rt.thread_samples(obj, "rawpoll")
        check(len(raw) >= 1000, "rawpoll (2 s blocked at 1000 Hz) has only %d samples" % len(raw))
        good = [s for s in raw if s.get("on_cpu") is False and s.get("syscall") == "poll"]
        check(len(good) >= 0.9 * len(raw), "only %d of %d rawpoll samples are off-CPU in poll"
              % (len(good), len(raw)))
        # Walked from the stack pointer /proc reports, with the CFI: the
        # whole chain up to the thread's start, not just the PC.
        chain = ["wpt_raw_poll", "rawpoll_main", "start_thread"]
        walked = [s for s in good
                  if all(f in rt.stack_functions(obj, s["stack_id"]) for f in chain)]
        if len(walked) < 0.9 * len(raw):
            bad = next(s for s in raw if s not in walked)
            raise rt.Failure("only %d of %d rawpoll samples have %s; e.g. %s"
                             % (len(walked), len(raw), " <- ".join(chain),
                                rt.stack_functions(obj, bad["stack_id"])[:6]))
        check((w.get("from_proc") or 0) >= 1, "from_proc is %r" % w.get("from_proc"))
        note("rawpoll: %d samples, from_proc %s, signals_blocked %s"
             % (len(raw), w.get("from_proc"), w.get("signals_blocked")))

    def test_rename(tmp):
        """A thread renamed while it runs is listed under its last name."""
        argv = [rt.prog("threads"), "rename"]
        r = rt.run_under_preload(argv, cwd=tmp)
        check(r.rc == 0 and r.stdout == "rename: done\n", "rename: stdout %r, %s"
              % (r.stdout, r.describe()))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        names = rt.thread_names(obj)
        check("before" not in names.values(), "thread_metadata still has the old name "
              "\"before\": %s" % sorted(set(names.values())))
        after = rt.thread_samples(obj, "after")
        check(len(after) >= 100, "thread \"after\" has only %d samples (2 s at 101 Hz)"
              % len(after))
        share = fn_share(obj, after, "wpt_rename_work")
        check(share >= 0.8, "wpt_rename_work in only %.0f%% of the samples of \"after\""
              % (share * 100))
        wt = rt.wallprof_section(obj).get("threads")
        if isinstance(wt, dict):
            tid = rt.tids_named(obj, "after")[0]
            entry = wt.get(tid) or wt.get(int(tid)) or {}
            check(entry.get("name") in (None, "after"),
                  "wallprof.threads[%s].name is %r, want \"after\"" % (tid, entry.get("name")))

    def test_untracked_not_dropped(tmp):
        """More threads than WALLPROF_MAX_THREADS: `threads_untracked` counts
        sightings of threads, not samples, so the exit line's "dropped" (the
        samples lost) does not add it."""
        import re
        code = ("import threading, time\n"
                "ts = [threading.Thread(target=time.sleep, args=(0.6,)) for _ in range(40)]\n"
                "[t.start() for t in ts]; [t.join() for t in ts]\n")
        r = rt.run_bounded(["python3", "-c", code], tmp,
                           {"WALLPROF_MAX_THREADS": "16", "WALLPROF_HZ": "200"}, timeout=60)
        check(r.rc == 0, r.describe())
        obj = rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % r.pid))
        w = rt.wallprof_section(obj)
        check(w["threads_untracked"] > 0, "no thread went untracked: %s" % w)
        m = re.search(r", (\d+) dropped\)", " ".join(r.wallprof_lines()))
        check(m, "no dropped count in %s" % r.wallprof_lines())
        keys = ("pending", "send_failed", "dropped_full", "overwritten", "exiting")
        want = sum(w[k] for k in keys)
        check(int(m.group(1)) == want, "the line says %s dropped; the samples lost are %d "
              "(%s), threads_untracked %d" % (m.group(1), want, ", ".join(
                  "%s %d" % (k, w[k]) for k in keys), w["threads_untracked"]))

    def short_threads(tmp, args):
        """build/bench/shortthreads ARGS at 1000 Hz: its exit profile, the
        share of the threads' CPU time (cpu_s, its own measure) found on
        CPU in short_work, cpu_s, and those samples."""
        prog = os.path.join(rt.BUILD, "bench", "shortthreads")
        r = rt.run_under_preload([prog] + args, cwd=tmp, env_extra={"WALLPROF_HZ": "1000"})
        check(r.rc == 0, r.describe())
        obj = rt.exit_profile(r)
        hits = [s for s in rt.profile_part(obj)["samples"] if s.get("on_cpu")
                and "short_work" in rt.stack_functions(obj, s["stack_id"])]
        cpu_s = float(re.search(r"cpu_s=([\d.]+)", r.stdout).group(1))
        return obj, len(hits) / 1000.0 / cpu_s, cpu_s, hits

    def test_short_threads(tmp):
        """Threads that live 2 ms on CPU each, one after the other, at
        1000 Hz: known to the sampler from their first instruction (not
        from the next /proc scan, every tenth tick), most of their CPU time
        is in the profile (about 5 % before)."""
        _, share, cpu_s, hits = short_threads(tmp, ["300", "2", "1"])
        note("short threads: %.0f %% of %.2f s of CPU found, %d threads sampled"
             % (100 * share, cpu_s, len({s["thread_id"] for s in hits})))
        check(share >= 0.4, "only %.0f %% of the short threads' CPU time is in the profile"
              % (100 * share))

    def test_very_short_threads(tmp):
        """Threads of 0.05 ms on CPU each, two at a time, at 1000 Hz: the
        sampler reaches a running thread before it ends (no /proc probe
        when its CPU clock is moving, a sampler that wakes on time): a
        good share of their CPU time is in the profile (7 to 17 % before);
        no signal is wasted on threads in their end, where glibc blocks
        every signal (half of them were, lost and not even counted)."""
        obj, share, cpu_s, _ = short_threads(tmp, ["3000", "0.05"])
        w = rt.wallprof_section(obj)
        sig, pend = int(w.get("signals") or 0), int(w.get("pending") or 0)
        note("very short threads: %.0f %% of %.2f s of CPU found; signals %d, pending %d, "
             "exiting %s" % (100 * share, cpu_s, sig, pend, w.get("exiting")))
        check(share >= 0.3, "only %.0f %% of the short threads' CPU time is in the profile"
              % (100 * share))
        check(pend <= 0.1 * sig, "%d of %d signals never taken" % (pend, sig))

    def test_idle_window(tmp):
        """400 threads blocked in one call for 3 s with a 2 s window: every
        one of them has a sample at (nearly) every tick of the window, and
        nothing is overwritten: a thread that stays in one place costs the
        ring one record a second, not one a tick (before, the ring held
        64 threads' worth of ticks: 400 threads kept a third of the
        window)."""
        r = rt.run_bounded([rt.prog("threads"), "idle", "400", "3"], tmp,
                           {"WALLPROF_RING_SECONDS": "2", "WALLPROF_RING_MB": "1"}, timeout=30)
        check(r.rc == 0 and r.stdout == "idle: 400 threads\n", r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        hz = int(w.get("hz") or 101)
        # (at the end all 400 are woken at once: their last few samples are
        # in the wake-up, the mutex, the exit)
        idle = [n for n in (sum(1 for s in ss
                                if "wpt_idle_wait" in rt.stack_functions(obj, s["stack_id"]))
                            for ss in rt.samples_by_thread(obj).values()) if n]
        check(len(idle) == 400, "%d threads in wpt_idle_wait, want 400" % len(idle))
        fewest = min(idle)
        note("idle window: %d threads, fewest samples %d (2 s at %d Hz: %d), overwritten %s, "
             "ticks_late %s" % (len(idle), fewest, hz, 2 * hz, w.get("overwritten"),
                                w.get("ticks_late")))
        check(int(w.get("overwritten") or 0) == 0, "overwritten: %s" % w.get("overwritten"))
        check(fewest >= 0.85 * 2 * hz - int(w.get("ticks_late") or 0),
              "a blocked thread has only %d samples of a 2 s window at %d Hz" % (fewest, hz))

    def phases(obj, ss, fn):
        """The thread's samples in time order as a string of 1 (the stack
        holds fn) and 0."""
        ss = sorted(ss, key=lambda s: int(s["elapsed_since_start_ns"]))
        return "".join("1" if fn in rt.stack_functions(obj, s["stack_id"]) else "0" for s in ss)

    def test_park_wake(tmp):
        """A thread that blocks 300 ms in a wrapped call (parked: not looked
        at tick after tick) and then spins 300 ms, 4 times: each time it
        wakes its samples move to the spin at once. Half its samples in the
        sleep, off CPU (but at its two ends, where a capture may catch the
        thread on its way in or out), half in the spin, on CPU, and exactly
        7 changes between the two. While it sleeps, main waits in pthread_join: both
        are parked, and the sampler rests (sleeps through the ticks that
        would only count them, ticks_rested) until the parker wakes; the
        ticks it slept through are in the profile all the same: main has a
        sample at every tick."""
        r = rt.run_bounded([rt.prog("threads"), "park"], tmp, timeout=30)
        check(r.rc == 0 and r.stdout == "park: done\n", r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        ss = rt.thread_samples(obj, "parker")
        seq = phases(obj, ss, "wpt_park_sleep")
        changes = sum(1 for a, b in zip(seq, seq[1:]) if a != b)
        asleep = seq.count("1") / max(len(seq), 1)
        # A sleep sample on CPU is one taken in wpt_park_sleep on its way
        # into nanosleep or back out of it: the first or last of its run.
        timed = sorted(ss, key=lambda s: int(s["elapsed_since_start_ns"]))
        on_inside = [i for i, s in enumerate(timed) if s.get("on_cpu") and seq[i] == "1"
                     and 0 < i < len(seq) - 1 and seq[i - 1] == "1" and seq[i + 1] == "1"]
        w = rt.wallprof_section(obj)
        ticks, rested = int(w.get("ticks") or 0), int(w.get("ticks_rested") or 0)
        nmain = max((len(ss) for ss in rt.samples_by_thread(obj).values()
                     if any("mode_park" in rt.stack_functions(obj, s["stack_id"])
                            for s in ss)), default=0)
        note("park: %d samples, %.0f%% asleep, %d changes; main %d samples of %d ticks, "
             "%d ticks rested" % (len(seq), 100 * asleep, changes, nmain, ticks, rested))
        check(len(seq) >= 200, "only %d samples of the parker" % len(seq))
        check(rested >= 0.25 * ticks, "the sampler rested %d ticks of %d, want a quarter or "
              "more (the parker sleeps half the time)" % (rested, ticks))
        check(nmain >= ticks - 2, "main has %d samples of %d ticks: ticks slept through "
              "are lost" % (nmain, ticks))
        check(0.4 <= asleep <= 0.6, "%.0f%% of the samples asleep, want about 50%%"
              % (100 * asleep))
        check(not on_inside, "%d sleep samples on CPU inside a sleep (ticks %s)"
              % (len(on_inside), on_inside))
        check(changes == 7, "%d changes between sleep and spin, want 7: %s" % (changes, seq))

    def test_park_wake_late(tmp):
        """The sampler, woken from its rest by the parker's wake, takes
        90 ms to get going (WALLPROF_TEST_REST_WAKE_DELAY_US, test build):
        the ticks it slept through are made up to the wake only. The ticks
        after it are not made as quiet ones (the parker's record would run
        on into its spin, one more sleep sample for every tick the sampler
        was slow): they are the next tick's to make, and that tick comes
        late, as any tick of a sampler that wakes a period late does: the
        ticks it missed are skipped and counted (ticks_late: 33 here), and
        a sleep of 300 ms has about 30 samples (34 at most, with the
        parker's own wake-up late on a busy machine). Regression: the ticks
        up to the sampler's own wake-up were made quiet (10 ticks late in
        all, sleeps of 38 samples)."""
        r = rt.run_bounded([rt.prog("threads"), "park"], tmp,
                           {"WALLPROF_TEST_REST_WAKE_DELAY_US": "90000"}, timeout=30)
        check(r.rc == 0 and r.stdout == "park: done\n", r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        late, rested = int(w.get("ticks_late") or 0), int(w.get("ticks_rested") or 0)
        seq = phases(obj, rt.thread_samples(obj, "parker"), "wpt_park_sleep")
        changes = sum(1 for a, b in zip(seq, seq[1:]) if a != b)
        runs = [len(x) for x in seq.split("0") if x]
        note("park, the sampler 90 ms slow after a rest: %d ticks late, %d rested, %d changes, "
             "sleep runs %s" % (late, rested, changes, runs))
        check(rested > 0, "no rest")
        check(late >= 20, "only %d ticks late: the ticks after the parker's wakes were made "
              "as quiet ones" % late)
        check(max(runs or [0]) <= 34, "sleeps of %s samples for 300 ms at 101 Hz: the ticks "
              "after the parker's wakes were made as quiet ones" % runs)
        check(changes == 7, "%d changes between sleep and spin, want 7: %s" % (changes, seq))

    def test_handler_over_parked(tmp):
        """A handler of the program's runs over a call the thread is parked
        in (read() on a pipe): the handler's 300 ms are in the profile, on
        CPU, then the thread is in read() again; the read returns as
        without the profiler."""
        r = rt.run_bounded([rt.prog("threads"), "handler"], tmp, timeout=30)
        check(r.rc == 0 and r.stdout == "handler: read 1\n", r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        ss = rt.thread_samples(obj, "reader")
        seq = phases(obj, ss, "wpt_handler_spin")
        share = seq.count("1") / max(len(seq), 1)
        on = sum(1 for s in ss if "wpt_handler_spin" in rt.stack_functions(obj, s["stack_id"])
                 and s.get("on_cpu"))
        changes = sum(1 for a, b in zip(seq, seq[1:]) if a != b)
        note("handler over a parked call: %d samples, %.0f%% in the handler, %d changes"
             % (len(seq), 100 * share, changes))
        check(0.25 <= share <= 0.42, "%.0f%% of the reader's samples in its handler, want "
              "about a third" % (100 * share))
        check(on >= 0.9 * seq.count("1"), "%d of %d handler samples on CPU"
              % (on, seq.count("1")))
        check(changes == 2, "%d changes in and out of the handler, want 2: %s" % (changes, seq))

    def test_long_destructor(tmp):
        """A thread whose own key destructor works 0.5 s, after ours has run
        (the thread is "exiting" for us), with CPU timers off: it is
        signalled again after two ticks, and the work is in the profile (a
        regression: it went unsampled, every tick counted in exiting). Only
        that thread ends past our destructor: at most 2 ticks counted."""
        r = rt.run_bounded([rt.prog("threads"), "dtor"], tmp, {"WALLPROF_CPU_TIMERS": "0"},
                           timeout=DTOR_TIMEOUT)
        check(r.rc == 0 and r.stdout == "dtor: joined\n", r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        ss = rt.thread_samples(obj, "dtor")
        spin = [s for s in ss if "wpt_dtor_spin" in rt.stack_functions(obj, s["stack_id"])]
        w = rt.wallprof_section(obj)
        note("dtor: %d samples, %d in wpt_dtor_spin; exiting %s" % (len(ss), len(spin),
                                                                  w.get("exiting")))
        check(len(spin) >= 25, "only %d samples in the destructor's 0.5 s" % len(spin))
        check(w["exiting"] <= 2, "exiting %d: one thread in its end is spared only 2 ticks"
              % w["exiting"])

    def test_fdfull(tmp):
        """A thread alternating work and a raw poll while no descriptor can
        be opened (RLIMIT_NOFILE 1), CPU timers off: the sampler cannot
        open /proc to tell whether the thread is in its poll, and must not
        signal it on a guess (it did: the poll ended with EINTR). The
        ticks it could not tell are counted lost (send_failed)."""
        r = rt.run_bounded([rt.prog("threads"), "fdfull"], tmp, {"WALLPROF_CPU_TIMERS": "0"},
                           timeout=SIGBLOCK_TIMEOUT)
        m = re.match(r"fdfull: (\d+) of 60 raw polls cut short\n$", r.stdout)
        check(r.rc == 0 and m, "%s %r" % (r.describe(), r.stdout))
        # A thread seen running is signalled; one that blocks in the
        # microseconds before the signal lands sees it (README, limits):
        # rare, not every tick (60 of 60 before).
        check(int(m.group(1)) <= 2, "%s of 60 raw polls cut short by our signal"
              % m.group(1))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        check(w["send_failed"] > 0, "send_failed %d: no /proc probe failed, the table was not "
              "full?" % w["send_failed"])

    def test_rawfutex(tmp):
        """A thread in a futex wait without timeout that no wrapper sees:
        the one blocked place that gets a signal (the kernel restarts the
        call unseen), once; its samples off CPU, labelled futex, in the
        waiting function (a regression: the label was lost from signalled
        samples)."""
        r = rt.run_bounded([rt.prog("threads"), "rawfutex"], tmp, timeout=SIGBLOCK_TIMEOUT)
        check(r.rc == 0 and r.stdout == "rawfutex: woken\n", r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        ss = rt.thread_samples(obj, "rawfutex")
        good = [s for s in ss if s.get("on_cpu") is False and s.get("syscall") == "futex"
                and "wpt_raw_futex_wait" in rt.stack_functions(obj, s["stack_id"])]
        w = rt.wallprof_section(obj)
        note("rawfutex: %d samples, %d off CPU in futex in wpt_raw_futex_wait; signals_blocked %s"
             % (len(ss), len(good), w.get("signals_blocked")))
        check(len(ss) >= 40, "only %d samples of the waiting thread" % len(ss))
        check(len(good) >= 0.8 * len(ss), "only %d of %d samples off CPU, labelled futex, in "
              "wpt_raw_futex_wait" % (len(good), len(ss)))
        check(1 <= int(w.get("signals_blocked") or 0) <= 3,
              "signals_blocked %s, want one (or a few)" % w.get("signals_blocked"))

    return [
        ("thr_rawfutex", test_rawfutex),
        ("thr_idle_window", test_idle_window),
        ("thr_park_wake", test_park_wake),
        ("thr_park_wake_late", test_park_wake_late),
        ("thr_handler_over_parked", test_handler_over_parked),
        ("thr_short_threads", test_short_threads),
        ("thr_very_short_threads", test_very_short_threads),
        ("thr_long_destructor", test_long_destructor),
        ("thr_fdfull", test_fdfull),
        ("thr_untracked_not_dropped", test_untracked_not_dropped),
        ("thr_churn", test_churn),
        ("thr_sigblock", test_sigblock),
        ("thr_stale_pending", test_stale_pending),
        ("thr_rename", test_rename),
        ("thr_rawpoll", test_rawpoll),
    ]
