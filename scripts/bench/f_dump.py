"""F-dump-ring: build/bench/dump ring (links the core sources): a ring sized
as the library sizes it, filled with 30 s x 64 threads x 101 Hz = 193,920
samples of 20-40-frame stacks over ~4,000 addresses in the executable, libc
and libdw; times the raw dump's write and read (the window) + wp_sym_open +
wp_out_sentry_write (target <= 1 s) and reports the peak extra memory (VmHWM
after - VmRSS before). Median of 3.
"""

import os
import subprocess

from .common import RUN_TIMEOUT, Benchmark, RunError, med, parse_line, prog, spread, vlog

DUMP_RUNS = 3


def bench_f_dump(table, tmpdir, quick):
    out = os.path.join(tmpdir, "dump.json")
    runs = []
    for i in range(DUMP_RUNS):
        p = subprocess.run([prog("dump"), "ring", out], capture_output=True, text=True,
                           timeout=RUN_TIMEOUT, cwd=tmpdir)
        if p.returncode != 0:
            raise RunError("dump ring exited with status %d: %s" % (p.returncode, p.stderr[-300:]))
        runs.append(parse_line(p.stdout, "dump_s", "dump ring"))
        if os.path.exists(out):
            os.unlink(out)
        vlog("dump ring: " + p.stdout.strip())
    r = runs[0]
    d = med([x["dump_s"] for x in runs])
    table.check("F(a): dump of a full ring (%d samples, %d stacks, %d frames)"
                % (r["samples"], r["stacks"], r["frames"]),
                "%.2f s median of %d (%s); JSON %.0f MB" % (
                    d, DUMP_RUNS, spread([x["dump_s"] for x in runs], "%.2f"), r["bytes"] / 1e6),
                "<= 1 s", d <= 1.0)
    peak = med([x["peak_extra_kb"] for x in runs])
    table.add("F(a): dump peak extra memory (VmHWM - VmRSS before)",
              "%.1f MiB median (%s MiB)" % (peak / 1024, spread([x["peak_extra_kb"] / 1024 for x in runs], "%.1f")),
              "report", "info")
    table.notes.append("F(a): %d-sample ring of %d threads over %d distinct addresses in the "
                       "executable, libc and libdw; split: raw dump write %.3f s, read %.3f s, "
                       "symbolize+JSON+write %.3f s, close %.3f s (medians)%s" % (
                           r["samples"], 64, r["pool"], med([x["raw_write_s"] for x in runs]),
                           med([x["raw_read_s"] for x in runs]),
                           med([x["write_s"] for x in runs]), med([x["close_s"] for x in runs]),
                           "" if r["hwm_reset"] else "; VmHWM could not be reset, peak is over VmHWM before"))


BENCHMARKS = [Benchmark("F-dump-ring", bench_f_dump, ("dump",))]
