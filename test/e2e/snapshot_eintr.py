"""A snapshot signal landing in a thread blocked in a wrapped call must not
make that call return EINTR early (the kernel picks any thread for it)."""

import glob
import os
import signal
import subprocess
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

    return [("snapshot_does_not_interrupt", snapshot_during_poll)]
