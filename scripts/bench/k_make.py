"""K-make-follow-children: a fork/exec-heavy workload. A fresh `git clone`
of this repository (its HEAD commit) into the temporary directory, then
`make -j2` (the default goal) built bare and under
LD_PRELOAD=build/libwallprof.so WALLPROF_FOLLOW_CHILDREN=1
WALLPROF_OUTPUT=<tmp>/wallprof.%p.json, alternating, the order flipped every
pair, `make clean` after every build (not timed); one bare build first as a
warm-up. 5 pairs (--quick 1): the build's pairs spread over 1.0-1.2 on a
noisy virtual machine, and three decided 1.05 against 1.10 by chance. The
figure is the median over pairs of the build's wall time with / without;
target <= 1.05x. Each profiled child
writes a raw dump as it exits; one converter for the whole tree (at idle
priority, keeping libc's debug info from dump to dump) turns them into
profiles, and the build's first process waits for it at its exit, so the
time includes every profile written. CPU counts the build's processes
only: the converter is nobody's child.
"""

import os
import re
import resource
import shutil
import subprocess
import time

from .common import (LIB, ROOT, RUN_TIMEOUT, Benchmark, RunError, clean_env, install_hint, log,
                     med, pair_order, spread)

PAIRS, QUICK_PAIRS = 5, 1
JOBS = 2
TARGET = 1.05
CHILDREN_RE = re.compile(r"wallprof: (\d+) child process[^;\n]*")
MAKE_VARS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR",
             "MAKEFILES", "GNUMAKEFLAGS")


def run(cmd, cwd, env, what):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RunError("%s timed out after %d s" % (what, RUN_TIMEOUT))
    if p.returncode != 0:
        raise RunError("%s exited with status %d: %s" % (what, p.returncode,
                                                          (p.stderr or p.stdout).strip()[-500:]))
    return p


def bench_k(table, tmpdir, quick):
    label = "K: make -j%d of the project (fresh clone), WALLPROF_FOLLOW_CHILDREN=1" % JOBS
    missing = [(c, pkg) for c, pkg in (("git", "git"), ("make", "make")) if not shutil.which(c)]
    if missing:
        table.add(label + ": wall ratio", "skipped (see note)", "<= %.2fx" % TARGET, "skip")
        table.notes.append("K: %s" % install_hint(" ".join(pkg for _, pkg in missing)))
        return
    pairs = QUICK_PAIRS if quick else PAIRS
    src = os.path.join(tmpdir, "make-src")
    out = os.path.join(tmpdir, "make-profiles")
    shutil.rmtree(src, ignore_errors=True)
    run(["git", "clone", "-q", ROOT, src], tmpdir, clean_env(), "git clone")
    rev = run(["git", "rev-parse", "--short", "HEAD"], src, clean_env(), "git rev-parse").stdout.strip()
    # The build must not join the jobserver or inherit the options of the
    # `make bench` that runs us.
    bare = {k: v for k, v in clean_env().items() if k not in MAKE_VARS}
    envs = {"none": bare,
            "wallprof": dict(bare, LD_PRELOAD=LIB, WALLPROF_FOLLOW_CHILDREN="1",
                             WALLPROF_OUTPUT=os.path.join(out, "wallprof.%p.json"))}

    def build(t):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p = run(["make", "-j%d" % JOBS], src, envs[t], "[%s] make -j%d" % (t, JOBS))
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        profiles = sum(1 for f in os.listdir(out) if f.endswith(".json"))
        m = CHILDREN_RE.search(p.stderr)
        run(["make", "clean"], src, bare, "make clean")
        shutil.rmtree(out, ignore_errors=True)
        return wall, cpu, profiles, m.group(0) if m else None

    build("none")  # warm-up: page cache, headers
    wall, cpu, base, summary = [], [], [], None
    for i in range(pairs):
        r = {t: build(t) for t in pair_order(i, "wallprof", "none")}
        wall.append(r["wallprof"][0] / r["none"][0])
        cpu.append(r["wallprof"][1] / r["none"][1])
        base.append(r["none"][0])
        summary = "%d profiles written; the library's summary: %s" % (
            r["wallprof"][2], r["wallprof"][3] or "none")
        log("K pair %d/%d: %.3fx (%.2f s with, %.2f s without), CPU %.3fx"
            % (i + 1, pairs, wall[-1], r["wallprof"][0], r["none"][0], cpu[-1]))
    w = med(wall)
    table.check(label + ": wall ratio",
                "%.3fx median of %d pairs (%s); %.2f s without; CPU %.3fx"
                % (w, pairs, spread(wall), med(base), med(cpu)),
                "<= %.2fx" % TARGET, w <= TARGET)
    table.notes.append("K: clone of commit %s (uncommitted changes are not built); last preloaded "
                       "build: %s. CPU: user+system time of the whole build tree, with over "
                       "without" % (rev, summary))


BENCHMARKS = [Benchmark("K-make-follow-children", bench_k)]
