"""Process creation under the profiler (test/progs/processes.c): fork, fork +
exec, vfork + exec, posix_spawn, system(), WALLPROF_FOLLOW_CHILDREN=0 and a
classic daemon. The program behaves as without the profiler, and every
process that is profiled leaves a complete, valid profile under its own pid."""

import json
import os
import re
import shutil
import time

CHILD_RE = re.compile(r"^child (\d+)$", re.M)
DAEMON_LOG = "daemon: start\ndaemon: work done\ndaemon: exiting\n"
WAIT_S = 10.0  # bound on waiting for a detached process or its files


def tests(rt):
    check, note = rt.check, rt.note

    def normalize(out):
        return re.sub(r"LD_PRELOAD=\[.*\]", "LD_PRELOAD=[...]", CHILD_RE.sub("child PID", out))

    def child_pid(r):
        m = CHILD_RE.search(r.stdout)
        check(m, "no \"child PID\" line in stdout %r (%s)" % (r.stdout[-200:], r.describe()))
        return int(m.group(1))

    def fn_samples(obj, fn):
        """Samples (any thread) whose stack holds function `fn`."""
        p = rt.profile_part(obj)
        return [s for s in p.get("samples", [])
                if fn in rt.stack_functions(obj, s["stack_id"])]

    def pid_profile(tmp, pid):
        return os.path.join(tmp, "wallprof.%d.json" % pid)

    def no_partial_files(tmp):
        """No temporary leftovers, and every wallprof.*.json parses."""
        names = sorted(os.listdir(tmp))
        leftovers = [n for n in names if ".tmp." in n]
        check(not leftovers, "partial/temporary profile files left behind: %s" % leftovers)
        for n in names:
            if n.startswith("wallprof.") and n.endswith(".json"):
                try:
                    with open(os.path.join(tmp, n)) as f:
                        json.load(f)
                except ValueError as e:
                    raise rt.Failure("%s is not valid JSON: %s" % (n, e))
        return names

    def same_behaviour(tmp, argv, env_extra=None, want_rc=0):
        plain = rt.run_plain(argv, tmp)
        check(plain.rc == want_rc, "without the preload %s exited %s, expected %s (test program?)"
              % (" ".join(os.path.basename(a) for a in argv), plain.rc, want_rc))
        # The plain run may leave nothing behind; clear it anyway.
        for n in os.listdir(tmp):
            if n.startswith("wallprof."):
                os.unlink(os.path.join(tmp, n))
        r = rt.run_under_preload(argv, env_extra, cwd=tmp)
        check(r.rc == plain.rc, "exit status %s under the preload, %s without (%s)"
              % (r.rc, plain.rc, r.describe()))
        check(normalize(r.stdout) == normalize(plain.stdout),
              "stdout differs: preload %r, plain %r" % (r.stdout[-300:], plain.stdout[-300:]))
        check(r.other_stderr() == plain.other_stderr(),
              "stderr differs (besides wallprof: lines): preload %s, plain %s"
              % (r.other_stderr()[:3], plain.other_stderr()[:3]))
        return r

    def parent_profile(tmp, r):
        path = pid_profile(tmp, r.pid)
        check(os.path.exists(path), "no parent profile wallprof.%d.json (files: %s; %s)"
              % (r.pid, sorted(os.listdir(tmp)), r.describe()))
        obj = rt.load_profile(path)
        rt.check_valid(obj, "parent profile")
        check(fn_samples(obj, "wpt_parent_work"), "parent profile has no wpt_parent_work sample")
        return obj

    def child_profile(tmp, r, pid, work_fn):
        path = pid_profile(tmp, pid)
        check(os.path.exists(path), "no child profile wallprof.%d.json (files: %s; %s)"
              % (pid, sorted(os.listdir(tmp)), r.describe()))
        obj = rt.load_profile(path)
        rt.check_valid(obj, "child profile")
        if work_fn:
            n = len(fn_samples(obj, work_fn))
            check(n >= 10, "child profile has %d samples with %s (want >= 10)" % (n, work_fn))
        return obj

    def exec_parts(tmp, pid):
        """The child's pre-exec profiles (wallprof.<pid>.exec<k>.json), each valid JSON."""
        parts = sorted(n for n in os.listdir(tmp)
                       if re.match(r"^wallprof\.%d\.exec\d+\.json$" % pid, n))
        if parts:
            note("pre-exec parts for %d: %s" % (pid, parts))
        return parts

    # ---- tests ----

    def test_fork(tmp):
        r = same_behaviour(tmp, [rt.prog("processes"), "fork"])
        pid = child_pid(r)
        obj = parent_profile(tmp, r)
        leaked = fn_samples(obj, "wpt_child_work")
        check(not leaked, "parent profile has %d samples of the child's wpt_child_work"
              % len(leaked))
        cobj = child_profile(tmp, r, pid, "wpt_child_work")
        cp = rt.wallprof_section(cobj).get("pid")
        check(cp in (None, pid), "child profile says pid %r, the child is %d" % (cp, pid))
        note("child profile: %d samples" % len(rt.profile_part(cobj).get("samples", [])))
        no_partial_files(tmp)

    def test_exec_fails(tmp):
        """A failed exec in a multithreaded process (CPython's test_os makes
        them): profiling starts again with the threads still there, and their
        samples have their names (the name table was emptied under slots that
        still pointed into it: garbage names, out-of-bounds writes, a SIGSEGV
        in the sampler about a second later in test_os)."""
        r = same_behaviour(tmp, [rt.prog("processes"), "execfail"])
        path = pid_profile(tmp, r.pid)
        check(os.path.exists(path), "no profile after the failed exec (%s)" % r.describe())
        obj = rt.load_profile(path)
        rt.check_valid(obj, "profile after a failed exec")
        meta = rt.profile_part(obj).get("thread_metadata") or {}
        nameless = [t for t, m in meta.items() if not (m or {}).get("name")]
        check(not nameless, "threads without a name in thread_metadata: %s" % nameless)
        workers = rt.tids_named(obj, "execfail-w")
        by = rt.samples_by_thread(obj)
        check(len(workers) == 3 and all(len(by.get(t, [])) >= 20 for t in workers),
              "the three execfail-w threads after the failed exec: %s"
              % {t: len(by.get(t, [])) for t in workers})

    def test_fork_from_thread(tmp):
        """A thread that is not main forks, and in the child returns from its
        start routine (CPython 3.11 threads end so): the child ends with
        status 0 at once, as without the profiler (it lived on for good: a
        zombie leader plus our sampler)."""
        r = same_behaviour(tmp, [rt.prog("processes"), "forkthread"])
        check("forkthread: child exited 0" in r.stdout, "forkthread: %r" % r.stdout.strip())

    def test_fork_exec(tmp):
        exe = rt.prog("exitcode")
        r = same_behaviour(tmp, [rt.prog("processes"), "forkexec", exe])
        check("child status: exited 7" in r.stdout, "exitcode did not exit 7: %r" % r.stdout)
        pid = child_pid(r)
        parent_profile(tmp, r)
        exec_parts(tmp, pid)
        child_profile(tmp, r, pid, "wpt_count_primes")
        no_partial_files(tmp)

    def test_fork_exec_sh(tmp):
        cmd = "%s envwork; exit 5" % rt.prog("processes")
        r = same_behaviour(tmp, [rt.prog("processes"), "forkexec", "/bin/sh", "-c", cmd])
        check("child status: exited 5" in r.stdout, "the shell did not exit 5: %r" % r.stdout)
        check(rt.LIB in r.stdout, "envwork under the shell does not see libwallprof in "
              "LD_PRELOAD: %r" % r.stdout)
        pid = child_pid(r)
        parent_profile(tmp, r)
        exec_parts(tmp, pid)
        path = pid_profile(tmp, pid)
        check(os.path.exists(path), "no profile of the shell (wallprof.%d.json; files: %s)"
              % (pid, sorted(os.listdir(tmp))))
        obj = rt.load_profile(path)
        if rt.profile_part(obj).get("samples"):
            rt.check_valid(obj, "shell profile")
        # envwork, the shell's own child, is profiled too.
        others = []
        for n in os.listdir(tmp):
            m = re.match(r"^wallprof\.(\d+)\.json$", n)
            if m and int(m.group(1)) not in (r.pid, pid):
                o = rt.load_profile(os.path.join(tmp, n))
                if fn_samples(o, "wpt_exec_work"):
                    rt.check_valid(o, n)
                    others.append(n)
        check(others, "no profile of envwork (run by the shell) with wpt_exec_work; files: %s"
              % sorted(os.listdir(tmp)))
        no_partial_files(tmp)

    def spawned(tmp, how):
        r = same_behaviour(tmp, [rt.prog("processes"), how, rt.prog("processes"), "envwork"])
        check("child status: exited 0" in r.stdout, "envwork did not exit 0: %r" % r.stdout)
        check("LD_PRELOAD=[%s]" % rt.LIB in r.stdout,
              "the child does not inherit LD_PRELOAD=%s: %r" % (rt.LIB, r.stdout))
        pid = child_pid(r)
        parent_profile(tmp, r)
        exec_parts(tmp, pid)
        child_profile(tmp, r, pid, "wpt_exec_work")
        no_partial_files(tmp)

    def test_vfork_exec(tmp):
        spawned(tmp, "vfork")

    def test_posix_spawn(tmp):
        spawned(tmp, "spawn")

    def no_follow(tmp, how):
        argv = [rt.prog("processes"), how, rt.prog("processes"), "envwork"]
        r = rt.run_under_preload(argv, {"WALLPROF_FOLLOW_CHILDREN": "0"}, cwd=tmp)
        check(r.rc == 0, "processes %s: %s" % (how, r.describe()))
        check("child status: exited 0" in r.stdout, "envwork did not exit 0: %r" % r.stdout)
        m = re.search(r"LD_PRELOAD=\[(.*)\]", r.stdout)
        check(m, "envwork printed no LD_PRELOAD line: %r" % r.stdout)
        check("libwallprof" not in m.group(1),
              "WALLPROF_FOLLOW_CHILDREN=0 but the child's LD_PRELOAD is %r" % m.group(1))
        pid = child_pid(r)
        parent_profile(tmp, r)
        names = no_partial_files(tmp)
        check(not os.path.exists(pid_profile(tmp, pid)),
              "WALLPROF_FOLLOW_CHILDREN=0 but the child wrote wallprof.%d.json" % pid)
        strays = [n for n in names if n.startswith("wallprof.") and n.endswith(".json")
                  and n != "wallprof.%d.json" % r.pid
                  and not re.match(r"^wallprof\.%d\.exec\d+\.json$" % pid, n)]
        check(not strays, "unexpected profiles with WALLPROF_FOLLOW_CHILDREN=0: %s" % strays)
        parts = exec_parts(tmp, pid)
        if parts:
            note("the forked child wrote its pre-exec part(s) %s" % parts)

    def test_no_follow_exec(tmp):
        no_follow(tmp, "forkexec")

    def test_no_follow_spawn(tmp):
        no_follow(tmp, "spawn")

    def test_system(tmp):
        r = same_behaviour(tmp, [rt.prog("processes"), "system", "echo from-shell; exit 3"])
        check("from-shell\nchild status: exited 3\n" in r.stdout,
              "system() output/status wrong: %r" % r.stdout)
        parent_profile(tmp, r)
        no_partial_files(tmp)

    def wait_gone(pid, timeout):
        """Waits (bounded poll) until process `pid` no longer runs (gone or zombie)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                return True
            if state in ("Z", "X"):
                return True
            time.sleep(0.02)  # polling an observable condition
        return False

    def run_daemon(tmp, preload):
        work = os.path.join(tmp, "preload" if preload else "plain")
        os.mkdir(work)
        marker = os.path.join(work, "marker")
        log = os.path.join(work, "daemon.log")
        argv = [rt.prog("processes"), "daemon", marker, log]
        r = (rt.run_under_preload(argv, cwd=work) if preload else rt.run_plain(argv, work))
        check(r.rc == 0 and r.stdout == "daemon: launched\n",
              "%s launcher: stdout %r, %s" % ("preload" if preload else "plain", r.stdout,
                                              r.describe()))
        check(rt.poll_for(marker, timeout=WAIT_S),
              "%s: the daemon wrote no marker within %.0f s (log: %r)"
              % ("preload" if preload else "plain", WAIT_S,
                 open(log).read() if os.path.exists(log) else None))
        with open(marker) as f:
            dpid = int(f.read().strip())
        try:
            check(wait_gone(dpid, WAIT_S), "the daemon %d did not exit within %.0f s"
                  % (dpid, WAIT_S))
        finally:
            if not wait_gone(dpid, 0):
                try:
                    os.kill(dpid, 9)
                except OSError:
                    pass
        with open(log) as f:
            text = f.read()
        return work, dpid, text

    def test_daemon(tmp):
        _, _, plain_log = run_daemon(tmp, False)
        check(plain_log == DAEMON_LOG, "without the preload the daemon log is %r (test program?)"
              % plain_log)
        work, dpid, log = run_daemon(tmp, True)
        stray = "/wallprof.%d.json" % dpid
        if os.path.exists(stray):
            os.unlink(stray)
            raise rt.Failure("the daemon's profile was written in / (its cwd after chdir), "
                             "not in the original working directory")
        path = os.path.join(work, "wallprof.%d.json" % dpid)
        raw = os.path.join(work, "wallprof.%d.raw" % dpid)
        # A descendant (the launcher is the root): its raw dump is converted
        # in the background, the dump removed once the profile is in place.
        deadline = time.monotonic() + WAIT_S
        while os.path.exists(raw) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(os.path.exists(path), "no daemon profile wallprof.%d.json in the original "
              "working directory (files: %s; daemon log %r)" % (dpid, sorted(os.listdir(work)),
                                                                 log))
        check(log == DAEMON_LOG, "the daemon's log (its fd 2) has foreign content: %r" % log)
        obj = rt.load_profile(path)
        rt.check_valid(obj, "daemon profile")
        n = len(fn_samples(obj, "wpt_daemon_work"))
        check(n >= 20, "daemon profile has %d wpt_daemon_work samples (want >= 20)" % n)
        no_partial_files(work)

    def test_fork_no_memory(tmp):
        """Forked children that lower RLIMIT_AS below what they have mapped
        at once: their new sampler cannot map its ring and profiling is off
        in them, with one line; they run on and exit 0 (they died of
        SIGSEGV when the sampler ticked on without a ring)."""
        r = rt.run_bounded([rt.prog("processes"), "forknomem"], tmp, timeout=60)
        check(r.rc == 0, r.describe())
        check(r.stdout == "forknomem: 0 of 8 children did not exit 0\n",
              "stdout %r" % r.stdout)

    def test_fork_during_reset(tmp):
        """A child forks while its new sampler is between the ring it had
        and its own (held there by the test build, and seen by the child
        in /proc): the grandchild runs, exits 0 and is profiled. It died
        of SIGSEGV when it inherited the child's pointer to the unmapped
        ring (the daemon test's rare failure: a double fork at once)."""
        for attempt in range(3):
            r = rt.run_under_preload([rt.prog("processes"), "forkreset"],
                                     {"WALLPROF_TEST_FORK_RESET_HOLD_US": "500000"}, cwd=tmp)
            check(r.rc == 0 and r.stdout.startswith("sampler seen: yes\n"),
                  "the child did not see its sampler hold (%s)" % r.describe())
            if "held across the fork: yes\n" in r.stdout:
                break
            note("attempt %d: the fork came after the hold (a busy machine); again" % attempt)
        else:
            raise rt.Failure("the child never forked inside its sampler's hold: %r" % r.stdout)
        check("grandchild status: exited 0\n" in r.stdout and
              r.stdout.endswith("child status: exited 0\n"),
              "stdout %r (%s)" % (r.stdout, r.describe()))
        check(not r.other_stderr(), "stderr besides wallprof lines: %s" % r.other_stderr()[:3])
        gc = int(re.search(r"^grandchild (\d+)$", r.stdout, re.M).group(1))
        path = pid_profile(tmp, gc)
        check(rt.poll_for(path, timeout=WAIT_S), "no grandchild profile wallprof.%d.json "
              "(files: %s; %s)" % (gc, sorted(os.listdir(tmp)), r.describe()))
        obj = rt.load_profile(path)
        rt.check_valid(obj, "grandchild profile")
        check(fn_samples(obj, "wpt_grandchild_work"),
              "the grandchild's profile has no wpt_grandchild_work sample")

    def test_fork_keeps_stdin(tmp):
        """A forked child reads the stdin it inherited: `(cat)` in a shell
        prints what it is fed, as without the profiler. Every forked child
        closed descriptor 0 when the parent had never converted anything
        (a conversion's descriptors were zeros, closed as the child forgot
        them)."""
        argv = ["/bin/sh", "-c", "(cat); echo rc=$?"]
        plain = rt.run_prog(argv, tmp, preload=False, stdin_data="hello\n")
        check(plain.stdout == "hello\nrc=0\n", "without the preload: %r (shell?)" % plain.stdout)
        r = rt.run_prog(argv, tmp, preload=True, stdin_data="hello\n")
        check(r.rc == 0 and r.stdout == plain.stdout,
              "under the preload the subshell printed %r (%s)" % (r.stdout, r.describe()))
        check(r.other_stderr() == plain.other_stderr(),
              "stderr differs: %s" % r.other_stderr()[:3])

    def test_fork_during_snapshot(tmp):
        """Children forked while a snapshot is converted keep descriptors
        0, 1 and 2 as the parent has them. The sampler's conversion
        descriptors live in its private table, where their numbers are
        small: a forked child closed those numbers in the program's table
        (its stderr)."""
        r = rt.run_under_preload([rt.prog("processes"), "snapfork"], cwd=tmp)
        m = re.search(r"^snapfork: (\d+) of (\d+) children lost a descriptor "
                      r"\((\d+) forked during the conversion\)$", r.stdout, re.M)
        check(r.rc == 0 and m, "stdout %r (%s)" % (r.stdout, r.describe()))
        check(int(m.group(3)) >= 1, "no fork while the snapshot was converted: %r" % r.stdout)
        check(m.group(1) == "0", "stdout %r (%s)" % (r.stdout, r.describe()))
        check(os.path.exists(pid_profile(tmp, r.pid).replace(".json", ".1.json")),
              "no snapshot profile (files: %s)" % sorted(os.listdir(tmp)))

    def test_fork_while_sampler_in_loader(tmp):
        """Forks while the sampler holds the loader's lock (the test build
        holds it 20 ms at every tick): each child, whose sampler looks its
        own code up with dl_iterate_phdr, ends on its own. Without the fork
        guard, 9 of 10 children hung: the lock was copied held by a thread
        the child does not have, and the child's exit waited for its
        sampler, blocked on it."""
        r = rt.run_bounded([rt.prog("processes"), "forkloader"], tmp,
                           {"WALLPROF_TEST_LOADER_HOLD_US": "20000"}, timeout=90)
        check(r.rc == 0 and r.stdout == "forkloader: 0 of 10 children hung\n",
              "stdout %r (%s)" % (r.stdout, r.describe()))

    def test_fork_with_loader_held(tmp):
        """A thread of the program holds the loader's lock (it waits in a
        dl_iterate_phdr callback for main) while main forks and then
        sleeps: the parent and the child both go on. The parent hung: the
        sampler, walking main's published sleep, waited for the lock, the
        thread for main, and main (pinned) for the sampler."""
        r = rt.run_bounded([rt.prog("processes"), "forkinloader"], tmp, timeout=30)
        check(r.rc == 0 and r.stdout == "forkinloader: the child exited 0\n",
              "stdout %r (%s)" % (r.stdout, r.describe()))

    return [
        ("proc_fork_with_loader_held", test_fork_with_loader_held),
        ("proc_fork_while_sampler_in_loader", test_fork_while_sampler_in_loader),
        ("proc_fork_keeps_stdin", test_fork_keeps_stdin),
        ("proc_fork_during_snapshot", test_fork_during_snapshot),
        ("proc_fork_no_memory", test_fork_no_memory),
        ("proc_fork_during_reset", test_fork_during_reset),
        ("proc_fork", test_fork),
        ("proc_fork_exec", test_fork_exec),
        ("proc_exec_fails", test_exec_fails),
        ("proc_fork_from_thread", test_fork_from_thread),
        ("proc_fork_exec_sh", test_fork_exec_sh),
        ("proc_vfork_exec", test_vfork_exec),
        ("proc_posix_spawn", test_posix_spawn),
        ("proc_no_follow_exec", test_no_follow_exec),
        ("proc_no_follow_spawn", test_no_follow_spawn),
        ("proc_system", test_system),
        ("proc_daemon", test_daemon),
    ]
