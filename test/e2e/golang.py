"""Go programs with cgo under the profiler (issue 9, item 4): test/go/cgoprog,
built here with Debian's golang-go into build/go/. Go's runtime takes the
signals over at start (through libc's sigaction when cgo is on, which the
preload interposes), runs goroutines on small stacks of its own and insists
that foreign signal handlers run on the alternate stack (SA_ONSTACK); a
handler that runs on a goroutine stack corrupts it ("unexpected return pc",
"unknown caller pc", hangs).

- golang_cgo_runs: the program, run many times at WALLPROF_HZ=1000 (in parallel
  batches), behaves as without the preload every time: same exit status,
  stdout and stderr (besides wallprof: lines), no hang.
- golang_cgo_exit_profile: a Go program that ends the Go way (main.main
  returns: the runtime calls exit_group directly, no exit(), no atexit, no
  destructors, nothing a library can see) leaves a valid profile or says in
  one wallprof: line why not.
- golang_cgo_profile: the same program ending through libc's exit() (C.exit from
  cgo): a valid profile in which Go's threads are sampled with symbolized
  stacks (runtime.* and main.* functions, the cgo call into C).
- golang_cgo_lines: the file:line of Go frames is Go's own (main.go), not
  another compile unit's.
- golang_cgo_debug_cache: Go's DWARF is compressed; read through the debug
  cache's uncompressed copy, the frames are the same as without it.

WPT_GO_RUNS and WPT_GO_HZ (environment of the test driver) change the
number of runs and the rate of golang_cgo_runs, for measurements (the
profile tests run at 1000 Hz).
"""

import collections
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import tempfile
import threading

GO_SRC = "go/cgoprog"           # under test/
GO_RUNS = int(os.environ.get("WPT_GO_RUNS", "30"))
GO_HZ = os.environ.get("WPT_GO_HZ", "1000")
PROFILE_HZ = 1000
PARALLEL = max(2, min(4, 2 * (os.cpu_count() or 1)))
RUN_TIMEOUT = 20                # one run takes ~1.5 s; a hang is killed after this
BUILD_TIMEOUT = 300
LAST_LINE = "cgoprog: done"

_build_lock = threading.Lock()
_built = {}

# Lines of a Go crash worth naming, most telling first.
CRASH_PATTERNS = [
    re.compile(r"^fatal error: .*"),
    re.compile(r"^runtime: .*unexpected return pc for \S+"),
    re.compile(r"^panic: .*"),
    re.compile(r"^unexpected fault address.*"),
    re.compile(r"^\[signal \S+.*"),
    re.compile(r"^SIG\w+.*"),
    re.compile(r"^child stderr: .*"),
]


def normalize_crash_line(line):
    line = re.sub(r"0x[0-9a-fA-F]+", "0x..", line)
    line = re.sub(r"\bg \d+\b", "g N", line)
    line = re.sub(r"\b(goroutine|m|p|M|P) \d+\b", r"\1 N", line)
    return line.strip()


def tests(rt):
    check, note = rt.check, rt.note
    src_dir = os.path.join(rt.TEST_DIR, GO_SRC)
    out_dir = os.path.join(rt.BUILD, "go")

    def go_env():
        env = rt.clean_env(preload=False)
        env.update({
            "GOCACHE": os.path.join(out_dir, "cache"),
            "GOPATH": os.path.join(out_dir, "path"),
            "GOMODCACHE": os.path.join(out_dir, "path", "pkg", "mod"),
            "GOENV": "off", "GOFLAGS": "", "GOTOOLCHAIN": "local", "GOPROXY": "off",
            "GO111MODULE": "on", "GOWORK": "off", "CGO_ENABLED": "1",
        })
        return env

    def build():
        """build/go/cgoprog, rebuilt when a source file is newer."""
        with _build_lock:
            if "cgoprog" in _built:
                return _built["cgoprog"]
            go = shutil.which("go")
            check(go, "go is not installed (Debian package golang-go; scripts/install-deps.sh "
                  "installs it): cannot build test/%s" % GO_SRC)
            exe = os.path.join(out_dir, "cgoprog")
            srcs = glob.glob(os.path.join(src_dir, "*.go")) + [os.path.join(src_dir, "go.mod")]
            newest = max(os.path.getmtime(p) for p in srcs)
            if not os.path.exists(exe) or os.path.getmtime(exe) < newest:
                os.makedirs(out_dir, exist_ok=True)
                fd, tmp_exe = tempfile.mkstemp(prefix=".cgoprog.", dir=out_dir)
                os.close(fd)
                try:
                    p = subprocess.run([go, "build", "-o", tmp_exe, "."], cwd=src_dir,
                                       env=go_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT)
                    if p.returncode != 0:
                        lines = p.stdout.decode(errors="replace").strip().splitlines()
                        raise rt.Failure("go build of test/%s failed (exit %d)%s"
                                         % (GO_SRC, p.returncode,
                                            (": " + lines[-1]) if lines else ""), lines[-20:])
                    os.rename(tmp_exe, exe)
                finally:
                    if os.path.exists(tmp_exe):
                        os.unlink(tmp_exe)
            _built["cgoprog"] = exe
            return exe

    def bare_run(exe, tmp, args=()):
        r = rt.run_bounded([exe] + list(args), tmp, preload=False, timeout=RUN_TIMEOUT)
        check(r.rc == 0 and r.stdout.rstrip().endswith(LAST_LINE),
              "without the preload cgoprog %s: %s, stdout %r (test program?)"
              % (" ".join(args), r.describe(), r.stdout[-200:]))
        check(not r.other_stderr(), "without the preload cgoprog writes to stderr: %s"
              % r.other_stderr()[:3])
        return r

    def problem(r, bare):
        """None if the run behaved like the bare one, else (kind, detail):
        kind the first telling line (normalized), detail one more."""
        if r.rc is None:
            return ("hang (killed after %d s)" % RUN_TIMEOUT,
                    "stdout ends %r" % r.stdout[-60:])
        lines = r.other_stderr()
        if r.rc == bare.rc and r.stdout == bare.stdout and lines == bare.other_stderr():
            return None
        named = []
        for pat in CRASH_PATTERNS:
            for line in lines:
                if pat.match(line):
                    named.append(normalize_crash_line(line))
                    break
            if len(named) == 2:
                break
        if not named:
            if r.rc != bare.rc:
                named = [normalize_crash_line(lines[0]) if lines else "no stderr"]
            elif r.stdout != bare.stdout:
                a, b = bare.stdout.splitlines(), r.stdout.splitlines()
                diff = [(x, y) for x, y in zip(a, b) if x != y] or [(len(a), len(b))]
                named = ["stdout differs", "first difference (bare, preload): %r"
                         % (diff[0],)]
            else:
                named = ["stderr differs: %s" % normalize_crash_line(lines[0] if lines else "")]
        return ("rc=%s, %s" % (r.rc, named[0]), " / ".join(named[1:]))

    def preload_run(exe, tmp, hz, args=()):
        return rt.run_bounded([exe] + list(args), tmp, {"WALLPROF_HZ": str(hz)},
                              timeout=RUN_TIMEOUT)

    def same_as(r, bare, what):
        p = problem(r, bare)
        if p:
            raise rt.Failure("%s under the preload differs from the bare run: %s%s"
                             % (what, p[0], (" (%s)" % p[1]) if p[1] else ""),
                             r.other_stderr()[:15])

    def test_runs(tmp):
        exe = build()
        bare = bare_run(exe, tmp)
        dirs = []
        for i in range(GO_RUNS):
            d = os.path.join(tmp, "run%02d" % i)
            os.mkdir(d)
            dirs.append(d)
        with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            runs = list(pool.map(lambda d: preload_run(exe, d, GO_HZ), dirs))
        again = bare_run(exe, tmp)
        check((again.stdout, again.other_stderr()) == (bare.stdout, bare.other_stderr()),
              "two runs of cgoprog without the preload differ (test program not deterministic, "
              "or a loaded machine?): stdout %r, then %r" % (bare.stdout, again.stdout))
        bad = [(r, problem(r, bare)) for r in runs]
        bad = [(r, p) for r, p in bad if p]
        kinds = collections.Counter(p[0] for _, p in bad)
        details = collections.Counter("%s: %s" % p for _, p in bad if p[1])
        note("%d runs at %s Hz (%d at a time): %d failed" % (len(runs), GO_HZ, PARALLEL, len(bad)))
        for k, n in details.most_common():
            note("  %d x %s" % (n, k))
        if bad:
            first = bad[0][0]
            raise rt.Failure(
                "%d of %d runs of cgoprog under the preload at %s Hz failed: %s"
                % (len(bad), len(runs), GO_HZ,
                   "; ".join("%d x %s" % (n, k) for k, n in kinds.most_common())),
                ["%d x %s" % (n, k) for k, n in details.most_common(8)]
                + ["first failed run (pid %d), stderr:" % first.pid]
                + first.stderr.strip().splitlines()[:12])

    def test_exit_profile(tmp):
        exe = build()
        bare = bare_run(exe, tmp)
        r = preload_run(exe, tmp, PROFILE_HZ)
        same_as(r, bare, "cgoprog")
        if r.profile_path() is None and any("this is a Go program" in l
                                            and "exit_group" in l for l in r.wallprof_lines()):
            note("no exit profile, and the library said why: %s" % r.wallprof_lines())
            return
        if r.profile_path() is None:
            raise rt.Failure(
                "no profile after a Go program's normal end (main.main returned) and no "
                "wallprof: line saying why (wallprof: lines: %s); Go's runtime ends the process "
                "with a raw exit_group system call: no exit(), atexit handlers or destructors "
                "(the same program ending through C.exit() writes one: golang_cgo_profile)"
                % (r.wallprof_lines() or "none"))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        by = rt.samples_by_thread(obj)
        check(len([t for t, ss in by.items() if ss]) >= 3,
              "only %d threads with samples: %s" % (len(by), {t: len(s) for t, s in by.items()}))

    def cexit_profile(tmp):
        exe = build()
        bare = bare_run(exe, tmp, ["cexit"])
        r = preload_run(exe, tmp, PROFILE_HZ, ["cexit"])
        same_as(r, bare, "cgoprog cexit")
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        return obj

    def test_profile(tmp):
        obj = cexit_profile(tmp)
        by = rt.samples_by_thread(obj)
        counts = {t: len(ss) for t, ss in by.items()}
        busy = [t for t, n in counts.items() if n >= 50]
        note("samples per thread: %s" % counts)
        check(len(busy) >= 3, "only %d threads with >= 50 samples at %d Hz: %s"
              % (len(busy), PROFILE_HZ, counts))
        samples = rt.profile_part(obj).get("samples", [])
        fns = {}
        for st in {s["stack_id"] for s in samples}:
            fns[st] = rt.stack_functions(obj, st)
        unnamed = [s for s in samples if not fns[s["stack_id"]][0]]
        check(len(unnamed) <= 0.05 * len(samples), "%d of %d samples have an unnamed leaf frame"
              % (len(unnamed), len(samples)))
        # Threads running Go code: unwound through Go's frames (frame
        # pointers, .debug_frame) down to the goroutine's root.
        on = [s for s in samples if s.get("on_cpu") is True]
        leaf_only = [s for s in on if len(fns[s["stack_id"]]) < 2]
        off_leaf = sum(1 for s in samples if s.get("on_cpu") is not True
                       and len(fns[s["stack_id"]]) < 2)
        note("%d on-CPU samples, %d of them leaf-only; %d off-CPU samples, %d leaf-only"
             % (len(on), len(leaf_only), len(samples) - len(on), off_leaf))
        check(len(on) >= 50, "only %d on-CPU samples (8 goroutines burn CPU)" % len(on))
        check(len(leaf_only) <= 0.1 * len(on), "%d of %d on-CPU samples have the leaf frame only"
              % (len(leaf_only), len(on)))
        go_on = [s for s in on if any(f and f.startswith("main.") for f in fns[s["stack_id"]])]
        unrooted = [s for s in go_on
                    if not (fns[s["stack_id"]][-1] or "").startswith("runtime.goexit")]
        check(len(unrooted) <= 0.2 * len(go_on), "%d of %d on-CPU samples in main.* code do not "
              "end at runtime.goexit (the goroutine's root); e.g. %s"
              % (len(unrooted), len(go_on), " <- ".join(
                  str(f) for f in fns[unrooted[0]["stack_id"]][:8]) if unrooted else ""))

        def with_fn(pred):
            return [s for s in samples if any(f and pred(f) for f in fns[s["stack_id"]])]

        rtm = with_fn(lambda f: f.startswith("runtime."))
        mains = with_fn(lambda f: f.startswith("main."))
        note("%d samples: %d with runtime.* frames, %d with main.* frames"
             % (len(samples), len(rtm), len(mains)))
        check(len(rtm) >= 0.5 * len(samples), "only %d of %d samples have a runtime.* frame"
              % (len(rtm), len(samples)))
        check(len(mains) >= 200, "only %d samples have a main.* frame (Go code of cgoprog)"
              % len(mains))
        # The goroutines in C.c_nap (2 x 4 x 250 ms): nanosleep under c_nap,
        # off-CPU, in the threads that ran them.
        naps = with_fn(lambda f: f == "c_nap")
        check(len(naps) >= 0.5 * PROFILE_HZ, "only %d samples in c_nap (two goroutines sleep "
              "1 s each in it)" % len(naps))
        deep = [s for s in naps if "nanosleep" in (fns[s["stack_id"]][0] or "")
                and "c_nap" in fns[s["stack_id"]][1:4]]
        check(len(deep) >= 0.8 * len(naps), "only %d of %d c_nap samples have a nanosleep leaf "
              "right under c_nap" % (len(deep), len(naps)))
        off = 1 - rt.on_cpu_share(deep)
        check(off >= 0.85, "c_nap samples are off-CPU in only %.0f%%" % (off * 100))

    def test_lines(tmp):
        obj = cexit_profile(tmp)
        frames = rt.profile_part(obj)["frames"]
        go = [f for f in frames if (f.get("function") or "").startswith(("main.", "runtime."))
              and f.get("filename")]
        check(go, "no main.* or runtime.* frame with a filename")
        # Go's own line table names its ABI wrappers "<autogenerated>".
        wrong = [f for f in go if not f["filename"].endswith((".go", ".s", ".S"))
                 and f["filename"] != "<autogenerated>"]
        if wrong:
            seen = collections.Counter("%s:%s" % (f.get("filename"), f.get("lineno"))
                                       for f in wrong)
            raise rt.Failure(
                "%d of %d Go frames (main.*, runtime.*) with a filename name a file that is not "
                "Go source: %s; e.g. %s at %s:%s (addr2line from binutils gives the .go line)"
                % (len(wrong), len(go), dict(seen.most_common(3)), wrong[0].get("function"),
                   wrong[0].get("filename"), wrong[0].get("lineno")))

    def test_debug_cache(tmp):
        """Go links its DWARF compressed: the converter reads the binary
        through an uncompressed copy in the debug cache, with the same
        frames as without it."""
        exe = build()
        bid, compressed = rt.elf_facts(exe)
        check(bid and compressed, "cgoprog: build-id %s, compressed DWARF: %s (Go's linker "
              "compresses it, and links through gcc with a GNU build-id)" % (bid, compressed))
        _, raw = rt.keep_raw_run([exe, "cexit"], tmp, {"WALLPROF_HZ": str(PROFILE_HZ)})
        cache = os.path.join(tmp, "cache")
        off, _ = rt.convert_frames(raw, os.path.join(tmp, "off.json"),
                                   {"WALLPROF_DEBUG_CACHE": "off"})
        made, _ = rt.convert_frames(raw, os.path.join(tmp, "made.json"),
                                    {"WALLPROF_DEBUG_CACHE": cache})
        read, _ = rt.convert_frames(raw, os.path.join(tmp, "read.json"),
                                    {"WALLPROF_DEBUG_CACHE": cache})
        copy = os.path.join(cache, bid + "-m.debug")
        check(os.path.exists(copy), "no copy of cgoprog in the cache: %s" % os.listdir(cache))
        check(rt.elf_facts(copy) == (bid, False), "the copy: %s" % (rt.elf_facts(copy),))
        check([f for f in off if (f.get("function") or "").startswith("main.")
               and f.get("lineno")], "no main.* frame with a line without the cache")
        check(made == off and read == off,
              "cgoprog's frames differ with the debug cache: first difference %s"
              % (next(((a, b) for a, b in zip(off, read) if a != b), None),))
        # A dump names any file it likes: one with another build-id at the
        # module's path (here a compressed debug file of another program) is
        # never copied.
        moved = os.path.join(tmp, "prog")
        shutil.copyfile(exe, moved)
        os.chmod(moved, 0o755)
        _, raw2 = rt.keep_raw_run([moved, "cexit"], tmp, {"WALLPROF_HZ": str(PROFILE_HZ)})
        os.unlink(moved)
        shutil.copyfile(copy, moved)
        other = os.path.join(tmp, "other")
        p = subprocess.run(["objcopy", "--compress-debug-sections=zlib", copy, other],
                           capture_output=True, text=True)
        check(p.returncode == 0, "objcopy: %s" % p.stderr[-200:])
        # the same DWARF, compressed, under another build-id
        with open(other, "r+b") as f:
            data = f.read()
            at = data.find(bytes.fromhex(bid))
            check(at > 0, "no build-id bytes in the copy")
            f.seek(at)
            f.write(bytes(b ^ 0xff for b in bytes.fromhex(bid)))
        os.replace(other, moved)
        other_bid, other_compressed = rt.elf_facts(moved)
        check(other_compressed and other_bid != bid, "the stand-in: %s"
              % (rt.elf_facts(moved),))
        shutil.rmtree(cache)
        rt.convert_frames(raw2, os.path.join(tmp, "other.json"), {"WALLPROF_DEBUG_CACHE": cache})
        check(not [n for n in os.listdir(cache) if n.endswith("-m.debug")
                   or n.startswith(other_bid)],
              "a file with another build-id at the module's path was copied: %s"
              % os.listdir(cache))

    return [
        ("golang_cgo_runs", test_runs),
        ("golang_cgo_exit_profile", test_exit_profile),
        ("golang_cgo_profile", test_profile),
        ("golang_cgo_lines", test_lines),
        ("golang_cgo_debug_cache", test_debug_cache),
    ]
