"""Every way a process ends (test/progs/exits.c): the exit status or
terminating signal (and core dump) is the one without the profiler, and the
promised profile is written: JSON for normal ends (return, exit from another
thread, _exit, _Exit, pthread_exit from main, exec), a raw dump that
build/wallprof (--library) turns into a profile for deaths by signal, also on
a Rust-sized 8 KiB alternate signal stack (test/progs/exits_altstack.c)."""

import json
import os
import re
import resource
import select
import signal
import struct
import subprocess
import time

EXIT_TIMEOUT = 15       # a process kept alive by the library is a hang


def tests(rt):
    check, note = rt.check, rt.note

    def fn_samples(obj, fn):
        return [s for s in rt.profile_part(obj).get("samples", [])
                if fn in rt.stack_functions(obj, s["stack_id"])]

    def no_partial_files(tmp):
        left = [n for n in os.listdir(tmp) if ".tmp." in n]
        check(not left, "partial/temporary profile files left behind: %s" % left)

    def run_pair(tmp, argv, want_rc, want_stdout=None):
        """Runs argv without and with the preload (bounded); both must end
        with `want_rc` and the same stdout. Returns the preload Run."""
        plain = rt.run_bounded(argv, tmp, preload=False, timeout=EXIT_TIMEOUT)
        check(plain.rc == want_rc, "without the preload %s ended with %s, expected %s "
              "(test program?)" % (" ".join(argv[1:]), plain.rc, want_rc))
        if want_stdout is not None:
            check(plain.stdout == want_stdout, "without the preload stdout %r, expected %r"
                  % (plain.stdout, want_stdout))
        r = rt.run_bounded(argv, tmp, timeout=EXIT_TIMEOUT)
        check(r.rc is not None, "under the preload %s did not end within %d s (it ends by "
              "itself in ~1 s without the preload); stdout %r, stderr %r"
              % (" ".join(argv[1:]), EXIT_TIMEOUT, r.stdout, r.stderr[-300:]))
        check(r.rc == plain.rc, "under the preload %s ended with %s, without with %s (%s)"
              % (" ".join(argv[1:]), r.rc, plain.rc, r.describe()))
        check(r.stdout == plain.stdout, "stdout differs: preload %r, plain %r"
              % (r.stdout, plain.stdout))
        check(r.other_stderr() == plain.other_stderr(), "stderr differs besides wallprof: "
              "lines: preload %s, plain %s" % (r.other_stderr()[:3], plain.other_stderr()[:3]))
        return r

    def pid_profile(tmp, r, work_fn, min_samples=20):
        path = os.path.join(tmp, "wallprof.%d.json" % r.pid)
        check(os.path.exists(path), "no profile wallprof.%d.json (files: %s; %s)"
              % (r.pid, sorted(os.listdir(tmp)), r.describe()))
        obj = rt.load_profile(path)
        rt.check_valid(obj)
        n = len(fn_samples(obj, work_fn))
        check(n >= min_samples, "the profile has %d samples with %s (want >= %d)"
              % (n, work_fn, min_samples))
        no_partial_files(tmp)
        return obj

    # ---- normal ends ----

    def normal_end(tmp, mode, rc, stdout):
        r = run_pair(tmp, [rt.prog("exits"), mode], rc, stdout)
        pid_profile(tmp, r, "wpt_exit_work")

    def test_return(tmp):
        normal_end(tmp, "return", 3, "main: return 3\n")

    def test_thread_exit(tmp):
        normal_end(tmp, "thread_exit", 4, "thread: exit(4)\n")

    def test__exit(tmp):
        normal_end(tmp, "_exit", 5, "main: _exit(5)\n")

    def test__Exit(tmp):
        normal_end(tmp, "_Exit", 6, "main: _Exit(6)\n")

    def test_pthread_exit(tmp):
        """main calls pthread_exit; the process must end when the last of
        the program's threads does (the sampler does not keep it alive)."""
        r = run_pair(tmp, [rt.prog("exits"), "pthread_exit"], 0, "main: pthread_exit\n")
        obj = pid_profile(tmp, r, "wpt_tail_work")
        tails = {s["thread_id"] for s in fn_samples(obj, "wpt_tail_work")}
        check(len(tails) == 2, "wpt_tail_work samples on %d threads, want 2" % len(tails))
        last = max(int(s["elapsed_since_start_ns"]) for s in fn_samples(obj, "wpt_tail_work"))
        first_exit = max(int(s["elapsed_since_start_ns"]) for s in fn_samples(obj, "wpt_exit_work"))
        check(last - first_exit >= 300_000_000, "the threads' work after main's pthread_exit "
              "is missing: last wpt_tail_work sample %.2f s after main's last sample"
              % ((last - first_exit) / 1e9))

    def test_exec(tmp):
        exe = rt.prog("exitcode")
        plain_out = rt.run_plain([exe], tmp).stdout
        r = run_pair(tmp, [rt.prog("exits"), "exec", exe], 7, "main: exec\n" + plain_out)
        pid_profile(tmp, r, "wpt_count_primes")
        parts = sorted(n for n in os.listdir(tmp)
                       if re.match(r"^wallprof\.%d\.exec\d+\.json$" % r.pid, n))
        note("pre-exec parts: %s" % parts)
        for n in parts:
            try:
                with open(os.path.join(tmp, n)) as f:
                    part = json.load(f)
            except ValueError as e:
                raise rt.Failure("%s is not valid JSON: %s" % (n, e))
            if rt.profile_part(part).get("samples"):
                rt.check_valid(part, n)
            if not fn_samples(part, "wpt_exit_work"):
                print("    note: %s has no wpt_exit_work sample" % n)

    # ---- deaths by signal: raw dump, converted by the converter ----

    def death_profile(tmp, r, sig, work_fn, min_samples):
        """The dying process's raw dump, converted in the converter's
        process before the death is seen: the profile, and one line."""
        path = os.path.join(tmp, "wallprof.%d.json" % r.pid)
        name = "SIG" + signal.Signals(sig).name[3:]
        lines = r.wallprof_lines()
        check(any(l.startswith("wallprof: %s: wrote %s" % (name, path)) for l in lines),
              "no line '%s: wrote %s': %s" % (name, path, lines[-3:]))
        check(not os.path.exists(os.path.join(tmp, "wallprof.%d.raw" % r.pid)),
              "the raw dump is left after its conversion")
        obj = rt.load_profile(path)
        rt.check_valid(obj, "the death's profile")
        n = len(fn_samples(obj, work_fn))
        check(n >= min_samples, "the profile has %d %s samples (want >= %d)"
              % (n, work_fn, min_samples))
        return obj

    def death(tmp, mode, sig):
        r = run_pair(tmp, [rt.prog("exits"), mode], -sig)
        death_profile(tmp, r, sig, "wpt_exit_work", 20)
        no_partial_files(tmp)

    def test_abort(tmp):
        death(tmp, "abort", signal.SIGABRT)

    def test_segv(tmp):
        death(tmp, "segv", signal.SIGSEGV)

    # ---- deaths on a small alternate signal stack (test/progs/exits_altstack.c) ----

    def altstack_death(tmp, mode, sig):
        """Both threads have an 8 KiB sigaltstack above a guard page, as Rust
        gives every thread; our fatal handler (SA_ONSTACK) runs on it, below
        the kernel's signal frame (3.3 KiB with AVX-512). If the fatal path
        needs more than what is left, the death is a SIGSEGV, with no dump."""
        r = run_pair(tmp, [rt.prog("exits_altstack"), mode], -sig)
        death_profile(tmp, r, sig, "wpt_altstack_work", 10)
        no_partial_files(tmp)

    def test_altstack_abort(tmp):
        altstack_death(tmp, "abort", signal.SIGABRT)

    def test_altstack_segv(tmp):
        altstack_death(tmp, "segv", signal.SIGSEGV)

    def test_altstack_thread_abort(tmp):
        altstack_death(tmp, "thread_abort", signal.SIGABRT)

    def test_altstack_thread_segv(tmp):
        altstack_death(tmp, "thread_segv", signal.SIGSEGV)

    def test_altstack_pending_abort(tmp):
        """SIGABRT and the sampler's signal delivered together (the one
        pending when the other comes): SIGABRT's handler must hold the
        sampling signal back, else that handler runs on top of it on the
        alternate stack and overflows it."""
        altstack_death(tmp, "pending_abort", signal.SIGABRT)

    ALTSTACK_BUDGET = 2048  # bytes our fatal handler may use, the kernel's frame aside

    def test_altstack_depth(tmp):
        """How deep the fatal path goes: the dying thread's alternate stack
        is 64 KiB of a shared file painted with 0xa5 (exits_altstack with
        PAINT_FILE), read back after the death. What lies below the kernel's
        signal frame (measured by the program) is our handler's."""
        paint = os.path.join(tmp, "altstack.paint")
        r = rt.run_bounded([rt.prog("exits_altstack"), "abort", paint], tmp,
                           timeout=EXIT_TIMEOUT)
        check(r.rc == -signal.SIGABRT, "exits_altstack abort PAINT_FILE ended with %s (%s)"
              % (r.rc, r.describe()))
        m = re.search(r"^frame (\d+)$", r.stdout, re.M)
        check(m, "exits_altstack printed no frame size: %r" % r.stdout)
        frame = int(m.group(1))
        with open(paint, "rb") as f:
            data = f.read()
        check(len(data) == 65536 and 0 < frame < 32768,
              "paint file of %d bytes, kernel frame %d" % (len(data), frame))
        low = len(data) - len(data.lstrip(b"\xa5"))
        used = len(data) - low - frame
        death_profile(tmp, r, signal.SIGABRT, "wpt_altstack_work", 1)
        note("fatal path: %d bytes of stack below the kernel's %d-byte signal frame"
             % (used, frame))
        check(used <= ALTSTACK_BUDGET, "the fatal handler used %d bytes of stack below the "
              "kernel's %d-byte signal frame (budget %d): an 8 KiB sigaltstack leaves "
              "%d" % (used, frame, ALTSTACK_BUDGET, 8192 - frame))

    def dynamic_flags(path):
        """DT_FLAGS and DT_FLAGS_1 of a 64-bit little-endian ELF file."""
        with open(path, "rb") as f:
            data = f.read()
        check(data[:6] == b"\x7fELF\x02\x01", "%s is not a 64-bit LE ELF file" % path)
        phoff, = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        flags = flags_1 = 0
        for i in range(phnum):
            p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", data, phoff + i * phentsize)
            if p_type != 2:  # PT_DYNAMIC
                continue
            for off in range(p_offset, p_offset + p_filesz, 16):
                tag, val = struct.unpack_from("<qQ", data, off)
                if tag == 30:  # DT_FLAGS
                    flags = val
                elif tag == 0x6ffffffb:  # DT_FLAGS_1
                    flags_1 = val
        return flags, flags_1

    def test_altstack_bind_now(tmp):
        """The library is linked with -z now: a libc function bound lazily
        at its first call from a signal handler would run the loader's
        resolver on the handler's stack, which saves the vector registers
        there (2.8 KiB with AVX-512; the fatal path took 11.1 KiB instead of
        8.3 that way before it was made small)."""
        flags, flags_1 = dynamic_flags(rt.LIB)
        check(flags & 0x8 or flags_1 & 0x1, "build/libwallprof.so binds lazily (DT_FLAGS %#x, "
              "DT_FLAGS_1 %#x): link it with -Wl,-z,now" % (flags, flags_1))

    def killed_run(tmp, preload):
        """exits sigterm: SIGTERM once it printed "ready"; returns a Run."""
        argv = [rt.prog("exits"), "sigterm"]
        env = rt.clean_env(preload=preload)
        proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            buf = b""
            deadline = time.monotonic() + EXIT_TIMEOUT
            while b"\n" not in buf and time.monotonic() < deadline:
                ready, _, _ = select.select([proc.stdout], [], [], 0.1)
                if ready:
                    chunk = os.read(proc.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    buf += chunk
            check(buf == b"ready\n", "exits sigterm printed %r, not \"ready\"" % buf)
            os.kill(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise rt.Failure("exits sigterm did not end within %d s of SIGTERM (preload=%s)"
                             % (EXIT_TIMEOUT, preload))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        return rt.Run(argv, tmp, proc.pid, proc.returncode, (buf + out).decode(errors="replace"),
                      err.decode(errors="replace"))

    def test_sigterm(tmp):
        plain = killed_run(tmp, False)
        check(plain.rc == -signal.SIGTERM, "without the preload ended with %s" % plain.rc)
        r = killed_run(tmp, True)
        check(r.rc == -signal.SIGTERM, "under the preload ended with %s, without with %s (%s)"
              % (r.rc, plain.rc, r.describe()))
        check(r.stdout == plain.stdout, "stdout %r, without the preload %r"
              % (r.stdout, plain.stdout))
        death_profile(tmp, r, signal.SIGTERM, "wpt_exit_work", 20)
        no_partial_files(tmp)

    # ---- core dumps ----

    def raw_status(tmp, argv, preload):
        """Runs argv with RLIMIT_CORE raised to its hard limit (unlimited unless
        capped); returns the raw wait status."""
        env = rt.clean_env(preload=preload)

        def unlimited_core():
            hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
            resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))

        with open(os.path.join(tmp, "out"), "wb") as out, \
                open(os.path.join(tmp, "err"), "wb") as err:
            proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, preexec_fn=unlimited_core)
        deadline = time.monotonic() + EXIT_TIMEOUT
        while True:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                proc.returncode = -1  # reaped here; keeps Popen from waiting again
                return status
            if time.monotonic() > deadline:
                proc.kill()
                os.waitpid(proc.pid, 0)
                proc.returncode = -1
                raise rt.Failure("%s did not end within %d s (preload=%s)"
                                 % (" ".join(argv[1:]), EXIT_TIMEOUT, preload))
            time.sleep(0.02)  # polling an observable condition

    def core_pattern():
        try:
            with open("/proc/sys/kernel/core_pattern") as f:
                return f.read().strip()
        except OSError:
            return "?"

    def test_core_dump(tmp):
        """With cores allowed, a crash dumps core (or not) exactly as it
        does without the preload, and by the same signal."""
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        if hard != resource.RLIM_INFINITY:
            print("    note: RLIMIT_CORE hard limit is %s; comparing what it allows" % hard)
        found = []
        for mode, sig in (("abort", signal.SIGABRT), ("segv", signal.SIGSEGV)):
            results = {}
            for preload in (False, True):
                d = os.path.join(tmp, "%s-%s" % (mode, "preload" if preload else "plain"))
                os.mkdir(d)
                st = raw_status(d, [rt.prog("exits"), mode], preload)
                check(os.WIFSIGNALED(st), "%s (preload=%s) was not killed by a signal: status "
                      "%#x" % (mode, preload, st))
                results[preload] = (os.WTERMSIG(st), os.WCOREDUMP(st))
                found.append("%s %s: signal %d, core %s, files %s" % (
                    mode, "preload" if preload else "plain", os.WTERMSIG(st), os.WCOREDUMP(st),
                    sorted(n for n in os.listdir(d) if n.startswith("core"))))
            check(results[False][0] == sig, "%s without the preload died of signal %d"
                  % (mode, results[False][0]))
            check(results[True] == results[False], "%s: under the preload (signal %d, core "
                  "dumped %s), without (signal %d, core dumped %s); core_pattern %r"
                  % (mode, results[True][0], results[True][1], results[False][0],
                     results[False][1], core_pattern()))
        note("core_pattern %r; %s" % (core_pattern(), "; ".join(found)))

    return [
        ("exit_return", test_return),
        ("exit_from_thread", test_thread_exit),
        ("exit__exit", test__exit),
        ("exit__Exit", test__Exit),
        ("exit_pthread_exit_main", test_pthread_exit),
        ("exit_exec", test_exec),
        ("exit_abort_raw", test_abort),
        ("exit_segv_raw", test_segv),
        ("exit_sigterm_raw", test_sigterm),
        ("exit_altstack_abort", test_altstack_abort),
        ("exit_altstack_segv", test_altstack_segv),
        ("exit_altstack_thread_abort", test_altstack_thread_abort),
        ("exit_altstack_thread_segv", test_altstack_thread_segv),
        ("exit_altstack_pending_abort", test_altstack_pending_abort),
        ("exit_altstack_depth", test_altstack_depth),
        ("exit_altstack_bind_now", test_altstack_bind_now),
        ("exit_core_dump", test_core_dump),
    ]
