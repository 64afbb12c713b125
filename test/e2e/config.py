"""Configuration through WALLPROF_* variables: bad values change nothing the
program does and are named on stderr, WALLPROF_OUTPUT templates (also
relative to a working directory too long for one path), WALLPROF_LOG=quiet.
Run on test/progs/exitcode.c."""

import glob
import json
import os

BAD_CONFIG = (
    ("WALLPROF_HZ", "abc"),
    ("WALLPROF_HZ", "0"),
    ("WALLPROF_HZ", "999999"),
    ("WALLPROF_RING_SECONDS", "-5"),
    ("WALLPROF_MAX_DEPTH", "zz"),
)


def tests(rt):
    check = rt.check

    def test_bad_config(tmp):
        argv = [rt.prog("exitcode"), "return"]
        plain = rt.run_plain(argv, tmp)
        for var, value in BAD_CONFIG:
            label = "%s=%s" % (var, value)
            r = rt.run_under_preload(argv, {var: value}, cwd=tmp)
            check(r.rc == plain.rc and r.stdout == plain.stdout,
                  "%s: program behaved differently (rc %s vs %s)" % (label, r.rc, plain.rc))
            lines = [l for l in r.stderr.splitlines() if l.startswith("wallprof: ") and var in l]
            check(lines, "%s: no stderr line starting 'wallprof: ' naming %s; stderr: %r"
                  % (label, var, r.wallprof_lines()))
            obj = rt.exit_profile(r)
            rt.check_valid(obj, "%s profile" % label)
            w = rt.wallprof_section(obj)
            check(w.get("hz") == rt.DEFAULT_HZ, "%s: wallprof.hz is %r, want %d"
                  % (label, w.get("hz"), rt.DEFAULT_HZ))
            if var == "WALLPROF_RING_SECONDS":
                check(w.get("ring_seconds") == rt.DEFAULT_RING_SECONDS, "%s: ring_seconds is %r"
                      % (label, w.get("ring_seconds")))
            if var == "WALLPROF_MAX_DEPTH":
                d = w.get("max_depth")
                check(isinstance(d, int) and d > 0, "%s: max_depth is %r" % (label, d))

    def test_output_template(tmp):
        sub = os.path.join(tmp, "sub")
        os.mkdir(sub)
        r = rt.run_under_preload([rt.prog("exitcode")],
                                 {"WALLPROF_OUTPUT": os.path.join(sub, "prof-%p.json")}, cwd=tmp)
        check(r.rc == 7, "exitcode: %s" % r.describe())
        want = os.path.join(sub, "prof-%d.json" % r.pid)
        check(os.path.exists(want), "%s not written; sub/ has %s, stderr: %r"
              % (os.path.relpath(want, tmp), sorted(os.listdir(sub)), r.wallprof_lines()))
        check(r.profile_path() == want, "stderr names %r, want %r" % (r.profile_path(), want))
        rt.check_valid(rt.load_profile(want))
        check(not glob.glob(os.path.join(tmp, "wallprof.*")),
              "a default-named file was written too")

    def test_output_long_cwd(tmp):
        """A working directory so long that it and WALLPROF_OUTPUT do not fit in
        one path (4096 bytes): the template stays relative (and says so), never
        cut short. Paths this long only work relative to a directory fd."""
        d = tmp
        while len(d) < 3300:
            d = os.path.join(d, "d" * 200)
            os.mkdir(d)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for _ in range(4):
                os.mkdir("q" * 200, dir_fd=fd)
                nfd = os.open("q" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = nfd
            tmpl = "/".join(["q" * 200] * 4) + "/p.%p.json"
            r = rt.run_under_preload([rt.prog("exitcode")], {"WALLPROF_OUTPUT": tmpl}, cwd=d)
            check(r.rc == 7, "exitcode: %s" % r.describe())
            name = "p.%d.json" % r.pid
            check(name in os.listdir(fd), "the profile is not at WALLPROF_OUTPUT relative to the "
                  "working directory; stderr: %s" % [l[:120] for l in r.wallprof_lines()])
            check(any("too long to make WALLPROF_OUTPUT" in l for l in r.wallprof_lines()),
                  "no word about the relative WALLPROF_OUTPUT: %s" % r.wallprof_lines())
            pfd = os.open(name, os.O_RDONLY, dir_fd=fd)
            with os.fdopen(pfd, "rb") as f:
                rt.check_valid(json.loads(f.read()))
        finally:
            os.close(fd)

    def test_quiet(tmp):
        r = rt.run_under_preload([rt.prog("exitcode")], {"WALLPROF_LOG": "quiet"}, cwd=tmp)
        check(r.rc == 7, "exitcode: %s" % r.describe())
        check(not r.wallprof_lines(), "quiet run printed %r" % r.wallprof_lines())
        path = os.path.join(tmp, "wallprof.%d.json" % r.pid)
        check(os.path.exists(path), "profile %s not written; cwd has %s"
              % (os.path.basename(path), sorted(os.listdir(tmp))))
        rt.check_valid(rt.load_profile(path))

    return [
        ("bad_config", test_bad_config),
        ("output_template", test_output_template),
        ("output_long_cwd", test_output_long_cwd),
        ("quiet", test_quiet),
    ]
