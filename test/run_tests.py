#!/usr/bin/env python3
"""libwallprof test driver (run by `make test`).

Runs every unit test binary (build/unit/test_*, build/asan/test_*) and the
end-to-end tests: sample programs from test/progs/ run under the preload in a
fresh temporary directory, and assertions are made on the profile they leave
(presence, ratios and ranges, never exact counts) and on the program's own
behaviour (same exit code and stdout as without the preload).

Usage: test/run_tests.py [-k SUBSTRING] [--list] [-v]
Prints "PASS name" or "FAIL name: reason" per test, then "N passed, M failed";
exits 1 when a test failed.
"""

import argparse
import concurrent.futures
import errno
import glob
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import *  # noqa: F401,F403 (the tests below move to test/e2e/)
from harness import kill_group as _kill, read_line as _read_line

UNIT_TIMEOUT = 300     # seconds for one unit test binary (ASan is slow)


# ---------------------------------------------------------------------------
# Blocking calls: behaviour (EINTR battery) and profiles of blocked threads

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


def elapsed_close(a, b):
    """Two elapsed times (ms) agree: within 60 ms or 15 % of the larger."""
    return abs(a - b) <= max(60, 0.15 * max(a, b))


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
        return None, "did not finish within %d s (stdout %r)" % (BATTERY_TIMEOUT, run.stdout[-80:])
    if run.rc != 0:
        return None, "exit status %s (%s)" % (run.rc, run.describe())
    lines = run.stdout.splitlines()
    if len(lines) != 1 or not RESULT_RE.match(lines[0]):
        return None, "stdout %r" % run.stdout[-200:]
    other = run.other_stderr()
    if other and not stderr_ok:
        return None, "stderr besides wallprof lines: %r" % other[:3]
    return parse_results(run)[0], None


def fmt_result(r):
    return "rc=%d errno=%s %d ms" % (r[1], r[2], r[3])


def battery_pair(tmp, call, env=None, binary="blocking"):
    """Runs `blocking CALL BATTERY_MS` without, then with the preload.
    Returns the two Runs."""
    argv = [prog(binary), call, str(BATTERY_MS)]
    # TMPDIR: the FIFO and lock files go in the test's directory, removed
    # even when a hung program is killed.
    plain = run_bounded(argv, tmp, {"TMPDIR": tmp}, preload=False, timeout=BATTERY_TIMEOUT)
    # The battery's helper children (waitpid, wait4, the lock holder of
    # setlkw and lockf) are forked: unprofiled, or their exit dump would delay
    # the wait being measured.
    pre = run_bounded(argv, tmp, dict({"WALLPROF_HZ": BATTERY_HZ, "WALLPROF_LOG": "error",
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
        return ["%s: under preload %s, without %s%s" % (call, fmt_result(q), fmt_result(p), what)], False
    problems = []
    if not elapsed_close(p[3], want_ms):
        problems.append("%s: without preload took %d ms, expected ~%d (loaded machine?)"
                        % (call, p[3], want_ms))
    if not elapsed_close(q[3], p[3]):
        problems.append("%s: under preload %s, without %s" % (call, fmt_result(q), fmt_result(p)))
    return problems, True  # only elapsed differs: worth one retry


def test_eintr_battery(tmp, env=None, binary="blocking"):
    """Every blocking call of test/progs/blocking.c returns the same rc and
    errno after the same time with the profiler at 1000 Hz as without it."""
    listed = run_plain([prog(binary), "list"], tmp).stdout.split()
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
        raise Failure("%d of %d calls of %s behave differently under the preload at %s Hz: %s"
                      % (len(bad), len(BATTERY), binary, BATTERY_HZ, " ".join(bad)), problems)


def dynamic_imports(path):
    """Undefined dynamic symbols of an executable (nm -D), without versions."""
    nm = shutil.which("nm")
    check(nm, "nm (binutils) not found: cannot check the fortified build's imports")
    p = subprocess.run([nm, "-D", "--undefined-only", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    check(p.returncode == 0, "nm -D %s: %s" % (path, p.stderr.decode(errors="replace").strip()))
    return {l.split()[-1].split("@")[0] for l in p.stdout.decode().splitlines() if l.split()}


def check_fortify_imports():
    """blocking_fortify really calls the __*_chk variants; blocking none."""
    got = dynamic_imports(prog("blocking_fortify"))
    missing = [s for s in FORTIFY_IMPORTS if s not in got]
    check(not missing, "build/progs/blocking_fortify does not import %s (it imports %s): its "
          "battery would not test the fortified calls" % (" ".join(missing),
                                                          sorted(s for s in got if "_chk" in s)))
    plain = sorted(s for s in FORTIFY_IMPORTS if s in dynamic_imports(prog("blocking")))
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
    r = run_bounded([prog(binary), "poll", str(BATTERY_MS)], tmp,
                    {"WALLPROF_HZ": BATTERY_HZ, "WALLPROF_TEST_SIGNAL_BLOCKED": "1"},
                    timeout=BATTERY_TIMEOUT)
    obj = exit_profile(r)
    retried = wallprof_section(obj).get("eintr_retried", 0)
    note("%s poll under forced signals: %d retries" % (binary, retried))
    check(retried >= 100, "the forced run of %s poll retried only %d calls; the safety net was "
          "not exercised" % (binary, retried))
    # Those signals land inside our poll wrapper; the wrapper stands for the
    # libc poll below it and must not appear as a caller in the stacks.
    ours = set()
    for smp in profile_part(obj)["samples"]:
        for f in stack_frames(obj, smp["stack_id"])[1:]:
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


def test_retry_poll_terminates(tmp):
    """A loop that retries poll() with its original timeout on EINTR ends
    after that timeout under the profiler (no EINTR storm)."""
    argv = [prog("blocking"), "retrypoll", str(BATTERY_MS)]
    plain = run_bounded(argv, tmp, preload=False, timeout=10)
    p, why = one_result(plain)
    check(p is not None, "without preload: %s" % why)
    check((p[1], p[2]) == (0, "0") and elapsed_close(p[3], BATTERY_MS),
          "without preload: %s, expected rc=0 errno=0 ~%d ms" % (fmt_result(p), BATTERY_MS))
    # The program gives up by itself after 10 x 500 ms + 1 s (rc=-1 EINTR);
    # the process timeout only bounds the exit (profile writing) on top.
    pre = run_bounded(argv, tmp, {"WALLPROF_HZ": BATTERY_HZ}, timeout=RETRY_POLL_TIMEOUT)
    retries = re.findall(r"retrypoll: (\d+) EINTR retries", pre.stderr)
    retries = retries[0] if retries else "0"
    note("under preload: stdout %r, %s EINTR retries" % (pre.stdout.strip(), retries))
    q, why = one_result(pre, stderr_ok=True)  # stderr has the retry count
    check(q is not None, "under preload: %s" % why)
    check((q[1], q[2]) == (0, "0"), "under preload the poll loop never timed out: gave up with "
          "%s after %s EINTR retries" % (fmt_result(q), retries))
    check(elapsed_close(q[3], BATTERY_MS), "under preload the poll loop took %d ms (%s EINTR "
          "retries), want ~%d" % (q[3], retries, BATTERY_MS))


CHURN_MS = 1500
CHURN_HZ = "5000"
CHURN_RE = re.compile(r"^churn calls=(\d+) bad=(\d+) elapsed_ms=(\d+)$")


def test_eintr_churn(tmp):
    """Thousands of short timed calls in a row (ticks land on their entries
    and exits, where a signal can race into the call): every one times out
    normally under the profiler at 5000 Hz."""
    argv = [prog("blocking"), "churn", str(CHURN_MS)]
    plain = run_bounded(argv, tmp, preload=False, timeout=20)
    m = CHURN_RE.match(plain.stdout.strip())
    check(plain.rc == 0 and m, "without preload: stdout %r (%s)" % (plain.stdout, plain.describe()))
    check(m.group(2) == "0", "without preload %s of %s calls went wrong: %s"
          % (m.group(2), m.group(1), plain.other_stderr()[:3]))
    pre = run_bounded(argv, tmp, {"WALLPROF_HZ": CHURN_HZ}, timeout=20)
    m = CHURN_RE.match(pre.stdout.strip())
    check(pre.rc == 0 and m, "under preload: stdout %r (%s)" % (pre.stdout, pre.describe()))
    w = wallprof_section(exit_profile(pre))
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
    late = ["%s %s" % (r[0], fmt_result(r)) for r in want if not elapsed_close(r[3], REAL_SIGNAL_MS)]
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


# The fortified build runs the calls whose code differs there (__*_chk).
REAL_SIGNAL_FORTIFY_CALLS = ("poll", "ppoll", "read", "recv", "recvfrom")
REAL_SIGNAL_BUILDS = (("blocking", REAL_SIGNAL_CALLS),
                      ("blocking_fortify", REAL_SIGNAL_FORTIFY_CALLS))


def realsignal_pair(tmp, binary, calls, pre_env, together):
    """`BINARY realsignal CALLS...` without and with the preload: side by
    side when `together`, else one after the other."""
    argv = [prog(binary), "realsignal"] + list(calls)
    plain_env, pre_env = {"TMPDIR": tmp}, dict(pre_env, TMPDIR=tmp)
    if not together:
        return (run_bounded(argv, tmp, plain_env, False, REAL_SIGNAL_TIMEOUT),
                run_bounded(argv, tmp, pre_env, True, REAL_SIGNAL_TIMEOUT))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        fp = pool.submit(run_bounded, argv, tmp, plain_env, False, REAL_SIGNAL_TIMEOUT)
        fq = pool.submit(run_bounded, argv, tmp, pre_env, True, REAL_SIGNAL_TIMEOUT)
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
        probs, retry = realsignal_problems(binary, calls,
                                           *realsignal_pair(tmp, binary, calls, pre_env, together))
        if probs and retry:
            probs2, _ = realsignal_problems(binary, calls,
                                            *realsignal_pair(tmp, binary, calls, pre_env, False))
            probs = probs2 and [p + " (twice)" for p in probs2]
        problems += probs
    if problems:
        raise Failure("%d of %d calls differ under the preload: %s"
                      % (len(problems), total, " ".join(p.split(":")[0] for p in problems)),
                      problems)


TRANSFER_MB = 512      # blocking transfer: 32 writes of 16 MiB into a pipe
TRANSFER_TIMEOUT = 60
TRANSFER_RE = re.compile(r"^transfer writes=(\d+) short=(\d+) eintr=(\d+) written=(\d+) "
                         r"read=(\d+) elapsed_ms=(\d+)$")


def test_transfer_full_writes(tmp):
    """16 MiB write() calls into a pipe a slow reader drains: a blocking
    write returns the full count unless a signal handler runs during it
    (then the part written so far). None may come back short, or fail,
    under the profiler at 1000 Hz."""
    argv = [prog("blocking"), "transfer", str(TRANSFER_MB)]
    want = TRANSFER_MB << 20
    for preload in (False, True):
        what = "under preload" if preload else "without preload"
        r = run_bounded(argv, tmp, {"WALLPROF_HZ": BATTERY_HZ, "WALLPROF_LOG": "error"}
                        if preload else None, preload, TRANSFER_TIMEOUT)
        m = TRANSFER_RE.match(r.stdout.strip())
        check(r.rc == 0 and m, "%s: stdout %r (%s)" % (what, r.stdout[-200:], r.describe()))
        writes, short, eintr, written, read = (int(g) for g in m.groups()[:5])
        note("%s: %s" % (what, r.stdout.strip()))
        check(written == want and read == want, "%s: wrote %d bytes, the reader got %d, want %d"
              % (what, written, read, want))
        check(short == 0 and eintr == 0, "%s at %s Hz: %d of %d write() calls of 16 MiB into a "
              "pipe came back short, %d failed with EINTR" % (what, BATTERY_HZ, short, writes,
                                                           eintr))


PY_STDOUT_BYTES = 100000000


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
                                  env=clean_env({"WALLPROF_HZ": BATTERY_HZ, "WALLPROF_LOG": "error"}
                                                if preload else None, preload),
                                  stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.PIPE,
                                  start_new_session=True)
            try:
                wc = subprocess.Popen(["wc", "-c"], cwd=tmp, env=clean_env(preload=False),
                                      stdin=r, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True)
            except BaseException:
                _kill(py)
                raise
        finally:
            os.close(r)
            os.close(w)
        try:
            _, py_err = py.communicate(timeout=RUN_TIMEOUT)
            wc_out, _ = wc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            _kill(py)
            _kill(wc)
            raise Failure("%s: python | wc -c did not finish within %d s" % (what, RUN_TIMEOUT))
        err = [l for l in py_err.decode(errors="replace").splitlines() if "wallprof:" not in l]
        check(py.returncode == 0, "%s: python exited with %s, stderr: %s"
              % (what, py.returncode, " | ".join(err[-3:])))
        count = wc_out.decode().strip()
        note("%s: wc -c printed %s" % (what, count))
        check(count == str(PY_STDOUT_BYTES), "%s at %s Hz: wc -c printed %s, want %d (stderr: %s)"
              % (what, BATTERY_HZ, count, PY_STDOUT_BYTES, " | ".join(err[-3:]) or "empty"))


# t_ thread of test/progs/blockers.c -> (chain name, syscall labels, libc leaf names).
# The chain is wpt_<chain>_inner called by wpt_<chain>_outer; a leaf name
# matches a libc function whose name contains it (__poll, ___pthread_cond_wait...).
BLOCKERS = (
    ("t_nanosleep", "nanosleep", ("clock_nanosleep", "nanosleep"), ("nanosleep",)),
    ("t_poll", "poll", ("poll", "ppoll"), ("poll",)),
    ("t_epoll", "epoll", ("epoll_wait", "epoll_pwait", "epoll_pwait2"), ("epoll_wait", "epoll_pwait")),
    ("t_select", "select", ("select", "pselect6"), ("select",)),
    ("t_read", "read", ("read",), ("read",)),
    ("t_cond", "cond", ("futex",), ("pthread_cond_wait",)),
    ("t_mutex", "mutex", ("futex",), ("pthread_mutex_lock",)),
    ("t_sem", "sem", ("futex",), ("sem_wait",)),
    ("t_sigwait", "sigwait", ("rt_sigtimedwait",), ("sigtimedwait",)),
)
BLOCKERS_HZ = 101
BLOCKED_SHARE = 0.8
# A t_ thread runs for a few microseconds before it blocks and after it is
# woken; a tick can catch it running then and legitimately signal it. A
# blocked thread that is signalled gets ~HZ signals a second instead.
STRAY_SIGNALS = 2


def _blockers_session(tmp, env_extra, hold_s, while_ready=None):
    """Runs blockers under the preload; after "ready" calls while_ready(proc)
    (if any), lets `hold_s` seconds of wall time pass since "ready" for
    samples to accumulate, then sends the line and waits for the end.
    Returns (Run, while_ready's result)."""
    argv = [prog("blockers")]
    proc = subprocess.Popen(argv, cwd=tmp, env=clean_env(env_extra), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    err_chunks = []
    drain = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    drain.start()
    line, rest, extra = "", b"", None
    try:
        line = _read_line(proc, time.monotonic() + 20)
        check(line == "ready\n", "expected 'ready', got %r (rc %s)" % (line, proc.poll()))
        ready_at = time.monotonic()
        if while_ready is not None:
            extra = while_ready(proc)
        left = ready_at + hold_s - time.monotonic()
        if left > 0:
            time.sleep(left)  # wall time for samples to accumulate, not synchronization
        check(proc.poll() is None, "blockers exited early (rc %s)" % proc.returncode)
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        rc = proc.wait(timeout=RUN_TIMEOUT)
        rest = proc.stdout.read()
    except subprocess.TimeoutExpired:
        raise Failure("blockers did not exit within %d s after the line" % RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            _kill(proc)
        drain.join(RUN_TIMEOUT)
    stderr = b"".join(err_chunks).decode(errors="replace")
    r = Run(argv, tmp, proc.pid, rc, line + rest.decode(errors="replace"), stderr)
    check(rc == 0, "blockers exited with %s" % r.describe())
    check(r.stdout == "ready\nblockers: done\n", "blockers stdout %r" % r.stdout)
    return r, extra


def _describe_sample(obj, s, depth=6):
    fns = stack_functions(obj, s["stack_id"])[:depth]
    return "on_cpu=%s syscall=%r: %s" % (s.get("on_cpu"), s.get("syscall"),
                                         " <- ".join(str(f) for f in fns))


def _blocked_sample_problem(obj, s, chain, labels, leaves):
    """Why sample `s` is not a proper blocked sample of chain wpt_<chain>_*
    (None when it is)."""
    if s.get("on_cpu") is not False:
        return "on_cpu is %r" % s.get("on_cpu")
    if s.get("syscall") not in labels:
        return "syscall label %r not in %s" % (s.get("syscall"), "/".join(labels))
    frames = stack_frames(obj, s["stack_id"])
    fns = [f.get("function") or "" for f in frames]
    inner, outer = "wpt_%s_inner" % chain, "wpt_%s_outer" % chain
    if inner not in fns:
        return "no %s frame" % inner
    k = fns.index(inner)
    if k + 1 >= len(fns) or fns[k + 1] != outer:
        return "%s is followed by %r, not %s" % (inner, fns[k + 1] if k + 1 < len(fns) else None,
                                                 outer)
    if k == 0:
        return "no libc frame below %s" % inner
    leaf = frames[0]
    if not is_libc_module(leaf.get("module")) or not any(n in fns[0] for n in leaves):
        return "leaf frame %r (module %s) is not libc's %s" % (
            fns[0], os.path.basename(str(leaf.get("module"))), "/".join(leaves))
    for f in frames[1:k]:
        if not is_libc_module(f.get("module")):
            return "non-libc frame %r (%s) between the leaf and %s" % (
                f.get("function"), os.path.basename(str(f.get("module"))), inner)
    return None


def check_blocked_thread(obj, thread, chain, labels, leaves, min_samples=50):
    """≥ BLOCKED_SHARE of `thread`'s samples are off-CPU, labelled with one of
    `labels`, have a libc leaf named like one of `leaves` and hold
    wpt_<chain>_inner right below wpt_<chain>_outer. Returns the tid."""
    tids = tids_named(obj, thread)
    check(len(tids) == 1, "expected one thread named %s, got %d" % (thread, len(tids)))
    samples = samples_by_thread(obj).get(tids[0], [])
    check(len(samples) >= min_samples, "%s has only %d samples" % (thread, len(samples)))
    why = {}
    good = 0
    for s in samples:
        p = _blocked_sample_problem(obj, s, chain, labels, leaves)
        if p is None:
            good += 1
        else:
            why.setdefault(p, []).append(s)
    share = good / len(samples)
    note("%s: %d samples, %.0f%% blocked in %s with wpt_%s_inner <- wpt_%s_outer"
         % (thread, len(samples), share * 100, "/".join(labels), chain, chain))
    if share < BLOCKED_SHARE:
        reason, bad = max(why.items(), key=lambda kv: len(kv[1]))
        raise Failure("%s: only %.0f%% of %d samples are proper blocked samples; most common "
                      "problem (%d samples): %s; e.g. %s"
                      % (thread, share * 100, len(samples), len(bad), reason,
                         _describe_sample(obj, bad[0])))
    return tids[0]


def thread_counters(obj, what):
    """wallprof.threads: tid string -> {"signals": N, "samples": N}."""
    th = wallprof_section(obj).get("threads")
    check(isinstance(th, dict), "%s: no wallprof.threads object (wallprof keys: %s)"
          % (what, sorted(wallprof_section(obj))))
    return {str(k): v for k, v in th.items()}


def thread_signals(counters, tid, thread, what):
    entry = counters.get(tid)
    check(isinstance(entry, dict) and isinstance(entry.get("signals"), int),
          "%s: wallprof.threads has no signals count for %s (%s): %r"
          % (what, thread, tid, entry))
    return entry["signals"]


def check_signals_blocked_zero(obj, what):
    n = wallprof_section(obj).get("signals_blocked")
    check(n == 0, "%s: wallprof.signals_blocked is %r, want 0" % (what, n))


def test_blocked_stacks(tmp):
    """Blocked threads are never signalled; their samples are off-CPU, carry
    the syscall label and the caller chain from the libc function upward."""
    snaps = []

    def two_snapshots(proc):
        # Two snapshots while every t_ thread is blocked: their signal counts
        # must not move in between (no race with start-up or wake-up).
        ready = time.monotonic()
        for n, at in ((1, 0.3), (2, 1.2)):
            time.sleep(max(0, ready + at - time.monotonic()))  # wall time, not synchronization
            os.kill(proc.pid, signal.SIGUSR2)
            path = os.path.join(tmp, "wallprof.%d.%d.json" % (proc.pid, n))
            check(poll_for(path, proc=proc), "snapshot %d did not appear" % n)
            snaps.append(load_profile(path))

    r, _ = _blockers_session(tmp, {"WALLPROF_HZ": str(BLOCKERS_HZ)}, 1.5, two_snapshots)
    obj = exit_profile(r)
    check_valid(obj)
    tids = {}
    for thread, chain, labels, leaves in BLOCKERS:
        tids[thread] = check_blocked_thread(obj, thread, chain, labels, leaves)

    # While everything is blocked (the snapshots below) no thread may get a
    # last-resort signal. The exit profile also covers the wake-up and the
    # joins, where a woken thread can block for a moment in an unwrapped
    # futex (thread exit): at most one such signal per blocked thread.
    nsb = wallprof_section(obj).get("signals_blocked")
    check(isinstance(nsb, int) and nsb <= len(BLOCKERS),
          "exit profile: wallprof.signals_blocked is %r, want at most %d (shutdown only)"
          % (nsb, len(BLOCKERS)))
    counters = thread_counters(obj, "exit profile")
    busy = tids_named(obj, "busy")
    check(len(busy) == 1, "no single busy thread")
    nb = thread_signals(counters, busy[0], "busy", "exit profile")
    check(nb >= 50, "exit profile: the busy thread got only %d signals" % nb)
    stray = {t: thread_signals(counters, tid, t, "exit profile") for t, tid in tids.items()}
    note("signals: busy %d, blocked threads %s, eintr_retried %r"
         % (nb, stray, wallprof_section(obj).get("eintr_retried")))
    many = {t: n for t, n in stray.items() if n > STRAY_SIGNALS}
    check(not many, "exit profile: blocked threads were signalled: %s (busy got %d)"
          % (many, nb))

    c1, c2 = (thread_counters(s, "snapshot %d" % (i + 1)) for i, s in enumerate(snaps))
    for i, s in enumerate(snaps):
        check_signals_blocked_zero(s, "snapshot %d" % (i + 1))
    moved = {}
    for t, tid in tids.items():
        d = (thread_signals(c2, tid, t, "snapshot 2") - thread_signals(c1, tid, t, "snapshot 1"))
        if d:
            moved[t] = d
    check(not moved, "signals sent to blocked threads between two snapshots 0.9 s apart: %s"
          % moved)
    db = thread_signals(c2, busy[0], "busy", "snapshot 2") - thread_signals(c1, busy[0], "busy",
                                                                             "snapshot 1")
    check(db > 0, "the busy thread got no signal between the snapshots")


EU_STACK_THREADS = ("t_poll", "t_nanosleep", "t_cond")
EU_FRAME_RE = re.compile(r"^#(\d+)\s+0x([0-9a-fA-F]+)\s*(.*?)(?:\s+-\s+(\S+))?\s*$")


def parse_eu_stack(text):
    """tid string -> [(function, module)] leaf first, from `eu-stack -m` output."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^TID (\d+):", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = EU_FRAME_RE.match(line.strip())
        if m and cur is not None:
            fn = m.group(3).strip() or None
            cur.append((fn, m.group(4)))
    return out


def app_chain(frames, exe):
    """From the first wpt_ frame upward, the frames of the executable `exe`."""
    fns = [f for f, _ in frames]
    start = next((i for i, f in enumerate(fns) if f and f.startswith("wpt_")), None)
    if start is None:
        return []
    chain = []
    for fn, mod in frames[start:]:
        if mod and os.path.realpath(mod) != os.path.realpath(exe):
            break
        chain.append(fn)
    return chain


def contains_run(seq, run):
    n = len(run)
    return any(seq[i:i + n] == run for i in range(len(seq) - n + 1))


def test_blocked_stacks_vs_eu_stack(tmp):
    """For blocked threads, the app frames eu-stack shows (wpt_*_inner,
    wpt_*_outer, the start routine) appear in the same order in our stacks."""
    exe = prog("blockers")
    eu = shutil.which("eu-stack")

    def snap(proc):
        names = {}
        for tid in os.listdir("/proc/%d/task" % proc.pid):
            try:
                with open("/proc/%d/task/%s/comm" % (proc.pid, tid)) as f:
                    names[tid] = f.read().strip()
            except OSError:
                pass
        if not eu:
            return names, None, "eu-stack not installed (package elfutils)"
        try:
            p = subprocess.run([eu, "-p", str(proc.pid), "-m"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
        except subprocess.TimeoutExpired:
            return names, None, "eu-stack timed out"
        text = p.stdout.decode(errors="replace")
        if "TID" not in text:
            err = p.stderr.decode(errors="replace").strip().splitlines()
            return names, None, "eu-stack could not attach (rc %d: %s)" % (
                p.returncode, err[-1] if err else "no output")
        return names, parse_eu_stack(text), None

    r, (names, eu_stacks, skip) = _blockers_session(tmp, {"WALLPROF_HZ": str(BLOCKERS_HZ)}, 1.5,
                                                   snap)
    obj = exit_profile(r)
    check_valid(obj)
    spec = {b[0]: b for b in BLOCKERS}
    tids = {t: check_blocked_thread(obj, *spec[t]) for t in EU_STACK_THREADS}
    if skip:
        print("    note: eu-stack comparison skipped: %s" % skip)
        return
    by_tid = samples_by_thread(obj)
    for thread, tid in tids.items():
        check(names.get(tid) == thread, "tid %s is %r in /proc, %s in the profile"
              % (tid, names.get(tid), thread))
        frames = eu_stacks.get(tid)
        check(frames, "eu-stack shows no stack for %s (tid %s)" % (thread, tid))
        chain = app_chain(frames, exe)
        check(len(chain) >= 3 and all(chain),
              "eu-stack: %s: app frames from the first wpt_ frame: %s (stack: %s)"
              % (thread, chain, [f for f, _ in frames]))
        samples = by_tid.get(tid, [])
        hits = sum(1 for s in samples if contains_run(stack_functions(obj, s["stack_id"]), chain))
        share = hits / len(samples) if samples else 0
        note("%s: eu-stack app chain %s in %.0f%% of our samples"
             % (thread, " <- ".join(chain), share * 100))
        if share < BLOCKED_SHARE:
            common = {}
            for s in samples:
                key = " <- ".join(str(f) for f in stack_functions(obj, s["stack_id"])[:6])
                common[key] = common.get(key, 0) + 1
            top = max(common.items(), key=lambda kv: kv[1]) if common else ("none", 0)
            raise Failure("%s: eu-stack's chain %s is in only %.0f%% of our samples; most "
                          "common stack: %s (%d)" % (thread, " <- ".join(chain), share * 100,
                                                     top[0], top[1]))


E2E_TESTS = [
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
    ("blocked_stacks", test_blocked_stacks),
    ("blocked_stacks_vs_eu_stack", test_blocked_stacks_vs_eu_stack),
]


# ---------------------------------------------------------------------------
# Driver


def unit_tests():
    """(name, function) for every built unit test binary."""
    out = []
    for kind in ("unit", "asan"):
        for path in sorted(glob.glob(os.path.join(BUILD, kind, "test_*"))):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                out.append(("%s/%s" % (kind, os.path.basename(path)),
                            lambda tmp, path=path: run_unit(path, tmp)))
    return out


def run_unit(path, tmp):
    """Runs one unit test binary from the source root (fixtures are found
    relative to it), with TMPDIR pointing at the test's temporary directory."""
    env = clean_env(preload=False)
    env["TMPDIR"] = tmp
    try:
        p = subprocess.run([path], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=UNIT_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise Failure("did not finish within %d s" % UNIT_TIMEOUT)
    if p.returncode != 0:
        lines = p.stdout.decode(errors="replace").strip().splitlines()
        raise Failure("exit status %d%s" % (p.returncode, (": " + lines[-1]) if lines else ""),
                      lines[-20:])


def profiles_under(tmp):
    """Every Sentry profile (a JSON object with "version" and "profile")
    left anywhere under `tmp`."""
    for d, _, names in os.walk(tmp):
        for n in names:
            if not n.endswith(".json") or ".tmp." in n:
                continue
            path = os.path.join(d, n)
            if os.path.islink(path):
                continue  # planted by a test; we never write through one
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            try:
                obj = json.loads(data)
            except ValueError as e:
                # Ours if it looks like one: a truncated profile is the
                # worst output there is.
                check(b'"profile"' not in data[:4096] and not n.startswith("wallprof"),
                      "%s, written during the test, is not JSON: %s" % (path, e))
                continue
            if isinstance(obj, dict) and "version" in obj and "profile" in obj:
                yield path, obj


def check_all_profiles(tmp):
    """Whatever a test asserted, every profile it left must pass Sentry's
    ingestion rules (test/sentry_check.py)."""
    n = 0
    for path, obj in profiles_under(tmp):
        n += 1
        errors = sentry_errors(obj)
        check(not errors, "%s, written during the test, fails sentry_check (%d errors): %s"
              % (os.path.relpath(path, tmp), len(errors), "; ".join(str(e) for e in errors[:3])))
    note("%d profile(s) left by the test pass sentry_check" % n)


def run_one(name, fn):
    tmp = tempfile.mkdtemp(prefix="wallprof-test-")
    t0 = time.monotonic()
    details = []
    saved_tmpdir = os.environ.get("TMPDIR")
    # Fallback profiles ($TMPDIR) land where check_all_profiles looks,
    # unless a test sets TMPDIR itself.
    os.mkdir(os.path.join(tmp, "tmpdir"))
    os.environ["TMPDIR"] = os.path.join(tmp, "tmpdir")
    try:
        fn(tmp)
        check_all_profiles(tmp)
        ok, reason = True, None
    except Failure as e:
        ok, reason, details = False, str(e), e.details
    except Exception as e:  # a bug in the test or a malformed profile
        ok, reason = False, "%s: %s" % (type(e).__name__, e)
    finally:
        if saved_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_tmpdir
        shutil.rmtree(tmp, ignore_errors=True)
    reason = " ".join((reason or "").split())
    if len(reason) > 600:
        reason = reason[:600] + "..."
    if ok:
        print("PASS %s" % name)
    else:
        print("FAIL %s: %s" % (name, reason))
        for line in details:
            line = "".join(c if c.isprintable() else "?" for c in line)
            print("    " + (line[:300] + "..." if len(line) > 300 else line))
    note("%.1f s" % (time.monotonic() - t0))
    sys.stdout.flush()
    return ok


def module_tests():
    """(name, function) from every test/e2e/*.py module: each defines
    tests(rt), rt being this driver (its helpers: run_under_preload, check,
    exit_profile, ...), and returns its (name, function) pairs."""
    out = []
    for path in sorted(glob.glob(os.path.join(TEST_DIR, "e2e", "*.py"))):
        name = "e2e_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out += mod.tests(harness)
    return out


def main():
    ap = argparse.ArgumentParser(description="libwallprof test suite")
    ap.add_argument("-k", metavar="SUBSTRING", help="only tests whose name contains SUBSTRING")
    ap.add_argument("--list", action="store_true", help="list test names and exit")
    ap.add_argument("-v", action="store_true", help="print measurements and timings")
    args = ap.parse_args()
    harness.VERBOSE = args.v

    tests = unit_tests() + E2E_TESTS + module_tests()
    if args.k:
        tests = [(n, f) for n, f in tests if args.k in n]
    if args.list:
        for n, _ in tests:
            print(n)
        return 0
    passed = failed = 0
    for name, fn in tests:
        if run_one(name, fn):
            passed += 1
        else:
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
