"""A program that calls libunwind itself (test/progs/unwind_user.c), the
copy the library links, from its first constructor on. libunwind blocks
every signal around its cache lock, and its blocking must hold for ours;
its own lock calls must not be published by our wrappers: else a sample,
or the sampler's walk of a pinned thread, waited for a lock that its own
thread held, waiting for us (a hang, every run, before). And libunwind's
validation pipe must be our fake one although the program walks before
our first tick (in a descriptor table the sampler shares, a real one made
on the program's call had our walks read and write whatever the program
put at those numbers later). And the warm-up that does this in the
constructor leaves the thread's trace cache to its first capture.
"""

import os
import statistics

TIMEOUT = 30
ENV = {"WALLPROF_HZ": "997", "WALLPROF_FOLLOW_CHILDREN": "0"}


def tests(rt):
    check = rt.check

    def pair(tmp, mode, env):
        argv = [rt.prog("unwind_user"), mode]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
        check(plain.rc == 0, "unwind_user %s without the preload: %s" % (mode, plain.describe()))
        run = rt.run_bounded(argv, tmp, env, timeout=TIMEOUT)
        check(run.rc is not None, "unwind_user %s hung under the preload (stderr %r)"
              % (mode, run.stderr[-300:]))
        check(run.rc == 0 and run.stdout == plain.stdout, "unwind_user %s under the preload: "
              "printed %r, %r without (%s)" % (mode, run.stdout, plain.stdout, run.describe()))
        return run

    def test_fds(tmp):
        """Descriptors the program reuses after its own libunwind call are
        its own: a message left in a socket pair at those numbers reads
        back intact, with the sampler in the program's table."""
        pair(tmp, "fds", ENV)

    def test_walks(tmp):
        """Four threads walking their own stacks with unw_step for 1.5 s
        under 997 Hz sampling: the program ends as without the profiler
        (it hung every time before) and its profile is valid."""
        run = pair(tmp, "walks", ENV)
        rt.check_valid(rt.exit_profile(run))

    def test_walk_masks(tmp):
        """Our handler's walks change no signal mask: libunwind blocks every
        signal around each of its locks, about a hundred system calls in a
        cold walk, and the handler has them blocked already (the test build
        aborts on a mask system call made in one of our walks; every walk
        made them before). The program's own walks keep the real calls."""
        run = pair(tmp, "walks", dict(ENV, WALLPROF_TEST_WALK_MASK_STRICT="1"))
        obj = rt.exit_profile(run)
        rt.check_valid(obj)
        deep = [s for s in rt.profile_part(obj)["samples"]
                if "deep" in rt.stack_functions(obj, s["stack_id"])]
        check(len(deep) >= 100, "only %d samples in the threads' recursion" % len(deep))

    def minflt(tmp, extra):
        """Minor page faults of one /bin/true under the preload."""
        env = rt.clean_env(dict({"WALLPROF_OUTPUT": os.path.join(tmp, "w.%p.json"),
                                 "WALLPROF_LOG": "quiet"}, **extra))
        pid = os.posix_spawn("/bin/true", ["/bin/true"], env)
        _, status, usage = os.wait4(pid, 0)
        check(os.waitstatus_to_exitcode(status) == 0, "/bin/true under the preload: status %d"
              % status)
        return usage.ru_minflt

    def test_warmup_pages(tmp):
        """A process that ends before its first sample does not pay for
        libunwind's trace cache: the warm-up refuses its 256 KiB (64 pages,
        which libunwind writes whole), so the library's start-up touches
        fewer pages than the cache alone and some 50 more (117 with the
        cache); medians of seven runs, enabled against WALLPROF_ENABLE=0."""
        on, off = [], []
        for _ in range(7):
            on.append(minflt(tmp, {}))
            off.append(minflt(tmp, {"WALLPROF_ENABLE": "0"}))
        extra = statistics.median(on) - statistics.median(off)
        check(extra < 88, "the library's start-up adds %d page faults (%s against %s): "
              "the warm-up made the trace cache" % (extra, on, off))

    return [
        ("unwind_warmup_pages", test_warmup_pages),
        ("unwind_user_fds", test_fds),
        ("unwind_user_walks", test_walks),
        ("unwind_walk_masks", test_walk_masks),
    ]
