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

import re

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

    def mthp_hides_pages():
        """Whether the kernel may back a 256 KiB anonymous mapping with
        larger folios (mTHP), so that touching it takes fewer faults."""
        base = "/sys/kernel/mm/transparent_hugepage"
        try:
            with open(base + "/enabled") as f:
                top = "[always]" in f.read()
        except OSError:
            top = False
        for size in (16, 32, 64, 128, 256):
            try:
                with open("%s/hugepages-%dkB/enabled" % (base, size)) as f:
                    mode = f.read()
            except OSError:
                continue
            if "[always]" in mode or ("[inherit]" in mode and top):
                return True
        return False

    def test_warmup_pages(tmp):
        """A process that ends before its first sample does not pay for
        libunwind's trace cache: the warm-up refuses its 256 KiB, which
        libunwind writes whole (64 page faults on the starting thread; the
        test build counts them, RUSAGE_THREAD around the warm-up), and
        /bin/true still runs as without the library."""
        plain = rt.run_bounded(["/bin/true"], tmp, preload=False, timeout=TIMEOUT)
        run = rt.run_bounded(["/bin/true"], tmp, {"WALLPROF_TEST_WARMUP_REPORT": "1"},
                             timeout=TIMEOUT)
        check(run.rc == plain.rc == 0, "/bin/true under the preload: %s" % run.describe())
        m = re.search(r"^wallprof test: the warm-up took (\d+) page faults$", run.stderr, re.M)
        check(m, "no warm-up line on stderr: %r" % run.stderr[-300:])
        if mthp_hides_pages():
            rt.note("anonymous mTHP is on: the page count cannot show the cache")
            return
        check(int(m.group(1)) < 32, "the warm-up took %s page faults: it made the trace "
              "cache (64 pages)" % m.group(1))

    return [
        ("unwind_warmup_pages", test_warmup_pages),
        ("unwind_user_fds", test_fds),
        ("unwind_user_walks", test_walks),
        ("unwind_walk_masks", test_walk_masks),
    ]
