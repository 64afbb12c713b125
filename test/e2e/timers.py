"""Running threads sampled by their own CPU-time timers
(test/progs/timers.c): the samples come from the timers, not from our
signals; the program's own timers get the ids they get without the
profiler, and none of ours outlives its thread."""

import os

SPIN_S = "1.5"


def tests(rt):
    check, note = rt.check, rt.note

    def spin_share(obj, samples):
        on = [s for s in samples if s.get("on_cpu")
              and "wpt_timers_spin" in rt.stack_functions(obj, s["stack_id"])]
        return len(on) / max(len(samples), 1)

    def spinners(obj):
        return [ss for ss in rt.samples_by_thread(obj).values()
                if any("wpt_timers_spin" in rt.stack_functions(obj, s["stack_id"]) for s in ss)]

    def test_spin(tmp):
        """Two threads spin 1.5 s: each gets a CPU timer; its samples are
        in the spinning function, on CPU, at the sampling rate; most come
        from the timer (from_timer) and few signals are sent. The
        program's first timer_create afterwards gets id 0 as without us,
        and no timer of ours is left (/proc/self/timers)."""
        argv = [rt.prog("timers"), "spin", SPIN_S]
        bare = rt.run_plain(argv, tmp)
        check(bare.rc == 0 and bare.stdout.startswith("timers: first id 0,"), bare.describe())
        r = rt.run_bounded(argv, tmp, timeout=30)
        check(r.rc == 0, r.describe())
        check(r.stdout == bare.stdout, "stdout %r, without the profiler %r"
              % (r.stdout, bare.stdout))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        sp = spinners(obj)
        note("timers: %s timers, from_timer %s, held %s, signals %s; spinners' samples %s"
             % (w.get("timers"), w.get("from_timer"), w.get("held"), w.get("signals"),
                [len(ss) for ss in sp]))
        check(len(sp) == 2, "%d spinning threads in the profile" % len(sp))
        check(int(w.get("timers") or 0) >= 1, "no CPU timer was armed")
        from_timer = int(w.get("from_timer") or 0)
        held = int(w.get("held") or 0)
        spun = sum(len(ss) for ss in sp)
        check(from_timer + held >= 0.5 * spun, "only %d of the spinners' %d samples from "
              "their timers (and %d held)" % (from_timer, spun, held))
        for ss in sp:
            check(spin_share(obj, ss) >= 0.9, "%.0f%% of a spinner's samples on CPU in "
                  "wpt_timers_spin" % (100 * spin_share(obj, ss)))
            rate = rt.sample_rate(ss)
            check(rate >= 0.85 * 101, "a spinner sampled at %.0f Hz" % rate)

    def test_spin_without(tmp):
        """WALLPROF_CPU_TIMERS=0: no timer, the spinners are signalled as
        before, with the same profile."""
        r = rt.run_bounded([rt.prog("timers"), "spin", SPIN_S], tmp,
                           {"WALLPROF_CPU_TIMERS": "0"}, timeout=30)
        check(r.rc == 0 and r.stdout.startswith("timers: first id 0, high 0"), r.describe())
        obj = rt.exit_profile(r)
        w = rt.wallprof_section(obj)
        check(int(w.get("timers") or 0) == 0 and int(w.get("from_timer") or 0) == 0,
              "timers %s, from_timer %s" % (w.get("timers"), w.get("from_timer")))
        sp = spinners(obj)
        check(len(sp) == 2 and all(spin_share(obj, ss) >= 0.9 for ss in sp),
              "spinners: %s" % [spin_share(obj, ss) for ss in sp])
        # two running threads take at most two signals a tick: one batch
        check(int(w.get("signal_batches") or 0) == 0,
              "%s extra batches of signals for two threads" % w.get("signal_batches"))

    def test_spread(tmp):
        """More running threads than a batch of signals holds: 24 threads
        on (at most) 2 CPUs spinning 1.5 s, 0.2 ms at a time between
        sched_yield calls, so that each runs in every period, without
        CPU-time timers (WALLPROF_CPU_TIMERS=0): a batch holds 8 (max(CPUs,
        8)) and a tick has about 20 signals to send. The sampler spreads
        them over the period (signal_batches: batches sent after a wait),
        and the profile still has every thread at nearly every tick, in its
        function (a signal to a thread waiting for a CPU lands as it leaves
        sched_yield, so the stack is the loop's, not always the spin's)."""
        mine = os.sched_getaffinity(0)
        pinned = set(sorted(mine)[:2])
        cpus, n = len(pinned), 24
        argv = [rt.prog("timers"), "crowd", str(n), SPIN_S]
        os.sched_setaffinity(0, pinned)  # the program inherits it
        try:
            r = rt.run_bounded(argv, tmp, {"WALLPROF_CPU_TIMERS": "0"}, timeout=60)
        finally:
            os.sched_setaffinity(0, mine)
        check(r.rc == 0 and r.stdout == "timers: crowd of %d done\n" % n, r.describe())
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        ticks, batches = int(w.get("ticks") or 0), int(w.get("signal_batches") or 0)
        sp = [ss for ss in rt.samples_by_thread(obj).values()
              if any("yielder" in rt.stack_functions(obj, s["stack_id"]) for s in ss)]
        total = sum(len(ss) for ss in sp)
        note("spread: %d threads on %d CPUs, %d ticks, %s signals, %d extra batches, "
             "pending %s; %d spinners' samples" % (n, cpus, ticks, w.get("signals"), batches,
                                                  w.get("pending"), total))
        check(batches >= ticks // 2, "only %d of %d ticks spread their signals (%s signals)"
              % (batches, ticks, w.get("signals")))
        # a batch holds 8 here: on average, no more than that goes at once
        sig = int(w.get("signals") or 0)
        check(sig <= 10 * (ticks + batches), "%d signals in %d ticks and %d later batches: "
              "more than 10 a batch" % (sig, ticks, batches))
        check(len(sp) == n, "%d of %d spinning threads in the profile" % (len(sp), n))
        check(total >= 0.7 * n * ticks, "%d samples of %d spinners over %d ticks"
              % (total, n, ticks))
        for ss in sp:
            mine = sum(1 for s in ss if "yielder" in rt.stack_functions(obj, s["stack_id"]))
            check(mine >= 0.9 * len(ss), "%d of a thread's %d samples in its function"
                  % (mine, len(ss)))

    def test_ids(tmp):
        """The program creates and deletes timers of its own while threads
        that get CPU timers come and go: it gets every id it gets without
        the profiler."""
        argv = [rt.prog("timers"), "ids"]
        bare = rt.run_plain(argv, tmp)
        check(bare.rc == 0 and bare.stdout.startswith("timers: ids "), bare.describe())
        for _ in range(3):
            r = rt.run_bounded(argv, tmp, timeout=30)
            check(r.rc == 0, r.describe())
            check(r.stdout == bare.stdout, "ids %r, without the profiler %r"
                  % (r.stdout.strip(), bare.stdout.strip()))

    def test_raw_held(tmp):
        """The program holds a timer made by a raw system call (the
        interposed timer_create never saw it) while threads that would get
        CPU timers run: its next timer's id is the one it gets without the
        profiler (no timer of ours is made then: /proc/self/timers shows
        the program's)."""
        argv = [rt.prog("timers"), "raw"]
        bare = rt.run_plain(argv, tmp)
        check(bare.rc == 0 and bare.stdout.startswith("timers: raw "), bare.describe())
        r = rt.run_bounded(argv, tmp, timeout=30)
        check(r.rc == 0 and r.stdout == bare.stdout, "stdout %r, without the profiler %r"
              % (r.stdout, bare.stdout))

    def test_queue_limit(tmp):
        """The user's signal queue nearly full (RLIMIT_SIGPENDING; every
        timer holds an entry of it): with room for 1, 2 or 3 entries, the
        program's first timer still gets id 0 (with 2, the timer that puts
        the kernel's next id back did not fit after ours: ours is deleted
        to make room)."""
        for room in ("1", "2", "3"):
            argv = [rt.prog("timers"), "queue", room]
            bare = rt.run_plain(argv, tmp)
            check(bare.rc == 0 and bare.stdout == "timers: first id 0\n", bare.describe())
            r = rt.run_bounded(argv, tmp, timeout=30)
            check(r.rc == 0 and r.stdout == bare.stdout, "room %s: stdout %r, without the "
                  "profiler %r" % (room, r.stdout, bare.stdout))

    return [
        ("timers_raw_held", test_raw_held),
        ("timers_queue_limit", test_queue_limit),
        ("timers_spin", test_spin),
        ("timers_spin_without", test_spin_without),
        ("timers_spread", test_spread),
        ("timers_ids", test_ids),
    ]
