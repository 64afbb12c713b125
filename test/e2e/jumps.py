"""Published contexts that outlive their call, and slots that outlive their
thread (test/progs/jumps.c). Guards:
- a thread that leaves a wrapped call by siglongjmp (an alarm timeout around
  read) and then runs is sampled where it runs, not "blocked in read" forever
  (before: every one of its samples showed the read), and its next wrapped
  call is shown as itself (before: the first read stood for all);
- a slot that such a thread leaves behind passes none of that to the next
  thread that takes it (before: that thread showed the dead one's read), and
  is given up when the thread exits (before: a thread that never lived
  through a scan was sampled "blocked in read" to the end of the run);
- a wrapped call made from a signal handler while the thread is blocked in
  another one leaves the outer call's context in place, and the program
  prints what it prints without the profiler; one made while the outer call
  is publishing its context does not tear it (before: the handler's call
  stood for the outer one until it returned);
- a scan of /proc/self/task never releases a live thread's slot because the
  slot kept an earlier owner's scan number (before: a thread that took such a
  slot while a scan ran went unsampled until the next scan)."""

import re

RUN_TIMEOUT = 30
HZ = "200"


def tests(rt):
    check, note = rt.check, rt.note

    def share(obj, samples, fn, on_cpu=None):
        if not samples:
            return 0.0
        n = sum(1 for s in samples if fn in rt.stack_functions(obj, s["stack_id"])
                and (on_cpu is None or s.get("on_cpu") is on_cpu))
        return n / len(samples)

    def top_stacks(obj, samples, k=3):
        count = {}
        for s in samples:
            key = "%s %s" % ("cpu" if s.get("on_cpu") else "off",
                             " <- ".join(str(f) for f in rt.stack_functions(obj, s["stack_id"])[:4]))
            count[key] = count.get(key, 0) + 1
        return sorted(count.items(), key=lambda kv: -kv[1])[:k]

    def run_pair(tmp, mode, env, want):
        argv = [rt.prog("jumps"), mode]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=RUN_TIMEOUT)
        check(plain.rc == 0 and plain.stdout == want,
              "jumps %s without the preload printed %r (%s); test program?"
              % (mode, plain.stdout, plain.describe()))
        r = rt.run_bounded(argv, tmp, env, timeout=RUN_TIMEOUT)
        check(r.rc == 0, "jumps %s under the preload: %s" % (mode, r.describe()))
        check(r.stdout == want, "jumps %s under the preload printed %r, without %r"
              % (mode, r.stdout, want))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        return r, obj

    def spin_share(obj, name, samples, fn):
        """The thread spins 1 s after 150 ms in read: most samples on CPU in `fn`."""
        check(len(samples) >= 100, "%s has only %d samples" % (name, len(samples)))
        got = share(obj, samples, fn, on_cpu=True)
        note("%s: %d samples, %.0f%% on CPU in %s; top: %s"
             % (name, len(samples), got * 100, fn, top_stacks(obj, samples)))
        check(got >= 0.6, "only %.0f%% of %d %s samples are on CPU in %s (it spins 1 s after "
              "leaving read by siglongjmp); most common: %s"
              % (got * 100, len(samples), name, fn, top_stacks(obj, samples)))

    def test_spin(tmp):
        """main and a thread leave read() by siglongjmp, then spin 1 s."""
        r, obj = run_pair(tmp, "spin", {"WALLPROF_HZ": HZ},
                          "spin: main left read by siglongjmp, jumper too\n")
        spin_share(obj, "main", rt.samples_by_thread(obj).get(str(r.pid), []), "wpt_main_spin")
        spin_share(obj, "jumper", rt.thread_samples(obj, "jumper"), "wpt_jumper_spin")

    def test_repl(tmp):
        """Reads left by siglongjmp one after the other, from two places
        (wpt_prompt_short 50 ms, wpt_prompt_long 150 ms): each read is shown
        where it was made (before: the first read's stack stood for all)."""
        r, obj = run_pair(tmp, "repl", {"WALLPROF_HZ": HZ},
                          "repl: 10 of 10 reads left by siglongjmp\n")
        main = rt.samples_by_thread(obj).get(str(r.pid), [])
        check(len(main) >= 150, "main has only %d samples" % len(main))
        short = share(obj, main, "wpt_prompt_short", on_cpu=False)
        long_ = share(obj, main, "wpt_prompt_long", on_cpu=False)
        note("repl: %d samples, %.0f%% off CPU from wpt_prompt_short (25%% of the time), %.0f%% "
             "from wpt_prompt_long (75%%); top: %s"
             % (len(main), short * 100, long_ * 100, top_stacks(obj, main)))
        check(short >= 0.1 and long_ >= 0.5,
              "%.0f%% of main's samples are in wpt_prompt_short (25%% of the time) and %.0f%% in "
              "wpt_prompt_long (75%%); most common: %s"
              % (short * 100, long_ * 100, top_stacks(obj, main)))

    def test_recycle(tmp):
        """With 16 slots, 15 threads leave read() by siglongjmp and exit; the
        next thread takes one of their slots and spins 1 s."""
        _, obj = run_pair(tmp, "recycle", {"WALLPROF_HZ": HZ, "WALLPROF_MAX_THREADS": "16"},
                          "recycle: 15 of 15 threads left read by siglongjmp, then the "
                          "spinner ran\n")
        spin_share(obj, "spinner", rt.thread_samples(obj, "spinner"), "wpt_spinner_spin")

    def test_dead(tmp):
        """10 threads in turn leave read() by siglongjmp 20 ms after they
        start, and exit: none is sampled long after it is gone (before: until
        the end of the run, "blocked in read")."""
        _, obj = run_pair(tmp, "dead", {"WALLPROF_HZ": HZ},
                          "dead: 10 of 10 threads left read by siglongjmp and exited\n")
        by_tid = rt.samples_by_thread(obj)
        counts = [len(by_tid.get(t, [])) for t in rt.tids_named(obj, "dead")]
        note("dead: samples per thread %s" % counts)
        # 20 ms of life; 0.25 s of samples is a generous bound for noticing the exit.
        limit = 0.25 * int(HZ)
        check(counts and max(counts) <= limit, "threads that lived 20 ms have %s samples (more "
              "than %d: sampled after they exited)" % (counts, limit))

    def nested(tmp, env, mode="nested", thread=None):
        """main blocks 1.5 s in read() while a SIGALRM handler sleeps 1 ms in
        nanosleep every 20 ms: in most samples the reader is shown off CPU
        from read's published context, the read leaf right above its caller
        wpt_nested_read (a stack walked from /proc instead has libc's and
        our wrapper's frames in between: the context was retracted)."""
        env = dict(env, WALLPROF_HZ=HZ)
        r, obj = run_pair(tmp, mode, env,
                          "nested: read returned 1, the handler ran at least 20 times\n")
        if thread:
            reader = rt.thread_samples(obj, thread)
        else:
            reader = rt.samples_by_thread(obj).get(str(r.pid), [])
        check(len(reader) >= 150, "the reader has only %d samples" % len(reader))
        in_read = [s for s in reader if s.get("on_cpu") is False
                   and rt.stack_functions(obj, s["stack_id"])[:2] in
                   (["read", "wpt_nested_read"], ["__libc_read", "wpt_nested_read"],
                    ["__read", "wpt_nested_read"])]
        got = len(in_read) / len(reader)
        note("%s: %d samples, %.0f%% off CPU in read from the published context; top: %s"
             % (mode, len(reader), got * 100, top_stacks(obj, reader)))
        check(got >= 0.7, "only %.0f%% of the reader's %d samples are off CPU in read from its "
              "published context, right above wpt_nested_read (it blocks there 1.5 s); most "
              "common: %s" % (got * 100, len(reader), top_stacks(obj, reader)))

    def test_nested(tmp):
        nested(tmp, {})

    def test_nested_alt(tmp):
        """The same in a thread with the handler on an alternate signal stack
        above the thread's: the stack pointers of the two calls are not
        comparable there, and the outer call's context still stands."""
        nested(tmp, {}, "nested_alt", "altreader")

    def test_nested_enter(tmp):
        """The same, with the handler's nanosleep also run in the middle of
        read()'s publishing (WALLPROF_TEST_ENTER_SIGNAL): the handler's call
        comes and goes there, and read publishes its own context all the same
        (before: the handler's nanosleep stood for the whole read)."""
        nested(tmp, {"WALLPROF_TEST_ENTER_SIGNAL": "14"})

    def test_scan(tmp):
        """Threads that take a recycled slot while a scan is held between
        listing and releasing (WALLPROF_TEST_SCAN_HOLD_US) are sampled all
        their life: each "victim" gets about as many samples per second as
        "steady", which spins all along."""
        env = {"WALLPROF_HZ": "100", "WALLPROF_MAX_THREADS": "16",
               "WALLPROF_TEST_SCAN_HOLD_US": "30000"}
        r = rt.run_bounded([rt.prog("jumps"), "scan"], tmp, env, timeout=RUN_TIMEOUT)
        check(r.rc == 0 and r.stdout == "scan: 4 victims ran\n", "jumps scan: %s" % r.describe())
        life = {m.group(1): float(m.group(2))
                for m in re.finditer(r"^life (\w+) ([0-9.]+)$", r.stderr, re.M)}
        check(len(life) == 5, "jumps scan printed %d lifetimes: %r" % (len(life), r.stderr[-300:]))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        steady = rt.thread_samples(obj, "steady")
        check(len(steady) >= 20, "steady has only %d samples" % len(steady))
        rate = len(steady) / life["steady"]
        victims = [rt.samples_by_thread(obj).get(t, []) for t in rt.tids_named(obj, "victim")]
        got = sum(len(v) for v in victims)
        want = rate * sum(v for k, v in life.items() if k.startswith("victim"))
        note("scan: steady %.1f samples/s; the 4 victims have %d samples, %.0f expected at "
             "that rate (%s)" % (rate, got, want, [len(v) for v in victims]))
        check(got >= 0.8 * want, "the 4 victims have %d samples, %.0f expected at steady's "
              "rate (%.1f/s): their slots were released while they lived (%s)"
              % (got, want, rate, [len(v) for v in victims]))

    return [("jumps_spin", test_spin), ("jumps_repl", test_repl),
            ("jumps_recycle", test_recycle), ("jumps_dead", test_dead),
            ("jumps_nested", test_nested), ("jumps_nested_alt", test_nested_alt),
            ("jumps_nested_enter", test_nested_enter),
            ("jumps_scan", test_scan)]
