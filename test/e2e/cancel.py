"""Threads cancelled inside wrapped calls (test/progs/cancel.c,
cancel_cxx.cc, cancel_guard.c with libcancel_guard.cc). The library is
built with -fexceptions so that a wrapper's cleanup runs when
pthread_cancel unwinds through it; and it names libgcc_s before libunwind,
which exports the _Unwind_* API too: with libunwind first in the global
scope, libgcc_s's own unwinder bound its calls to it, and neither the
wrappers' cleanups nor the program's destructors ran (a C program, or one
whose C++ library brings libgcc_s in after us)."""

THREAD_NAMES = ("in_read", "in_nanosleep", "in_cond_wait", "in_poll", "in_accept")
TIMEOUT = 30


def tests(rt):
    check = rt.check

    def same_as_plain(tmp, name, *args):
        argv = [rt.prog(name)] + list(args)
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
        check(plain.rc == 0, "%s without the preload: %s" % (name, plain.describe()))
        run = rt.run_bounded(argv, tmp, {"WALLPROF_FOLLOW_CHILDREN": "0"}, timeout=TIMEOUT)
        check(run.rc == 0, "%s under the preload: %s" % (name, run.describe()))
        check(run.stdout == plain.stdout, "%s printed %r under the preload, %r without"
              % (name, run.stdout, plain.stdout))
        check(run.other_stderr() == plain.stderr.splitlines(), "%s wrote %r to stderr under "
              "the preload, %r without" % (name, run.other_stderr(), plain.stderr))
        obj = rt.exit_profile(run)
        rt.check_valid(obj)
        return obj

    def test_blocked(tmp):
        """Five threads, each blocked in another wrapped call (read,
        nanosleep, pthread_cond_wait, poll, accept), cancelled and joined:
        every one ends PTHREAD_CANCELED as without the profiler, and each
        was sampled in its call before."""
        obj = same_as_plain(tmp, "cancel", "blocked")
        by_thread = rt.samples_by_thread(obj)
        for fn in THREAD_NAMES:
            n = max((sum(1 for s in ss if fn in rt.stack_functions(obj, s["stack_id"]))
                     for ss in by_thread.values()), default=0)
            check(n >= 10, "the thread in %s has %d samples in it (300 ms at 101 Hz)" % (fn, n))

    def spin_samples(obj, fn):
        return [s for ss in rt.samples_by_thread(obj).values() for s in ss
                if fn in rt.stack_functions(obj, s["stack_id"])]

    def test_cleanup_c(tmp):
        """A C program: a thread cancelled in a wrapped read runs its
        cleanup handler (pthread_cleanup_push), 400 ms of CPU, sampled as
        such: the wrapper's own cleanup ran before it. With libunwind's
        _Unwind_* first in the scope, libgcc_s's unwind skipped our frame's
        cleanup: 0 samples in the handler, all of them in read."""
        obj = same_as_plain(tmp, "cancel", "cleanup")
        spin = spin_samples(obj, "spin_in_cleanup")
        check(len(spin) >= 15, "%d samples in spin_in_cleanup (400 ms of CPU at 101 Hz)"
              % len(spin))

    def test_destructor(tmp):
        """A C program with a C++ library: a thread cancelled in the
        library's read runs the destructor of the object it holds, as
        without the profiler (its line on stderr). With libunwind's
        _Unwind_* ahead of libgcc_s in the scope it did not."""
        same_as_plain(tmp, "cancel_guard")

    def test_cleanup_ran(tmp):
        """A thread cancelled in a wrapped read catches the cancellation
        (abi::__forced_unwind) and spins 400 ms of CPU before it rethrows:
        its samples show the spin, on CPU. Had the wrapper's cleanup not
        run on the way out, the sampler would still take the thread for one
        waiting in read (0 spin samples then)."""
        obj = same_as_plain(tmp, "cancel_cxx")
        spin = spin_samples(obj, "spin_after_cancel")
        check(len(spin) >= 15, "%d samples in spin_after_cancel (400 ms of CPU at 101 Hz)"
              % len(spin))
        stale = [s for s in spin if "__libc_read" in rt.stack_functions(obj, s["stack_id"])
                 or "read" in rt.stack_functions(obj, s["stack_id"])]
        check(not stale, "%d spin samples still in read" % len(stale))

    return [
        ("cancel_blocked", test_blocked),
        ("cancel_cleanup_c", test_cleanup_c),
        ("cancel_destructor", test_destructor),
        ("cancel_cleanup_ran", test_cleanup_ran),
    ]
