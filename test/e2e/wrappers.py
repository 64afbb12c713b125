"""The interposed calls at their edges (test/progs/wrappers.c), each found by a
review of the issue-9 wrappers: bad arguments the kernel rejects must come
back as its errors (the wrappers read the caller's timespecs and iovecs
before the kernel did and crashed), a timeout of LONG_MAX seconds must not
wrap to zero after our signal, a thread that ran 3 ms and then blocked in a
raw nanosleep must not be signalled there (every such sleep ended early),
MSG_WAITALL on a datagram socket must not glue datagrams together, and a
send with SO_SNDTIMEO that our signal interrupts must not start its timeout
over (it never returned under forced signals).
Programs run at 1000 Hz with our signal forced into wrapped calls
(WALLPROF_TEST_SIGNAL_BLOCKED=1) and must print what they print without the
profiler."""

import re

RUN_TIMEOUT = 30
FORCED = {"WALLPROF_HZ": "1000", "WALLPROF_TEST_SIGNAL_BLOCKED": "1",
          "WALLPROF_FOLLOW_CHILDREN": "0", "WALLPROF_LOG": "error"}


def tests(rt):
    check = rt.check

    def pair(tmp, mode, env=FORCED):
        argv = [rt.prog("wrappers"), mode]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=RUN_TIMEOUT)
        check(plain.rc == 0, "wrappers %s without the preload: %s" % (mode, plain.describe()))
        run = rt.run_bounded(argv, tmp, env, timeout=RUN_TIMEOUT)
        check(run.rc == 0, "wrappers %s under the preload: %s" % (mode, run.describe()))
        return plain, run

    def same(tmp, mode):
        plain, run = pair(tmp, mode)
        check(run.stdout == plain.stdout, "wrappers %s under the preload printed %r, without %r"
              % (mode, run.stdout.strip().splitlines(), plain.stdout.strip().splitlines()))

    def test_bad_args(tmp):
        same(tmp, "badargs")

    def test_huge_timeout(tmp):
        same(tmp, "hugetimeout")

    def test_udp_waitall(tmp):
        same(tmp, "udpwaitall")

    def test_send_timeout(tmp):
        same(tmp, "sndtimeo")

    def test_long_connect_timeout(tmp):
        """SO_SNDTIMEO past 24.8 days on a connect our signal interrupts:
        the background wait must not wrap to a short timeout."""
        same(tmp, "longconnect")

    def test_busy_then_blocked(tmp):
        """A signal sent to a thread seen running can still land in the
        microseconds after it blocked (a few in a hundred); never more
        (before: every sleep)."""
        plain, run = pair(tmp, "busyblock", {"WALLPROF_HZ": "1000", "WALLPROF_LOG": "error"})
        m = re.search(r"busyblock: (\d+) of (\d+)", run.stdout)
        check(m, "wrappers busyblock printed %r" % run.stdout)
        early, n = int(m.group(1)), int(m.group(2))
        rt.note("busyblock: %d of %d raw sleeps ended early under the preload (%s without)"
                % (early, n, plain.stdout.strip()))
        check(n >= 100 and early <= 0.1 * n, "%d of %d raw nanosleeps ended early under the "
              "preload (without: %s)" % (early, n, plain.stdout.strip()))

    def test_mmap_next(tmp):
        """The library defines mmap (for libunwind's calls, unwind.c): a
        library of the program's that defines it too (a heap profiler's
        hook) still sees every call the program makes, enabled or not
        (test/progs/mmap_next.c; a disabled library used to send them
        straight to the system call)."""
        argv = [rt.prog("mmap_next")]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=RUN_TIMEOUT)
        check(plain.rc == 0 and plain.stdout == "mmap_next: 10 of 10\n",
              "mmap_next without the preload: %s" % plain.describe())
        for env in ({"WALLPROF_ENABLE": "0"}, {"WALLPROF_LOG": "quiet"}):
            run = rt.run_bounded(argv, tmp, env, timeout=RUN_TIMEOUT)
            check(run.rc == 0 and run.stdout == plain.stdout, "mmap_next under the preload "
                  "(%s) printed %r (%s)" % (env, run.stdout, run.describe()))

    return [
        ("wrap_mmap_next", test_mmap_next),
        ("wrap_bad_args", test_bad_args),
        ("wrap_huge_timeout", test_huge_timeout),
        ("wrap_udp_waitall", test_udp_waitall),
        ("wrap_busy_then_blocked", test_busy_then_blocked),
        ("wrap_send_timeout", test_send_timeout),
        ("wrap_long_connect_timeout", test_long_connect_timeout),
    ]
