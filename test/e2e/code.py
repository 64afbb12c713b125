"""Code layouts under the profiler (test/progs/code.c, libcode_plugin.c): a
plugin deleted or replaced on disk while loaded, no frame pointers, no
unwind tables, stripped executables with their debug info in a debuglink
file or under /usr/lib/debug/.build-id, and stacks deeper than
WALLPROF_MAX_DEPTH. Variants with special build flags are built here, into
the test's temporary directory."""

import os
import re
import shutil
import subprocess

SRC = "code.c"
BASE_FLAGS = ["-pthread", "-Wall", "-Wextra", "-Werror", "-std=gnu11"]
CHAIN = ["wpt_level3", "wpt_level2", "wpt_level1", "main"]  # leaf first
RECURSE_DEPTH = 3000
TOOL_TIMEOUT = 60


def tests(rt):
    check, note = rt.check, rt.note
    src = os.path.join(rt.PROG_SRC, SRC)

    def tool(argv, what):
        return rt.tool(argv, what, TOOL_TIMEOUT)

    def build(tmp, name, flags):
        out = os.path.join(tmp, name)
        tool([os.environ.get("CC", "cc")] + flags + BASE_FLAGS + ["-o", out, src, "-lm"],
             "building %s" % name)
        return out

    def symbols(path):
        """Names in the ELF symbol table (.symtab only; none when stripped)."""
        out = tool(["readelf", "-W", "--syms", path], "readelf --syms")
        names, section = set(), None
        for line in out.splitlines():
            if line.startswith("Symbol table"):
                section = ".symtab" if "'.symtab'" in line else "other"
                continue
            parts = line.split()
            if section == ".symtab" and len(parts) >= 8 and parts[0].endswith(":"):
                names.add(parts[7])
        return names

    def build_id(path):
        m = re.search(r"Build ID:\s*([0-9a-fA-F]+)", tool(["readelf", "-n", path], "readelf -n"))
        check(m, "%s has no GNU build-id note" % path)
        return m.group(1).lower()

    def func_line_range(fn):
        """(first, last) source lines of `fn` in code.c."""
        with open(src) as f:
            lines = f.read().splitlines()
        start = next(i for i, l in enumerate(lines, 1) if re.search(r"\b%s\(" % fn, l)
                     and not l.rstrip().endswith(";"))
        end = next(i for i, l in enumerate(lines[start:], start + 1) if l == "}")
        return start, end

    def run_chain(tmp, exe, seconds="1.0", env_extra=None):
        r = rt.run_under_preload([exe, "chain", seconds], env_extra, cwd=tmp)
        check(r.rc == 0 and r.stdout == "chain: done\n", "%s chain: stdout %r, %s"
              % (os.path.basename(exe), r.stdout, r.describe()))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        main = rt.samples_by_thread(obj).get(str(r.pid), [])
        check(len(main) >= 40, "the main thread has only %d samples" % len(main))
        return r, obj, main

    def has_chain(fns):
        """CHAIN appears in order (leaf first), allowing frames in between
        only below wpt_level3 (libc's clock_gettime and the like)."""
        if "wpt_level3" not in fns:
            return False
        k = fns.index("wpt_level3")
        return fns[k:k + len(CHAIN)] == CHAIN

    def chain_share(obj, samples):
        return sum(1 for s in samples if has_chain(rt.stack_functions(obj, s["stack_id"]))) \
            / len(samples)

    def top_stacks(obj, samples, n=2, depth=6):
        common = {}
        for s in samples:
            key = " <- ".join(str(f) for f in rt.stack_functions(obj, s["stack_id"])[:depth])
            common[key] = common.get(key, 0) + 1
        return sorted(common.items(), key=lambda kv: -kv[1])[:n]

    def require_chain(obj, samples, what, want=0.8):
        share = chain_share(obj, samples)
        note("%s: %.0f%% of %d main-thread samples hold %s" % (what, share * 100, len(samples),
                                                               " <- ".join(CHAIN)))
        check(share >= want, "%s: only %.0f%% of %d samples reach main through %s; most common: "
              "%s" % (what, share * 100, len(samples), " <- ".join(CHAIN),
                      top_stacks(obj, samples)))

    def require_lines(obj, what):
        """wpt_level3 frames carry code.c and a line inside wpt_level3."""
        lo, hi = func_line_range("wpt_level3")
        frames = [f for f in rt.profile_part(obj)["frames"] if f.get("function") == "wpt_level3"]
        check(frames, "%s: no wpt_level3 frame; functions: %s" % (
            what, sorted({str(f.get("function")) for f in rt.profile_part(obj)["frames"]})[:12]))
        good = [f for f in frames if f.get("filename") == SRC and isinstance(f.get("lineno"), int)
                and lo <= f["lineno"] <= hi]
        check(good, "%s: no wpt_level3 frame with %s:%d..%d; seen %s" % (
            what, SRC, lo, hi, sorted({(f.get("filename"), f.get("lineno")) for f in frames},
                                      key=str)[:5]))

    # ---- plugin deleted / replaced while loaded ----

    CRT_FUNCTIONS = {"_init", "_fini", "frame_dummy", "register_tm_clones",
                     "deregister_tm_clones", "__do_global_dtors_aux"}

    def plugin_case(tmp, action):
        plugin = os.path.join(tmp, "libcode_plugin.so")
        shutil.copy(os.path.join(rt.PROGS, "libcode_plugin.so"), plugin)
        argv = [rt.prog("code"), "plugin", plugin, action]
        if action == "replace":
            other = os.path.join(tmp, "other.so")
            shutil.copy(os.path.join(rt.PROGS, "libwpt_plugin.so"), other)
            argv.append(other)
        word = "unlinked" if action == "unlink" else "replaced"
        want = "plugin: work 1\nplugin: %s\nplugin: work again 1\n" % word
        r = rt.run_under_preload(argv, cwd=tmp)
        check(r.rc == 0 and r.stdout == want, "code plugin %s: stdout %r, %s"
              % (action, r.stdout, r.describe()))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        p = rt.profile_part(obj)
        frames = p["frames"]
        plug = [i for i, f in enumerate(frames) if "libcode_plugin" in str(f.get("module", ""))
                or str(f.get("function", "")).startswith("wpt_hplugin")]
        check(plug, "no frame from libcode_plugin.so; modules: %s"
              % sorted({str(f.get("module")) for f in frames}))
        modules = sorted({str(frames[i].get("module")) for i in plug})
        names = sorted({str(frames[i].get("function")) for i in plug})
        note("plugin %s: plugin frames: functions %s, modules %s" % (action, names, modules))
        # Where the plugin's functions are in the file that was loaded.
        orig = os.path.join(rt.PROGS, "libcode_plugin.so")
        lo = hi = None
        for line in tool(["nm", "-S", orig], "nm -S").splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[3].startswith("wpt_hplugin"):
                a, n = int(parts[0], 16), int(parts[1], 16)
                lo = a if lo is None else min(lo, a)
                hi = a + n if hi is None else max(hi, a + n)
        check(lo is not None, "test problem: no wpt_hplugin_* in nm -S %s" % orig)
        for i in plug:
            f = frames[i]
            fn = str(f.get("function") or "")
            # Symbolized from the original (still mapped) file: the work
            # functions or a helper of the same source inlined into them.
            if fn.startswith("wpt_hplugin") or f.get("filename") == "libcode_plugin.c":
                continue
            # A sample may land while dlopen/dlclose run the plugin's
            # compiler-provided init and fini code: true frames too.
            if fn in CRT_FUNCTIONS:
                continue
            check("module" in f and "module_offset" in f,
                  "plugin frame %r neither symbolized as wpt_hplugin_* nor with module + "
                  "module_offset: %s" % (fn, f))
            off = int(str(f["module_offset"]), 16)
            check(lo <= off < hi, "plugin frame module_offset %#x is outside wpt_hplugin_* "
                  "(%#x..%#x) in the loaded file: %s" % (off, lo, hi, f))
        want_id = build_id(orig)
        imgs = [i for i in obj.get("debug_meta", {}).get("images", [])
                if "libcode_plugin" in str(i.get("code_file"))]
        check(imgs, "no debug_meta image for the plugin")
        check(all(str(i.get("code_id", "")).lower() == want_id for i in imgs),
              "the plugin's debug image has code_id %s, the loaded file's build-id is %s"
              % ([i.get("code_id") for i in imgs], want_id))
        wrong = [f for f in frames if f.get("function") == "wpt_plugin_work"]
        check(not wrong, "frames named wpt_plugin_work (the function of the file that "
              "replaced the plugin on disk): %s" % wrong[:2])
        main = rt.samples_by_thread(obj).get(str(r.pid), [])
        plug = set(plug)
        in_plugin = [s for s in main if plug.intersection(p["stacks"][s["stack_id"]])]
        check(len(in_plugin) >= 40, "only %d of %d main-thread samples have plugin frames "
              "(0.8 s in the plugin)" % (len(in_plugin), len(main)))
        # The last 0.2 s run in the plugin after its file was deleted/replaced.
        last = max(int(s["elapsed_since_start_ns"]) for s in main)
        late = [s for s in main if int(s["elapsed_since_start_ns"]) >= last - 200_000_000]
        late_in = [s for s in late if plug.intersection(p["stacks"][s["stack_id"]])]
        check(len(late_in) >= len(late) * 0.7, "after the file was %s only %d of %d samples "
              "have plugin frames" % (word, len(late_in), len(late)))
        named = [s for s in in_plugin if "wpt_hplugin_inner" in rt.stack_functions(
            obj, s["stack_id"])]
        if len(named) < 0.8 * len(in_plugin):
            print("    note: plugin %s: only %d of %d plugin samples symbolized to wpt_hplugin_inner"
                 % (action, len(named), len(in_plugin)))

    def test_plugin_deleted(tmp):
        plugin_case(tmp, "unlink")

    def test_plugin_replaced(tmp):
        plugin_case(tmp, "replace")

    # ---- unwinding without frame pointers / without unwind tables ----

    def test_no_frame_pointers(tmp):
        exe = build(tmp, "code_nofp", ["-O2", "-g", "-fomit-frame-pointer"])
        _, obj, main = run_chain(tmp, exe)
        require_chain(obj, main, "-fomit-frame-pointer")

    def fde_ranges(path):
        out = tool(["readelf", "-W", "--debug-dump=frames", path], "readelf --debug-dump=frames")
        return [(int(a, 16), int(b, 16)) for a, b in
                re.findall(r"FDE cie=\S+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", out)]

    def test_no_unwind_tables(tmp):
        exe = build(tmp, "code_noeh", ["-O0", "-fno-omit-frame-pointer",
                                         "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"])
        nm = tool(["nm", exe], "nm")
        addr = {l.split()[2]: int(l.split()[0], 16) for l in nm.splitlines()
                if len(l.split()) == 3}
        covered = [fn for fn in CHAIN if fn in addr and
                   any(a <= addr[fn] < b for a, b in fde_ranges(exe))]
        check(not covered, "test build problem: unwind info (FDE) still covers %s" % covered)
        _, obj, main = run_chain(tmp, exe)
        share = chain_share(obj, main)
        depths = sorted(len(rt.profile_part(obj)["stacks"][s["stack_id"]]) for s in main)
        print("    note: no .eh_frame/.debug_frame for the program's code (-O0, frame "
              "pointers): %.0f%% of %d samples reach main via wpt_level3..1; median depth %d; "
              "most common: %s" % (share * 100, len(main), depths[len(depths) // 2],
                                   top_stacks(obj, main, 1)))
        leafy = sum(1 for s in main if "wpt_level3" in rt.stack_functions(obj, s["stack_id"]))
        check(leafy >= 0.8 * len(main), "only %d of %d samples hold wpt_level3" % (leafy,
                                                                                  len(main)))

    # ---- stripped executables: debuglink, build-id ----

    def stripped_pair(tmp, name):
        exe = build(tmp, name, ["-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id"])
        dbg = exe + ".debug"
        tool(["objcopy", "--only-keep-debug", exe, dbg], "objcopy --only-keep-debug")
        return exe, dbg

    def test_debuglink(tmp):
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        exe, dbg = stripped_pair(bindir, "code")
        tool(["strip", "--strip-debug", "--strip-unneeded", exe], "strip")
        tool(["objcopy", "--add-gnu-debuglink=%s" % dbg, exe], "objcopy --add-gnu-debuglink")
        check("wpt_level3" not in symbols(exe), "test build problem: wpt_level3 still in the "
              "stripped executable's symbol table")
        _, obj, main = run_chain(tmp, exe)
        require_chain(obj, main, "stripped + .gnu_debuglink")
        require_lines(obj, "stripped + .gnu_debuglink")

    def test_build_id_dir(tmp):
        unshare = shutil.which("unshare")
        if not unshare:
            print("    note: skipped: unshare not installed")
            return
        probe = subprocess.run([unshare, "-m", "sh", "-c", "mount -t tmpfs none /usr/lib/debug"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        if probe.returncode != 0:
            print("    note: skipped: cannot mount in a private mount namespace: %s"
                  % probe.stdout.decode(errors="replace").strip()[-200:])
            return
        exe, dbg = stripped_pair(tmp, "code")
        bid = build_id(exe)
        tool(["strip", "--strip-all", exe], "strip --strip-all")
        check(build_id(exe) == bid, "strip changed the build-id")
        check("wpt_level3" not in symbols(exe), "test build problem: wpt_level3 still in the "
              "stripped executable's symbol table")
        target = "/usr/lib/debug/.build-id/%s/%s.debug" % (bid[:2], bid[2:])
        script = ('set -e; mount -t tmpfs none /usr/lib/debug; mkdir -p "$(dirname "$T")"; '
                  'cp "$D" "$T"; exec env LD_PRELOAD="$L" "$E" chain 1.0')
        env = rt.clean_env(preload=False)
        env.update({"T": target, "D": dbg, "L": rt.LIB, "E": exe})
        try:
            p = subprocess.run([unshare, "-m", "sh", "-c", script], cwd=tmp, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=rt.RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise rt.Failure("the stripped program did not finish within %d s" % rt.RUN_TIMEOUT)
        r = rt.Run([exe], tmp, None, p.returncode, p.stdout.decode(errors="replace"),
                   p.stderr.decode(errors="replace"))
        check(r.rc == 0 and r.stdout == "chain: done\n", "stripped chain: stdout %r, %s"
              % (r.stdout, r.describe()))
        check(not os.path.exists(target), "the debug file leaked out of the mount namespace")
        paths = r.wrote_paths()
        check(paths, "no \"wallprof: wrote\" line (%s)" % r.describe())
        obj = rt.load_profile(paths[-1])
        rt.check_valid(obj)
        pid = rt.wallprof_section(obj).get("pid")
        main = rt.samples_by_thread(obj).get(str(pid), [])
        check(len(main) >= 40, "the main thread has only %d samples" % len(main))
        require_chain(obj, main, "stripped, debug file by build-id")
        require_lines(obj, "stripped, debug file by build-id")

    # ---- deep recursion: WALLPROF_MAX_DEPTH ----

    def recursion(tmp, max_depth):
        env = {"WALLPROF_MAX_DEPTH": str(max_depth)} if max_depth != 128 else None
        r = rt.run_under_preload([rt.prog("code"), "recurse", str(RECURSE_DEPTH), "1.0"], env,
                                 cwd=tmp)
        check(r.rc == 0 and r.stdout == "recurse: done\n", "recurse: stdout %r, %s"
              % (r.stdout, r.describe()))
        obj = rt.exit_profile(r)
        rt.check_valid(obj)
        w = rt.wallprof_section(obj)
        check(w.get("max_depth") in (None, max_depth), "wallprof.max_depth is %r, want %d"
              % (w.get("max_depth"), max_depth))
        p = rt.profile_part(obj)
        main = rt.samples_by_thread(obj).get(str(r.pid), [])
        check(len(main) >= 40, "the main thread has only %d samples" % len(main))
        deep = [s for s in main if "wpt_level3" in rt.stack_functions(obj, s["stack_id"])]
        check(len(deep) >= 0.8 * len(main), "only %d of %d samples hold wpt_level3 at the "
              "bottom of the recursion" % (len(deep), len(main)))
        longest, worst = 0, None
        for s in main:
            frames = rt.stack_frames(obj, s["stack_id"])
            # Inlined frames are added by symbolization; the cut applies to
            # the captured addresses: the frames not marked inlined.
            raw = sum(1 for f in frames if f.get("inlined") is not True)
            if raw > longest:
                longest, worst = raw, frames
        note("max depth %d: longest stack %d captured frames" % (max_depth, longest))
        check(longest <= max_depth, "a stack has %d captured frames, WALLPROF_MAX_DEPTH is %d"
              % (longest, max_depth))
        check(longest >= max_depth - 2, "stacks are cut at %d frames, well below "
              "WALLPROF_MAX_DEPTH %d" % (longest, max_depth))
        rec = sum(1 for f in worst if f.get("function") == "wpt_recurse")
        check(rec >= max_depth - 8, "the longest stack has only %d wpt_recurse frames" % rec)
        flagged = [s for s in deep if s.get("truncated") is True]
        check(len(flagged) >= 0.9 * len(deep), "only %d of %d cut samples carry "
              "\"truncated\": true" % (len(flagged), len(deep)))
        check(isinstance(w.get("truncated_samples"), int) and w["truncated_samples"] >= len(deep)
              * 0.9, "wallprof.truncated_samples is %r for %d cut samples"
              % (w.get("truncated_samples"), len(deep)))
        short = [s for s in main if s.get("truncated") is True and
                 len(p["stacks"][s["stack_id"]]) < max_depth // 2]
        check(not short, "%d samples marked truncated have short stacks" % len(short))

    def test_recursion_default(tmp):
        recursion(tmp, 128)

    def test_recursion_64(tmp):
        recursion(tmp, 64)

    def test_block_in_loader(tmp):
        """A blocking call inside a dl_iterate_phdr callback (the thread holds
        the loader's lock): the sampler must not unwind it with libunwind,
        which takes that lock (it used to hang the program for good)."""
        argv = [rt.prog("code"), "dlblock", "300"]
        plain = rt.run_plain(argv, tmp)
        check(plain.rc == 0 and plain.stdout == "dlblock: 300 callbacks\n",
              "code dlblock without the library: %s" % plain.describe())
        run = rt.run_under_preload(argv, {"WALLPROF_HZ": "1000"}, cwd=tmp, timeout=60)
        check(run.rc == plain.rc and run.stdout == plain.stdout,
              "under the preload: rc %s, stdout %r (%s)" % (run.rc, run.stdout, run.describe()))
        obj = rt.load_profile(run.profile_path())
        rt.check_valid(obj, "dlblock profile")
        # 300 x 2 ms asleep at 1000 Hz: about 600 samples. The sampler must
        # not wait for the loader's lock the callback holds either (its
        # module-map refresh did, every tick: ~130 samples, 370 ticks late).
        labels = [s.get("syscall") for s in rt.profile_part(obj)["samples"]]
        n = labels.count("nanosleep") + labels.count("clock_nanosleep")
        check(n >= 300, "only %d samples in the callback's sleep (labels seen: %s; ticks_late %s)"
              % (n, sorted(set(map(str, labels))), rt.wallprof_section(obj).get("ticks_late")))

    def site_replay(tmp, mode):
        argv = [rt.prog("code_sites"), "3"] + ([mode] if mode else [])
        run = rt.run_under_preload(argv, {"WALLPROF_HZ": "1000", "WALLPROF_TEST_SITE_CHECK": "1"},
                                   cwd=tmp)
        check(run.rc == 0 and run.stdout == "sites: done\n", "code_sites: %s" % run.describe())
        obj = rt.load_profile(run.profile_path())
        rt.check_valid(obj, "code_sites profile")
        ctr = obj["wallprof"]
        check(ctr["site_mismatch"] == 0, "%d of %d replayed walks differ from libunwind's"
              % (ctr["site_mismatch"], ctr["site_replayed"]))
        check(ctr["site_replayed"] >= 200, "only %d walks replayed (from_wrapper %d)"
              % (ctr["site_replayed"], ctr["from_wrapper"]))
        seen = set()
        for smp in rt.profile_part(obj)["samples"]:
            fns = rt.stack_functions(obj, smp["stack_id"])
            if "block_once" in fns:
                seen.update(f for f in ("wpt_site_a", "wpt_site_b") if f in fns)
        want = {"wpt_site_b"} if mode == "same" else {"wpt_site_a", "wpt_site_b"}
        check(seen == want, "blocked stacks name %s, want %s" % (sorted(seen), sorted(want)))
        return obj, ctr

    def test_site_replay(tmp):
        """Walks from published registers are replayed when a thread blocks
        again where it blocked before; WALLPROF_TEST_SITE_CHECK=1 checks each
        replay against a real libunwind walk. code_sites blocks from two
        look-alike functions (same stack pointer, other return addresses).
        Its threads block on the stacks pthread gave them, which the sampler
        finds in /proc/self/maps and then reads directly; so does the main
        thread on its [stack] ("main": the loop on the main thread alone)."""
        for mode in (None, "main"):
            _, ctr = site_replay(tmp, mode)
            check(ctr["site_direct"] >= ctr["site_replayed"] * 0.8,
                  "%s: only %d of %d replays read the stack directly"
                  % (mode or "threads", ctr["site_direct"], ctr["site_replayed"]))

    def test_site_replay_same_place(tmp):
        """Threads that block again and again at one place have nearly every
        walk replayed. Guards the cache key: the registers a wrapper
        publishes must not vary from call to call (a change to the wrappers'
        inlined code once made %rbp vary and cut the mixed benchmark's
        replays from 99 % to 60 %)."""
        _, ctr = site_replay(tmp, "same")
        check(ctr["site_replayed"] >= 0.8 * ctr["from_wrapper"],
              "only %d of %d walks from wrappers replayed"
              % (ctr["site_replayed"], ctr["from_wrapper"]))

    def test_site_replay_own_stacks(tmp):
        """The same on stacks the program made itself (makecontext on an
        mmap with a guard page): the sampler cannot vouch for that memory
        and reads it through the kernel; the replays are still checked."""
        _, ctr = site_replay(tmp, "ctx")
        check(ctr["site_replayed"] - ctr["site_direct"] >= 200,
              "%d of %d replays read the program's own stacks through the kernel"
              % (ctr["site_replayed"] - ctr["site_direct"], ctr["site_replayed"]))

    return [
        ("code_site_replay", test_site_replay),
        ("code_site_replay_own_stacks", test_site_replay_own_stacks),
        ("code_site_replay_same_place", test_site_replay_same_place),
        ("code_dl_callback_blocks", test_block_in_loader),
        ("code_plugin_deleted", test_plugin_deleted),
        ("code_plugin_replaced", test_plugin_replaced),
        ("code_no_frame_pointers", test_no_frame_pointers),
        ("code_no_unwind_tables", test_no_unwind_tables),
        ("code_debuglink", test_debuglink),
        ("code_build_id_dir", test_build_id_dir),
        ("code_recursion_depth_default", test_recursion_default),
        ("code_recursion_depth_64", test_recursion_64),
    ]
