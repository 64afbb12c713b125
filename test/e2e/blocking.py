"""Blocking calls under the profiler (test/progs/blocking.c, also built with
-D_FORTIFY_SOURCE=2 as build/progs/blocking_fortify): the EINTR battery (every
call returns the same rc and errno after the same time as without the
profiler, also when our signal hits it on every tick), real signals still
interrupting them, short timed calls in a row, a poll loop retried on EINTR,
full-count writes into pipes (also python3 -u into wc -c)."""

import concurrent.futures
import errno
import os
import re
import shutil
import signal
import subprocess
import sys

# "CALL rc=<rc> errno=<name|0> elapsed_ms=<ms>", the one-line result format of
# test/progs/blocking.c.
RESULT_RE = re.compile(r"^(\S+) rc=(-?\d+) errno=(\S+) elapsed_ms=(\d+)$")

BATTERY_MS = 500       # timeout of each battery call
BATTERY_HZ = "1000"    # a high rate makes interruptions (and races) likely
BATTERY_JOBS = 4       # programs run at once
BATTERY_TIMEOUT = 15   # seconds for one battery program (a swallowed wake-up hangs)
RETRY_POLL_TIMEOUT = 20

# (call, rc, errno) without the profiler; elapsed is BATTERY_MS except "sleep" (1 s).
BATTERY = (
    ("nanosleep", 0, "0"),
    ("clock_nanosleep", 0, "0"),
    ("clock_nanosleep_abs", 0, "0"),
    ("usleep", 0, "0"),
    ("sleep", 0, "0"),
    ("poll", 0, "0"),
    ("poll_wake", 1, "0"),
    ("ppoll", 0, "0"),
    ("select", 0, "0"),
    ("pselect", 0, "0"),
    ("epoll_wait", 0, "0"),
    ("epoll_pwait", 0, "0"),
    ("epoll_eventfd", 1, "0"),
    ("sigtimedwait", -1, "EAGAIN"),
    ("sigwaitinfo", int(signal.SIGUSR1), "0"),
    ("sigsuspend", -1, "EINTR"),
    ("pause", -1, "EINTR"),
    ("sem_timedwait", -1, "ETIMEDOUT"),
    ("sem_wait", 0, "0"),
    ("cond_timedwait", errno.ETIMEDOUT, "0"),
    ("cond_wait", 0, "0"),
    ("mutex_lock", 0, "0"),
    ("pthread_join", 0, "0"),
    ("waitpid", 0, "0"),
    ("wait4", 0, "0"),
    ("read_pipe", 1, "0"),
    ("read_rcvtimeo", -1, "EAGAIN"),
    ("recv", -1, "EAGAIN"),
    ("recvfrom", -1, "EAGAIN"),
    ("recvmsg", -1, "EAGAIN"),
    ("accept", -1, "EAGAIN"),
    ("accept4", -1, "EAGAIN"),
    ("connect", -1, "EAGAIN"),
    # the same calls through syscall(), which no wrapper of the libc function sees
    ("syscall_nanosleep", 0, "0"),
    ("syscall_clock_nanosleep", 0, "0"),
    ("syscall_poll", 0, "0"),
    ("syscall_ppoll", 0, "0"),
    ("syscall_epoll_wait", 0, "0"),
    ("syscall_epoll_pwait", 0, "0"),
    ("syscall_futex_wait", -1, "ETIMEDOUT"),         # FUTEX_WAIT, relative timeout
    ("syscall_futex_wait_bitset", -1, "ETIMEDOUT"),  # FUTEX_WAIT_BITSET, absolute
    ("syscall_semtimedop", -1, "EAGAIN"),
    ("syscall_msgrcv", 4, "0"),                      # a helper sends at the deadline
    ("syscall_io_getevents", 0, "0"),                # aio context, nothing submitted
    ("syscall_read_pipe", 1, "0"),
    ("syscall_wait4", 0, "0"),
    # System V IPC (removed at exit)
    ("msgrcv", 4, "0"),
    ("msgsnd_full", 0, "0"),                         # a helper drains one at the deadline
    ("semop", 0, "0"),                               # a helper increments at the deadline
    ("semtimedop", -1, "EAGAIN"),
    # POSIX message queues
    ("mq_receive", 4, "0"),
    ("mq_timedreceive", -1, "ETIMEDOUT"),
    ("mq_send_full", 0, "0"),
    ("mq_timedsend_full", -1, "ETIMEDOUT"),
    ("epoll_pwait2", 0, "0"),
    # pthread: clock/timed variants time out, the plain rwlock ones get the
    # lock a helper holds until the deadline
    ("cond_clockwait", errno.ETIMEDOUT, "0"),
    ("mutex_timedlock", errno.ETIMEDOUT, "0"),
    ("mutex_clocklock", errno.ETIMEDOUT, "0"),
    ("sem_clockwait", -1, "ETIMEDOUT"),
    ("rwlock_rdlock", 0, "0"),
    ("rwlock_wrlock", 0, "0"),
    ("rwlock_timedrdlock", errno.ETIMEDOUT, "0"),
    ("rwlock_timedwrlock", errno.ETIMEDOUT, "0"),
    ("rwlock_clockrdlock", errno.ETIMEDOUT, "0"),
    ("rwlock_clockwrlock", errno.ETIMEDOUT, "0"),
    ("timedjoin_np", errno.ETIMEDOUT, "0"),
    ("clockjoin_np", errno.ETIMEDOUT, "0"),
    ("recvmmsg_rcvtimeo", -1, "EAGAIN"),             # SO_RCVTIMEO, timeout argument NULL
    ("recvmmsg_wake", 1, "0"),
    # 4 MiB in one call into a pipe / socketpair drained from the deadline on:
    # the full count, never a short one
    ("write_full", 4 << 20, "0"),
    ("writev_full", 4 << 20, "0"),
    ("send_full", 4 << 20, "0"),
    ("sendto_full", 4 << 20, "0"),
    ("sendmsg_full", 4 << 20, "0"),
    # locks held elsewhere until the deadline, a FIFO's writer opening then
    ("flock", 0, "0"),
    ("ofd_setlkw", 0, "0"),
    ("setlkw", 0, "0"),                              # held by a forked child
    ("lockf", 0, "0"),                               # held by a forked child
    ("open_fifo", 0, "0"),
    # every signal blocked and waited for: the profiler's SIGPROF must never
    # be the one returned
    ("sigtimedwait_full", -1, "EAGAIN"),
    ("sigwaitinfo_full", int(signal.SIGUSR1), "0"),
)

# The fortified build (build/progs/blocking_fortify, -D_FORTIFY_SOURCE=2) must
# import these, or its battery silently stops testing them; the plain build
# must import none.
FORTIFY_IMPORTS = ("__poll_chk", "__ppoll_chk", "__read_chk", "__recv_chk", "__recvfrom_chk")

REAL_SIGNAL_MS = 200   # blocking.c REAL_SIGNAL_DELAY_MS
# realsignal: every call ends with EINTR; clock_nanosleep returns the error.
# (The pthread lock, condition and join calls are not interruptible, and the
# *_full sigwait calls would take the signal: they are not in this list.)
REAL_SIGNAL_CALLS = ("pause", "sigsuspend", "nanosleep", "clock_nanosleep", "poll", "ppoll",
                     "select", "epoll_wait", "sigtimedwait", "read", "recv", "accept",
                     "sem_wait", "waitpid",
                     "recvfrom", "pselect", "epoll_pwait", "epoll_pwait2", "sem_timedwait",
                     "sem_clockwait", "wait4", "semop", "semtimedop", "msgrcv", "msgsnd",
                     "mq_receive", "mq_timedreceive", "mq_send", "mq_timedsend", "recvmmsg",
                     "write", "writev", "send", "sendto", "sendmsg",  # full pipe / socket
                     "flock", "ofd_setlkw", "setlkw", "lockf", "open_fifo",
                     "syscall_nanosleep", "syscall_clock_nanosleep", "syscall_poll",
                     "syscall_ppoll", "syscall_epoll_wait", "syscall_epoll_pwait",
                     "syscall_futex_wait", "syscall_futex_wait_bitset", "syscall_semtimedop",
                     "syscall_msgrcv", "syscall_io_getevents", "syscall_read_pipe",
                     "syscall_wait4")
REAL_SIGNAL_TIMEOUT = 60  # seconds for one realsignal run (~11 s of calls)

CHURN_MS = 1500
CHURN_HZ = "5000"
CHURN_RE = re.compile(r"^churn calls=(\d+) bad=(\d+) elapsed_ms=(\d+)$")

# The fortified build runs the calls whose code differs there (__*_chk).
REAL_SIGNAL_FORTIFY_CALLS = ("poll", "ppoll", "read", "recv", "recvfrom")
REAL_SIGNAL_BUILDS = (("blocking", REAL_SIGNAL_CALLS),
                      ("blocking_fortify", REAL_SIGNAL_FORTIFY_CALLS))

TRANSFER_MB = 512      # blocking transfer: 32 writes of 16 MiB into a pipe
TRANSFER_TIMEOUT = 60
TRANSFER_RE = re.compile(r"^transfer writes=(\d+) short=(\d+) eintr=(\d+) written=(\d+) "
                         r"read=(\d+) elapsed_ms=(\d+)$")

PY_STDOUT_BYTES = 100000000


def elapsed_close(a, b):
    """Two elapsed times (ms) agree: within 60 ms or 15 % of the larger."""
    return abs(a - b) <= max(60, 0.15 * max(a, b))


def fmt_result(r):
    return "rc=%d errno=%s %d ms" % (r[1], r[2], r[3])


def tests(rt):
    check, note = rt.check, rt.note

    def parse_results(run):
        """[(call, rc, errno name, elapsed ms)] from blocking's stdout (complete
        lines only: a killed program can leave half a line)."""
        out = []
        complete = run.stdout[:run.stdout.rfind("\n") + 1]
        for line in complete.splitlines():
            m = RESULT_RE.match(line)
            check(m, "unexpected output line %r from %s" % (line, " ".join(run.argv[1:])))
            out.append((m.group(1), int(m.group(2)), m.group(3), int(m.group(4))))
        return out

    def one_result(run, stderr_ok=False):
        """(result, None) from the single result line of a `blocking` run, or
        (None, why). Other stderr lines than the library's are a problem unless
        `stderr_ok`."""
        if run.rc is None:
            return None, "did not finish within %d s (stdout %r)" % (BATTERY_TIMEOUT,
                                                                     run.stdout[-80:])
        if run.rc != 0:
            return None, "exit status %s (%s)" % (run.rc, run.describe())
        lines = run.stdout.splitlines()
        if len(lines) != 1 or not RESULT_RE.match(lines[0]):
            return None, "stdout %r" % run.stdout[-200:]
        other = run.other_stderr()
        if other and not stderr_ok:
            return None, "stderr besides wallprof lines: %r" % other[:3]
        return parse_results(run)[0], None

    def battery_pair(tmp, call, env=None, binary="blocking"):
        """Runs `blocking CALL BATTERY_MS` without, then with the preload.
        Returns the two Runs."""
        argv = [rt.prog(binary), call, str(BATTERY_MS)]
        # TMPDIR: the FIFO and lock files go in the test's directory, removed
        # even when a hung program is killed.
        plain = rt.run_bounded(argv, tmp, {"TMPDIR": tmp}, preload=False,
                               timeout=BATTERY_TIMEOUT)
        # The battery's helper children (waitpid, wait4, the lock holder of
        # setlkw and lockf) are forked: unprofiled, or their exit dump would delay
        # the wait being measured.
        pre = rt.run_bounded(argv, tmp, dict({"WALLPROF_HZ": BATTERY_HZ, "WALLPROF_LOG": "error",
                                              "WALLPROF_FOLLOW_CHILDREN": "0", "TMPDIR": tmp},
                                             **(env or {})), timeout=BATTERY_TIMEOUT)
        return plain, pre

    def battery_problems(call, want_rc, want_errno, plain, pre):
        """(problems, timing_only): what differs between the two runs of `call`
        or from its expected result; timing_only when only elapsed times do."""
        want_ms = 1000 if call == "sleep" else BATTERY_MS
        p, why = one_result(plain)
        if p is None:
            return ["%s: without preload: %s" % (call, why)], False
        if (p[1], p[2]) != (want_rc, want_errno):
            return ["%s: without preload rc=%d errno=%s, expected rc=%d errno=%s (test program?)"
                    % (call, p[1], p[2], want_rc, want_errno)], False
        q, why = one_result(pre)
        if q is None:
            return ["%s: under preload: %s" % (call, why)], False
        if (q[1], q[2]) != (p[1], p[2]):
            what = " (SIGPROF: the profiler's own signal)" if (
                call.startswith("sig") and q[1] == int(signal.SIGPROF)) else ""
            return ["%s: under preload %s, without %s%s"
                    % (call, fmt_result(q), fmt_result(p), what)], False
        problems = []
        if not elapsed_close(p[3], want_ms):
            problems.append("%s: without preload took %d ms, expected ~%d (loaded machine?)"
                            % (call, p[3], want_ms))
        if not elapsed_close(q[3], p[3]):
            problems.append("%s: under preload %s, without %s"
                            % (call, fmt_result(q), fmt_result(p)))
        return problems, True  # only elapsed differs: worth one retry

    def test_eintr_battery(tmp, env=None, binary="blocking"):
        """Every blocking call of test/progs/blocking.c returns the same rc and
        errno after the same time with the profiler at 1000 Hz as without it."""
        listed = rt.run_plain([rt.prog(binary), "list"], tmp).stdout.split()
        check(sorted(listed) == sorted(c for c, _, _ in BATTERY),
              "%s list and BATTERY disagree: %s"
              % (binary, sorted(set(listed).symmetric_difference(c for c, _, _ in BATTERY))))
        with concurrent.futures.ThreadPoolExecutor(max_workers=BATTERY_JOBS) as pool:
            runs = {c: pool.submit(battery_pair, tmp, c, env, binary) for c, _, _ in BATTERY}
            runs = {c: f.result() for c, f in runs.items()}
        problems = []
        for call, want_rc, want_errno in BATTERY:
            plain, pre = runs[call]
            probs, retry = battery_problems(call, want_rc, want_errno, plain, pre)
            if probs and retry:  # timing only: once more, alone, before calling it a difference
                plain, pre = battery_pair(tmp, call, env, binary)
                probs2, _ = battery_problems(call, want_rc, want_errno, plain, pre)
                probs = probs2 and [p + " (twice)" for p in probs2]
            problems += probs
            q, _ = one_result(pre)
            if q is not None:
                note("%-26s under preload %s" % (call, fmt_result(q)))
        if problems:
            bad = sorted({p.split(":")[0] for p in problems})
            raise rt.Failure("%d of %d calls of %s behave differently under the preload at %s Hz: "
                             "%s" % (len(bad), len(BATTERY), binary, BATTERY_HZ, " ".join(bad)),
                             problems)

    def dynamic_imports(path):
        """Undefined dynamic symbols of an executable (nm -D), without versions."""
        nm = shutil.which("nm")
        check(nm, "nm (binutils) not found: cannot check the fortified build's imports")
        p = subprocess.run([nm, "-D", "--undefined-only", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        check(p.returncode == 0, "nm -D %s: %s"
              % (path, p.stderr.decode(errors="replace").strip()))
        return {l.split()[-1].split("@")[0] for l in p.stdout.decode().splitlines() if l.split()}

    def check_fortify_imports():
        """blocking_fortify really calls the __*_chk variants; blocking none."""
        got = dynamic_imports(rt.prog("blocking_fortify"))
        missing = [s for s in FORTIFY_IMPORTS if s not in got]
        check(not missing, "build/progs/blocking_fortify does not import %s (it imports %s): "
              "its battery would not test the fortified calls"
              % (" ".join(missing), sorted(s for s in got if "_chk" in s)))
        plain = sorted(s for s in FORTIFY_IMPORTS if s in dynamic_imports(rt.prog("blocking")))
        check(not plain, "build/progs/blocking imports %s: built with _FORTIFY_SOURCE?" % plain)

    def test_eintr_battery_fortify(tmp, env=None):
        """The battery once more, built with -D_FORTIFY_SOURCE=2: poll, ppoll,
        read, recv and recvfrom are then glibc's __poll_chk, __ppoll_chk,
        __read_chk, __recv_chk and __recvfrom_chk, which call the system call
        without going through the interposable poll, read, ..."""
        check_fortify_imports()
        test_eintr_battery(tmp, env, binary="blocking_fortify")

    def check_forced_retries(tmp, binary):
        """`binary poll` under forced signals: our signal lands in the poll
        wrapper again and again (retried), and the stacks show no wrapper."""
        r = rt.run_bounded([rt.prog(binary), "poll", str(BATTERY_MS)], tmp,
                           {"WALLPROF_HZ": BATTERY_HZ, "WALLPROF_TEST_SIGNAL_BLOCKED": "1"},
                           timeout=BATTERY_TIMEOUT)
        obj = rt.exit_profile(r)
        retried = rt.wallprof_section(obj).get("eintr_retried", 0)
        note("%s poll under forced signals: %d retries" % (binary, retried))
        check(retried >= 100, "the forced run of %s poll retried only %d calls; the safety net "
              "was not exercised" % (binary, retried))
        # Those signals land inside our poll wrapper; the wrapper stands for the
        # libc poll below it and must not appear as a caller in the stacks.
        ours = set()
        for smp in rt.profile_part(obj)["samples"]:
            for f in rt.stack_frames(obj, smp["stack_id"])[1:]:
                if "libwallprof" in (f.get("module") or ""):
                    ours.add(f.get("function") or f.get("instruction_addr"))
        check(not ours, "stacks show the library's own frames as callers: %s" % sorted(ours))

    def test_eintr_battery_forced(tmp):
        """The safety net itself: the library signals threads inside wrapped
        calls on every tick (a test-only knob), so every interruptible call is
        interrupted by our signal again and again; each must still return what
        it returns without the profiler, after the same time, because the
        wrappers retry with the time left."""
        test_eintr_battery(tmp, {"WALLPROF_TEST_SIGNAL_BLOCKED": "1"})
        check_forced_retries(tmp, "blocking")

    def test_eintr_battery_fortify_forced(tmp):
        """The same with the fortified build (its poll is __poll_chk)."""
        test_eintr_battery_fortify(tmp, {"WALLPROF_TEST_SIGNAL_BLOCKED": "1"})
        check_forced_retries(tmp, "blocking_fortify")

    def test_retry_poll_terminates(tmp):
        """A loop that retries poll() with its original timeout on EINTR ends
        after that timeout under the profiler (no EINTR storm)."""
        argv = [rt.prog("blocking"), "retrypoll", str(BATTERY_MS)]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=10)
        p, why = one_result(plain)
        check(p is not None, "without preload: %s" % why)
        check((p[1], p[2]) == (0, "0") and elapsed_close(p[3], BATTERY_MS),
              "without preload: %s, expected rc=0 errno=0 ~%d ms" % (fmt_result(p), BATTERY_MS))
        # The program gives up by itself after 10 x 500 ms + 1 s (rc=-1 EINTR);
        # the process timeout only bounds the exit (profile writing) on top.
        pre = rt.run_bounded(argv, tmp, {"WALLPROF_HZ": BATTERY_HZ}, timeout=RETRY_POLL_TIMEOUT)
        retries = re.findall(r"retrypoll: (\d+) EINTR retries", pre.stderr)
        retries = retries[0] if retries else "0"
        note("under preload: stdout %r, %s EINTR retries" % (pre.stdout.strip(), retries))
        q, why = one_result(pre, stderr_ok=True)  # stderr has the retry count
        check(q is not None, "under preload: %s" % why)
        check((q[1], q[2]) == (0, "0"), "under preload the poll loop never timed out: gave up "
              "with %s after %s EINTR retries" % (fmt_result(q), retries))
        check(elapsed_close(q[3], BATTERY_MS), "under preload the poll loop took %d ms (%s EINTR "
              "retries), want ~%d" % (q[3], retries, BATTERY_MS))

    def test_eintr_churn(tmp):
        """Thousands of short timed calls in a row (ticks land on their entries
        and exits, where a signal can race into the call): every one times out
        normally under the profiler at 5000 Hz."""
        argv = [rt.prog("blocking"), "churn", str(CHURN_MS)]
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=20)
        m = CHURN_RE.match(plain.stdout.strip())
        check(plain.rc == 0 and m, "without preload: stdout %r (%s)"
              % (plain.stdout, plain.describe()))
        check(m.group(2) == "0", "without preload %s of %s calls went wrong: %s"
              % (m.group(2), m.group(1), plain.other_stderr()[:3]))
        pre = rt.run_bounded(argv, tmp, {"WALLPROF_HZ": CHURN_HZ}, timeout=20)
        m = CHURN_RE.match(pre.stdout.strip())
        check(pre.rc == 0 and m, "under preload: stdout %r (%s)" % (pre.stdout, pre.describe()))
        w = rt.wallprof_section(rt.exit_profile(pre))
        note("under preload: %s calls, %s bad; eintr_retried %r, signals_blocked %r"
             % (m.group(1), m.group(2), w.get("eintr_retried"), w.get("signals_blocked")))
        check(m.group(2) == "0", "under preload at %s Hz %s of %s short calls did not time out "
              "normally, e.g. %s" % (CHURN_HZ, m.group(2), m.group(1),
                                     "; ".join(l.replace("blocking: churn: ", "")
                                               for l in pre.other_stderr()[:3])))
        check(isinstance(w.get("eintr_retried"), int), "wallprof.eintr_retried is %r"
              % w.get("eintr_retried"))

    def realsignal_problems(binary, calls, plain, pre):
        """(problems, timing_only): what differs between the realsignal runs of
        `binary` without and with the preload, or what is wrong with the run
        without it; timing_only when only elapsed times are off."""
        tag = "" if binary == "blocking" else " (%s)" % binary
        if plain.rc != 0:
            return ["%s without preload: %s" % (binary, plain.describe())], False
        want = parse_results(plain)
        if [r[0] for r in want] != list(calls):
            return ["%s without preload: calls %s" % (binary, [r[0] for r in want])], False
        for r in want:
            if (r[1], r[2]) != ((4, "0") if r[0] == "clock_nanosleep" else (-1, "EINTR")):
                return ["%s without preload: %s %s, expected EINTR (test program?)"
                        % (binary, r[0], fmt_result(r))], False
        late = ["%s %s" % (r[0], fmt_result(r)) for r in want
                if not elapsed_close(r[3], REAL_SIGNAL_MS)]
        if late:
            return ["%s without preload: %s, expected EINTR after ~%d ms (loaded machine?)"
                    % (binary, ", ".join(late[:3]), REAL_SIGNAL_MS)], True
        got = parse_results(pre)
        problems, timing_only = [], True
        for i, r in enumerate(want):
            if i >= len(got):
                problems.append("%s%s: no result under preload (%s)"
                                % (r[0], tag, "killed after %d s" % REAL_SIGNAL_TIMEOUT
                                   if pre.rc is None else pre.describe()))
                timing_only = False
                continue
            g = got[i]
            if (g[0], g[1], g[2]) != (r[0], r[1], r[2]) or (
                    g[3] < r[3] and not elapsed_close(g[3], r[3])):
                timing_only = False  # a loaded machine makes calls late, never early
            if (g[0], g[1], g[2]) != (r[0], r[1], r[2]) or not elapsed_close(g[3], r[3]):
                problems.append("%s%s: under preload %s, without %s"
                                % (r[0], tag, fmt_result(g), fmt_result(r)))
            note("%-26s under preload %s%s" % (g[0], fmt_result(g), tag))
        if not problems:
            if pre.rc != 0:
                return ["%s under preload: %s" % (binary, pre.describe())], False
            if pre.other_stderr():
                return ["%s under preload, stderr: %r" % (binary, pre.other_stderr()[:3])], False
        return problems, timing_only

    def realsignal_pair(tmp, binary, calls, pre_env, together):
        """`BINARY realsignal CALLS...` without and with the preload: side by
        side when `together`, else one after the other."""
        argv = [rt.prog(binary), "realsignal"] + list(calls)
        plain_env, pre_env = {"TMPDIR": tmp}, dict(pre_env, TMPDIR=tmp)
        if not together:
            return (rt.run_bounded(argv, tmp, plain_env, False, REAL_SIGNAL_TIMEOUT),
                    rt.run_bounded(argv, tmp, pre_env, True, REAL_SIGNAL_TIMEOUT))
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            fp = pool.submit(rt.run_bounded, argv, tmp, plain_env, False, REAL_SIGNAL_TIMEOUT)
            fq = pool.submit(rt.run_bounded, argv, tmp, pre_env, True, REAL_SIGNAL_TIMEOUT)
            return fp.result(), fq.result()

    def test_real_signal_interrupts(tmp, env=None, together=True):
        """A real signal (handler without SA_RESTART) still interrupts every
        blocking call with EINTR after the same time under the profiler, in the
        plain build and (its __*_chk calls) the fortified one. The runs with and
        without the preload go side by side unless `together` is false (a run
        that keeps a CPU busy would slow the other one down). A build whose runs
        differ in lateness only is run once more before it counts."""
        pre_env = dict({"WALLPROF_HZ": BATTERY_HZ}, **(env or {}))
        problems, total = [], 0
        for binary, calls in REAL_SIGNAL_BUILDS:
            total += len(calls)
            probs, retry = realsignal_problems(
                binary, calls, *realsignal_pair(tmp, binary, calls, pre_env, together))
            if probs and retry:
                probs2, _ = realsignal_problems(
                    binary, calls, *realsignal_pair(tmp, binary, calls, pre_env, False))
                probs = probs2 and [p + " (twice)" for p in probs2]
            problems += probs
        if problems:
            raise rt.Failure("%d of %d calls differ under the preload: %s"
                             % (len(problems), total, " ".join(p.split(":")[0] for p in problems)),
                             problems)

    def test_real_signal_interrupts_forced(tmp):
        """The same while our own signal also hits every blocked call each
        millisecond: the wrappers must tell the program's EINTR from ours."""
        test_real_signal_interrupts(tmp, {"WALLPROF_TEST_SIGNAL_BLOCKED": "1"})

    def test_real_signal_during_our_handler(tmp):
        """The program's signal arriving while our handler runs, after our signal
        made the kernel restart the call (SA_RESTART): without the profiler it
        would end the call with EINTR, so it still must (read, recv, accept,
        sem_wait and waitpid used to block for good). Our handler waits, up to
        2 ms inside wrapped calls, for the program's signal to come."""
        test_real_signal_interrupts(tmp, {"WALLPROF_TEST_SIGNAL_BLOCKED": "1",
                                          "WALLPROF_TEST_HANDLER_DELAY_US": "2000"},
                                    together=False)  # our handler spins: one run at a time

    def test_transfer_full_writes(tmp):
        """16 MiB write() calls into a pipe a slow reader drains: a blocking
        write returns the full count unless a signal handler runs during it
        (then the part written so far). None may come back short, or fail,
        under the profiler at 1000 Hz."""
        argv = [rt.prog("blocking"), "transfer", str(TRANSFER_MB)]
        want = TRANSFER_MB << 20
        for preload in (False, True):
            what = "under preload" if preload else "without preload"
            r = rt.run_bounded(argv, tmp, {"WALLPROF_HZ": BATTERY_HZ, "WALLPROF_LOG": "error"}
                               if preload else None, preload, TRANSFER_TIMEOUT)
            m = TRANSFER_RE.match(r.stdout.strip())
            check(r.rc == 0 and m, "%s: stdout %r (%s)" % (what, r.stdout[-200:], r.describe()))
            writes, short, eintr, written, read = (int(g) for g in m.groups()[:5])
            note("%s: %s" % (what, r.stdout.strip()))
            check(written == want and read == want, "%s: wrote %d bytes, the reader got %d, "
                  "want %d" % (what, written, read, want))
            check(short == 0 and eintr == 0, "%s at %s Hz: %d of %d write() calls of 16 MiB into "
                  "a pipe came back short, %d failed with EINTR"
                  % (what, BATTERY_HZ, short, writes, eintr))

    def test_python_stdout_full(tmp):
        """`python3 -u -c 'import sys; sys.stdout.write("x"*100000000)' | wc -c`
        prints 100000000 with the python process (only) under the preload at
        1000 Hz, as without it."""
        code = 'import sys; sys.stdout.write("x"*%d)' % PY_STDOUT_BYTES
        for preload in (False, True):
            what = "under preload" if preload else "without preload"
            r, w = os.pipe()
            try:
                py = subprocess.Popen([sys.executable, "-u", "-c", code], cwd=tmp,
                                      env=rt.clean_env({"WALLPROF_HZ": BATTERY_HZ,
                                                        "WALLPROF_LOG": "error"}
                                                       if preload else None, preload),
                                      stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.PIPE,
                                      start_new_session=True)
                try:
                    wc = subprocess.Popen(["wc", "-c"], cwd=tmp, env=rt.clean_env(preload=False),
                                          stdin=r, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          start_new_session=True)
                except BaseException:
                    rt.kill_group(py)
                    raise
            finally:
                os.close(r)
                os.close(w)
            try:
                _, py_err = py.communicate(timeout=rt.RUN_TIMEOUT)
                wc_out, _ = wc.communicate(timeout=rt.RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                rt.kill_group(py)
                rt.kill_group(wc)
                raise rt.Failure("%s: python | wc -c did not finish within %d s"
                                 % (what, rt.RUN_TIMEOUT))
            err = [l for l in py_err.decode(errors="replace").splitlines() if "wallprof:" not in l]
            check(py.returncode == 0, "%s: python exited with %s, stderr: %s"
                  % (what, py.returncode, " | ".join(err[-3:])))
            count = wc_out.decode().strip()
            note("%s: wc -c printed %s" % (what, count))
            check(count == str(PY_STDOUT_BYTES), "%s at %s Hz: wc -c printed %s, want %d "
                  "(stderr: %s)" % (what, BATTERY_HZ, count, PY_STDOUT_BYTES,
                                    " | ".join(err[-3:]) or "empty"))

    return [
        ("eintr_battery", test_eintr_battery),
        ("eintr_battery_forced", test_eintr_battery_forced),
        ("eintr_battery_fortify", test_eintr_battery_fortify),
        ("eintr_battery_fortify_forced", test_eintr_battery_fortify_forced),
        ("transfer_full_writes", test_transfer_full_writes),
        ("python_stdout_full", test_python_stdout_full),
        ("retry_poll_terminates", test_retry_poll_terminates),
        ("eintr_churn", test_eintr_churn),
        ("real_signal_interrupts", test_real_signal_interrupts),
        ("real_signal_interrupts_forced", test_real_signal_interrupts_forced),
        ("real_signal_during_our_handler", test_real_signal_during_our_handler),
    ]
