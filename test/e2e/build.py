"""What the build hands users: the library without the test-only knobs
(they live in build/test/libwallprof.so, the test build), and an installed
tree (`make install`) whose command (record, and the converter) and library
find each other."""

import os
import subprocess

TIMEOUT = 120


def tests(rt):
    check = rt.check

    def test_no_test_hooks(tmp):
        with open(rt.LIB, "rb") as f:
            data = f.read()
        check(b"WALLPROF_TEST_" not in data, "build/libwallprof.so reads WALLPROF_TEST_* knobs")
        syms = subprocess.run(["nm", rt.LIB], capture_output=True, text=True).stdout
        bad = [l.split()[-1] for l in syms.splitlines() if "_test_" in l.split()[-1]]
        check(not bad, "test hooks in the production library: %s" % bad)
        with open(rt.TEST_LIB, "rb") as f:
            check(b"WALLPROF_TEST_SIGNAL_BLOCKED" in f.read(),
                  "the test library lacks the knobs the tests use")

    def test_install(tmp):
        """make install into a DESTDIR: the installed launcher preloads the
        installed library, whose exit dump the installed converter (found
        in ../bin) turns into the profile; make uninstall removes it all."""
        dest = os.path.join(tmp, "dest")
        prefix = "/opt/wp"
        r = subprocess.run(["make", "-s", "-C", rt.ROOT, "install", "DESTDIR=" + dest,
                            "PREFIX=" + prefix], capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 0, "make install: %s" % r.stderr[-400:])
        root = dest + prefix
        for f in ("lib/libwallprof.so", "bin/wallprof"):
            check(os.path.exists(os.path.join(root, f)), "%s not installed" % f)
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        run = subprocess.run([os.path.join(root, "bin", "wallprof"), "record", "--",
                              rt.prog("conversion"), "work", "300"], cwd=work,
                             env=rt.clean_env(preload=False), capture_output=True, text=True,
                             timeout=TIMEOUT)
        check(run.returncode == 0, "installed launcher: %s" % run.stderr[-400:])
        jsons = [n for n in os.listdir(work) if n.endswith(".json")]
        check(len(jsons) == 1 and not [n for n in os.listdir(work) if n.endswith(".raw")],
              "files after the installed run: %s (stderr %r)" % (os.listdir(work), run.stderr))
        rt.check_valid(rt.load_profile(os.path.join(work, jsons[0])))
        r = subprocess.run(["make", "-s", "-C", rt.ROOT, "uninstall", "DESTDIR=" + dest,
                            "PREFIX=" + prefix], capture_output=True, text=True, timeout=TIMEOUT)
        left = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs]
        check(r.returncode == 0 and not left, "after make uninstall: %s" % left)

    return [("build_no_test_hooks", test_no_test_hooks),
            ("build_install", test_install)]
