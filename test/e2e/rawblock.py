"""Threads blocked in system calls that no wrapper sees (test/progs/rawblock.c:
raw ppoll and FUTEX_WAIT with a timeout, issued with the syscall
instruction): a signal would end them early, so the sampler never signals
them and walks their stacks from the stack pointer and PC that
/proc/self/task/T/syscall reports (preload/proc_unwind.c), with the CFI
alone. The frames below the blocking call must be the program's callers,
down to the thread's start; a frame whose CFA needs a register /proc does
not report ends the walk, marked partial, with no guessed caller.

- rawblk_chain: the program as built by the Makefile (.eh_frame).
- rawblk_debug_frame: built without unwind tables, -g: only .debug_frame
  describes the program's functions (Go's code is described so too).
- rawblk_debug_frame_zlib: the same with the debug sections compressed
  (SHF_COMPRESSED, as Go's linker writes them).
- rawblk_many: 50 such threads re-blocking every 2 ms at 1000 Hz, each
  block at a new stack pointer (every one walked afresh): no crash, no
  hang, the same frames; the sampler's CPU time is noted.
- rawblk_dlopen_churn: 8 such threads while the main thread dlopens and
  dlcloses a plugin in a loop (the module list, and with it what the walks
  use, changes at every tick): the same frames, and memory that stops
  growing (what the walks keep is dropped when the modules change).
"""

import os
import re
import subprocess

SRC = "rawblock.c"
FLAGS = ["-O2", "-pthread", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror",
         "-std=gnu11"]
HZ = "1000"
TIMEOUT = 60
MIDDLE = ["wpt_rb_middle", "wpt_rb_outer"]


def tests(rt):
    check, note = rt.check, rt.note
    src = os.path.join(rt.PROG_SRC, SRC)

    def tool(argv, what):
        return rt.tool(argv, what, TIMEOUT)

    def build(tmp, name, flags):
        exe = os.path.join(tmp, name)
        tool([os.environ.get("CC", "cc")] + FLAGS + flags + ["-o", exe, src, "-lm"],
             "building %s" % name)
        return exe

    def eh_frame_covers(exe, fn):
        """Whether an .eh_frame FDE covers function `fn` of `exe`."""
        addr = None
        for line in tool(["nm", exe], "nm").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2] == fn:
                addr = int(parts[0], 16)
        check(addr is not None, "test build problem: no symbol %s in %s" % (fn, exe))
        out = tool(["readelf", "--debug-dump=frames", exe], "readelf --debug-dump=frames")
        eh = out.split("Contents of the .debug_frame section")[0]
        for a, b in re.findall(r"FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", eh):
            if int(a, 16) <= addr < int(b, 16):
                return True
        return False

    def chain_ok(fns, leaf):
        """leaf <- wpt_rb_middle <- wpt_rb_outer <- rb_pad (1 to 8) <-
        rb_thread_main <- ... start_thread, nothing in between."""
        if len(fns) < 6 or fns[0] != leaf or fns[1:3] != MIDDLE:
            return False
        k = 3
        while k < len(fns) and fns[k] == "rb_pad":
            k += 1
        return 3 < k < len(fns) and fns[k] == "rb_thread_main" and "start_thread" in fns[k + 1:]

    def run(tmp, exe, nthreads, seconds, wait_ms, env=None, extra=()):
        env_extra = {"WALLPROF_HZ": HZ}
        env_extra.update(env or {})
        r = rt.run_bounded([exe, str(nthreads), str(seconds), str(wait_ms)] + list(extra), tmp,
                           env_extra, timeout=TIMEOUT)
        check(r.rc is not None, "rawblock did not finish within %d s (stdout %r)"
              % (TIMEOUT, r.stdout))
        check(r.rc == 0 and r.stdout == "rawblock: %d threads\n" % nthreads,
              "rawblock: stdout %r, %s" % (r.stdout, r.describe()))
        m = re.search(r"rawblock: (\d+) of (\d+) calls interrupted", r.stderr)
        check(m, "no interrupted count on stderr: %r" % r.stderr[-300:])
        early, calls = int(m.group(1)), int(m.group(2))
        # A thread seen running between two calls may get a signal that
        # lands as it blocks again: rare. Signalled while blocked, they all
        # would be.
        check(calls >= nthreads and early <= 0.05 * calls,
              "%d of %d raw calls ended early (EINTR) under the preload" % (early, calls))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        return r, obj, (early, calls)

    def check_threads(obj, nthreads, what):
        names = rt.thread_names(obj)
        by = rt.samples_by_thread(obj)
        total = walked = blocked = 0
        bad = None
        for tid, name in names.items():
            m = re.match(r"rawblk(\d+)$", name or "")
            if not m:
                continue
            k = int(m.group(1))
            leaf, call = ("wpt_rb_futex", "futex") if k % 2 else ("wpt_rb_ppoll", "ppoll")
            ss = by.get(tid, [])
            total += len(ss)
            for s in ss:
                if s.get("on_cpu") is not False or s.get("syscall") != call:
                    continue
                blocked += 1
                fns = rt.stack_functions(obj, s["stack_id"])
                if chain_ok(fns, leaf) and not s.get("partial"):
                    walked += 1
                elif bad is None:
                    bad = (name, s.get("partial"), fns[:12])
        seen = sum(1 for n in names.values() if re.match(r"rawblk\d+$", n or ""))
        check(seen == nthreads, "%s: %d rawblk threads in the profile, want %d"
              % (what, seen, nthreads))
        check(total >= 500, "%s: the rawblk threads have only %d samples" % (what, total))
        check(blocked >= 0.8 * total, "%s: only %d of %d rawblk samples are off-CPU in their "
              "raw ppoll/futex" % (what, blocked, total))
        note("%s: %d rawblk samples, %d blocked, %d with the whole chain%s"
             % (what, total, blocked, walked, "; e.g. %s" % (bad,) if bad else ""))
        check(walked >= 0.95 * blocked,
              "%s: only %d of %d blocked samples have <leaf> <- %s <- rb_pad.. <- "
              "rb_thread_main <- .. start_thread, not partial; e.g. %s"
              % (what, walked, blocked, " <- ".join(MIDDLE), bad))

    def check_fp(obj, what):
        """The frame-pointer leaf: rbp unknown, the walk stops at once."""
        ss = rt.thread_samples(obj, "rawfp")
        blocked = [s for s in ss if s.get("on_cpu") is False and s.get("syscall") == "ppoll"]
        good = [s for s in blocked if s.get("partial") is True and
                rt.stack_functions(obj, s["stack_id"]) == ["wpt_rb_fp_leaf"]]
        check(len(blocked) >= 0.8 * len(ss) and len(ss) >= 100,
              "%s: rawfp has %d samples, %d of them off-CPU in ppoll" % (what, len(ss),
                                                                        len(blocked)))
        bad = next((s for s in blocked if s not in good), None)
        check(len(good) >= 0.95 * len(blocked),
              "%s: only %d of %d rawfp samples are the leaf alone, marked partial (its CFA "
              "needs rbp, which /proc does not report); e.g. partial=%r %s"
              % (what, len(good), len(blocked), bad and bad.get("partial"),
                 bad and rt.stack_functions(obj, bad["stack_id"])[:6]))

    def chain_test(tmp, exe, what):
        _, obj, (early, calls) = run(tmp, exe, 4, 2, 50)
        w = rt.wallprof_section(obj)
        note("%s: %d of %d calls interrupted, from_proc %s" % (what, early, calls,
                                                               w.get("from_proc")))
        check((w.get("from_proc") or 0) >= 50, "%s: from_proc is %r (every block at a new "
              "stack pointer is walked)" % (what, w.get("from_proc")))
        check_threads(obj, 4, what)
        check_fp(obj, what)

    def test_chain(tmp):
        chain_test(tmp, rt.prog("rawblock"), "eh_frame")

    def debug_frame_build(tmp, name, extra):
        exe = build(tmp, name, ["-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"]
                    + extra)
        for fn in ("wpt_rb_ppoll", "wpt_rb_middle", "rb_thread_main"):
            check(not eh_frame_covers(exe, fn),
                  "test build problem: .eh_frame still describes %s" % fn)
        sections = tool(["readelf", "-SW", exe], "readelf -S")
        m = re.search(r"\.debug_frame\s+PROGBITS\s+\S+\s+\S+\s+\S+\s+\S+\s*(\S*)", sections)
        check(m, "test build problem: no .debug_frame in %s" % name)
        return exe, m.group(1)

    def test_debug_frame(tmp):
        exe, _ = debug_frame_build(tmp, "rawblock_noeh", [])
        chain_test(tmp, exe, "debug_frame")

    def test_debug_frame_zlib(tmp):
        exe, flags = debug_frame_build(tmp, "rawblock_noeh_gz", ["-gz=zlib"])
        check("C" in flags, "test build problem: .debug_frame not compressed (flags %r)"
              % flags)
        chain_test(tmp, exe, "debug_frame, zlib")

    def test_many(tmp):
        r, obj, (early, calls) = run(tmp, rt.prog("rawblock"), 50, 3, 2,
                                     {"WPT_SAMPLER_CPU": "1"})
        w = rt.wallprof_section(obj)
        m = re.search(r"sampler_cpu_s ([0-9.]+)", r.stderr)
        note("50 threads, 3 s at %s Hz: %d calls (%d interrupted), from_proc %s, ticks %s "
             "(late %s), sampler CPU %s s"
             % (HZ, calls, early, w.get("from_proc"), w.get("ticks"), w.get("ticks_late"),
                m.group(1) if m else "?"))
        check((w.get("from_proc") or 0) >= 1000, "from_proc is %r" % w.get("from_proc"))
        check_threads(obj, 50, "50 threads")

    def test_dlopen_churn(tmp):
        plugin = os.path.join(rt.PROGS, "libwpt_plugin.so")
        check(os.path.exists(plugin), "%s is not built" % plugin)
        r, obj, (early, calls) = run(tmp, rt.prog("rawblock"), 8, 6, 3,
                                     {"WALLPROF_RING_MB": "1"}, [plugin])
        m = re.search(r"rawblock: (\d+) dlopens, rss_kb (-?\d+) then (-?\d+)", r.stderr)
        check(m, "no dlopen count on stderr: %r" % r.stderr[-300:])
        n, third, end = int(m.group(1)), int(m.group(2)), int(m.group(3))
        w = rt.wallprof_section(obj)
        note("%d dlopens; VmRSS %d KiB a third of the way, %d KiB at the end; from_proc %s"
             % (n, third, end, w.get("from_proc")))
        check(n >= 1000, "only %d dlopen/dlclose cycles" % n)
        # The 1 MiB ring wraps within the first third.
        check(0 < third and end <= third + 2048, "VmRSS grew from %d KiB (a third of the "
              "way) to %d KiB at the end" % (third, end))
        check_threads(obj, 8, "dlopen churn")

    return [
        ("rawblk_chain", test_chain),
        ("rawblk_debug_frame", test_debug_frame),
        ("rawblk_debug_frame_zlib", test_debug_frame_zlib),
        ("rawblk_many", test_many),
        ("rawblk_dlopen_churn", test_dlopen_churn),
    ]
