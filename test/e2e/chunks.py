"""Periodic chunks (WALLPROF_CHUNK_SECONDS, test/progs/chunks.c): every
period the samples since the last chunk become a profile of their own,
"<name>.chunk<k>.json", converted in the background; the exit writes the
last one. Chunks follow each other without overlap or gap, together hold
what the exit profile holds, and a process killed with SIGKILL still
leaves every chunk up to the last period."""

import datetime
import glob
import os
import re
import signal
import subprocess
import time


def tests(rt):
    check = rt.check

    def abs_times(obj):
        """Each sample's CLOCK_REALTIME time in seconds, sorted."""
        t0 = datetime.datetime.strptime(obj["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        return sorted(t0 + int(s["elapsed_since_start_ns"]) / 1e9
                      for s in rt.profile_part(obj)["samples"])

    def chunk_files(tmp, pid):
        found = glob.glob(os.path.join(tmp, "wallprof.%d.chunk*.json" % pid))
        return sorted(found, key=lambda p: int(re.search(r"chunk(\d+)\.json$", p).group(1)))

    def check_chunks(paths, period, want_fns):
        """Valid profiles, each within one period, in order, no overlap."""
        prev_last = None
        total = 0
        for k, path in enumerate(paths, 1):
            check(path.endswith(".chunk%d.json" % k), "chunk names not 1..n: %s"
                  % [os.path.basename(p) for p in paths])
            obj = rt.load_profile(path)
            rt.check_valid(obj, os.path.basename(path))
            times = abs_times(obj)
            check(times[-1] - times[0] <= period + 0.1, "%s spans %.2f s, the period is %d s"
                  % (os.path.basename(path), times[-1] - times[0], period))
            if prev_last is not None:
                check(times[0] > prev_last, "%s begins at or before the last sample of the "
                      "chunk before it" % os.path.basename(path))
                check(times[0] - prev_last < 0.2, "%s begins %.3f s after the chunk before "
                      "it ended: samples missing" % (os.path.basename(path),
                                                    times[0] - prev_last))
            prev_last = times[-1]
            total += len(times)
            for fn in want_fns:
                s = rt.profile_part(obj)["samples"]
                check(rt.share_with_function(obj, s, fn) > 0.2, "%s: %s in %.0f %% of the "
                      "samples" % (os.path.basename(path), fn,
                                   100 * rt.share_with_function(obj, s, fn)))
        return total

    def test_files(tmp):
        """3.5 s at 1-second chunks: chunks 1..4 (the last, half a second,
        written at exit), together the exit profile's samples."""
        plain = rt.run_bounded([rt.prog("chunks"), "3.5"], tmp, preload=False)
        r = rt.run_bounded([rt.prog("chunks"), "3.5"], tmp,
                           env_extra={"WALLPROF_CHUNK_SECONDS": "1"})
        check(r.rc == 0 and r.stdout == plain.stdout, "under the preload: %s" % r.describe())
        check(not r.other_stderr(), "stderr besides our lines: %r" % r.other_stderr())
        paths = chunk_files(tmp, r.pid)
        check(len(paths) == 4, "chunks: %s" % [os.path.basename(p) for p in paths])
        total = check_chunks(paths, 1, ["spin_work", "nap_work"])
        exit_obj = rt.exit_profile(r)
        n = len(rt.profile_part(exit_obj)["samples"])
        check(abs(total - n) <= max(2, n // 100), "the chunks hold %d samples, the exit "
              "profile %d" % (total, n))
        check(not glob.glob(os.path.join(tmp, "*.raw")), "raw dumps left: %s"
              % os.listdir(tmp))

    def test_sigkill(tmp):
        """SIGKILL after chunk 3 appeared: chunks 1..3 are there and valid
        (the converter is not the program's: it goes on)."""
        env = rt.clean_env({"WALLPROF_CHUNK_SECONDS": "1"})
        proc = subprocess.Popen([rt.prog("chunks"), "0"], cwd=tmp, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            third = os.path.join(tmp, "wallprof.%d.chunk3.json" % proc.pid)
            check(rt.poll_for(third, timeout=15, proc=proc), "chunk 3 did not appear")
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
        finally:
            rt.kill_group(proc)
        check(proc.returncode == -signal.SIGKILL, "rc %r" % proc.returncode)
        paths = chunk_files(tmp, proc.pid)
        check(len(paths) >= 3, "chunks after SIGKILL: %s" % os.listdir(tmp))
        check_chunks(paths[:3], 1, ["spin_work"])
        check(not os.path.exists(os.path.join(tmp, "wallprof.%d.json" % proc.pid)),
              "an exit profile after SIGKILL?")

    def test_bad_value(tmp):
        """A period past the window is cut to it, with one line; a value that
        is not a number leaves chunks off, with one line."""
        r = rt.run_bounded([rt.prog("chunks"), "1.2"], tmp,
                           env_extra={"WALLPROF_CHUNK_SECONDS": "5",
                                      "WALLPROF_RING_SECONDS": "1"})
        check(r.rc == 0, r.describe())
        lines = [l for l in r.wallprof_lines() if "WALLPROF_CHUNK_SECONDS" in l]
        check(len(lines) == 1 and "using 1" in lines[0], "lines: %s" % r.wallprof_lines())
        check(len(chunk_files(tmp, r.pid)) >= 1, "no chunk with the period cut to 1 s")
        r = rt.run_bounded([rt.prog("chunks"), "1.2"], tmp,
                           env_extra={"WALLPROF_CHUNK_SECONDS": "ten"})
        check(r.rc == 0, r.describe())
        lines = [l for l in r.wallprof_lines() if "WALLPROF_CHUNK_SECONDS" in l]
        check(len(lines) == 1, "lines: %s" % r.wallprof_lines())
        check(not chunk_files(tmp, r.pid), "chunks with WALLPROF_CHUNK_SECONDS=ten")

    return [
        ("chunks_files", test_files),
        ("chunks_sigkill", test_sigkill),
        ("chunks_bad_value", test_bad_value),
    ]
