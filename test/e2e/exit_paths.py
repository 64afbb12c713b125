"""Ends that run the program's own code last (test/progs/exit_paths.c):
main() leaving by pthread_exit, whose last thread then runs the atexit
handlers and flushes stdout in the program's own descriptor table; and
_exit or exec from a signal handler that may have interrupted malloc, where
only the raw dump (async-signal-safe) may be written: no hang, the same
status, the profile converted from it in the converter's process."""

import os

RUNS = 8          # handler_exit hung in 4 of 5 runs before the fix
TIMEOUT = 15


def tests(rt):
    check = rt.check

    def test_pthread_exit_atexit(tmp):
        argv = [rt.prog("exit_paths"), "pthread_exit_atexit"]
        want = "main: buffered\natexit: stdout\n"
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
        check(plain.rc == 0 and plain.stdout == want, "bare: rc %s stdout %r"
              % (plain.rc, plain.stdout))
        with open(os.path.join(tmp, "atexit.log")) as f:
            check(f.read() == "atexit ran\n", "bare: the atexit handler's write")
        os.unlink(os.path.join(tmp, "atexit.log"))
        r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
        check(r.rc == 0, "preloaded: %s" % r.describe())
        check(r.stdout == want, "preloaded: stdout %r, want %r (stdout's buffer lost?)"
              % (r.stdout, want))
        with open(os.path.join(tmp, "atexit.log")) as f:
            got = f.read()
        check(got == "atexit ran\n", "preloaded: the atexit handler wrote %r to the file main "
              "opened (want 'atexit ran'): it ran in another descriptor table" % got)
        obj = rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % r.pid))
        rt.check_valid(obj)
        tails = {s["thread_id"] for s in rt.profile_part(obj)["samples"]
                 if "wpt_tail_work" in rt.stack_functions(obj, s["stack_id"])}
        check(len(tails) == 2, "wpt_tail_work on %d threads, want 2" % len(tails))

    def test_pthread_exit_short(tmp):
        """main's pthread_exit with 16 threads of 5 ms each, which no tick
        sees: the last of them still ends the process on its own thread
        (stdout flushed, the atexit handler's write done)."""
        argv = [rt.prog("exit_paths"), "pthread_exit_short"]
        want = "main: buffered\natexit: stdout\n"
        bad = 0
        for i in range(RUNS * 2):
            r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
            with open(os.path.join(tmp, "atexit.log")) as f:
                log = f.read()
            if r.rc != 0 or r.stdout != want or log != "atexit ran\n":
                bad += 1
                last = "rc %s, stdout %r, log %r" % (r.rc, r.stdout, log)
        check(bad == 0, "%d of %d runs lost the program's output (%s)" % (bad, RUNS * 2, last)
              if bad else "")

    def test_pthread_exit_cleanup(tmp):
        """main's own cleanup handler runs 0.4 s after its pthread_exit:
        main is still sampled there (it was let go at the call, and its
        handler's work was missing from the profile)."""
        argv = [rt.prog("exit_paths"), "pthread_exit_cleanup"]
        r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
        check(r.rc == 0 and r.stdout == "cleanup: done\n", "%s %r" % (r.describe(), r.stdout))
        obj = rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % r.pid))
        rt.check_valid(obj)
        n = sum(1 for s in rt.profile_part(obj)["samples"]
                if "wpt_cleanup_work" in rt.stack_functions(obj, s["stack_id"])
                and str(s["thread_id"]) == str(r.pid))
        check(n >= 25, "%d samples of main's 0.4 s cleanup handler (want >= 25)" % n)

    def test_thrd_exit(tmp):
        """main leaves by thrd_exit while a C11 thread (thrd_create, counted
        as pthread_create's are) works on: sampling goes on until it ends,
        and its output is there."""
        argv = [rt.prog("exit_paths"), "thrd_exit"]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
        check(plain.rc == 0 and plain.stdout == "thrd: done\n", "bare: %s %r"
              % (plain.describe(), plain.stdout))
        r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
        check(r.rc == 0 and r.stdout == plain.stdout, "preloaded: %s %r" % (r.describe(), r.stdout))
        obj = rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % r.pid))
        n = sum(1 for s in rt.profile_part(obj)["samples"]
                if "wpt_tail_work" in rt.stack_functions(obj, s["stack_id"]))
        check(n >= 30, "%d samples of the C11 thread's 0.5 s of work (want >= 30): the "
              "sampler stopped when main left" % n)

    def test_raw_exit(tmp):
        """main leaves by a raw exit system call (no destructor of ours
        runs: only the kernel knows) while a thread works on: sampling goes
        on until that thread ends, the process then ends with it, status 0,
        and the profile is written."""
        # 0.5 s: the sampler has seen main gone (it looks every 100 ms);
        # 0.06 s: the thread's end is the first to know
        for secs, want in (("0.5", 30), ("0.06", 3)):
            argv = [rt.prog("exit_paths"), "raw_exit", secs]
            plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
            check(plain.rc == 0 and plain.stdout == "raw: done\n", "bare: %s %r"
                  % (plain.describe(), plain.stdout))
            for _ in range(3):
                r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
                check(r.rc == 0 and r.stdout == plain.stdout,
                      "preloaded: %s %r" % (r.describe(), r.stdout))
                obj = rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % r.pid))
                n = sum(1 for s in rt.profile_part(obj)["samples"]
                        if "wpt_tail_work" in rt.stack_functions(obj, s["stack_id"]))
                check(n >= want, "%d samples of the thread's %s s of work (want >= %d)"
                      % (n, secs, want))

    def test_raw_exit_status(tmp):
        """main leaves by a raw exit with status 3, and its other thread,
        after its work, by a raw exit too: no code of ours sees either
        end, so the sampler finds them gone, writes the profile (nothing
        else could) and leaves by a raw exit of its own thread: the
        process ends with the status the bare run gets (the last
        thread's on Linux 6.18: 0), and no exit_group of ours imposes
        one."""
        for secs, want in (("0.5", 30), ("0.06", 3)):
            argv = [rt.prog("exit_paths"), "raw_exit_all", secs, "3"]
            plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
            check(plain.rc in (0, 3) and plain.stdout == "raw: done\n", "bare: %s %r"
                  % (plain.describe(), plain.stdout))
            for _ in range(3):
                r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
                check(r.rc == plain.rc and r.stdout == plain.stdout,
                      "preloaded: %s %r, bare %s" % (r.describe(), r.stdout, plain.describe()))
                obj = rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % r.pid))
                n = sum(1 for s in rt.profile_part(obj)["samples"]
                        if "wpt_tail_work" in rt.stack_functions(obj, s["stack_id"]))
                check(n >= want, "%d samples of the thread's %s s of work (want >= %d)"
                      % (n, secs, want))

    def handler_end(tmp, argv, want_rc):
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
        check(plain.rc == want_rc, "bare: rc %s, want %s" % (plain.rc, want_rc))
        hung = 0
        for i in range(RUNS):
            r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
            if r.rc is None:
                hung += 1
                continue
            check(r.rc == plain.rc, "preloaded: rc %s, bare %s (%s)" % (r.rc, plain.rc,
                                                                       r.describe()))
            check(r.stdout == plain.stdout and r.other_stderr() == plain.other_stderr(),
                  "output differs: %r %r" % (r.stdout, r.other_stderr()))
            # Only the raw dump is written in the handler; the converter's
            # process makes the profile of it before the exit is seen.
            raw = os.path.join(tmp, "wallprof.%d.raw" % r.pid)
            out = os.path.join(tmp, "wallprof.%d.json" % r.pid)
            if argv[1] == "handler_exec":
                out = os.path.join(tmp, "wallprof.%d.exec0.json" % r.pid)
            check(os.path.exists(out), "no profile %s (%s)" % (out, r.describe()))
            check(not os.path.exists(raw), "the raw dump %s is left" % raw)
            if i == 0:
                obj = rt.load_profile(out)
                rt.check_valid(obj)
                fns = set()
                for s in rt.profile_part(obj)["samples"]:
                    fns.update(f for f in rt.stack_functions(obj, s["stack_id"]) if f)
                check("wpt_malloc_work" in fns, "the dump lacks wpt_malloc_work: %s"
                      % sorted(fns)[:10])
        check(hung == 0, "%d of %d runs hung (_exit from a handler that interrupted malloc)"
              % (hung, RUNS))

    def test_handler_exit(tmp):
        handler_end(tmp, [rt.prog("exit_paths"), "handler_exit"], 7)

    def test_handler_exec(tmp):
        handler_end(tmp, [rt.prog("exit_paths"), "handler_exec", "/bin/true"], 0)

    def test_handler_exec_fails(tmp):
        """An exec from a handler that fails: its raw dump parked the
        sampler, which must go on; the exit then writes the JSON profile
        with the work done after."""
        argv = [rt.prog("exit_paths"), "handler_exec_fails"]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=TIMEOUT)
        check(plain.rc == 0, "bare: %s" % plain.describe())
        r = rt.run_bounded(argv, tmp, timeout=TIMEOUT)
        check(r.rc == 0 and r.stdout == plain.stdout, "preloaded: %s, stdout %r"
              % (r.describe(), r.stdout))
        path = os.path.join(tmp, "wallprof.%d.json" % r.pid)
        check(os.path.exists(path), "no JSON profile after the failed exec (%s)" % r.describe())
        obj = rt.load_profile(path)
        rt.check_valid(obj)
        n = sum(1 for s in rt.profile_part(obj)["samples"]
                if "wpt_after_work" in rt.stack_functions(obj, s["stack_id"]))
        check(n >= 20, "%d samples of the work after the failed exec (want >= 20): sampling "
              "stopped" % n)

    return [("exit_pthread_exit_atexit", test_pthread_exit_atexit),
            ("exit_pthread_exit_short", test_pthread_exit_short),
            ("exit_pthread_exit_cleanup", test_pthread_exit_cleanup),
            ("exit_thrd_exit", test_thrd_exit),
            ("exit_raw_exit", test_raw_exit),
            ("exit_raw_exit_status", test_raw_exit_status),
            ("exit_handler_exec_fails", test_handler_exec_fails),
            ("exit_handler__exit", test_handler_exit),
            ("exit_handler_exec", test_handler_exec)]
