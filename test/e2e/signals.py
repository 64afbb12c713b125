"""Programs that use signals themselves (test/progs/signals.c): their own
SIGPROF timer, a POSIX timer on SIGALRM, every disposition reset to SIG_DFL,
SIGPROF blocked in main, and what sigaction reports. The program sees what
it would see without the profiler, and the profile is still written."""

import re

RUN_TIMEOUT = 20
COUNT_RE = re.compile(r"handler ran (\d+) times")


def tests(rt):
    check, note = rt.check, rt.note

    def fn_samples(obj, samples, fn):
        return [s for s in samples if fn in rt.stack_functions(obj, s["stack_id"])]

    def bounded(tmp, argv, preload):
        r = rt.run_bounded(argv, tmp, preload=preload, timeout=RUN_TIMEOUT)
        check(r.rc is not None, "%s (preload=%s) did not end within %d s; stdout %r"
              % (" ".join(argv[1:]), preload, RUN_TIMEOUT, r.stdout))
        return r

    def pair(tmp, mode):
        argv = [rt.prog("signals"), mode]
        plain = bounded(tmp, argv, False)
        check(plain.rc == 0, "without the preload signals %s: %s (test program?)"
              % (mode, plain.describe()))
        r = bounded(tmp, argv, True)
        check(r.rc == 0, "under the preload signals %s ended with %s (plain: 0); %s"
              % (mode, r.rc, r.describe()))
        check(r.other_stderr() == plain.other_stderr(), "stderr differs besides wallprof: "
              "lines: preload %s, plain %s" % (r.other_stderr()[:3], plain.other_stderr()[:3]))
        return plain, r

    def count(run):
        m = COUNT_RE.search(run.stdout)
        check(m, "no \"handler ran N times\" in %r" % run.stdout)
        return int(m.group(1))

    def profile(r, min_main=0, fn=None):
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        main = rt.samples_by_thread(obj).get(str(r.pid), [])
        if min_main:
            check(len(main) >= min_main, "the main thread has only %d samples (want >= %d)"
                  % (len(main), min_main))
        if fn and min_main:
            n = len(fn_samples(obj, main, fn))
            check(n >= 0.8 * len(main), "%s in only %d of %d main-thread samples"
                  % (fn, n, len(main)))
        return obj, main

    def test_own_sigprof(tmp):
        """The program's own SIGPROF + ITIMER_PROF: its handler runs about as
        often as without the profiler, and sampling goes on (chained)."""
        plain, r = pair(tmp, "prof")
        a, b = count(plain), count(r)
        note("ITIMER_PROF handler: %d plain, %d under the preload" % (a, b))
        check(a >= 50, "without the preload the handler ran only %d times (test program?)" % a)
        check(abs(b - a) <= 0.2 * a, "the program's SIGPROF handler ran %d times under the "
              "preload, %d without (more than 20%% apart)" % (b, a))
        profile(r, 40, "wpt_sig_work")

    def test_timer_create(tmp):
        """A POSIX timer (SIGALRM every 5 ms): same number of handler runs."""
        plain, r = pair(tmp, "timer")
        a, b = count(plain), count(r)
        note("SIGALRM timer handler: %d plain, %d under the preload" % (a, b))
        check(a >= 80, "without the preload the handler ran only %d times (test program?)" % a)
        check(abs(b - a) <= max(0.15 * a, 5), "the program's SIGALRM handler ran %d times "
              "under the preload, %d without" % (b, a))
        profile(r, 30, "wpt_sig_work")

    def test_queue_full(tmp):
        """The user's signal queue full (RLIMIT_SIGPENDING): our sampling
        signal, sent with its siginfo, arrives without it (as SI_USER from
        pid 0): it is still ours, not the program's, whose default action
        would end the program (it did, "Profiling timer expired")."""
        plain, r = pair(tmp, "queuefull")
        check(r.stdout == "queuefull: done\n" and r.stdout == plain.stdout,
              "stdout %r, without the preload %r" % (r.stdout, plain.stdout))
        obj, _ = profile(r)
        worker = [ss for tid, ss in rt.samples_by_thread(obj).items()
                  if tid != str(r.pid) and len(fn_samples(obj, ss, "wpt_sig_work")) >= 40]
        check(len(worker) == 1, "no worker thread with 40 samples in wpt_sig_work")

    def test_reset_all(tmp):
        """Every disposition reset to SIG_DFL: our pending SIGPROF must never
        meet a default action (which would kill the program)."""
        plain, r = pair(tmp, "reset")
        check(r.stdout == plain.stdout, "stdout %r, without the preload %r"
              % (r.stdout, plain.stdout))
        obj, _ = profile(r)
        workers = [tid for tid, ss in rt.samples_by_thread(obj).items()
                   if tid != str(r.pid) and len(fn_samples(obj, ss, "wpt_sig_work")) >= 40]
        check(len(workers) == 2, "%d worker threads with >= 40 wpt_sig_work samples, want 2"
              % len(workers))
        w = rt.wallprof_section(obj)
        note("reset: signals %s, samples %s" % (w.get("signals"), w.get("samples")))

    def test_mask_sigprof(tmp):
        """main blocks SIGPROF all its life (the only thread): no hang, same
        exit; a profile, or, since no sample can be taken, a wallprof: line
        that says why there is none."""
        plain, r = pair(tmp, "mask")
        check(r.stdout == plain.stdout, "stdout %r, without the preload %r"
              % (r.stdout, plain.stdout))
        if r.profile_path() is None:
            why = [l for l in r.wallprof_lines() if "no profile" in l or "not written" in l]
            check(why, "no profile and no wallprof: line saying why (%s)" % r.describe())
            print("    note: SIGPROF blocked in the only thread: no profile; the library says: "
                  "%s" % why[0].strip())
            return
        obj, main = profile(r)
        w = rt.wallprof_section(obj)
        print("    note: SIGPROF blocked in main: %d main-thread samples, pending %s, "
              "send_failed %s, signals %s" % (len(main), w.get("pending"), w.get("send_failed"),
                                               w.get("signals")))

    def test_mask_sigprof_thread(tmp):
        """main blocks SIGPROF all its life, a second thread does not: the
        profile is written, the second thread is sampled, and the loss on
        main is accounted (pending / per-thread signals without samples)."""
        plain, r = pair(tmp, "mask_thread")
        check(r.stdout == plain.stdout, "stdout %r, without the preload %r"
              % (r.stdout, plain.stdout))
        obj, main = profile(r)
        by = rt.samples_by_thread(obj)
        w = rt.wallprof_section(obj)
        ticks = w.get("ticks") or 0
        check(ticks >= 30, "only %r sampler ticks in 1 s at 101 Hz" % w.get("ticks"))
        # Relative to the ticks the sampler managed (a loaded machine slows it).
        workers = [t for t, ss in by.items() if t != str(r.pid)
                   and len(fn_samples(obj, ss, "wpt_unmasked_work")) >= 0.6 * ticks]
        check(len(workers) == 1, "no thread with wpt_unmasked_work in >= 60%% of %d ticks "
              "(samples per thread: %s)" % (ticks, {t: len(ss) for t, ss in by.items()}))
        entry = (w.get("threads") or {}).get(str(r.pid)) or {}
        note("main (SIGPROF blocked): %d samples; pending %s; wallprof.threads[main] %s"
             % (len(main), w.get("pending"), entry))
        # README: wallprof.threads lists every thread tracked, with or
        # without samples in the window.
        check(isinstance(entry.get("signals"), int) and entry["signals"] >= 1,
              "wallprof.threads has no entry with signals >= 1 for main (%d), which the sampler "
              "signalled (pending %r); entries: %s" % (r.pid, w.get("pending"),
                                                       w.get("threads")))
        lost = (w.get("pending") or 0) + (w.get("send_failed") or 0)
        check(len(main) + lost >= 0.5 * ticks, "main has %d samples and only %d of %d ticks "
              "are accounted as lost (pending %r, send_failed %r)"
              % (len(main), lost, ticks, w.get("pending"), w.get("send_failed")))

    def test_query(tmp):
        """sigaction(sig, NULL, &old) reports the program's own view."""
        plain, r = pair(tmp, "query")
        check("start SIGPROF: SIG_DFL" in plain.stdout, "test program? %r" % plain.stdout)
        if r.stdout != plain.stdout:
            a, b = plain.stdout.splitlines(), r.stdout.splitlines()
            diff = [(x, y) for x, y in zip(a, b) if x != y] or [(len(a), len(b))]
            raise rt.Failure("sigaction reports differ; first (plain, preload): %s" % (diff[0],))
        profile(r)

    def test_setxid(tmp):
        """setgid and setuid after the sampler runs: glibc carries them to
        every thread with its SIGSETXID and waits for each, so the sampler
        must take that signal; the calls return and the profile is
        written."""
        plain, r = pair(tmp, "setxid")
        check("setxid: done" in r.stdout, "stdout %r (plain: %r)" % (r.stdout, plain.stdout))
        profile(r, min_main=10)

    return [
        ("sig_setxid_all_threads", test_setxid),
        ("sig_own_sigprof_itimer", test_own_sigprof),
        ("sig_timer_create_sigalrm", test_timer_create),
        ("sig_queue_full", test_queue_full),
        ("sig_reset_all_dfl", test_reset_all),
        ("sig_mask_sigprof_main", test_mask_sigprof),
        ("sig_mask_sigprof_main_thread", test_mask_sigprof_thread),
        ("sig_query_sigaction", test_query),
    ]
