"""M-window: build/bench/mem: N threads blocked in pthread_cond_wait plus
4 busy ones, for the ring's window + 3 s (N = 1,000 and 10,000; --quick:
1,000 only), under the preload with the default window and ring size
(WALLPROF_RING_SECONDS=30, WALLPROF_RING_MB=64) at WALLPROF_HZ=101, the
exit profile in pprof (WALLPROF_FORMAT=pprof: with 10,000 threads the
Sentry JSON, one entry per thread per tick, would be about 3 GB). The
figures come from the library's line on stderr (WALLPROF_LOG=info),
"wallprof: wrote PATH (S samples, T threads, H s, D dropped) in M ms":
the seconds of history H (the profile's last sample's time minus its
first's) against the window asked for, and the samples S as a share of
(N + 5 threads, the main one included) x window x hz. Peak RSS added: the
same program bare, run at the same time; each run's peak is the
ru_maxrss that wait4 gives for it, so its exit (the raw dump's write) is
in it. Both run through `mem --reap`, which forks the program from a small
process and prints that figure: a process started straight from this
script would carry the script's own peak in its ru_maxrss (exec records
the peak of the memory it replaces, the script's under vfork). The
converter that turns the dump into the profile is a process of its own
(nobody's child of the program), so its memory is not in it. The
program's own VmHWM 0.1 s before its end is shown beside it. Issue 14's
targets: >= 29 s of a 30 s window with 10,000 blocked threads, RSS added
<= 64 MiB.
"""

import os
import re
import subprocess

from .common import (HZ, LIB, RUN_TIMEOUT, Benchmark, RunError, clean_env, log, parse_line, prog,
                     vlog)

SIZES, QUICK_SIZES = (1000, 10000), (1000,)
BUSY = 4
WINDOW_S = 30

# "wallprof: [SIGxxx: ]wrote PATH ([snapshot: ]S samples, T threads, H s, D dropped) in M ms"
WROTE_LINE_RE = re.compile(r"wrote (\S+) \([^)]*?(\d+) samples, (\d+) threads, ([\d.]+) s, "
                           r"(\d+) dropped\) in ([\d.]+) ms")


def run_pair(n, secs, tmpdir, busy=BUSY):
    """mem N SECS BUSY under the preload and bare, at the same time, each
    through `mem --reap`. Returns {kind: (stdout, stderr, peak RSS in KiB)}."""
    env_with = clean_env()
    env_with.update(WALLPROF_LOG="info", WALLPROF_FORMAT="pprof", WALLPROF_HZ=str(HZ),
                    WALLPROF_OUTPUT=os.path.join(tmpdir, "w.%p.json"))
    args = [str(n), str(secs), str(busy)]
    cmds = {"wallprof": [prog("mem"), "--reap", "--preload", LIB] + args,
            "none": [prog("mem"), "--reap"] + args}
    envs = {"wallprof": env_with, "none": clean_env()}
    procs = {t: subprocess.Popen(cmds[t], cwd=tmpdir, env=envs[t], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
             for t in ("wallprof", "none")}
    res = {}
    try:
        for t, pr in procs.items():
            try:
                o, e = pr.communicate(timeout=RUN_TIMEOUT + secs)
            except subprocess.TimeoutExpired:
                raise RunError("window %d [%s] timed out after %d s" % (n, t, RUN_TIMEOUT + secs))
            if pr.returncode != 0:
                raise RunError("window %d [%s] exited with status %d: %s"
                               % (n, t, pr.returncode, e.strip()[-300:]))
            peak = parse_line(o, "maxrss_kb", "mem --reap")["maxrss_kb"]
            res[t] = (o, e, peak)
            vlog("M [%s] %s -> %s; %s" % (t, " ".join(cmds[t][1:]), o.strip(), e.strip()[-300:]))
    finally:
        for pr in procs.values():
            if pr.poll() is None:
                pr.kill()   # the reaper; its child has PR_SET_PDEATHSIG
                pr.wait()
    return res


def bench_m(table, tmpdir, quick):
    secs = WINDOW_S + 3
    for n in (QUICK_SIZES if quick else SIZES):
        res = run_pair(n, secs, tmpdir)
        err = res["wallprof"][1]
        m = WROTE_LINE_RE.search(err)
        if not m:
            raise RunError("window %d: no \"wrote ... (S samples, T threads, H s, D dropped)\" "
                           "line from the library: %s" % (n, err.strip()[-500:]))
        path = m.group(1)
        path = path if os.path.isabs(path) else os.path.join(tmpdir, path)
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if os.path.exists(path):
            os.unlink(path)
        samples, threads, hist = int(m.group(2)), int(m.group(3)), float(m.group(4))
        dropped, write_ms = int(m.group(5)), float(m.group(6))
        expected = (n + BUSY + 1) * WINDOW_S * HZ
        log("M %d: %s" % (n, m.group(0)))
        table.check("M: window kept, %d blocked + %d busy threads, %d s run" % (n, BUSY, secs),
                    "%.1f s of %d s; %d samples = %.1f %% of %d threads x %d s x %d Hz "
                    "(%d threads in the profile, %d dropped; pprof of %.0f KiB written in %.0f ms)"
                    % (hist, WINDOW_S, samples, 100.0 * samples / expected, n + BUSY + 1,
                       WINDOW_S, HZ, threads, dropped, size / 1024.0, write_ms),
                    ">= 29 s", hist >= 29)
        added = (res["wallprof"][2] - res["none"][2]) / 1024.0
        # The program's own VmHWM, read 0.1 s before its end: the peak
        # before the exit's dump, for comparison.
        hwm = [parse_line(res[t][0], "hwm_kb", "mem").get("hwm_kb") for t in ("wallprof", "none")]
        before = ("; %+.1f MiB 0.1 s before the exit (VmHWM)" % ((hwm[0] - hwm[1]) / 1024.0)
                  if all(isinstance(h, float) for h in hwm) else "")
        table.check("M: peak RSS added, %d blocked + %d busy threads" % (n, BUSY),
                    "%.1f MiB (ru_maxrss, exit included, side by side: %.1f vs %.1f MiB%s)" % (
                        added, res["wallprof"][2] / 1024.0, res["none"][2] / 1024.0, before),
                    "<= 64 MiB", added <= 64)


BENCHMARKS = [Benchmark("M-window", bench_m, ("mem",))]
