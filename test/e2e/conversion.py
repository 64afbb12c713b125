"""The profiled process only captures: every profile is a raw dump turned
into JSON by the converter (build/wallprof --library) in a process of its
own (preload/convert.c). The library links no symbolizer or JSON library;
the converter's process is invisible to the program (no SIGCHLD, nothing
for its wait() to reap); a missing or hung converter leaves the raw dump
and says so in one line, within WALLPROF_CONVERT_TIMEOUT; a descendant's
exit does not wait for its conversion, the root's report does."""

import os
import re
import stat
import subprocess
import sys
import time

TIMEOUT = 60


def tests(rt):
    check = rt.check
    lib = os.path.join(rt.BUILD, "libwallprof.so")
    converter = os.path.join(rt.BUILD, "wallprof")

    def fake_converter(tmp, body):
        path = os.path.join(tmp, "fake-convert")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(path, 0o755)
        return path

    def test_library_deps(tmp):
        """`ldd build/libwallprof.so`: no JSON library, no zlib, no elfutils
        (libdw, libelf), no C++ runtime; and no symbol of theirs is
        referenced (zlib is dlopen'ed only for a compressed .debug_frame).
        Beyond libc it needs libunwind and libgcc_s, libgcc_s first:
        libunwind.so.8 exports the _Unwind_* API too, and the first in the
        program's scope is what libgcc_s's unwinder calls (cancel.py). The
        converter does not link libcurl."""
        out = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
        for name in ("libjansson", "libstdc++", "libdw.", "libelf.", "libz."):
            check(name not in out, "%s is linked into the library:\n%s" % (name, out))
        dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
        check(set(needed) <= {"libc.so.6", "ld-linux-x86-64.so.2", "libunwind.so.8",
                              "libunwind-x86_64.so.8", "libgcc_s.so.1"},
              "the library needs %s" % needed)
        unw = [i for i, n in enumerate(needed) if n.startswith("libunwind")]
        check("libgcc_s.so.1" in needed and unw and needed.index("libgcc_s.so.1") < min(unw),
              "libgcc_s does not come before libunwind: %s" % needed)
        syms = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True,
                              text=True).stdout.split()
        bad = [s for s in syms if re.match(r"(json_|dwarf_|dwelf_|dwfl_|elf_|gz|deflate|"
                                           r"inflate|uncompress|__cxa_demangle)", s)]
        check(not bad, "the library still references: %s" % bad[:8])
        # The converter loads libcurl when it first sends (upload/http.c):
        # its thirty-odd libraries are no cost of every conversion.
        cmd = os.path.join(rt.BUILD, "wallprof")
        dyn = subprocess.run(["readelf", "-d", cmd], capture_output=True, text=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
        check(needed and not [n for n in needed if "curl" in n],
              "the converter needs %s" % needed)

    def test_invisible(tmp):
        """A snapshot's converter runs while the program goes on: the
        program's SIGCHLD handler never runs and waitpid(-1) finds no
        child."""
        r = rt.run_bounded([rt.prog("conversion"), "invisible", tmp], tmp, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        check(r.stdout.startswith("snapshot seen, sigchld 0, waitpid -1 No child processes"),
              "the program saw our converter: %r" % r.stdout)
        rt.check_valid(rt.load_profile(os.path.join(tmp, "wallprof.%d.1.json" % r.pid)))

    def test_missing(tmp):
        """No converter: the raw dump stays, one line says so and how to
        convert it; converted by hand it is the profile."""
        env = {"WALLPROF_CONVERTER": os.path.join(tmp, "nowhere", "wallprof")}
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp, env_extra=env,
                           timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        raw = os.path.join(tmp, "wallprof.%d.raw" % r.pid)
        lines = r.wallprof_lines()
        check(os.path.exists(raw), "no raw dump: %s" % lines)
        check(not os.path.exists(os.path.join(tmp, "wallprof.%d.json" % r.pid)),
              "a JSON profile without a converter?")
        check(len(lines) == 2 and "WALLPROF_CONVERTER" in lines[0] and
              "no converter found" in lines[1] and raw in lines[1],
              "want the setting's line and one line naming the dump: %s" % lines)
        out = os.path.join(tmp, "by-hand.json")
        c = subprocess.run([converter, "convert", raw, "-o", out], capture_output=True, text=True)
        check(c.returncode == 0, "by hand: %s" % c.stderr)
        obj = rt.load_profile(out)
        rt.check_valid(obj)
        n = sum(1 for s in rt.profile_part(obj)["samples"]
                if "wpt_conv_work" in rt.stack_functions(obj, s["stack_id"]))
        check(n >= 10, "%d samples of wpt_conv_work" % n)

    def test_timeout(tmp):
        """A converter that hangs is stopped at WALLPROF_CONVERT_TIMEOUT:
        the exit is delayed by that much, not more; the dump stays."""
        fake = fake_converter(tmp, "exec sleep 30")
        env = {"WALLPROF_CONVERTER": fake, "WALLPROF_CONVERT_TIMEOUT": "1"}
        t0 = time.monotonic()
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp, env_extra=env,
                           timeout=TIMEOUT)
        took = time.monotonic() - t0
        check(r.rc == 0, r.describe())
        check(took < 10, "the exit waited %.1f s with WALLPROF_CONVERT_TIMEOUT=1" % took)
        raw = os.path.join(tmp, "wallprof.%d.raw" % r.pid)
        lines = r.wallprof_lines()
        check(len(lines) == 1 and "WALLPROF_CONVERT_TIMEOUT=1" in lines[0] and raw in lines[0],
              "want one line naming the setting and the dump: %s" % lines)
        check(os.path.exists(raw), "the raw dump is gone")
        c = subprocess.run([converter, "convert", raw, "-o", os.path.join(tmp, "x.json")],
                           capture_output=True, text=True)
        check(c.returncode == 0, "by hand: %s" % c.stderr)

    def test_child_background(tmp):
        """A descendant's exit waits for its raw dump only: with a converter
        that takes 2 s, the child still ends within 1 s of its work; the
        root's report waits for it and counts its profile."""
        fake = fake_converter(tmp, "sleep 2\nexec %s \"$@\"" % converter)
        code = ("import subprocess, sys, time\n"
                "t = time.monotonic()\n"
                "subprocess.run(sys.argv[1:])\n"
                "print('child %.3f' % (time.monotonic() - t))\n")
        env = {"WALLPROF_CONVERTER": fake}
        r = rt.run_bounded([sys.executable, "-c", code, rt.prog("conversion"), "work", "300"],
                           tmp, env_extra=env, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        m = re.search(r"child ([0-9.]+)", r.stdout)
        check(m and float(m.group(1)) < 1.3, "the child took %s s (300 ms of work; its "
              "conversion takes 2 s)" % (m and m.group(1)))
        lines = r.wallprof_lines()
        check(any(re.search(r"1 child process: 1 file written", l) for l in lines),
              "the root's report: %s" % lines)
        jsons = [n for n in os.listdir(tmp) if n.endswith(".json") and
                 n != "wallprof.%d.json" % r.pid]
        check(len(jsons) == 1, "child profiles: %s" % jsons)
        obj = rt.load_profile(os.path.join(tmp, jsons[0]))
        rt.check_valid(obj)
        check(not [n for n in os.listdir(tmp) if n.endswith(".raw")], "a raw dump is left")

    def test_same_name(tmp):
        """Two children ending together under one profile name (a template
        without %p): the second does not truncate or wait for the first's
        dump being converted; it writes its own (the fallback in
        $TMPDIR), both are converted, each exit stays short."""
        fake = fake_converter(tmp, "sleep 2\nexec %s \"$@\"" % converter)
        code = ("import subprocess, sys, time\n"
                "t = time.monotonic()\n"
                "ps = [subprocess.Popen(sys.argv[1:]) for i in range(2)]\n"
                "for p in ps: p.wait()\n"
                "print('children %.3f' % (time.monotonic() - t))\n")
        td = os.path.join(tmp, "td")
        os.mkdir(td)
        env = {"WALLPROF_CONVERTER": fake, "WALLPROF_OUTPUT": os.path.join(tmp, "p.json"),
               "TMPDIR": td}
        r = rt.run_bounded([sys.executable, "-c", code, rt.prog("conversion"), "work", "300"],
                           tmp, env_extra=env, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        m = re.search(r"children ([0-9.]+)", r.stdout)
        check(m and float(m.group(1)) < 1.5, "the children took %s s (300 ms of work each)"
              % (m and m.group(1)))
        lines = r.wallprof_lines()
        check(any("2 files written" in l for l in lines), "the root's report: %s" % lines)
        idx = [n for n in os.listdir(tmp) if n.endswith(".index")]
        with open(os.path.join(tmp, idx[0])) as f:
            text = f.read()
        check("corrupt" not in text and "empty" not in text, "index: %s" % text)

    def test_converter_crash(tmp):
        """A converter that dies without a word: one line says so and where
        the dump stays."""
        fake = fake_converter(tmp, "kill -SEGV $$")
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp,
                           env_extra={"WALLPROF_CONVERTER": fake}, timeout=TIMEOUT)
        raw = os.path.join(tmp, "wallprof.%d.raw" % r.pid)
        lines = r.wallprof_lines()
        check(r.rc == 0 and len(lines) == 1 and "without a word" in lines[0] and raw in lines[0],
              "want one line naming the dump left: %s" % lines)
        check(os.path.exists(raw), "the raw dump is gone")

    def test_index_fifo(tmp):
        """A FIFO named as a dump in the index (any descendant may write
        it) is not opened for long: the root's report ends."""
        code = ("import os\n"
                "idx = os.environ['WALLPROF_TREE'].split(':', 1)[1]\n"
                "fifo = os.path.join(os.getcwd(), 'fifo.raw')\n"
                "os.mkfifo(fifo)\n"
                "with open(idx, 'a') as f:\n"
                "    f.write('%d\\traw\\t%s\\t0\\tconverting\\n' % (os.getpid() + 1, fifo))\n")
        r = rt.run_bounded([sys.executable, "-c", code], tmp, timeout=30)
        check(r.rc == 0, "the root did not end: %s" % r.describe())

    def test_relative_preload(tmp):
        """LD_PRELOAD naming the library relative to a directory the
        program leaves before its exit: the converter is still found."""
        rel = os.path.relpath(lib, rt.ROOT)
        env = {"LD_PRELOAD": "./" + rel, "WALLPROF_OUTPUT": os.path.join(tmp, "w.%p.json")}
        r = rt.run_bounded([rt.prog("conversion"), "chdir", "300", "/"], rt.ROOT,
                           env_extra=env, preload=False, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        path = os.path.join(tmp, "w.%d.json" % r.pid)
        check(os.path.exists(path), "no profile: %s" % r.wallprof_lines())

    def test_forks_during_wait(tmp):
        """Children forked while the exit waits for its converter may hold
        the report pipe: the wait ends when the converter does, with its
        line and no false timeout."""
        env = {"WALLPROF_CONVERT_TIMEOUT": "3", "WALLPROF_FOLLOW_CHILDREN": "0"}
        for i in range(3):
            t0 = time.monotonic()
            r = rt.run_bounded([rt.prog("conversion"), "forks", "300"], tmp, env_extra=env,
                               timeout=TIMEOUT)
            took = time.monotonic() - t0
            lines = r.wallprof_lines()
            check(r.rc == 0 and not any("longer than" in l for l in lines) and
                  any("wrote" in l for l in lines),
                  "run %d: %s (%s)" % (i, lines, r.describe()))
            check(took < 2.5, "run %d: the exit took %.1f s" % (i, took))

    def logging_converter(tmp, before=""):
        """A converter that logs its mode (--library or --tree) to a file,
        then runs the real one; `before`: shell lines run first."""
        log = os.path.join(tmp, "calls")
        return log, fake_converter(tmp, '%s\necho "$1" >> %s\nexec %s "$@"'
                                   % (before, log, converter))

    def calls(log):
        with open(log) as f:
            return f.read().split()

    def child_profiles(tmp, r):
        return [n for n in os.listdir(tmp) if n.endswith(".json") and
                n != "wallprof.%d.json" % r.pid]

    def test_tree_one_converter(tmp):
        """Four children one after the other: one converter (--tree)
        converts all their dumps, each written and valid, the root's own
        with its own (--library); the report counts four files."""
        log, fake = logging_converter(tmp)
        code = ("import subprocess, sys\n"
                "for i in range(4): subprocess.run(sys.argv[1:])\n")
        r = rt.run_bounded([sys.executable, "-c", code, rt.prog("conversion"), "work", "300"],
                           tmp, env_extra={"WALLPROF_CONVERTER": fake}, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        lines = r.wallprof_lines()
        check(any("4 child processes: 4 files written" in l for l in lines),
              "the root's report: %s" % lines)
        c = calls(log)
        check(c.count("--tree") == 1 and c.count("--library") == 1,
              "converters started: %s" % c)
        jsons = child_profiles(tmp, r)
        check(len(jsons) == 4, "child profiles: %s" % jsons)
        for j in jsons:
            rt.check_valid(rt.load_profile(os.path.join(tmp, j)))
        check(not [n for n in os.listdir(tmp) if n.endswith(".raw")], "a raw dump is left")

    def test_tree_after_root(tmp):
        """A child that outlives the root: its dump is converted by a
        converter it starts itself, which ends once done (the root has said
        "end")."""
        code = ("import subprocess, sys\n"
                "print(subprocess.Popen(sys.argv[1:]).pid, flush=True)\n")
        r = rt.run_bounded([sys.executable, "-c", code, rt.prog("conversion"), "work", "600"],
                           tmp, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        child = int(r.stdout.split()[0])
        path = os.path.join(tmp, "wallprof.%d.json" % child)
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(os.path.exists(path), "the child's profile never came")
        rt.check_valid(rt.load_profile(path))

        def converters():
            out = []
            for pid in os.listdir("/proc"):
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as f:
                        if tmp.encode() in f.read() and pid.isdigit():
                            out.append(pid)
                except OSError:
                    pass
            return out
        while converters() and time.monotonic() < deadline:
            time.sleep(0.05)
        check(not converters(), "the converter lingers after the root's end")

    def test_tree_restart(tmp):
        """The tree's converter dies before converting anything: the root
        starts another at its exit, and the child's profile is written."""
        mark = os.path.join(tmp, "died")
        log, fake = logging_converter(
            tmp, 'if [ "$1" = --tree ] && [ ! -e %s ]; then : > %s; exit 1; fi' % (mark, mark))
        code = "import subprocess, sys\nsubprocess.run(sys.argv[1:])\n"
        r = rt.run_bounded([sys.executable, "-c", code, rt.prog("conversion"), "work", "300"],
                           tmp, env_extra={"WALLPROF_CONVERTER": fake}, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        check(os.path.exists(mark), "the first converter was not started")
        lines = r.wallprof_lines()
        check(any("1 child process: 1 file written" in l for l in lines),
              "the root's report: %s" % lines)
        jsons = child_profiles(tmp, r)
        check(len(jsons) == 1, "child profiles: %s" % jsons)
        rt.check_valid(rt.load_profile(os.path.join(tmp, jsons[0])))

    def test_dump_left_kept(tmp):
        """A raw dump left under the profile's name (a profile still to
        convert) is not written over: this run's dump and profile take the
        fallback in $TMPDIR (the name may be another process's profile), and
        one line says so."""
        old = os.path.join(tmp, "p.raw")
        with open(old, "wb") as f:
            f.write(b"a dump left behind")
        td = os.path.join(tmp, "td")
        os.mkdir(td)
        env = {"WALLPROF_OUTPUT": os.path.join(tmp, "p.json"), "TMPDIR": td}
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp, env_extra=env,
                           timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        with open(old, "rb") as f:
            check(f.read() == b"a dump left behind", "the dump left behind was written over")
        want = os.path.join(td, "wallprof.%d.json" % r.pid)
        lines = r.wallprof_lines()
        check(any(old in l and "holds another dump" in l and want in l for l in lines),
              "no line about the name taken: %s" % lines)
        rt.check_valid(rt.load_profile(want))
        check(not os.path.exists(os.path.join(tmp, "p.json")), "a profile under the taken name")
        check(os.listdir(td) == [os.path.basename(want)], "left in TMPDIR: %s" % os.listdir(td))

    # A root that edits its tree's index before and after running one child
    # (conversion work 300): `before` and `after` are Python lines with
    # `idx` the index's path.
    def index_root(before="", after=""):
        return ("import os, subprocess, sys\n"
                "idx = os.environ['WALLPROF_TREE'].split(':', 1)[1]\n"
                + before + "\nsubprocess.run(sys.argv[1:])\n" + after + "\n")

    def test_tree_abandoned(tmp):
        """A dump an earlier converter took and never finished (it crashed
        on it) is not taken again: one line says so, the dump stays, and
        the dumps after it are converted."""
        dead = os.path.join(tmp, "dead.raw")
        with open(dead, "wb") as f:
            f.write(b"not converted again")
        before = ("with open(idx, 'a') as f:\n"
                  "    f.write('99999\\traw\\t%s\\t0\\t%s\\t%s\\n' % (\n"
                  "        '{d}', '{d}.json', '{d}.fb.json'))\n"
                  "    f.write('99999\\ttaking\\t{d}\\t0\\t\\n')\n").format(d=dead)
        r = rt.run_bounded([sys.executable, "-c", index_root(before), rt.prog("conversion"),
                            "work", "300"], tmp, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        lines = r.wallprof_lines()
        check(any("child 99999: " in l and "ended while converting it" in l and dead in l
                  for l in lines), "no line for the abandoned dump: %s" % lines)
        check(any("2 child processes: 1 file written" in l for l in lines),
              "the root's report: %s" % lines)
        with open(dead, "rb") as f:
            check(f.read() == b"not converted again", "the abandoned dump was touched")

    def test_tree_converter_dies(tmp):
        """A tree converter that dies at once, every time: the root starts
        it again a few times, not in a loop until its timeout, and says the
        dump is not converted."""
        log, fake = logging_converter(tmp, '[ "$1" = --tree ] && echo "$1" >> %s && kill -SEGV $$'
                                      % os.path.join(tmp, "calls"))
        code = "import subprocess, sys\nsubprocess.run(sys.argv[1:])\n"
        t0 = time.monotonic()
        r = rt.run_bounded([sys.executable, "-c", code, rt.prog("conversion"), "work", "300"],
                           tmp, env_extra={"WALLPROF_CONVERTER": fake}, timeout=TIMEOUT)
        took = time.monotonic() - t0
        check(r.rc == 0, r.describe())
        starts = calls(log).count("--tree")
        check(1 <= starts <= 5, "%d tree converters started" % starts)
        check(took < 20, "the root waited %.1f s" % took)
        lines = r.wallprof_lines()
        check(any("1 raw dump not converted" in l for l in lines), "the report: %s" % lines)

    def test_tree_control_chars(tmp):
        """An output directory whose name holds a tab: the child's dump
        cannot be named in the index, so it gets a converter of its own;
        its profile is written."""
        d = os.path.join(tmp, "a\tb")
        os.mkdir(d)
        code = "import subprocess, sys\nsubprocess.run(sys.argv[1:])\n"
        r = rt.run_bounded([sys.executable, "-c", code, rt.prog("conversion"), "work", "300"],
                           tmp, env_extra={"WALLPROF_OUTPUT": os.path.join(d, "w.%p.json")},
                           timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        jsons = [n for n in os.listdir(d) if n.endswith(".json")]
        check(len(jsons) == 2, "profiles: %s (%s)" % (jsons, r.wallprof_lines()))
        check(not [n for n in os.listdir(d) if n.endswith(".raw")], "a raw dump is left")

    def test_tree_index_damaged(tmp):
        """NUL bytes and a line cut short in the index: the root's wait and
        report go past them and count the child's profile; no timeout."""
        after = ("with open(idx, 'ab') as f:\n"
                 "    f.write(b'\\0\\n1\\traw\\t/x\\0y\\t0\\t/a\\t/b\\n' + b'z' * 70000 + b'\\n')\n")
        t0 = time.monotonic()
        r = rt.run_bounded([sys.executable, "-c", index_root(after=after), rt.prog("conversion"),
                            "work", "300"], tmp, env_extra={"WALLPROF_CONVERT_TIMEOUT": "20"},
                           timeout=TIMEOUT)
        took = time.monotonic() - t0
        check(r.rc == 0, r.describe())
        lines = r.wallprof_lines()
        check(any("1 child process: 1 file written" in l and "not converted" not in l
                  for l in lines), "the report: %s" % lines)
        check(took < 15, "the root waited %.1f s" % took)

    def test_tree_index_fifo(tmp):
        """The index replaced by a FIFO: nobody hangs on it."""
        before = "os.unlink(idx) if os.path.exists(idx) else None\nos.mkfifo(idx)\n"
        r = rt.run_bounded([sys.executable, "-c", index_root(before), rt.prog("conversion"),
                            "work", "300"], tmp, timeout=30)
        check(r.rc == 0, "the tree did not end: %s" % r.describe())

    def test_tree_index_untrusted(tmp):
        """An index anybody may write names files the converter would write
        over: the tree's converter refuses it, and the report says the dump
        is not converted."""
        before = "open(idx, 'a').close()\nos.chmod(idx, 0o666)\n"
        r = rt.run_bounded([sys.executable, "-c", index_root(before), rt.prog("conversion"),
                            "work", "300"], tmp, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        lines = r.wallprof_lines()
        check(any("1 raw dump not converted" in l for l in lines), "the report: %s" % lines)
        check(not [n for n in os.listdir(tmp) if n.endswith(".json") and
                   n != "wallprof.%d.json" % r.pid], "a child profile from an untrusted index")

    return [("conv_library_deps", test_library_deps),
            ("conv_tree_abandoned", test_tree_abandoned),
            ("conv_tree_converter_dies", test_tree_converter_dies),
            ("conv_tree_control_chars", test_tree_control_chars),
            ("conv_tree_index_damaged", test_tree_index_damaged),
            ("conv_tree_index_fifo", test_tree_index_fifo),
            ("conv_tree_index_untrusted", test_tree_index_untrusted),
            ("conv_tree_one_converter", test_tree_one_converter),
            ("conv_tree_after_root", test_tree_after_root),
            ("conv_tree_restart", test_tree_restart),
            ("conv_dump_left_kept", test_dump_left_kept),
            ("conv_forks_during_wait", test_forks_during_wait),
            ("conv_same_name", test_same_name),
            ("conv_converter_crash", test_converter_crash),
            ("conv_index_fifo", test_index_fifo),
            ("conv_relative_preload", test_relative_preload),
            ("conv_invisible", test_invisible),
            ("conv_missing", test_missing),
            ("conv_timeout", test_timeout),
            ("conv_child_background", test_child_background)]
