"""End-to-end tests of `wallprof record`, the launcher: it runs the program
itself (exec: same pid, exit status, stdout and signals as a plain run),
puts the library first in LD_PRELOAD while keeping the caller's entries,
maps its options to WALLPROF_* variables, and says so, then still runs the
program, when the loader cannot preload into it (static, setuid, setgid).
"""

import os
import re
import shutil
import signal
import stat

LAUNCHER_REL = os.path.join("build", "wallprof")
NOBODY = 65534  # uid/gid of nobody/nogroup on Debian


def tests(rt):
    launcher = os.path.join(rt.ROOT, LAUNCHER_REL)
    plugin = os.path.join(rt.PROGS, "libwpt_plugin.so")

    def wallprof(args, tmp, env_extra=None, **kw):
        """Runs `build/wallprof record ARGS` with no LD_PRELOAD and no WALLPROF_*
        variables of our own (the launcher must add them)."""
        rt.check(os.access(launcher, os.X_OK), "%s is missing or not executable" % LAUNCHER_REL)
        return rt.run_prog([launcher, "record"] + list(args), tmp, env_extra, preload=False, **kw)

    def launcher_lines(run):
        return [l for l in run.stderr.splitlines() if l.startswith("wallprof: ")]

    def same_as_plain(label, plain, run):
        rt.check(run.rc == plain.rc, "%s: exit status %s through the launcher, %s plain (%s)"
                 % (label, run.rc, plain.rc, run.describe()))
        rt.check(run.stdout == plain.stdout, "%s: stdout differs: %r vs plain %r"
                 % (label, run.stdout[-200:], plain.stdout[-200:]))
        rt.check(run.other_stderr() == plain.other_stderr(),
                 "%s: stderr besides wallprof lines differs: %r vs %r"
                 % (label, run.other_stderr()[:3], plain.other_stderr()[:3]))

    def no_profiles(tmp, label):
        left = sorted(f for f in os.listdir(tmp) if f.startswith("wallprof.") and f.endswith(".json"))
        rt.check(not left, "%s: a profile was written although the program is not profiled: %s"
                 % (label, left))

    # -- the plain path ------------------------------------------------------

    def test_same_as_plain(tmp):
        for args in ([], ["return"]):
            argv = [rt.prog("exitcode")] + args
            label = " ".join(["exitcode"] + args)
            plain = rt.run_plain(argv, tmp)
            for form in (["--"], []):  # with and without "--"
                run = wallprof(form + argv, tmp)
                same_as_plain("wallprof %s" % " ".join(form + [label]), plain, run)
                # exec: the program has the launcher's pid, so its profile is wallprof.<pid>.json.
                path = os.path.join(tmp, "wallprof.%d.json" % run.pid)
                rt.check(os.path.exists(path), "%s: no %s (the program does not have the "
                         "launcher's pid, or no profile: %s)"
                         % (label, os.path.basename(path), run.describe()))
                rt.check(run.profile_path() == path, "%s: stderr names %r, want %r"
                         % (label, run.profile_path(), path))
                rt.check_valid(rt.load_profile(path), "%s profile" % label)
                os.unlink(path)

    def test_signals_and_status(tmp):
        # Death by a signal is the program's own (no wrapper process in between).
        argv = ["sh", "-c", "kill -TERM $$; sleep 5"]
        plain = rt.run_plain(argv, tmp)
        run = wallprof(["-q", "--"] + argv, tmp)
        rt.check(plain.rc == -signal.SIGTERM, "plain sh -c 'kill -TERM $$': rc %s" % plain.rc)
        rt.check(run.rc == plain.rc, "through the launcher rc %s, plain %s" % (run.rc, plain.rc))
        # Dispositions: Python ignores SIGPIPE and SIGXFSZ; the program must
        # not inherit that. Same SigIgn mask as a plain run, also when the
        # caller itself ignores SIGPIPE.
        for pre in ("", "trap '' PIPE; "):
            plain = rt.run_plain(["sh", "-c", pre + "exec grep ^SigIgn: /proc/self/status"], tmp)
            run = rt.run_prog(["sh", "-c", pre + 'exec "$0" record -q -- grep ^SigIgn: /proc/self/status',
                               launcher], tmp, None, preload=False)
            rt.check(plain.rc == 0 and plain.stdout.startswith("SigIgn:"),
                     "plain grep SigIgn: %s" % plain.describe())
            rt.check(run.stdout == plain.stdout, "%signored signals differ through the launcher: "
                     "%r, plain %r" % (pre and "caller ignores SIGPIPE: ", run.stdout.strip(),
                                       plain.stdout.strip()))

    # -- LD_PRELOAD and the environment --------------------------------------

    def test_keeps_ld_preload(tmp):
        rt.check(os.path.exists(plugin), "build/progs/libwpt_plugin.so not built")
        show = ["sh", "-c", 'printf "%s\\n" "$LD_PRELOAD"; cat /proc/$$/maps']
        cases = (
            (plugin, [rt.LIB, plugin]),
            (" %s  %s: " % (plugin, plugin), [rt.LIB, plugin, plugin]),   # space separated
            ("%s:%s" % (rt.LIB, plugin), [rt.LIB, plugin]),               # ours already in it
        )
        for existing, want in cases:
            run = wallprof(["-q", "--"] + show, tmp, {"LD_PRELOAD": existing})
            rt.check(run.rc == 0, "LD_PRELOAD=%r: %s" % (existing, run.describe()))
            lines = run.stdout.splitlines()
            got = re.split(r"[:\s]+", lines[0].strip()) if lines else []
            rt.check(got == want, "LD_PRELOAD=%r: the program sees %r, want %r"
                     % (existing, lines[0] if lines else None, ":".join(want)))
            maps = run.stdout
            for lib in (rt.LIB, plugin):
                rt.check(lib in maps, "LD_PRELOAD=%r: %s is not mapped in the program"
                         % (existing, os.path.basename(lib)))
        run = wallprof(["--"] + show, tmp)
        lines = run.stdout.splitlines()
        rt.check(lines and lines[0] == rt.LIB, "no LD_PRELOAD before: the program sees %r, "
                 "want %r" % (lines[0] if lines else None, rt.LIB))

    def test_options_env(tmp):
        env_prog = shutil.which("env") or "/usr/bin/env"
        out_rel = os.path.join("out", "p-%p.json")
        cases = (
            (["--hz", "200"], {"WALLPROF_HZ": "200"}),
            (["--hz=300"], {"WALLPROF_HZ": "300"}),
            (["-o", out_rel], {"WALLPROF_OUTPUT": os.path.join(tmp, out_rel)}),
            (["--output=/x/%p.json"], {"WALLPROF_OUTPUT": "/x/%p.json"}),
            (["--ring-seconds", "5"], {"WALLPROF_RING_SECONDS": "5"}),
            (["--max-depth", "64"], {"WALLPROF_MAX_DEPTH": "64"}),
            (["--signal", "SIGRTMIN+4"], {"WALLPROF_SIGNAL": "SIGRTMIN+4"}),
            (["--snapshot-signal", "off"], {"WALLPROF_SNAPSHOT_SIGNAL": "off"}),
            (["--no-follow-children"], {"WALLPROF_FOLLOW_CHILDREN": "0"}),
            (["--debug-cache", "dc"], {"WALLPROF_DEBUG_CACHE": os.path.join(tmp, "dc")}),
            (["--no-debug-cache"], {"WALLPROF_DEBUG_CACHE": "off"}),
            (["-q"], {"WALLPROF_LOG": "quiet"}),
            (["--quiet"], {"WALLPROF_LOG": "quiet"}),
            (["--debug"], {"WALLPROF_LOG": "debug"}),
        )
        for opts, want in cases:
            # env runs with the library too: keep its own output quiet where
            # the case does not set the log level.
            run = wallprof(opts + ["--", env_prog], tmp,
                           None if "WALLPROF_LOG" in want else {"WALLPROF_LOG": "quiet"})
            rt.check(run.rc == 0, "%s: %s" % (" ".join(opts), run.describe()))
            got = dict(l.split("=", 1) for l in run.stdout.splitlines()
                       if l.startswith("WALLPROF_") and "=" in l)
            leaked = [l for l in run.stdout.splitlines() if l.startswith("_WALLPROF")]
            rt.check(not leaked, "the launcher's own variable reaches the program: %s" % leaked)
            for var, value in want.items():
                rt.check(got.get(var) == value, "wallprof %s: the program sees %s=%r, want %r"
                         % (" ".join(opts), var, got.get(var), value))
            for f in os.listdir(tmp):
                if f.startswith("wallprof."):
                    os.unlink(os.path.join(tmp, f))
        # An option overrides the caller's variable; other variables pass through.
        run = wallprof(["--hz", "200", "--", env_prog], tmp,
                       {"WALLPROF_HZ": "50", "WALLPROF_RING_SECONDS": "7", "WALLPROF_LOG": "quiet"})
        got = dict(l.split("=", 1) for l in run.stdout.splitlines() if "=" in l)
        rt.check(got.get("WALLPROF_HZ") == "200" and got.get("WALLPROF_RING_SECONDS") == "7",
                 "caller's WALLPROF_HZ=50 RING_SECONDS=7 with --hz 200: the program sees HZ=%r "
                 "RING_SECONDS=%r" % (got.get("WALLPROF_HZ"), got.get("WALLPROF_RING_SECONDS")))
        # Options reach the library: the profile says so.
        os.mkdir(os.path.join(tmp, "out"))
        run = wallprof(["--hz", "200", "--ring-seconds", "5", "--max-depth", "64", "-o", out_rel,
                        rt.prog("exitcode"), "return"], tmp)
        rt.check(run.rc == 3, "exitcode return: %s" % run.describe())
        path = os.path.join(tmp, "out", "p-%d.json" % run.pid)
        rt.check(os.path.exists(path), "-o %s: %s not written (%s)" % (out_rel, path, run.describe()))
        w = rt.wallprof_section(rt.load_profile(path))
        for key, value in (("hz", 200), ("ring_seconds", 5), ("max_depth", 64)):
            rt.check(w.get(key) == value, "wallprof.%s is %r, want %r" % (key, w.get(key), value))
        # Nothing else in the environment changes (Python, under the C locale,
        # would add LC_CTYPE=C.UTF-8; the shell prologue may add PWD).
        base = ["env", "-i", "PATH=" + os.environ.get("PATH", "/usr/bin:/bin"), "WPT_X=1"]
        plain = rt.run_plain(base + [env_prog], tmp)
        run = rt.run_prog(base + [launcher, "record", "-q", env_prog], tmp, None, preload=False)
        ignore = ("LD_PRELOAD=", "WALLPROF_", "PWD=")
        p_env = sorted(l for l in plain.stdout.splitlines() if not l.startswith(ignore))
        l_env = sorted(l for l in run.stdout.splitlines() if not l.startswith(ignore))
        rt.check(run.rc == 0 and l_env == p_env, "environment through the launcher %s, plain %s"
                 % (l_env, p_env))
        # Arguments after the program are the program's, even if they look like options.
        run = wallprof(["-q", "sh", "-c", 'printf "%s\\n" "$@"', "sh", "--hz", "-q"], tmp)
        rt.check(run.stdout == "--hz\n-q\n", "program arguments that look like options: "
                 "stdout %r" % run.stdout)

    def test_usage_errors(tmp):
        for args, what in ((["--hz"], "needs a value"), (["--hz", "fast", "true"], "whole number"),
                           (["--bogus", "true"], "unknown option"), ([], "no program"),
                           (["--hz", "200"], "no program")):
            run = wallprof(args, tmp)
            rt.check(run.rc == 125, "wallprof %s: rc %s, want 125" % (" ".join(args), run.rc))
            rt.check(any(what in l for l in launcher_lines(run)),
                     "wallprof %s: no 'wallprof: ...%s...' line: %r"
                     % (" ".join(args), what, run.stderr.strip()[-200:]))
        run = wallprof(["--help"], tmp)
        rt.check(run.rc == 0, "--help: rc %s" % run.rc)
        for opt in ("--hz", "--output", "--ring-seconds", "--max-depth", "--signal",
                    "--snapshot-signal", "--no-follow-children", "--quiet", "--debug", "--lib",
                    "--version"):
            rt.check(opt in run.stdout, "--help does not mention %s" % opt)
        run = wallprof(["--version"], tmp)
        with open(os.path.join(rt.ROOT, "output", "output.h")) as f:
            m = re.search(r'#define\s+WP_VERSION\s+"([^"]+)"', f.read())
        rt.check(m, "no WP_VERSION in output/output.h")
        rt.check(run.rc == 0 and run.stdout == "wallprof %s\n" % m.group(1),
                 "--version printed %r (rc %s), the library is %s" % (run.stdout, run.rc, m.group(1)))

    def test_lib_option(tmp):
        run = wallprof(["--lib", "/nonexistent/libwallprof.so", "true"], tmp)
        rt.check(run.rc == 125, "--lib missing: rc %s, want 125" % run.rc)
        rt.check(any("/nonexistent/libwallprof.so" in l and "not found" in l
                     for l in launcher_lines(run)),
                 "--lib missing: no line naming it: %r" % run.stderr.strip())
        copy = os.path.join(tmp, "copy.so")
        shutil.copy(rt.LIB, copy)
        show = ["sh", "-c", 'printf "%s\\n" "$LD_PRELOAD"']
        run = wallprof(["-q", "--lib", "copy.so", "--"] + show, tmp)
        rt.check(run.rc == 0 and run.stdout == copy + "\n",
                 "--lib copy.so (relative): the program sees LD_PRELOAD=%r (%s)"
                 % (run.stdout.strip(), run.describe()))
        run = wallprof(["-q", "--"] + show, tmp, {"WALLPROF_LIB": copy})
        rt.check(run.stdout == copy + "\n", "WALLPROF_LIB=%s: the program sees LD_PRELOAD=%r"
                 % (copy, run.stdout.strip()))
        run = wallprof(["--"] + show, tmp, {"WALLPROF_LIB": os.path.join(tmp, "none.so")})
        rt.check(run.rc == 125 and any("none.so" in l for l in launcher_lines(run)),
                 "WALLPROF_LIB missing: rc %s, stderr %r" % (run.rc, run.stderr.strip()))

    # -- programs LD_PRELOAD cannot reach ------------------------------------

    def test_static(tmp):
        exe = rt.prog("launcher_static")
        plain = rt.run_plain([exe, "9"], tmp)
        rt.check(plain.rc == 9, "launcher_static 9: rc %s" % plain.rc)
        # The premise: the loader really never sees it.
        pre = rt.run_under_preload([exe, "9"], cwd=tmp)
        rt.check(pre.rc == 9 and not pre.wallprof_lines(), "launcher_static under LD_PRELOAD: %s"
                 % pre.describe())
        no_profiles(tmp, "launcher_static under LD_PRELOAD")
        run = wallprof(["--", exe, "9"], tmp)
        same_as_plain("launcher_static", plain, run)
        want = ("wallprof: %s is statically linked; LD_PRELOAD cannot profile it "
                "(running it unprofiled)" % exe)
        rt.check(launcher_lines(run) == [want], "stderr %r, want the one line %r"
                 % (run.stderr.strip(), want))
        no_profiles(tmp, "launcher_static")
        # Found through PATH: the message names it as it was typed.
        run = wallprof(["launcher_static", "4"], tmp,
                       {"PATH": rt.PROGS + ":" + os.environ.get("PATH", "")})
        rt.check(run.rc == 4, "launcher_static via PATH: %s" % run.describe())
        rt.check(launcher_lines(run) == [want.replace(exe, "launcher_static")],
                 "via PATH: stderr %r" % run.stderr.strip())
        # -q: the launcher is quiet too.
        run = wallprof(["-q", exe, "2"], tmp)
        rt.check(run.rc == 2 and not run.stderr, "-q launcher_static 2: rc %s, stderr %r"
                 % (run.rc, run.stderr))

    def test_scripts(tmp):
        # A "#!" script whose interpreter is dynamic is profiled (the shell).
        script = os.path.join(tmp, "dyn.sh")
        with open(script, "w") as f:
            # sh waits 0.3 s for sleep: long enough to have samples of its own.
            f.write("#!/bin/sh\necho \"dyn $1\"\nsleep 0.3\nexit 4\n")
        os.chmod(script, 0o755)
        run = wallprof([script, "x"], tmp)
        rt.check(run.rc == 4 and run.stdout == "dyn x\n", "dyn.sh: %s, stdout %r"
                 % (run.describe(), run.stdout))
        rt.check(not any("unprofiled" in l for l in launcher_lines(run)),
                 "dyn.sh (#!/bin/sh) is called unprofiled: %r" % launcher_lines(run))
        rt.check(run.wrote_paths(), "dyn.sh: no profile written (%s)" % run.describe())
        # One whose interpreter is static is not, and the launcher says so.
        exe = rt.prog("launcher_static")
        script = os.path.join(tmp, "stat.sh")
        with open(script, "w") as f:
            f.write("#!%s\n" % exe)
        os.chmod(script, 0o755)
        plain = rt.run_plain([script], tmp)
        run = wallprof([script], tmp)
        same_as_plain("stat.sh", plain, run)
        lines = launcher_lines(run)
        rt.check(len(lines) == 1 and exe in lines[0] and "statically linked" in lines[0]
                 and "unprofiled" in lines[0], "stat.sh (#!launcher_static): stderr %r" % lines)
        # No "#!" at all: run by /bin/sh, as execvp does.
        script = os.path.join(tmp, "bare")
        with open(script, "w") as f:
            f.write("echo bare \"$1\"\n")
        os.chmod(script, 0o755)
        run = wallprof(["-q", script, "y"], tmp)
        rt.check(run.rc == 0 and run.stdout == "bare y\n", "script without #!: %s, stdout %r"
                 % (run.describe(), run.stdout))

    def test_setuid(tmp):
        if os.geteuid() != 0:
            print("    note: setuid test skipped: needs root to give the copy another owner")
            return
        os.chmod(tmp, 0o755)
        src = rt.prog("exitcode")
        plain = rt.run_plain([src], tmp)

        def copy(name, uid, gid, mode):
            path = os.path.join(tmp, name)
            shutil.copy(src, path)
            os.chown(path, uid, gid)
            os.chmod(path, mode)
            return path

        # Owned by nobody, set-user-ID: root runs it as euid nobody, the kernel
        # flags the exec secure (AT_SECURE) and the loader drops LD_PRELOAD.
        for name, uid, gid, mode, word in (("suid", NOBODY, 0, 0o4755, "setuid"),
                                           ("sgid", 0, NOBODY, 0o2755, "setgid")):
            path = copy(name, uid, gid, mode)
            pre = rt.run_under_preload([path], cwd=tmp)
            rt.check(pre.rc == plain.rc, "%s under LD_PRELOAD: %s" % (name, pre.describe()))
            rt.check(not pre.wallprof_lines(), "premise: the loader preloaded into the %s copy "
                     "(%r); secure mode is not what this test assumes" % (word, pre.wallprof_lines()))
            no_profiles(tmp, "%s under LD_PRELOAD" % name)
            rel = "./" + name
            run = wallprof([rel], tmp)
            same_as_plain(name, plain, run)
            want = ("wallprof: %s is %s; the dynamic loader ignores LD_PRELOAD for it (running it "
                    "unprofiled)" % (rel, word))
            rt.check(launcher_lines(run) == [want], "%s: stderr %r, want the one line %r"
                     % (name, run.stderr.strip(), want))
            no_profiles(tmp, name)
        # Set-user-ID root, run by root: the ids do not change, the exec is
        # not secure, the loader preloads; the launcher must not warn.
        path = copy("suid_root", 0, 0, 0o4755)
        run = wallprof(["./suid_root"], tmp)
        same_as_plain("suid_root", plain, run)
        rt.check(not any("unprofiled" in l for l in launcher_lines(run)),
                 "setuid-root copy run by root (profilable) is called unprofiled: %r"
                 % launcher_lines(run))
        rt.check(run.wrote_paths(), "setuid-root copy run by root: no profile (%s)" % run.describe())

    def test_not_found(tmp):
        run = wallprof(["./nope", "a"], tmp)
        rt.check(run.rc == 127, "./nope: rc %s, want 127" % run.rc)
        rt.check(launcher_lines(run) == ["wallprof: ./nope: not found"],
                 "./nope: stderr %r" % run.stderr.strip())
        run = wallprof(["--", "wpt-no-such-command"], tmp)
        rt.check(run.rc == 127 and launcher_lines(run) == ["wallprof: wpt-no-such-command: not found"],
                 "command not in PATH: rc %s, stderr %r" % (run.rc, run.stderr.strip()))
        run = wallprof([tmp], tmp)
        rt.check(run.rc == 126, "a directory: rc %s, want 126" % run.rc)
        plain_file = os.path.join(tmp, "data")
        with open(plain_file, "w") as f:
            f.write("x\n")
        os.chmod(plain_file, 0o644)
        run = wallprof([plain_file], tmp)
        rt.check(run.rc == 126, "a file without x bits: rc %s, want 126 (%s)"
                 % (run.rc, run.stderr.strip()))
        bad = os.path.join(tmp, "badint")
        with open(bad, "w") as f:
            f.write("#!/nonexistent/interpreter\n")
        os.chmod(bad, 0o755)
        run = wallprof([bad], tmp)
        rt.check(run.rc == 127 and launcher_lines(run),
                 "script with a missing interpreter: rc %s (want 127 like a shell), stderr %r"
                 % (run.rc, run.stderr.strip()))
        for f in os.listdir(tmp):
            rt.check(not f.startswith("wallprof."), "%s written, no program ran" % f)

    return [
        ("launcher_same_as_plain", test_same_as_plain),
        ("launcher_signals_and_status", test_signals_and_status),
        ("launcher_keeps_ld_preload", test_keeps_ld_preload),
        ("launcher_options_env", test_options_env),
        ("launcher_usage_errors", test_usage_errors),
        ("launcher_lib_option", test_lib_option),
        ("launcher_static", test_static),
        ("launcher_scripts", test_scripts),
        ("launcher_setuid", test_setuid),
        ("launcher_not_found", test_not_found),
    ]
