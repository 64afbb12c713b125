"""The profile of test/progs/profile.c under the preload (three named
threads: "busy" on the CPU, "sleeper" and "piper" off it): valid Sentry JSON,
the right functions on the right threads, wall time balanced between on- and
off-CPU threads, the sampling rate, source lines and inlined frames, and
demangled C++ names (test/progs/profile_cxx.cc). The programs behave exactly
as without the preload."""


PROFILE_SECONDS = "2.0"
PROFILE_STDOUT = "profile: done\n"


IDENTICAL_CASES = (
    (["exitcode"], 7),
    (["exitcode", "return"], 3),
    (["profile", "1.0"], 0),
    (["profile_cxx"], 0),
)


def tests(rt):
    check, note = rt.check, rt.note

    def run_profile(tmp, env_extra=None, seconds=PROFILE_SECONDS):
        r = rt.run_under_preload([rt.prog("profile"), seconds], env_extra, cwd=tmp)
        check(r.rc == 0, "profile exited with %s" % r.describe())
        check(r.stdout == PROFILE_STDOUT, "profile stdout %r" % r.stdout)
        return r, rt.exit_profile(r)

    def test_valid(tmp):
        _, obj = run_profile(tmp)
        rt.check_valid(obj)
        check(obj.get("platform") == "native", "platform is %r" % obj.get("platform"))
        w = rt.wallprof_section(obj)
        check(w.get("snapshot") == 0, "exit profile has snapshot=%r" % w.get("snapshot"))
        check(obj.get("transaction", {}).get("active_thread_id") == w.get("pid"),
              "transaction.active_thread_id %r != pid %r"
              % (obj.get("transaction", {}).get("active_thread_id"), w.get("pid")))

    def test_functions_on_threads(tmp):
        _, obj = run_profile(tmp)
        names = rt.thread_names(obj)
        for want in ("busy", "sleeper", "piper"):
            check(want in names.values(), "no thread named %r in thread_metadata (have %s)"
                  % (want, sorted(set(names.values()))))
        by_tid = rt.samples_by_thread(obj)
        for tid, name in names.items():
            check(not (name.startswith("wallprof") and by_tid.get(tid)),
                  "profiler thread %r (%s) has %d samples"
                  % (name, tid, len(by_tid.get(tid, []))))
        for thread, fn in (("busy", "wpt_burn_cpu"), ("sleeper", "wpt_nap"),
                           ("piper", "wpt_wait_pipe")):
            samples = rt.thread_samples(obj, thread)
            check(len(samples) >= 50, "thread %s has only %d samples" % (thread, len(samples)))
            share = rt.share_with_function(obj, samples, fn)
            note("%s: %d samples, %.0f%% with %s" % (thread, len(samples), share * 100, fn))
            if share < 0.8:
                common = {}
                for s in samples:
                    key = " <- ".join(str(f) for f in rt.stack_functions(obj, s["stack_id"])[:4])
                    common[key] = common.get(key, 0) + 1
                top = max(common.items(), key=lambda kv: kv[1])
                raise rt.Failure("%s in only %.0f%% of %d %s samples; most common stack: %s (%d)"
                                 % (fn, share * 100, len(samples), thread, top[0], top[1]))

    def test_wall_balance(tmp):
        _, obj = run_profile(tmp)
        busy = rt.thread_samples(obj, "busy")
        sleeper = rt.thread_samples(obj, "sleeper")
        piper = rt.thread_samples(obj, "piper")
        nb, ns = len(busy), len(sleeper)
        note("busy %d, sleeper %d, piper %d samples" % (nb, ns, len(piper)))
        check(nb and ns, "busy has %d and sleeper %d samples" % (nb, ns))
        check(min(nb, ns) / max(nb, ns) >= 0.8,
              "busy (%d) and sleeper (%d) sample counts differ by more than 20%%" % (nb, ns))
        check(rt.on_cpu_share(busy) >= 0.85, "busy is on-CPU in only %.0f%% of samples"
              % (rt.on_cpu_share(busy) * 100))
        for name, samples in (("sleeper", sleeper), ("piper", piper)):
            check(samples, "%s has no samples" % name)
            off = 1 - rt.on_cpu_share(samples)
            check(off >= 0.85, "%s is off-CPU in only %.0f%% of samples" % (name, off * 100))

    def _check_rate(tmp, hz):
        env = {"WALLPROF_HZ": str(hz)} if hz != rt.DEFAULT_HZ else None
        _, obj = run_profile(tmp, env)
        check(rt.wallprof_section(obj).get("hz") == hz, "wallprof.hz is %r, want %d"
              % (rt.wallprof_section(obj).get("hz"), hz))
        rate = rt.sample_rate(rt.thread_samples(obj, "sleeper"))
        note("sleeper rate at %d Hz: %.1f" % (hz, rate))
        check(0.85 * hz <= rate <= 1.05 * hz,
              "sleeper sampled at %.1f/s, want %d Hz (%.0f..%.0f)"
              % (rate, hz, 0.85 * hz, 1.05 * hz))

    def test_rate(tmp):
        _check_rate(tmp, rt.DEFAULT_HZ)

    def test_rate_200hz(tmp):
        _check_rate(tmp, 200)

    def test_lines_and_inline(tmp):
        _, obj = run_profile(tmp)
        step_line = rt.mark_line("profile.c", "inline_step")
        call_line = rt.mark_line("profile.c", "inline_call")
        p = rt.profile_part(obj)
        frames = p["frames"]

        inl = [i for i, f in enumerate(frames) if f.get("function") == "wpt_inline_step"]
        check(inl, "no frame with function wpt_inline_step")
        seen = sorted({(f.get("filename"), f.get("lineno"), f.get("inlined")) for f in
                       (frames[i] for i in inl)}, key=str)
        good = [i for i in inl if frames[i].get("inlined") is True
                and frames[i].get("filename") == "profile.c"
                and frames[i].get("lineno") == step_line]
        check(good, "no wpt_inline_step frame with inlined=true, profile.c:%d; seen "
              "(filename, lineno, inlined): %s" % (step_line, seen[:5]))

        good = set(good)
        outer_seen = set()
        found = False
        for st in p["stacks"]:
            for k in range(len(st) - 1):
                if st[k] in good:
                    outer = frames[st[k + 1]]
                    outer_seen.add((outer.get("function"), outer.get("lineno")))
                    if (outer.get("function") == "wpt_burn_cpu"
                            and outer.get("lineno") == call_line):
                        found = True
        check(found, "the frame after the inlined wpt_inline_step is not wpt_burn_cpu at line "
              "%d; seen (function, lineno): %s" % (call_line, sorted(outer_seen, key=str)[:5]))

        burn = [f for f in frames if f.get("function") == "wpt_burn_cpu"]
        check(any((f.get("abs_path") or "").endswith("test/progs/profile.c") for f in burn),
              "no wpt_burn_cpu frame with abs_path .../test/progs/profile.c (seen %s)"
              % sorted({str(f.get("abs_path")) for f in burn}))
        check(all(f.get("in_app") is True for f in burn), "a wpt_burn_cpu frame is not in_app")
        libc = [f for f in frames if rt.is_libc_module(f.get("module"))]
        check(libc, "no frame from libc (modules: %s)"
              % sorted({str(f.get("module")) for f in frames})[:5])
        check(all(f.get("in_app") is False for f in libc), "a libc frame has in_app != false")

    def test_demangled(tmp):
        r = rt.run_under_preload([rt.prog("profile_cxx")], cwd=tmp)
        check(r.rc == 0, "profile_cxx exited with %s" % r.describe())
        obj = rt.exit_profile(r)
        fns = {f.get("function") for f in rt.profile_part(obj)["frames"]}
        check("wpt::Worker::spin(int)" in fns, "no frame wpt::Worker::spin(int); spin-like: %s"
              % sorted(str(f) for f in fns if f and "spin" in f))

    def test_identical_behaviour(tmp):
        for argv, want_rc in IDENTICAL_CASES:
            full = [rt.prog(argv[0])] + argv[1:]
            label = " ".join(argv)
            plain = rt.run_plain(full, tmp)
            check(plain.rc == want_rc, "%s without preload: rc %s, want %d"
                  % (label, plain.rc, want_rc))
            pre = rt.run_under_preload(full, cwd=tmp)
            check(pre.rc == plain.rc, "%s: rc %s under preload, %s without (%s)"
                  % (label, pre.rc, plain.rc, pre.describe()))
            check(pre.stdout == plain.stdout, "%s: stdout differs under preload: %r vs %r"
                  % (label, pre.stdout[-200:], plain.stdout[-200:]))
            check(pre.other_stderr() == plain.other_stderr(), "%s: stderr differs besides "
                  "wallprof lines: %r" % (label, pre.other_stderr()[:3]))
            check(len(pre.wallprof_lines()) == 1, "%s: %d wallprof stderr lines, want 1: %r"
                  % (label, len(pre.wallprof_lines()), pre.wallprof_lines()[:3]))
            check(pre.wrote_paths(), "%s: no 'wallprof: wrote' line" % label)
            rt.check_valid(rt.exit_profile(pre), "%s profile" % label)

    return [
        ("valid", test_valid),
        ("functions_on_threads", test_functions_on_threads),
        ("wall_balance", test_wall_balance),
        ("rate", test_rate),
        ("rate_200hz", test_rate_200hz),
        ("lines_and_inline", test_lines_and_inline),
        ("demangled", test_demangled),
        ("identical_behaviour", test_identical_behaviour),
    ]
