"""On-demand snapshots (test/progs/snapshot.c): SIGUSR2, or the signal
WALLPROF_SNAPSHOT_SIGNAL names, writes wallprof.<pid>.<n>.json while the
program runs on; a program that owns SIGUSR2 itself
(test/progs/snapshot_ownusr2.c) keeps it, and snapshots are off. A snapshot signal landing in a thread
blocked in a wrapped call must not make that call return EINTR early (the
kernel picks any thread for it)."""

import glob
import os
import signal
import subprocess
import threading
import time


def _blocked_in(pid, sysno):
    """Whether some thread of `pid` sits in system call `sysno`."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, t)) as f:
                if f.read().split(" ", 1)[0] == str(sysno):
                    return True
        except OSError:
            pass
    return False


def tests(rt):
    check = rt.check

    def _check_snapshot(tmp, pid, n, proc):
        path = os.path.join(tmp, "wallprof.%d.%d.json" % (pid, n))
        check(rt.poll_for(path, proc=proc), "snapshot %d: %s did not appear within %.0f s"
              % (n, os.path.basename(path), rt.POLL_TIMEOUT))
        obj = rt.load_profile(path)
        rt.check_valid(obj, "snapshot %d" % n)
        w = rt.wallprof_section(obj)
        check(w.get("snapshot") == n, "snapshot %d has wallprof.snapshot=%r"
              % (n, w.get("snapshot")))
        for name in ("busy", "sleeper"):
            check(rt.thread_samples(obj, name), "snapshot %d has no samples of %s" % (n, name))
        return path

    def _snapshot_session(tmp, env_extra, sig, count):
        """Runs the snapshot program under the preload, takes `count` snapshots
        with signal `sig` after "ready", then lets it finish. Returns the Run
        and the snapshot paths."""
        proc = subprocess.Popen([rt.prog("snapshot")], cwd=tmp, env=rt.clean_env(env_extra),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        err_chunks = []
        drain = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()),
                                 daemon=True)
        drain.start()
        line, rest = "", b""
        snaps = []
        try:
            line = rt.read_line(proc, time.monotonic() + 20)
            check(line == "ready\n", "expected 'ready', got %r (rc %s)" % (line, proc.poll()))
            for n in range(1, count + 1):
                os.kill(proc.pid, sig)
                snaps.append(_check_snapshot(tmp, proc.pid, n, proc))
                check(proc.poll() is None, "program exited (rc %s) after snapshot %d"
                      % (proc.returncode, n))
            proc.stdin.write(b"go\n")
            proc.stdin.close()
            rc = proc.wait(timeout=rt.RUN_TIMEOUT)  # it prints one short line: no pipe stall
            rest = proc.stdout.read()
        except subprocess.TimeoutExpired:
            raise rt.Failure("snapshot did not exit within %d s" % rt.RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                rt.kill_group(proc)
            drain.join(rt.RUN_TIMEOUT)
        stderr = b"".join(err_chunks).decode(errors="replace")
        r = rt.Run([rt.prog("snapshot")], tmp, proc.pid, rc, line + rest.decode(errors="replace"),
                   stderr)
        check(rc == 0, "snapshot exited with %s" % r.describe())
        check(r.stdout == "ready\nsnapshot: done\n", "snapshot stdout %r" % r.stdout)
        for path in snaps:
            check(os.path.basename(path) in stderr, "stderr does not mention %s"
                  % os.path.basename(path))
        obj = rt.exit_profile(r)
        rt.check_valid(obj, "exit profile")
        check(rt.wallprof_section(obj).get("snapshot") == 0, "exit profile has snapshot=%r"
              % rt.wallprof_section(obj).get("snapshot"))
        check(os.path.basename(r.profile_path()) == "wallprof.%d.json" % r.pid,
              "exit profile is %s" % os.path.basename(r.profile_path()))
        return r, snaps

    def test_snapshot(tmp):
        _snapshot_session(tmp, None, signal.SIGUSR2, 2)

    def test_snapshot_usr1(tmp):
        _snapshot_session(tmp, {"WALLPROF_SNAPSHOT_SIGNAL": "USR1"}, signal.SIGUSR1, 1)

    def test_own_usr2(tmp):
        r = rt.run_under_preload([rt.prog("snapshot_ownusr2")], cwd=tmp)
        check(r.rc == 0 and r.stdout == "handled 3\n", "snapshot_ownusr2: rc %s, stdout %r "
              "(%s)" % (r.rc, r.stdout, r.describe()))
        check(any("snapshot" in l for l in r.wallprof_lines()),
              "no wallprof stderr line about snapshots: %r" % r.wallprof_lines())
        rt.check_valid(rt.exit_profile(r))

    def snapshot_during_poll(tmp):
        env = rt.clean_env({"WALLPROF_HZ": "101"})
        proc = subprocess.Popen([rt.prog("blocking"), "poll", "2000"], cwd=tmp, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 5
            while not _blocked_in(proc.pid, 7) and time.monotonic() < deadline:  # 7 = poll
                time.sleep(0.005)  # polling an observable condition
            rt.check(_blocked_in(proc.pid, 7), "the program never blocked in poll")
            # Two snapshots while it waits; one sent before the first tick
            # has no samples and writes nothing, so send again until two
            # files exist.
            written = []
            for _ in range(20):
                if len(written) >= 2 or proc.poll() is not None:
                    break
                proc.send_signal(signal.SIGUSR2)
                end = time.monotonic() + 0.3
                while time.monotonic() < end and proc.poll() is None:
                    written = glob.glob(os.path.join(tmp, "wallprof.%d.*.json" % proc.pid))
                    if len(written) >= 2:
                        break
                    time.sleep(0.01)  # polling an observable condition
            rt.check(len(written) >= 2, "only %d snapshots written while blocked" % len(written))
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        rt.check(proc.returncode == 0, "blocking exited with %s: %s" % (proc.returncode, err))
        fields = dict(kv.split("=") for kv in out.split()[1:])
        rt.check(fields.get("rc") == "0" and fields.get("errno") == "0",
                 "poll was disturbed by the snapshots: %s" % out.strip())
        ms = int(fields.get("elapsed_ms", "0"))
        rt.check(1900 <= ms <= 2300, "poll took %d ms, want about 2000" % ms)

    return [
        ("snapshot", test_snapshot),
        ("snapshot_usr1", test_snapshot_usr1),
        ("own_usr2", test_own_usr2),
        ("snapshot_does_not_interrupt", snapshot_during_poll),
    ]
