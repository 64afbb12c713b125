"""The `wallprof` command (convert/main.c): its help and version, report,
convert and diff on real profiles (a raw dump left without a converter and
the profile converted from it), WALLPROF_FORMAT (several formats side by
side, a bad value), and one "wallprof:" line with the documented exit status
(1 failure, 2 usage) for every bad input. The launcher (record) has
e2e/launcher.py. Uses test/progs/conversion.c (work MS)."""

import json
import os
import re
import subprocess

TIMEOUT = 60
ALL_FORMATS = ("sentry", "pprof", "folded", "speedscope", "html")
SUFFIX = {"sentry": ".json", "pprof": ".pb.gz", "folded": ".folded",
          "speedscope": ".speedscope.json", "html": ".html"}


def tests(rt):
    check = rt.check
    wallprof = os.path.join(rt.BUILD, "wallprof")

    def cmd(args, tmp, stdin=None):
        p = subprocess.run([wallprof] + list(args), cwd=tmp, capture_output=True, text=True,
                           env=rt.clean_env(preload=False), timeout=TIMEOUT, input=stdin)
        return p.returncode, p.stdout, p.stderr

    def one_line(what, rc, err, want_rc, want=None):
        lines = err.splitlines()
        check(rc == want_rc, "%s: exit status %s, want %s (stderr %r)" % (what, rc, want_rc, err))
        check(len(lines) == 1 and lines[0].startswith("wallprof: "),
              "%s: stderr is not one 'wallprof:' line: %r" % (what, err))
        if want:
            check(re.search(want, lines[0]), "%s: %r does not say %r" % (what, lines[0], want))

    def built(fmt, tmp, profile):
        """Whether this build has the writer of `fmt`."""
        rc, _, err = cmd(["convert", profile, "-f", fmt, "-o", os.path.join(tmp, "probe")], tmp)
        if os.path.exists(os.path.join(tmp, "probe")):
            os.unlink(os.path.join(tmp, "probe"))
        return "not built" not in err

    def raw_and_json(tmp):
        """A raw dump of `conversion work 300` left without a converter, and
        the profile `wallprof convert` makes of it (default name)."""
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp,
                           env_extra={"WALLPROF_CONVERTER": os.path.join(tmp, "none")},
                           timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        raw = os.path.join(tmp, "wallprof.%d.raw" % r.pid)
        check(os.path.exists(raw), "no raw dump: %s" % r.describe())
        rc, out, err = cmd(["convert", raw], tmp)
        js = os.path.join(tmp, "wallprof.%d.json" % r.pid)
        check(rc == 0 and out.startswith("wallprof: wrote %s (" % js) and not err,
              "convert RAW: rc %s, stdout %r, stderr %r" % (rc, out, err))
        check(os.path.exists(raw), "convert by hand deleted the dump")
        rt.check_valid(rt.load_profile(js))
        return raw, js

    def test_help(tmp):
        rc, out, err = cmd(["--help"], tmp)
        check(rc == 0 and not err, "--help: rc %s, stderr %r" % (rc, err))
        for word in ("record", "report", "convert", "diff", "--version"):
            check(word in out, "wallprof --help does not mention %s" % word)
        for sub, words in (("record", ("--hz", "--format", "--output", "--lib")),
                           ("report", ("--top", "--threads", "--markdown")),
                           ("convert", ("--format", "--output", "pprof", "html")),
                           ("diff", ("--format", "--output", "text"))):
            rc, out, err = cmd([sub, "--help"], tmp)
            check(rc == 0 and out.startswith("usage: wallprof %s" % sub) and not err,
                  "wallprof %s --help: rc %s, %r" % (sub, rc, out[:80]))
            for w in words:
                check(w in out, "wallprof %s --help does not mention %s" % (sub, w))
        with open(os.path.join(rt.ROOT, "output", "output.h")) as f:
            version = re.search(r'#define\s+WP_VERSION\s+"([^"]+)"', f.read()).group(1)
        rc, out, err = cmd(["--version"], tmp)
        check(rc == 0 and out == "wallprof %s\n" % version, "--version: %r" % out)
        rc, out, err = cmd([], tmp)
        check(rc == 2 and "usage: wallprof COMMAND" in err, "no command: rc %s, %r" % (rc, err))

    def test_errors(tmp):
        raw, js = raw_and_json(tmp)
        trunc = os.path.join(tmp, "trunc.prof")
        with open(js) as f, open(trunc, "w") as g:
            g.write(f.read()[:300])
        foreign = os.path.join(tmp, "package.txt")
        with open(foreign, "w") as f:
            json.dump({"name": "x", "version": "1.0"}, f)
        garbage = os.path.join(tmp, "garbage.bin")
        with open(garbage, "wb") as f:
            f.write(os.urandom(4096))
        missing = os.path.join(tmp, "missing.json")
        cases = (
            (["bogus"], 2, "unknown command bogus"),
            (["--bogus"], 2, "unknown option --bogus"),
            (["report"], 2, "no profile"),
            (["report", js, "--bogus"], 2, "unknown option --bogus"),
            (["report", js, "--top", "many"], 2, "whole number"),
            (["report", missing], 1, "missing.json: cannot open: No such file"),
            (["report", trunc], 1, "truncated"),
            (["report", foreign], 1, "not a libwallprof profile"),
            (["report", garbage], 1, "garbage.bin"),
            (["report", tmp], 1, "not a regular file|directory"),
            (["convert"], 2, "no input"),
            (["convert", js, "-f", "svg"], 2, 'unknown format "svg"'),
            (["convert", js, "-f", "sentry"], 2, "write over the input"),
            (["convert", js, "-f", "sentry", "-o", js], 2, "write over the input"),
            (["convert", trunc, "-o", os.path.join(tmp, "x.out")], 1, "truncated"),
            (["convert", js, "-o"], 2, "needs a value"),
            (["diff", js], 2, "two profiles"),
            (["diff", js, js, "-f", "svg"], 2, 'unknown format "svg"'),
            (["diff", js, foreign], 1, "not a libwallprof profile"),
        )
        for args, want_rc, want in cases:
            rc, out, err = cmd(args, tmp)
            one_line("wallprof %s" % " ".join(os.path.basename(a) for a in args), rc, err,
                     want_rc, want)
        check(not os.path.exists(os.path.join(tmp, "x.out")), "a failed convert left x.out")

    def test_report(tmp):
        raw, js = raw_and_json(tmp)
        rc_raw, out_raw, err = cmd(["report", raw], tmp)
        check(rc_raw == 0 and not err, "report RAW: rc %s, %r" % (rc_raw, err))
        rc, out, err = cmd(["report", js], tmp)
        check(rc == 0 and not err, "report JSON: rc %s, %r" % (rc, err))
        for want in ("profile:  ", "duration: ", "samples:  ", "threads:", "wpt_conv_work",
                     "top functions by share of wall time", "off-CPU time by system call"):
            check(want in out, "report lacks %r:\n%s" % (want, out))
        # The raw dump and its profile say the same, but for the file's name.
        check(out_raw.split("\n", 1)[1] == out.split("\n", 1)[1],
              "report of the raw dump differs from its profile's:\n%s\n---\n%s" % (out_raw, out))
        # The program spins in wpt_conv_work; a tick may land in main or
        # exit around it (1 of 30 samples in a 0.3 s run).
        m = re.search(r"^\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+wpt_conv_work\s+"
                      r"conversion\.c:\d+$", out, re.M)
        check(m and float(m.group(1)) >= 90 and float(m.group(2)) >= 90,
              "wpt_conv_work is not most of the on-CPU time:\n%s" % out)
        rc, out, _ = cmd(["report", js, "--markdown", "--threads", "--top", "1"], tmp)
        check(rc == 0 and "### threads" in out and "|---" in out and
              re.search(r"### thread \d+ \(conversion\): top functions", out),
              "--markdown --threads:\n%s" % out)
        rows = [l for l in out.splitlines() if l.startswith("| ") and "%" in l]
        check(rows, "no Markdown rows:\n%s" % out)

    def test_convert(tmp):
        raw, js = raw_and_json(tmp)
        # Read back and written again: the same frames, stacks and samples.
        again = os.path.join(tmp, "again.json")
        rc, out, err = cmd(["convert", js, "-o", again], tmp)
        check(rc == 0 and not err, "convert JSON -o: rc %s, %r" % (rc, err))
        a, b = rt.load_profile(js), rt.load_profile(again)
        for key in ("frames", "stacks", "samples", "thread_metadata"):
            check(a["profile"][key] == b["profile"][key], "profile.%s differs read back" % key)
        check(a["wallprof"] == b["wallprof"] and a["debug_meta"] == b["debug_meta"] and
              a["timestamp"] == b["timestamp"], "wallprof, debug_meta or timestamp differ")
        # To standard output.
        rc, out, err = cmd(["convert", raw, "-o", "-"], tmp)
        check(rc == 0 and not err and json.loads(out)["profile"] == a["profile"],
              "convert RAW -o -: rc %s, %r" % (rc, err))
        # Every format: written with its suffix, or "not built yet".
        for fmt in ALL_FORMATS[1:]:
            rc, out, err = cmd(["convert", js, "-f", fmt], tmp)
            path = js[:-5] + SUFFIX[fmt]
            if "not built" in err:
                one_line("convert -f %s" % fmt, rc, err, 1, "format %s is not built" % fmt)
                check(not os.path.exists(path), "%s left behind" % path)
            else:
                check(rc == 0 and os.path.getsize(path) > 0, "convert -f %s: rc %s, %r"
                      % (fmt, rc, err))

    def test_diff(tmp):
        _, js = raw_and_json(tmp)
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        other = os.path.join(tmp, "wallprof.%d.json" % r.pid)
        rc, out, err = cmd(["diff", js, other], tmp)
        check(rc == 0 and not err, "diff: rc %s, %r" % (rc, err))
        check("functions by change in share of wall time" in out and "wpt_conv_work" in out,
              "diff output:\n%s" % out)
        rc, out, err = cmd(["diff", js, other, "-f", "html", "-o", os.path.join(tmp, "d.html")],
                           tmp)
        if "not built" in err:
            one_line("diff -f html", rc, err, 1, "format html is not built")
        else:
            check(rc == 0 and os.path.getsize(os.path.join(tmp, "d.html")) > 0,
                  "diff -f html: rc %s, %r" % (rc, err))

    def test_format_env(tmp):
        """WALLPROF_FORMAT=sentry,folded,pprof: each format beside the
        other (or, for a writer this build lacks, one line saying so); a bad
        value is one line and the default."""
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp,
                           env_extra={"WALLPROF_FORMAT": "sentry,folded,pprof"}, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        base = os.path.join(tmp, "wallprof.%d" % r.pid)
        rt.check_valid(rt.load_profile(base + ".json"))
        wrote = [l for l in r.wallprof_lines() if " wrote " in l]
        check(any(base + ".json" in l for l in wrote), "no line for the Sentry profile: %s"
              % r.wallprof_lines())
        for fmt in ("folded", "pprof"):
            path = base + SUFFIX[fmt]
            if os.path.exists(path):
                check(any(path in l for l in wrote), "no line for %s: %s" % (path, wrote))
            else:
                check(any("format %s is not built" % fmt in l for l in r.wallprof_lines()),
                      "%s neither written nor said missing: %s" % (fmt, r.wallprof_lines()))
        r = rt.run_bounded([rt.prog("conversion"), "work", "300"], tmp,
                           env_extra={"WALLPROF_FORMAT": "sentry,svg"}, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        bad = [l for l in r.wallprof_lines() if "WALLPROF_FORMAT" in l]
        check(len(bad) == 1 and "using sentry" in bad[0], "bad WALLPROF_FORMAT: %s"
              % r.wallprof_lines())
        rt.check_valid(rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % r.pid)))

    return [("cmd_help", test_help),
            ("cmd_errors", test_errors),
            ("cmd_report", test_report),
            ("cmd_convert", test_convert),
            ("cmd_diff", test_diff),
            ("cmd_format_env", test_format_env)]
