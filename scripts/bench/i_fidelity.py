"""I-fidelity: build/bench/fidelity: 4 threads that time their own noinline
functions (spinning, nanosleep, pipe read, cond wait, clock_nanosleep, poll)
for 10 s (--quick 6 s), under the preload. Per thread and function, the
share of the thread's samples whose stack holds the function must be within
2 percentage points of the measured share; each whole-run thread's sampling
rate, (samples - 1) / (last - first), within 2 % of WALLPROF_HZ.
"""

import json
import os

from .common import HZ, RUN_TIMEOUT, Benchmark, RunError, run_tool, vlog

FIDELITY_S, QUICK_FIDELITY_S = 10.0, 6.0
FIDELITY_PP = 2.0
FIDELITY_RATE_PCT = 2.0


def bench_i(table, tmpdir, quick):
    secs = QUICK_FIDELITY_S if quick else FIDELITY_S
    r = run_tool(["fidelity", secs], "wallprof", tmpdir, "tid", keep_profile=True,
                 timeout=secs + RUN_TIMEOUT)
    path = r["profile"]
    try:
        with open(path) as f:
            doc = json.load(f)
    finally:
        os.unlink(path)
    truth, helpers = {}, {}
    for line in r["stdout"].splitlines():
        kv = line.split()
        if not kv:
            continue
        fields = dict(x.split("=", 1) for x in kv[1:] if "=" in x)
        if kv[0] == "thread":
            truth[int(fields["tid"])] = (fields["name"], dict(
                (x.split("=", 1)[1].rsplit(":", 1)[0], float(x.rsplit(":", 1)[1]))
                for x in kv[1:] if x.startswith("fn=")))
        elif kv[0] == "helper":
            helpers[int(fields["tid"])] = fields["name"]
    prof = doc["profile"]
    wp = doc.get("wallprof", {})
    fnames = [f.get("function") or "" for f in prof["frames"]]
    stack_fns = [frozenset(fnames[i] for i in st) for st in prof["stacks"]]
    per = {}
    for s in prof["samples"]:
        per.setdefault(int(s["thread_id"]), []).append(
            (int(s["elapsed_since_start_ns"]), s["stack_id"], bool(s.get("on_cpu"))))
    worst, worst_what, rates = 0.0, "", []
    cpu_ok = cpu_all = 0
    for tid, (name, shares) in sorted(truth.items()):
        ss = per.get(tid, [])
        if len(ss) < 10:
            raise RunError("fidelity: thread %s (%d) has %d samples in the profile" % (name, tid, len(ss)))
        for fn, share in shares.items():
            hits = [x for x in ss if fn in stack_fns[x[1]]]
            got = len(hits) / len(ss)
            diff = 100.0 * (got - share)
            if abs(diff) > abs(worst):
                worst, worst_what = diff, "%s/%s %.1f %% vs %.1f %%" % (name, fn, 100 * got, 100 * share)
            vlog("I %s %s: profile %.1f %% measured %.1f %%" % (name, fn, 100 * got, 100 * share))
            on = fn.startswith("spin_")
            cpu_all += len(hits)
            cpu_ok += sum(1 for x in hits if x[2] == on)
    for tid in list(truth) + list(helpers):
        ss = per.get(tid, [])
        if len(ss) >= 2:
            span = (ss[-1][0] - ss[0][0]) / 1e9
            rates.append((100.0 * (len(ss) - 1) / span / HZ,
                          truth[tid][0] if tid in truth else helpers[tid]))
    table.check("I: fidelity, 4 threads x %.0f s: worst share error" % secs,
                "%+.1f pp (%s)" % (worst, worst_what), "within %.0f pp" % FIDELITY_PP,
                abs(worst) <= FIDELITY_PP)
    lo, hi = min(rates), max(rates)
    far = max(rates, key=lambda x: abs(x[0] - 100))
    off = abs(far[0] - 100)
    table.check("I: fidelity: sampling rate per thread (%d threads)" % len(rates),
                "%.1f..%.1f %% of %d Hz (farthest: %s)" % (lo[0], hi[0], HZ, far[1]),
                "within %.0f %%" % FIDELITY_RATE_PCT, off <= FIDELITY_RATE_PCT)
    ticks, late = int(wp.get("ticks", 0)), int(wp.get("ticks_late", 0))
    if ticks + late:
        table.notes.append("I: the sampler ran %d ticks and skipped %d late ones (%.1f %%; it skips "
                           "a tick it wakes up a whole period late, e.g. when other processes hold "
                           "the CPUs)" % (ticks, late, 100.0 * late / (ticks + late)))
    table.add("I: fidelity: on_cpu flag matches spin / blocking functions",
              "%.1f %% of %d samples" % (100.0 * cpu_ok / max(cpu_all, 1), cpu_all), "-", "info")


BENCHMARKS = [Benchmark("I-fidelity", bench_i, ("fidelity",))]
