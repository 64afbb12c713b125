"""Threads cancelled inside wrapped calls (test/progs/cancel.c and
cancel_cxx.cc). The library is built with -fexceptions so that a wrapper's
cleanup runs when pthread_cancel unwinds through it; the personality
routine and _Unwind_Resume that cleanup needs are forwarded at run time to
the unwinder in use (preload/eh_abi.c), not linked from libgcc_s. A C
program gets its libgcc_s from glibc, in glibc's own scope; a C++ program
has it in its own."""

THREAD_NAMES = ("in_read", "in_nanosleep", "in_cond_wait", "in_poll", "in_accept")
TIMEOUT = 30


def tests(rt):
    check = rt.check

    def same_as_plain(tmp, name):
        argv = [rt.prog(name)]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
        check(plain.rc == 0, "%s without the preload: %s" % (name, plain.describe()))
        run = rt.run_bounded(argv, tmp, {"WALLPROF_FOLLOW_CHILDREN": "0"}, timeout=TIMEOUT)
        check(run.rc == 0, "%s under the preload: %s" % (name, run.describe()))
        check(run.stdout == plain.stdout, "%s printed %r under the preload, %r without"
              % (name, run.stdout, plain.stdout))
        check(not run.other_stderr(), "%s wrote to stderr: %r" % (name, run.other_stderr()))
        obj = rt.exit_profile(run)
        rt.check_valid(obj)
        return obj

    def test_blocked(tmp):
        """Five threads, each blocked in another wrapped call (read,
        nanosleep, pthread_cond_wait, poll, accept), cancelled and joined:
        every one ends PTHREAD_CANCELED as without the profiler, and each
        was sampled in its call before."""
        obj = same_as_plain(tmp, "cancel")
        by_thread = rt.samples_by_thread(obj)
        for fn in THREAD_NAMES:
            n = max((sum(1 for s in ss if fn in rt.stack_functions(obj, s["stack_id"]))
                     for ss in by_thread.values()), default=0)
            check(n >= 10, "the thread in %s has %d samples in it (300 ms at 101 Hz)" % (fn, n))

    def test_cleanup_ran(tmp):
        """A thread cancelled in a wrapped read catches the cancellation
        (abi::__forced_unwind) and spins 400 ms of CPU before it rethrows:
        its samples show the spin, on CPU. Had the wrapper's cleanup not
        run on the way out, the sampler would still take the thread for one
        waiting in read (0 spin samples then)."""
        obj = same_as_plain(tmp, "cancel_cxx")
        spin = [s for ss in rt.samples_by_thread(obj).values() for s in ss
                if "spin_after_cancel" in rt.stack_functions(obj, s["stack_id"])]
        check(len(spin) >= 15, "%d samples in spin_after_cancel (400 ms of CPU at 101 Hz)"
              % len(spin))
        stale = [s for s in spin if "__libc_read" in rt.stack_functions(obj, s["stack_id"])
                 or "read" in rt.stack_functions(obj, s["stack_id"])]
        check(not stale, "%d spin samples still in read" % len(stale))

    return [
        ("cancel_blocked", test_blocked),
        ("cancel_cleanup_ran", test_cleanup_ran),
    ]
