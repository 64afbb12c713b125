"""The debug cache (symbolize/debug_cache.c): uncompressed copies of
compressed debug information, kept between conversions and named by
build-id, so that a converter does not inflate libc's debug file (Debian's
libc6-dbg compresses it) every time it starts. The subject is the
separate debug file of the libc this machine runs, which every stack
reaches (__libc_start_call_main); a Go binary's own compressed DWARF is
golang_cgo_debug_cache's.

- debug_cache_same: a dump converted without the cache, then with it (the
  copy made), then again (the copy read, not made again) gives the same
  frames; the copy is a regular file of ours in a directory of ours, with
  libc's build-id and nothing compressed; reading it marks it used (its
  mtime); eu-addr2line gives the same functions, inlined frames and lines
  for the original and the copy inside 3000 of libc's functions.
- debug_cache_damaged: a copy cut short, a copy with another build-id, a
  symbolic link and the module itself in a copy's place are never read:
  the frames are those of a conversion without the cache, and a whole copy
  is made again.
- debug_cache_bounds: WALLPROF_DEBUG_CACHE_MAX_MB is kept by dropping the
  least recently used copies first; a copy that cannot fit is not made,
  and nothing is dropped for it; temporaries a dead converter left are
  removed after an hour, not before.
- debug_cache_settings: through the library, a bad WALLPROF_DEBUG_CACHE or
  WALLPROF_DEBUG_CACHE_MAX_MB and a cache directory others can write each
  give one line and no cache, the program and its profile otherwise as
  usual; `off` makes nothing; a HOME of another user gets nothing (as
  root); unset, the cache is $XDG_CACHE_HOME/wallprof/debug.
"""

import os
import re
import shutil
import subprocess
import time

PROG = "conversion"          # test/progs/conversion.c: "work MS" burns CPU in its own code
WORK = ["work", "200"]


def tests(rt):
    check, note = rt.check, rt.note

    def libc_path():
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if rt.is_libc_module(path) and os.path.exists(path):
                    return path
        raise rt.Failure("no libc in this process's maps")

    def libc_debug():
        """The separate debug file of the libc this machine runs (compressed,
        as libc6-dbg ships it), and its build-id; None when there is none."""
        libc = libc_path()
        bid, _ = rt.elf_facts(libc)
        path = bid and "/usr/lib/debug/.build-id/%s/%s.debug" % (bid[:2], bid[2:])
        if not path or not os.path.exists(path):
            note("no debug file for %s (Debian package libc6-dbg; scripts/install-deps.sh "
                 "installs it): the debug cache tests are skipped" % libc)
            return None, None
        check(rt.elf_facts(path)[1], "%s is not compressed: nothing for the cache to do" % path)
        return path, bid

    def dump(tmp):
        _, raw = rt.keep_raw_run([rt.prog(PROG)] + WORK, tmp)
        return raw

    def valid_copy(path, bid):
        st = os.lstat(path)
        check(os.path.isfile(path) and not os.path.islink(path) and st.st_uid == os.geteuid()
              and st.st_mode & 0o077 == 0, "the copy %s: mode %o, uid %d" % (path, st.st_mode,
                                                                                 st.st_uid))
        got, compressed = rt.elf_facts(path)
        check(got == bid and not compressed,
              "the copy %s: build-id %s (want %s), compressed sections: %s"
              % (path, got, bid, compressed))
        return st

    def only_copies(cache):
        """Every entry of the cache is a valid copy (libc's, and ld.so's
        when a sample fell there)."""
        for n in os.listdir(cache):
            check(re.match(r"^[0-9a-f]+-[dm]\.debug$", n), "in the cache: %s" % os.listdir(cache))
            valid_copy(os.path.join(cache, n), n.split("-")[0])

    def same_lines(orig, copy, tmp):
        """eu-addr2line gives the same functions, inlined frames and lines
        for the original and the copy, at a point inside each of up to 3000
        functions of the symbol table."""
        syms = rt.tool(["readelf", "-sW", orig], "readelf -s")
        addrs = sorted({int(f[1], 16) + int(f[2], 0) // 2 for f in
                        (l.split() for l in syms.splitlines())
                        if len(f) >= 8 and f[3] == "FUNC" and f[2].isdigit() and int(f[2]) > 0})
        addrs = addrs[::max(1, len(addrs) // 3000)]
        check(len(addrs) >= 1000, "only %d functions in %s" % (len(addrs), orig))
        argf = os.path.join(tmp, "addrs")
        with open(argf, "w") as f:
            f.write("\n".join("0x%x" % a for a in addrs) + "\n")
        out = {}
        for what, path in (("original", orig), ("copy", copy)):
            with open(argf) as f:
                p = subprocess.run(["eu-addr2line", "-f", "-i", "-e", path], stdin=f,
                                   capture_output=True, text=True, timeout=120)
            check(p.returncode == 0, "eu-addr2line -e %s: %s" % (path, p.stderr[-300:]))
            out[what] = p.stdout.splitlines()
        check(sum(1 for l in out["original"] if re.search(r":[1-9]\d*(:\d+)?$", l))
              >= len(addrs) // 2, "eu-addr2line finds few lines in %s" % orig)
        check(sum(1 for l in out["original"] if " inlined at " in l) >= 50,
              "eu-addr2line finds few inlined frames in %s" % orig)
        diff = [(a, b) for a, b in zip(out["original"], out["copy"]) if a != b]
        check(out["original"] == out["copy"],
              "eu-addr2line over %d addresses: %d lines of the original, %d of the copy, "
              "first difference %s" % (len(addrs), len(out["original"]), len(out["copy"]),
                                       diff[:1]))

    def libc_frames(frames):
        return [f for f in frames if rt.is_libc_module(f.get("module"))]

    def start(tmp):
        """libc's debug file and build-id, a kept dump, the cache's path
        and the dump's frames without the cache; None without libc6-dbg."""
        dbg, bid = libc_debug()
        if not dbg:
            return None
        raw = dump(tmp)
        off, _ = rt.convert_frames(raw, os.path.join(tmp, "off.json"),
                                   {"WALLPROF_DEBUG_CACHE": "off"})
        return dbg, bid, raw, os.path.join(tmp, "cache"), off

    def test_same(tmp):
        got = start(tmp)
        if not got:
            return
        dbg, bid, raw, cache, off = got
        lf = libc_frames(off)
        check([f for f in lf if f.get("lineno")],
              "no libc frame with a line number without the cache: %s" % lf[:3])
        made, _ = rt.convert_frames(raw, os.path.join(tmp, "made.json"),
                                    {"WALLPROF_DEBUG_CACHE": cache})
        copy = os.path.join(cache, bid + "-d.debug")
        only_copies(cache)
        check(os.stat(cache).st_mode & 0o777 == 0o700, "the cache is mode %o"
              % (os.stat(cache).st_mode & 0o777))
        ino = valid_copy(copy, bid).st_ino
        # held by a second name, its inode cannot be reused by a copy made
        # again meanwhile
        os.link(copy, os.path.join(tmp, "held"))
        os.utime(copy, (1e9, 1e9))
        read, _ = rt.convert_frames(raw, os.path.join(tmp, "read.json"),
                                    {"WALLPROF_DEBUG_CACHE": cache})
        check(made == off and read == off,
              "frames differ with the cache: %d frames without, %d when the copy was made, "
              "%d when it was read; first difference: %s"
              % (len(off), len(made), len(read),
                 next(((a, b) for a, b in zip(off, read) if a != b), None)))
        st = os.stat(copy)
        check(st.st_mtime > time.time() - 600,
              "reading the copy did not mark it used (mtime %s)" % st.st_mtime)
        check(st.st_ino == ino and not [n for n in os.listdir(cache) if n.endswith(".tmp")],
              "the copy was made again instead of read (inode %d, then %d; %s)"
              % (ino, st.st_ino, os.listdir(cache)))
        same_lines(dbg, copy, tmp)
        # What is read is the copy: a name changed in it (same length, so
        # the copy still checks out) is the name in the profile.
        name = "__libc_start_call_main"
        check(name in [f.get("function") for f in lf], "no %s frame: %s"
              % (name, [f.get("function") for f in lf]))
        with open(copy, "r+b") as f:
            data = f.read()
            check(data.count(name.encode() + b"\0") >= 1, "no %s in the copy" % name)
            f.seek(0)
            f.write(data.replace(name.encode() + b"\0", name[:-1].encode() + b"X\0"))
        marked, _ = rt.convert_frames(raw, os.path.join(tmp, "marked.json"),
                                      {"WALLPROF_DEBUG_CACHE": cache})
        names = [f.get("function") for f in libc_frames(marked)]
        check(name[:-1] + "X" in names and name not in names,
              "a name changed in the copy is not what the profile shows: %s" % names)

    def test_damaged(tmp):
        got = start(tmp)
        if not got:
            return
        dbg, bid, raw, cache, off = got
        env = {"WALLPROF_DEBUG_CACHE": cache}
        rt.convert_frames(raw, os.path.join(tmp, "made.json"), env)
        copy = os.path.join(cache, bid + "-d.debug")
        good = os.path.join(tmp, "good.debug")
        shutil.copyfile(copy, good)
        size = os.path.getsize(good)

        def cut(path):
            with open(path, "r+b") as f:
                f.truncate(size // 2)

        def other(path):
            os.unlink(path)
            shutil.copyfile(os.path.realpath(rt.prog(PROG)), path)

        def link(path):
            os.unlink(path)
            os.symlink(good, path)

        def module(path):
            # libc itself: the same build-id, nothing compressed, but not
            # the debug file it would stand for
            os.unlink(path)
            shutil.copyfile(libc_path(), path)

        for what, spoil in (("cut short", cut), ("another file's", other),
                            ("a symbolic link", link), ("of the module itself", module)):
            spoil(copy)
            os.chmod(copy, 0o600) if not os.path.islink(copy) else None
            frames, lines = rt.convert_frames(raw, os.path.join(tmp, "x.json"), env)
            check(frames == off, "with a copy %s in the cache, the frames differ from a "
                  "conversion without the cache" % what)
            check(not lines, "with a copy %s: %s" % (what, lines))
            valid_copy(copy, bid)
            check(os.path.getsize(copy) == size, "with a copy %s: made again with %d bytes, "
                  "not %d" % (what, os.path.getsize(copy), size))

    def test_bounds(tmp):
        dbg, bid = libc_debug()
        if not dbg:
            return
        raw = dump(tmp)
        cache = os.path.join(tmp, "cache")
        rt.convert_frames(raw, os.path.join(tmp, "a.json"), {"WALLPROF_DEBUG_CACHE": cache})
        size = os.path.getsize(os.path.join(cache, bid + "-d.debug"))
        shutil.rmtree(cache)
        os.mkdir(cache, 0o700)
        # Three older copies of 4 MiB each (names of build-ids, not ELF
        # files: only their names, sizes and times count), used at 1000,
        # 2000 and 3000 s after the epoch.
        olds = []
        for i, t in enumerate((1000, 2000, 3000)):
            p = os.path.join(cache, ("%02d" % i) * 20 + "-d.debug")
            with open(p, "wb") as f:
                f.write(b"\0" * (4 << 20))
            os.utime(p, (t, t))
            olds.append(p)
        stale = os.path.join(cache, ".%s.debug.1.tmp" % ("ab" * 20))
        fresh = os.path.join(cache, ".%s.debug.2.tmp" % ("cd" * 20))
        for p, age in ((stale, 7200), (fresh, 60)):
            open(p, "wb").close()
            os.utime(p, (time.time() - age,) * 2)
        # Room for the new copy and two and a half of the three.
        mb = (size + (10 << 20) + (1 << 20) - 1) >> 20
        frames, lines = rt.convert_frames(raw, os.path.join(tmp, "b.json"),
                                          {"WALLPROF_DEBUG_CACHE": cache,
                                           "WALLPROF_DEBUG_CACHE_MAX_MB": str(mb)})
        check(not lines, "lines: %s" % lines)
        left = sorted(os.listdir(cache))
        total = sum(os.path.getsize(os.path.join(cache, n)) for n in left)
        check(total <= mb << 20, "%d bytes in a cache of %d MiB: %s" % (total, mb, left))
        check(os.path.exists(os.path.join(cache, bid + "-d.debug")), "no copy made: %s" % left)
        gone = [not os.path.exists(p) for p in olds]
        check(gone[0] and not gone[2] and gone == sorted(gone, reverse=True),
              "want the least recently used copies dropped first, the newest kept: %s" % left)
        check(not os.path.exists(stale) and os.path.exists(fresh),
              "want the two-hour-old temporary removed, the minute-old one kept: %s" % left)
        # A copy larger than the whole cache is not made, and nothing is
        # dropped for it: neither when the original is larger than the
        # cache, nor when only the copy (inflated) is.
        os.unlink(os.path.join(cache, bid + "-d.debug"))
        orig_mb = (os.path.getsize(dbg) + (1 << 20) - 1) >> 20
        # A temporary another converter is writing takes room too: with it,
        # the copy would not fit even with every other copy gone.
        writing = os.path.join(cache, ".%s-d.debug.3.tmp" % ("ef" * 20))
        with open(writing, "wb") as f:
            f.write(b"\0" * (8 << 20))
        before = sorted(os.listdir(cache))
        for limit in ("1", str(orig_mb + 1), str(((size + (1 << 20) - 1) >> 20) + 4)):
            rt.convert_frames(raw, os.path.join(tmp, "c.json"),
                              {"WALLPROF_DEBUG_CACHE": cache,
                               "WALLPROF_DEBUG_CACHE_MAX_MB": limit})
            after = sorted(os.listdir(cache))
            # (a copy of ld.so's debug file, when a sample fell there, may
            # fit where libc's does not, and drop the old ones for itself)
            check(bid + "-d.debug" not in after and os.path.exists(writing) and
                  (after == before or set(after) - set(before)),
                  "a cache of %s MiB: %s, was %s" % (limit, after, before))

    def test_settings(tmp):
        dbg, bid = libc_debug()
        argv = [rt.prog(PROG)] + WORK
        bare = rt.run_bounded(argv, tmp, preload=False)
        open_dir = os.path.join(tmp, "shared")
        os.mkdir(open_dir)
        os.chmod(open_dir, 0o777)
        for env, want in (({"WALLPROF_DEBUG_CACHE_MAX_MB": "abc"},
                           'WALLPROF_DEBUG_CACHE_MAX_MB="abc": want a whole number'),
                          ({"WALLPROF_DEBUG_CACHE": "relative/dir"},
                           'WALLPROF_DEBUG_CACHE="relative/dir": want an absolute directory'),
                          ({"WALLPROF_DEBUG_CACHE": open_dir},
                           "not a directory of ours that only we can write")):
            env["XDG_CACHE_HOME"] = os.path.join(tmp, "xdg")
            r = rt.run_bounded(argv, tmp, env_extra=env)
            check(r.rc == bare.rc and r.stdout == bare.stdout and not r.other_stderr(),
                  "with %s: %s" % (env, r.describe()))
            lines = [l for l in r.wallprof_lines() if "debug cache" in l]
            check(len(lines) == 1 and want in lines[0] and "the debug cache is off" in lines[0],
                  "with %s, want one line with %r: %s" % (env, want, r.wallprof_lines()))
            rt.check_valid(rt.exit_profile(r))
            check(os.listdir(open_dir) == [] and not os.path.exists(env["XDG_CACHE_HOME"]),
                  "with %s a cache was written: %s" % (env, os.listdir(open_dir)))
        xdg = os.path.join(tmp, "xdg")
        r = rt.run_bounded(argv, tmp, env_extra={"WALLPROF_DEBUG_CACHE": "off",
                                                 "XDG_CACHE_HOME": xdg})
        check(r.rc == bare.rc and not [l for l in r.wallprof_lines() if "cache" in l],
              "with the cache off: %s" % r.describe())
        check(not os.path.exists(xdg), "with the cache off, %s was made" % xdg)
        if os.geteuid() == 0:
            # root with another user's HOME (sudo keeps it): nothing made there
            alien = os.path.join(tmp, "alien")
            os.mkdir(alien)
            os.chown(alien, 65534, 65534)
            env = {"HOME": alien, "XDG_CACHE_HOME": ""}
            r = rt.run_bounded(argv, tmp, env_extra=env)
            check(r.rc == bare.rc and not [l for l in r.wallprof_lines() if "cache" in l],
                  "with another user's HOME: %s" % r.describe())
            check(os.listdir(alien) == [], "made in another user's HOME: %s"
                  % os.listdir(alien))
        if not dbg:
            return
        r = rt.run_bounded(argv, tmp, env_extra={"XDG_CACHE_HOME": xdg})
        check(r.rc == bare.rc and not [l for l in r.wallprof_lines() if "cache" in l],
              "with the default cache: %s" % r.describe())
        rt.check_valid(rt.exit_profile(r))
        valid_copy(os.path.join(xdg, "wallprof", "debug", bid + "-d.debug"), bid)
        only_copies(os.path.join(xdg, "wallprof", "debug"))

    return [
        ("debug_cache_same", test_same),
        ("debug_cache_damaged", test_damaged),
        ("debug_cache_bounds", test_bounds),
        ("debug_cache_settings", test_settings),
    ]
