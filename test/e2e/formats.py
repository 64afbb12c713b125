"""The pprof, folded and speedscope writers on a live profile: the demo
program (main plus compute, sleeper and reader threads: on-CPU, sleeping
and blocked in read) runs under the preload with no converter, so its raw
dump stays; the dump is converted to the Sentry profile (the reference)
and to each format, and the formats are read back by the real tools:

- pprof by `go tool pprof` (-top, -traces, -tagfocus=state=off-cpu,
  -tagroot=thread_name): totals equal the Sentry profile's sample counts;
- folded and speedscope parsed back here: the same stacks with the same
  counts as the Sentry profile;
- speedscope loaded by speedscope's own importer (the npm package, headless
  in node: test/tools/speedscope_import.js) with no warning, each thread's
  stacks and weights those of the Sentry profile.

Without go, node or the npm package (offline), the test that needs it says
"skipped: ..." and passes.
"""

import collections
import glob
import json
import os
import re
import shutil
import subprocess

TIMEOUT = 120
HZ = 101
SPEEDSCOPE_VERSION = "1.25.0"


def tests(rt):
    check = rt.check
    npm_dir = os.path.join(rt.BUILD, "npm")
    importer = os.path.join(rt.TEST_DIR, "tools", "speedscope_import.js")

    def convert_cmd(raw, fmt, out, threads=False, syscalls=False):
        """The writer under test: `wallprof convert`."""
        cmd = [os.path.join(rt.BUILD, "wallprof"), "convert", raw, "-f", fmt, "-o", out]
        return cmd + (["--threads"] if threads else []) + (["--syscalls"] if syscalls else [])

    def skipped(why):
        print("    skipped: " + why)

    def profile_run(tmp):
        """Runs the demo with no converter: (raw dump, Sentry profile object)."""
        env = {"WALLPROF_CONVERTER": os.path.join(tmp, "none", "wallprof"),
               "WALLPROF_HZ": str(HZ)}
        r = rt.run_bounded([rt.prog("demo")], tmp, env_extra=env, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        raw = os.path.join(tmp, "wallprof.%d.raw" % r.pid)
        check(os.path.exists(raw), "no raw dump: %s" % r.wallprof_lines())
        ref = os.path.join(tmp, "ref.json")
        c = subprocess.run([os.path.join(rt.BUILD, "wallprof"), "convert", raw, "-o", ref],
                           capture_output=True, text=True, timeout=TIMEOUT)
        check(c.returncode == 0, "wallprof convert: %s" % c.stderr.strip())
        obj = rt.load_profile(ref)
        check(len(rt.profile_part(obj)["samples"]) > 100, "too few samples")
        return raw, obj

    def write(tmp, raw, fmt, name, **kw):
        out = os.path.join(tmp, name)
        c = subprocess.run(convert_cmd(raw, fmt, out, **kw), capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(c.returncode == 0, "writing %s: %s" % (fmt, c.stderr.strip()))
        check(os.path.exists(out), "no %s file" % fmt)
        return out

    def label(f):
        """Our name of a Sentry frame (model.h's wp_model_frame_label)."""
        if f.get("function"):
            return f["function"]
        if f.get("module") and f.get("module_offset"):
            return "%s+0x%x" % (os.path.basename(f["module"]), int(f["module_offset"], 16))
        return "0x?"  # outside every module: the looked-up address, not in the JSON

    def folded_name(name):
        name = name.replace(";", ":")
        return "".join("?" if ord(c) < 0x20 or ord(c) == 0x7f else c for c in name)

    def unknown_outside(name):
        return "0x?" if re.fullmatch(r"0x[0-9a-f]+", name) else name

    def sentry_stacks(obj, threads=False, syscalls=False, escape=folded_name):
        """Counter of root-first stacks (tuples of names) of the Sentry
        profile, with the folded options applied."""
        p = rt.profile_part(obj)
        names = rt.thread_names(obj)
        out = collections.Counter()
        for s in p["samples"]:
            st = [escape(label(p["frames"][i])) for i in reversed(p["stacks"][s["stack_id"]])]
            if threads:
                tid = str(s["thread_id"])
                st.insert(0, escape(names.get(tid) or tid))
            if syscalls and s.get("on_cpu") is False:
                st.append("[off-cpu: %s]" % s["syscall"] if s.get("syscall") else "[off-cpu]")
            out[tuple(unknown_outside(x) for x in st)] += 1
        return out

    def read_folded(path):
        out = collections.Counter()
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
        check(lines == sorted(lines, key=lambda l: l.rsplit(" ", 1)[0].encode(
            "utf-8", "surrogateescape")), "folded lines are not sorted")
        for line in lines:
            m = re.fullmatch(r"(.*) (\d+)", line)
            check(m, "folded line without a count: %r" % line)
            key = tuple(unknown_outside(x) for x in m.group(1).split(";"))
            check(key not in out, "folded stack written twice: %r" % m.group(1))
            out[key] += int(m.group(2))
        return out

    def same(got, want, what):
        if got == want:
            return
        diff = []
        for k in sorted(set(got) | set(want)):
            if got.get(k, 0) != want.get(k, 0):
                diff.append("%s: got %s, want %s" % (";".join(k)[-150:], got.get(k, 0),
                                                     want.get(k, 0)))
        raise rt.Failure("%s differ from the Sentry profile's (%d stacks)" % (what, len(diff)),
                         diff[:10])

    def test_folded_vs_sentry(tmp):
        """Folded, plain and with the thread prefix and off-CPU suffix: the
        Sentry profile's stacks with its counts, each stack once, sorted."""
        raw, obj = profile_run(tmp)
        same(read_folded(write(tmp, raw, "folded", "plain.folded")), sentry_stacks(obj),
             "folded stacks")
        got = read_folded(write(tmp, raw, "folded", "both.folded", threads=True, syscalls=True))
        same(got, sentry_stacks(obj, threads=True, syscalls=True), "folded stacks (--threads)")
        check(any(k[-1] == "[off-cpu: read]" and k[0] == "reader" for k in got),
              "no reader;...;[off-cpu: read] line")

    def speedscope_stacks(doc):
        """{profile name: Counter of root-first stacks} of a speedscope file."""
        frames = doc["shared"]["frames"]
        out = {}
        for prof in doc["profiles"]:
            check(prof["type"] == "sampled" and prof["unit"] == "nanoseconds",
                  "profile %s: %s/%s" % (prof.get("name"), prof.get("type"), prof.get("unit")))
            check(len(prof["samples"]) == len(prof["weights"]), "samples/weights lengths")
            check(prof["endValue"] - prof["startValue"] == sum(prof["weights"]),
                  "endValue - startValue is not the weights' sum")
            c = collections.Counter()
            period = 10**9 // HZ
            for st, w in zip(prof["samples"], prof["weights"]):
                # a run of n ticks with one stack weighs n periods
                check(w > 0 and w % period == 0, "weight %s, not a multiple of %d" % (w, period))
                c[tuple(unknown_outside(frames[i]["name"]) for i in st)] += w // period
            out[prof["name"]] = c
        return out

    def sentry_by_thread(obj):
        """{speedscope profile name: Counter} from the Sentry profile."""
        names = rt.thread_names(obj)
        per = collections.defaultdict(collections.Counter)
        p = rt.profile_part(obj)
        for s in p["samples"]:
            tid = str(s["thread_id"])
            name = "%s (tid %s)" % (names[tid], tid) if names.get(tid) else "tid %s" % tid
            st = [unknown_outside(label(p["frames"][i])) for i in reversed(p["stacks"][s["stack_id"]])]
            if s.get("on_cpu") is False:
                st.append("[off-cpu: %s]" % s["syscall"] if s.get("syscall") else "[off-cpu]")
            per[name][tuple(st)] += 1
        return dict(per)

    def test_speedscope_vs_sentry(tmp):
        """speedscope: schema fields, one sampled profile per thread, the
        main thread first; each thread's stacks and counts the Sentry
        profile's; frames carry file and line where known."""
        raw, obj = profile_run(tmp)
        path = write(tmp, raw, "speedscope", "p.speedscope.json")
        with open(path) as f:
            doc = json.load(f)
        check(doc.get("$schema") == "https://www.speedscope.app/file-format-schema.json",
              "$schema: %r" % doc.get("$schema"))
        check(any(f.get("file") and f.get("line") for f in doc["shared"]["frames"]),
              "no frame has file and line")
        got = speedscope_stacks(doc)
        want = sentry_by_thread(obj)
        check(sorted(got) == sorted(want), "profiles %s, threads %s" % (sorted(got), sorted(want)))
        for name in want:
            same(got[name], want[name], "speedscope stacks of %s" % name)
        check(doc["profiles"][0]["name"].startswith("demo "), "first profile: %s"
              % doc["profiles"][0]["name"])

    def speedscope_bundle(tmp):
        """speedscope's browser bundle from the npm package, installed into
        build/npm when missing; None (with a note) offline."""
        pattern = os.path.join(npm_dir, "node_modules", "speedscope", "dist", "release",
                               "speedscope-*.js")
        found = glob.glob(pattern)
        if not found:
            subprocess.run([os.path.join(rt.ROOT, "scripts", "install-deps.sh"), "speedscope"],
                           capture_output=True, timeout=300)
            found = glob.glob(pattern)
        return found[0] if found else None

    def test_speedscope_loads(tmp):
        """speedscope's own importer (npm package, headless in node) loads
        the file with no warning; its call trees hold the Sentry profile's
        stacks with weight = samples x period."""
        if not shutil.which("node"):
            return skipped("node is not installed (scripts/install-deps.sh installs it)")
        bundle = speedscope_bundle(tmp)
        if not bundle:
            return skipped("the npm package speedscope is not installed and npm could not "
                           "fetch it (offline?): scripts/install-deps.sh speedscope")
        raw, obj = profile_run(tmp)
        path = write(tmp, raw, "speedscope", "p.speedscope.json")
        c = subprocess.run(["node", importer, bundle, path], capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(c.returncode in (0, 1) and c.stdout.strip(),
              "speedscope_import: %s" % (c.stderr.strip() or c.returncode))
        res = json.loads(c.stdout)
        check(not res["warnings"], "speedscope warned: %s" % res["warnings"][:3])
        check(c.returncode == 0, "speedscope_import exit %d" % c.returncode)
        period = round(1e9 / HZ)
        want = sentry_by_thread(obj)
        got = {p["name"]: p for p in res["profiles"]}
        check(sorted(got) == sorted(want), "profiles %s" % sorted(got))
        for name, stacks in want.items():
            p = got[name]
            check(p["unit"] == "nanoseconds", "unit %s" % p["unit"])
            check(abs(p["total"] - sum(stacks.values()) * period) <= len(stacks),
                  "%s: total weight %s, want %d samples x %d" % (name, p["total"],
                                                               sum(stacks.values()), period))
            drawn = collections.Counter({tuple(unknown_outside(x) for x in k.split(";")):
                                         round(v / period) for k, v in p["stacks"].items()})
            same(drawn, stacks, "speedscope's call tree of %s" % name)

    def pprof(args, path, timeout=TIMEOUT):
        env = dict(os.environ, PPROF_TMPDIR=os.path.dirname(path), HOME=os.path.dirname(path),
                   GOFLAGS="-mod=mod", PPROF_BINARY_PATH="/nonexistent")
        c = subprocess.run(["go", "tool", "pprof"] + args + [path], capture_output=True,
                           text=True, timeout=timeout, env=env)
        check(c.returncode == 0, "go tool pprof %s: %s" % (" ".join(args), c.stderr.strip()[-300:]))
        return c.stdout, c.stderr

    def accounted(out):
        m = re.search(r"Showing nodes accounting for (\d+), [\d.]+% of (\d+) total", out)
        check(m, "no totals line in:\n%s" % out[:500])
        return int(m.group(1)), int(m.group(2))

    def test_pprof_go_tool(tmp):
        """`go tool pprof` reads the profile with no warning: -top's total
        is the Sentry profile's sample count and its top functions the
        demo's (prime counting, sleeping, reading); -tagfocus=state=off-cpu
        keeps the off-CPU samples exactly, -tagfocus=syscall=read the
        reader's; -traces -tagroot=thread_name puts each thread's name at
        the root; -raw lists the labels and the inlined Lines."""
        if not shutil.which("go"):
            return skipped("go is not installed (Debian golang-go; scripts/install-deps.sh)")
        raw, obj = profile_run(tmp)
        path = write(tmp, raw, "pprof", "p.pb.gz")
        samples = rt.profile_part(obj)["samples"]
        n = len(samples)
        off = sum(1 for s in samples if s.get("on_cpu") is False)
        read = sum(1 for s in samples if s.get("on_cpu") is False and s.get("syscall") == "read")
        flags = ["-sample_index=samples", "-nodefraction=0", "-nodecount=100000"]
        out, err = pprof(["-top"] + flags, path)
        check(not err.strip(), "pprof warned: %s" % err.strip()[:300])
        shown, total = accounted(out)
        check(total == n and shown == n, "pprof -top: %d of %d, the profile has %d samples"
              % (shown, total, n))
        check("Type: samples" in out and "Duration:" in out, "header: %s" % out[:300])
        top = [l.split()[-1] for l in out.splitlines() if re.match(r"\s*\d+\s+[\d.]+%", l)][:4]
        for fn in ("wpt_is_prime", "__libc_read"):
            check(fn in top, "%s not among the top functions %s" % (fn, top))
        check(any("nanosleep" in f for f in top), "no nanosleep among %s" % top)
        out, _ = pprof(["-top", "-tagfocus=state=off-cpu"] + flags, path)
        check(accounted(out) == (off, n), "-tagfocus=state=off-cpu: %s, want %d off-CPU of %d"
              % (accounted(out), off, n))
        out, _ = pprof(["-top", "-tagfocus=syscall=read"] + flags, path)
        check(accounted(out)[0] == read and read > 0, "-tagfocus=syscall=read: %s, want %d"
              % (accounted(out), read))
        out, _ = pprof(["-traces", "-tagroot=thread_name", "-sample_index=samples"], path)
        blocks = [b for b in out.split("-----------+") if re.search(r"^\s+\d+\s", b, re.M)]
        check(blocks, "no traces")
        count = 0
        for b in blocks:
            lines = [l for l in b.splitlines() if l.strip()]
            m = re.search(r"thread_name:\s+(\S+)", b)
            check(m, "a trace without thread_name: %s" % b[:200])
            stack = [l.strip() for l in lines if not re.match(r"\s*\w+:\s", l)]
            check(stack and stack[-1].endswith(m.group(1)),
                  "-tagroot=thread_name: root %r, thread %s" % (stack[-1:], m.group(1)))
            count += int(re.search(r"^\s+(\d+)\s", b, re.M).group(1))
        check(count == n, "-traces: %d samples, want %d" % (count, n))
        out, _ = pprof(["-raw"], path)
        for want in ("state:[off-cpu]", "syscall:[read]", "thread_name:[reader]", "thread_id:["):
            check(want in out, "-raw lacks %s" % want)
        check("PeriodType: wall nanoseconds" in out and "Period: %d" % round(1e9 / HZ) in out,
              "period: %s" % out[:200])

    return [
        ("formats_folded_vs_sentry", test_folded_vs_sentry),
        ("formats_speedscope_vs_sentry", test_speedscope_vs_sentry),
        ("formats_speedscope_loads", test_speedscope_loads),
        ("formats_pprof_go_tool", test_pprof_go_tool),
    ]
