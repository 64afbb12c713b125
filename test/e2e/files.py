"""End-to-end tests: hostile files and bad configuration.

The library's contract under test:
- A bad value in any WALLPROF_* variable never changes what the program
  does; each bad variable gets one stderr line starting "wallprof: " that
  names it.
- When the profile cannot be written where WALLPROF_OUTPUT says (missing or
  unwritable directory, read-only working directory, full disk, file size
  limit, a symlink it must not follow), stderr says so and names the
  fallback it wrote instead: $TMPDIR/wallprof.<pid>.json (TMPDIR from the
  environment, else /tmp); if that fails too, stderr says the profile was
  not written.
- The program behaves exactly as without the library: same exit status and
  stdout; in particular a file size limit never kills it with SIGXFSZ.
- A symlink at the output path is never written through: its target is not
  created, truncated or changed.
- A written profile's mode follows the umask (0666 & ~umask).
- Never a partial or corrupt file: every *.json left behind is complete JSON
  and no temporary file remains.

Tests that need other users (nobody, and uid 65533 as a second unprivileged
user) or a private mount namespace run only as root; they say "note:
skipped" otherwise.
"""

import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import threading

NOBODY = (65534, 65534)   # nobody:nogroup, the "attacker" in symlink tests
VICTIM = (65533, 65533)   # a second unprivileged user without a passwd entry
TMPFS_SIZE = 64 * 1024
# A line that says a file was not written (the exact words are the library's).
NOT_WRITTEN_RE = re.compile(r"not (?:been )?written|could not|couldn't|cannot|can't|failed|"
                            r"unable", re.I)
TEMP_RE = re.compile(r"\.tmp\.|\.tmp$|~$")
XFSZ_BIT = 1 << (signal.SIGXFSZ - 1)


def tests(rt):
    is_root = os.geteuid() == 0

    # -- running ---------------------------------------------------------

    def run_as(argv, cwd, env_extra=None, preload=True, user=None, umask=None, fsize=None,
               unset=(), timeout=rt.RUN_TIMEOUT):
        """Like rt.run_prog, with a user (uid, gid), umask, RLIMIT_FSIZE
        (bytes) and variables removed from the environment."""
        env = rt.clean_env(env_extra, preload)
        for k in unset:
            env.pop(k, None)
        kw = {}
        if user is not None:
            kw.update(user=user[0], group=user[1], extra_groups=[])
        if umask is not None:
            kw["umask"] = umask
        if fsize is not None:
            kw["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        # restore_signals (the default) puts SIGPIPE/SIGXFSZ back to SIG_DFL.
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, **kw)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.communicate()
            raise rt.Failure("%s did not finish within %d s" % (" ".join(argv), timeout))
        return rt.Run(argv, cwd, proc.pid, proc.returncode, out.decode(errors="replace"),
                      err.decode(errors="replace"))

    def exitcode_plain(tmp, **kw):
        plain = run_as([rt.prog("exitcode")], tmp, preload=False, **kw)
        rt.check(plain.rc == 7, "exitcode without the library: %s" % plain.describe())
        return plain

    def same_behaviour(label, plain, run):
        rt.check(run.rc == plain.rc, "%s: exit status %s, %s without the library (%s)"
                 % (label, run.rc, plain.rc, run.describe()))
        rt.check(run.stdout == plain.stdout, "%s: stdout differs from the plain run: %r vs %r"
                 % (label, run.stdout[-200:], plain.stdout[-200:]))
        rt.check(run.other_stderr() == plain.other_stderr(),
                 "%s: stderr besides wallprof lines differs: %r" % (label, run.other_stderr()[:3]))

    # -- files -----------------------------------------------------------

    def mkdir(path, mode, owner=None):
        os.makedirs(path, exist_ok=True)
        if owner is not None:
            os.chown(path, owner[0], owner[1])
        os.chmod(path, mode)
        return path

    def open_up(tmp):
        """Lets other users into the test directory (mkdtemp makes it 0700)."""
        os.chmod(tmp, 0o755)

    def scan(label, *dirs):
        """Every *.json under `dirs` (symlinks not followed) is complete
        JSON; no temporary file is left. Returns the regular *.json files."""
        found = []
        for top in dirs:
            if not os.path.isdir(top):
                continue
            for d, subdirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(d, name)
                    if os.path.islink(path):
                        continue
                    rt.check(not TEMP_RE.search(name), "%s: temporary file left: %s"
                             % (label, path))
                    if name.endswith(".json"):
                        try:
                            with open(path) as f:
                                json.load(f)
                        except ValueError as e:
                            raise rt.Failure("%s: %s is not complete JSON (%d bytes): %s"
                                             % (label, path, os.path.getsize(path), e))
                        found.append(path)
        return found

    def lines_naming(run, *needles):
        return [l for l in run.wallprof_lines() if any(n in l for n in needles)]

    def check_fallback(label, run, tmpdir, refused):
        """The profile went to tmpdir/wallprof.<pid>.json, stderr says the
        intended place (any of `refused`: path or directory) failed and names
        the fallback. Returns the loaded profile."""
        fallback = os.path.join(tmpdir, "wallprof.%d.json" % run.pid)
        other = [p for p in run.wrote_paths() if os.path.dirname(p) == tmpdir and p != fallback]
        rt.check(not other, "%s: the fallback was written as %s; the contract names it %s "
                 "($TMPDIR/wallprof.<pid>.json, whatever WALLPROF_OUTPUT's file name)"
                 % (label, other[0] if other else "", fallback))
        rt.check(lines_naming(run, *refused),
                 "%s: no wallprof line says the profile could not be written to %s; stderr: %r"
                 % (label, refused[0], run.wallprof_lines()))
        rt.check(lines_naming(run, fallback), "%s: no wallprof line names the fallback %s; "
                 "stderr: %r" % (label, fallback, run.wallprof_lines()))
        rt.check(os.path.isfile(fallback) and not os.path.islink(fallback),
                 "%s: fallback %s not written; %s has %s"
                 % (label, fallback, tmpdir, sorted(os.listdir(tmpdir))))
        obj = rt.load_profile(fallback)
        rt.check_valid(obj, "%s: fallback profile" % label)
        return obj

    def check_not_written(label, run):
        rt.check(not run.wrote_paths(), "%s: stderr says it wrote %s" % (label, run.wrote_paths()))
        rt.check(any(NOT_WRITTEN_RE.search(l) for l in run.wallprof_lines()),
                 "%s: no wallprof line says the profile was not written; stderr: %r"
                 % (label, run.wallprof_lines()))

    def unprivileged():
        """The (uid, gid) to run as so that permissions apply: nobody when we
        are root, else None (we already are unprivileged)."""
        return NOBODY if is_root else None

    def in_mount_ns(tmp, mnt, opts, argv, env_extra, copy):
        """Runs argv (with the library) in a private mount namespace with a
        tmpfs (mount options `opts`) at `mnt`; afterwards the tmpfs contents
        are copied to `copy` (the mount disappears with the namespace).
        Returns (Run of the program with its own pid, or None if mounting
        failed; the raw Run of the wrapper)."""
        pidfile = os.path.join(tmp, "mnt.pid")
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        script = ('mnt=$1 copy=$2 opts=$3 pidfile=$4 lib=$5; shift 5\n'
                  'mount -t tmpfs -o "$opts" wallprof-test "$mnt" 2>/dev/null || exit 200\n'
                  # The program alone gets LD_PRELOAD, and its pid is recorded.
                  'sh -c \'p=$0 l=$1; shift; echo $$ > "$p"; exec env LD_PRELOAD="$l" "$@"\' '
                  '"$pidfile" "$lib" "$@"\n'
                  'rc=$?\n'
                  'cp -a "$mnt"/. "$copy"/ 2>/dev/null\n'
                  'exit $rc\n')
        mkdir(copy, 0o755)
        full = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", mnt, copy,
                opts, pidfile, rt.LIB] + argv
        run = run_as(full, tmp, env_extra, preload=False)
        if run.rc == 200 or not os.path.exists(pidfile):
            return None, run
        with open(pidfile) as f:
            pid = int(f.read().strip())
        if run.rc is not None and run.rc > 128:
            run.rc = -(run.rc - 128)  # sh reports death by signal N as 128+N
        return rt.Run(argv, tmp, pid, run.rc, run.stdout, run.stderr), run

    # -- bad configuration ------------------------------------------------

    def garbage(tmp):
        return {
            "WALLPROF_HZ": "fast",
            "WALLPROF_OUTPUT": os.path.join(tmp, "no", "such", "dir", "p.%p.json"),
            "WALLPROF_RING_SECONDS": "-5",
            "WALLPROF_RING_MB": "lots",
            "WALLPROF_MAX_DEPTH": "deep",
            "WALLPROF_MAX_THREADS": "1e9",
            "WALLPROF_SIGNAL": "SIGNOPE",
            "WALLPROF_SNAPSHOT_SIGNAL": "SIGKILL",
            "WALLPROF_LOG": "loud",
            "WALLPROF_SENTRY_PLATFORM": "Not A Platform!",
            "WALLPROF_ENABLE": "maybe",
            "WALLPROF_FOLLOW_CHILDREN": "sometimes",
            "WALLPROF_DEBUGINFOD": "perhaps",
        }

    def test_garbage_config(tmp):
        td = mkdir(os.path.join(tmp, "td"), 0o755)
        plain = exitcode_plain(tmp)
        env = garbage(tmp)
        env["TMPDIR"] = td
        run = run_as([rt.prog("exitcode")], tmp, env)
        same_behaviour("garbage in every WALLPROF_* variable", plain, run)
        problems = []
        for var in sorted(env):
            if not var.startswith("WALLPROF_") or var == "WALLPROF_OUTPUT":
                continue
            n = len([l for l in run.stderr.splitlines()
                     if l.startswith("wallprof: ") and re.search(r"\b%s\b" % var, l)])
            if n != 1:
                problems.append("%s=%r: %d lines name it, want 1" % (var, env[var], n))
        out = env["WALLPROF_OUTPUT"]
        expanded = out.replace("%p", str(run.pid))
        if not lines_naming(run, "WALLPROF_OUTPUT", expanded, os.path.dirname(out)):
            problems.append("WALLPROF_OUTPUT=%s: no line names it or its path" % out)
        if problems:
            raise rt.Failure("%d of %d bad variables not reported as they should be: %s"
                             % (len(problems), len(env) - 1, "; ".join(problems)),
                             run.wallprof_lines())
        rt.check(not os.path.exists(os.path.join(tmp, "no")), "the library created %s"
                 % os.path.join(tmp, "no"))
        obj = check_fallback("garbage config", run, td, (expanded, os.path.dirname(out),
                                                         "WALLPROF_OUTPUT"))
        w = rt.wallprof_section(obj)
        for key, want in (("hz", rt.DEFAULT_HZ), ("ring_seconds", rt.DEFAULT_RING_SECONDS)):
            rt.check(w.get(key) == want, "garbage config: wallprof.%s is %r, want the default %r"
                     % (key, w.get(key), want))
        rt.check(obj.get("platform") == "native", "garbage config: platform %r"
                 % obj.get("platform"))
        scan("garbage config", tmp)

    def test_config_control_chars(tmp):
        """Values with newlines, escapes and huge lengths: still one line per
        variable, and nothing the value holds can forge a line of our own."""
        plain = exitcode_plain(tmp)
        env = {
            "WALLPROF_HZ": "12\nwallprof: wrote /etc/shadow (1 samples)",
            "WALLPROF_LOG": "\x1b[2J\x1b[31mloud",
            "WALLPROF_SIGNAL": "\tSIGPROF\r",
            "WALLPROF_SENTRY_PLATFORM": "A" * 20000,
            "WALLPROF_MAX_DEPTH": "9" * 400,
        }
        run = run_as([rt.prog("exitcode")], tmp, env)
        label = "control characters in WALLPROF_*"
        rt.check(run.rc == plain.rc and run.stdout == plain.stdout,
                 "%s: the program behaved differently: %s" % (label, run.describe()))
        lines = run.stderr.split("\n")
        forged = [l for l in lines if l.startswith("wallprof: wrote /etc/shadow")]
        rt.check(not forged, "a value forged a line of its own: %r" % forged)
        rt.check("/etc/shadow" not in " ".join(run.wrote_paths()),
                 "a 'wallprof: wrote' line names /etc/shadow")
        ctrl = sorted({"%r" % c for c in run.stderr if ord(c) < 32 and c != "\n"})
        rt.check(not ctrl, "raw control characters reach stderr: %s; lines: %r"
                 % (" ".join(ctrl), [l[:80] for l in lines if any(ord(c) < 32 for c in l)][:3]))
        for var in env:
            n = len([l for l in lines if l.startswith("wallprof: ") and var in l])
            rt.check(n == 1, "%s: %d lines name it, want 1: %r"
                     % (var, n, [l[:100] for l in lines if var in l]))
        same_behaviour(label, plain, run)
        long_lines = [len(l) for l in lines if len(l) > 1024]
        rt.check(not long_lines, "stderr lines of %s characters" % long_lines)
        rt.check_valid(rt.exit_profile(run))
        scan("control characters", tmp)

    # -- the output cannot go where it should -----------------------------

    def test_missing_dir(tmp):
        td = mkdir(os.path.join(tmp, "td"), 0o755)
        plain = exitcode_plain(tmp)
        out = os.path.join(tmp, "missing", "dir", "p.%p.json")
        run = run_as([rt.prog("exitcode")], tmp, {"WALLPROF_OUTPUT": out, "TMPDIR": td})
        same_behaviour("output dir missing", plain, run)
        check_fallback("output dir missing", run, td,
                       (out.replace("%p", str(run.pid)), os.path.dirname(out)))
        rt.check(not os.path.exists(os.path.join(tmp, "missing")), "the library created %s"
                 % os.path.join(tmp, "missing"))
        scan("output dir missing", tmp)
        # Without TMPDIR the fallback is /tmp.
        run = run_as([rt.prog("exitcode")], tmp, {"WALLPROF_OUTPUT": out}, unset=("TMPDIR",))
        fallback = os.path.join("/tmp", "wallprof.%d.json" % run.pid)
        try:
            same_behaviour("output dir missing, no TMPDIR", plain, run)
            check_fallback("output dir missing, no TMPDIR", run, "/tmp",
                           (out.replace("%p", str(run.pid)), os.path.dirname(out)))
        finally:
            for path in set([fallback] + run.wrote_paths()):
                if (os.path.dirname(path) == "/tmp" and os.path.isfile(path)
                        and not os.path.islink(path)):
                    os.unlink(path)

    def test_unwritable_dir(tmp):
        user = unprivileged()
        open_up(tmp)
        ro = mkdir(os.path.join(tmp, "ro"), 0o555 if user is None else 0o755)
        td = mkdir(os.path.join(tmp, "td"), 0o1777)
        plain = exitcode_plain(td, user=user)
        out = os.path.join(ro, "p.%p.json")
        run = run_as([rt.prog("exitcode")], td, {"WALLPROF_OUTPUT": out, "TMPDIR": td}, user=user)
        label = "output dir not writable (as %s)" % ("nobody" if user else "myself")
        same_behaviour(label, plain, run)
        check_fallback(label, run, td, (out.replace("%p", str(run.pid)), ro))
        rt.check(not os.listdir(ro), "%s: %s has %s" % (label, ro, os.listdir(ro)))
        if user:
            st = os.stat(os.path.join(td, "wallprof.%d.json" % run.pid))
            rt.check(st.st_uid == user[0], "%s: fallback owned by uid %d" % (label, st.st_uid))
        scan(label, tmp)

    def test_readonly_cwd(tmp):
        user = unprivileged()
        open_up(tmp)
        ro = mkdir(os.path.join(tmp, "ro"), 0o555)
        td = mkdir(os.path.join(tmp, "td"), 0o1777)
        plain = exitcode_plain(ro, user=user)
        run = run_as([rt.prog("exitcode")], ro, {"TMPDIR": td}, user=user)
        label = "read-only working directory (as %s)" % ("nobody" if user else "myself")
        same_behaviour(label, plain, run)
        check_fallback(label, run, td, ("wallprof.%d.json" % run.pid, ro))
        rt.check(not os.listdir(ro), "%s: %s has %s" % (label, ro, os.listdir(ro)))
        scan(label, tmp)
        # A read-only file system (EROFS), as root: a tmpfs mounted ro.
        if not is_root:
            print("    note: read-only file system case skipped: needs root")
            return
        mnt = mkdir(os.path.join(tmp, "rofs"), 0o755)
        argv = [rt.prog("exitcode")]
        res, raw = in_mount_ns(tmp, mnt, "ro,size=64k", argv, {"TMPDIR": td,
                               "WALLPROF_OUTPUT": os.path.join(mnt, "p.%p.json")},
                               os.path.join(tmp, "rofs-copy"))
        if res is None:
            print("    note: read-only file system case skipped: cannot mount a tmpfs in a "
                  "private mount namespace (%s)" % raw.describe())
            return
        same_behaviour("read-only file system", exitcode_plain(tmp), res)
        check_fallback("read-only file system", res, td,
                       (os.path.join(mnt, "p.%d.json" % res.pid), mnt))
        scan("read-only file system", tmp)

    def test_full_disk(tmp):
        if not is_root:
            print("    note: skipped: mounting a small tmpfs needs root")
            return
        full = mkdir(os.path.join(tmp, "full"), 0o755)
        td = mkdir(os.path.join(tmp, "td"), 0o755)
        copy = os.path.join(tmp, "full-copy")
        argv = [rt.prog("profile"), "2.0"]
        plain = run_as(argv, tmp, preload=False)
        rt.check(plain.rc == 0, "profile without the library: %s" % plain.describe())
        out = os.path.join(full, "p.%p.json")
        # 400 Hz: a profile of several times the tmpfs size.
        res, raw = in_mount_ns(tmp, full, "size=%d" % TMPFS_SIZE, argv,
                               {"WALLPROF_OUTPUT": out, "TMPDIR": td, "WALLPROF_HZ": "400"}, copy)
        if res is None:
            print("    note: skipped: cannot mount a tmpfs in a private mount namespace (%s)"
                  % raw.describe())
            return
        same_behaviour("full disk", plain, res)
        left = sorted(os.listdir(copy))
        rt.check(not left, "full disk: the full tmpfs holds %s after the run (partial or "
                 "temporary files)" % left)
        check_fallback("full disk", res, td, (out.replace("%p", str(res.pid)), full))
        size = os.path.getsize(os.path.join(td, "wallprof.%d.json" % res.pid))
        rt.check(size > TMPFS_SIZE, "test premise: the profile (%d bytes) fits the %d-byte tmpfs"
                 % (size, TMPFS_SIZE))
        rt.note("full disk: %d-byte profile fell back to TMPDIR" % size)
        scan("full disk", tmp)

    def test_fsize_limit(tmp):
        limit = 4096
        cwd = mkdir(os.path.join(tmp, "cwd"), 0o755)
        td = mkdir(os.path.join(tmp, "td"), 0o755)
        # Premises: the child starts with SIGXFSZ at its default (killing)
        # action, and a write past the limit does kill.
        probe = run_as(["sh", "-c", "grep ^SigIgn: /proc/$$/status"], tmp, preload=False,
                       fsize=limit)
        mask = int(probe.stdout.split()[1], 16) if probe.stdout.startswith("SigIgn:") else None
        rt.check(mask is not None and not mask & XFSZ_BIT,
                 "test premise: SIGXFSZ is ignored in the child (%r)" % probe.stdout)
        probe = run_as(["sh", "-c", "exec head -c 8192 /dev/zero > big"], tmp, preload=False,
                       fsize=limit)
        rt.check(probe.rc == -signal.SIGXFSZ, "test premise: writing past RLIMIT_FSIZE did not "
                 "kill with SIGXFSZ (%s)" % probe.describe())
        os.unlink(os.path.join(tmp, "big"))

        plain = exitcode_plain(cwd, fsize=limit)
        run = run_as([rt.prog("exitcode")], cwd, {"TMPDIR": td}, fsize=limit)
        label = "RLIMIT_FSIZE %d bytes" % limit
        if run.rc == -signal.SIGXFSZ:
            raise rt.Failure("%s: the library's write got the program killed by SIGXFSZ (%s)"
                             % (label, run.describe()))
        same_behaviour(label, plain, run)
        check_not_written(label, run)
        for d in (cwd, td):
            big = [f for f in os.listdir(d) if os.path.getsize(os.path.join(d, f)) >= limit]
            rt.check(not big, "%s: %s holds %s" % (label, d, big))
        scan(label, tmp)

        # A limit the profile fits in: written where it belongs.
        run = run_as([rt.prog("exitcode")], cwd, {"TMPDIR": td}, fsize=1 << 20)
        label = "RLIMIT_FSIZE 1 MiB"
        same_behaviour(label, plain, run)
        path = os.path.join(cwd, "wallprof.%d.json" % run.pid)
        rt.check(os.path.isfile(path), "%s: %s not written (%s)" % (label, path, run.describe()))
        rt.check_valid(rt.load_profile(path), label)
        scan(label, tmp)

    # -- symlinks and modes ---------------------------------------------------

    def plant(link, target):
        """nobody creates the symlink link -> target."""
        p = subprocess.run(["ln", "-s", target, link], user=NOBODY[0], group=NOBODY[1],
                           extra_groups=[], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        rt.check(p.returncode == 0 and os.path.islink(link), "cannot plant %s as nobody: %s"
                 % (link, p.stdout.decode(errors="replace").strip()))

    def victim_file(path, owner, mode):
        with open(path, "w") as f:
            f.write("precious\n")
        os.chown(path, owner[0], owner[1])
        os.chmod(path, mode)
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)

    def check_untouched(label, path, before):
        rt.check(os.path.exists(path), "%s: %s is gone" % (label, path))
        st = os.stat(path)
        with open(path) as f:
            content = f.read()
        rt.check(content == "precious\n" and (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
                 == before, "%s: the symlink's target %s was written (now %d bytes: %r)"
                 % (label, path, st.st_size, content[:40]))

    def test_symlink(tmp):
        if not is_root:
            print("    note: skipped: planting a symlink as another user needs root")
            return
        open_up(tmp)
        sticky = mkdir(os.path.join(tmp, "sticky"), 0o1777)
        td = mkdir(os.path.join(tmp, "td"), 0o1777)
        # The program runs as root, then as VICTIM, a user nobody's symlink
        # cannot be replaced for in a sticky directory.
        for who, user in (("root", None), ("uid %d" % VICTIM[0], VICTIM)):
            owner = user or (0, 0)
            vdir = mkdir(os.path.join(tmp, "victim-%d" % owner[0]), 0o755, owner)
            secret = os.path.join(vdir, "secret")
            before = victim_file(secret, owner, 0o600)
            absent = os.path.join(vdir, "absent.json")
            p_link = os.path.join(sticky, "p-%d.json" % owner[0])
            q_link = os.path.join(sticky, "q-%d.json" % owner[0])
            plant(p_link, secret)
            plant(q_link, absent)
            plain = exitcode_plain(td, user=user)
            for link, target in ((p_link, secret), (q_link, absent)):
                label = "symlink %s -> %s, program as %s" % (os.path.basename(link),
                                                              os.path.basename(target), who)
                run = run_as([rt.prog("exitcode")], td, {"WALLPROF_OUTPUT": link, "TMPDIR": td},
                             user=user, umask=0o022)
                same_behaviour(label, plain, run)
                if target == secret:
                    check_untouched(label, secret, before)
                else:
                    rt.check(not os.path.lexists(absent), "%s: the symlink's target %s was "
                             "created" % (label, absent))
                if os.path.islink(link):
                    rt.check(os.readlink(link) == target, "%s: the symlink changed" % label)
                    check_fallback(label, run, td, (link,))
                else:
                    # Replaced (allowed when permitted: root in a sticky dir).
                    rt.check(user is None, "%s: the library replaced another user's symlink in a "
                             "sticky directory" % label)
                    rt.check_valid(rt.load_profile(link), label)
                    mode = stat.S_IMODE(os.lstat(link).st_mode)
                    rt.check(mode == 0o644, "%s: profile mode %o with umask 022, want 644"
                             % (label, mode))
                    rt.note("%s: the profile replaced the symlink" % label)
        scan("symlink", tmp)

    def test_symlink_fallback(tmp):
        """The fallback name in a shared TMPDIR is predictable: a symlink
        planted there must not be written through either."""
        if not is_root:
            print("    note: skipped: planting a symlink as another user needs root")
            return
        open_up(tmp)
        td = mkdir(os.path.join(tmp, "td"), 0o1777)
        # The file name is the fallback's own, whatever rule names the fallback.
        out = os.path.join(tmp, "missing", "wallprof.%p.json")
        plain = exitcode_plain(tmp)
        for who, user in (("uid %d" % VICTIM[0], VICTIM), ("root", (0, 0))):
            vdir = mkdir(os.path.join(tmp, "victim-%d" % user[0]), 0o755, user)
            secret = os.path.join(vdir, "secret")
            before = victim_file(secret, user, 0o600)
            # nobody plants wallprof.<pid>.json -> secret with the program's
            # own pid, then the program runs (same pid, exec) as `user`.
            script = ('setpriv --reuid=%d --regid=%d --clear-groups ln -s "$1" "$2/wallprof.$$.json" '
                      '|| exit 200\n'
                      'echo $$ > "$2/pid-%d"\n'
                      'exec setpriv --reuid=%d --regid=%d --clear-groups env LD_PRELOAD="$3" "$4"\n'
                      % (NOBODY[0], NOBODY[1], user[0], user[0], user[1]))
            raw = run_as(["sh", "-c", script, "sh", secret, td, rt.LIB, rt.prog("exitcode")], tmp,
                         {"WALLPROF_OUTPUT": out, "TMPDIR": td}, preload=False)
            label = "symlink at the fallback, program as %s" % who
            rt.check(raw.rc != 200, "%s: cannot plant the symlink (%s)" % (label, raw.describe()))
            with open(os.path.join(td, "pid-%d" % user[0])) as f:
                pid = int(f.read())
            run = rt.Run(raw.argv, tmp, pid, raw.rc, raw.stdout, raw.stderr)
            same_behaviour(label, plain, run)
            check_untouched(label, secret, before)
            link = os.path.join(td, "wallprof.%d.json" % pid)
            if os.path.islink(link):
                rt.check(os.readlink(link) == secret, "%s: the symlink changed" % label)
                # Written elsewhere (a path of its own choosing) or not at all.
                elsewhere = [p for p in run.wrote_paths() if os.path.realpath(p) != secret
                             and os.path.isfile(p) and not os.path.islink(p)]
                if not elsewhere:
                    check_not_written(label, run)
            else:
                rt.check(user[0] == 0, "%s: another user's symlink in a sticky directory was "
                         "replaced" % label)
                rt.check_valid(rt.load_profile(link), label)
        scan("symlink at the fallback", tmp)

    def test_umask(tmp):
        td = mkdir(os.path.join(tmp, "td"), 0o755)
        cwd = mkdir(os.path.join(tmp, "cwd"), 0o755)
        missing = os.path.join(tmp, "missing", "p.%p.json")
        for umask, want in ((0o077, 0o600), (0o022, 0o644), (0o027, 0o640), (0o002, 0o664)):
            run = run_as([rt.prog("exitcode")], cwd, {"TMPDIR": td}, umask=umask)
            path = os.path.join(cwd, "wallprof.%d.json" % run.pid)
            rt.check(os.path.isfile(path), "umask %03o: no profile (%s)" % (umask, run.describe()))
            mode = stat.S_IMODE(os.stat(path).st_mode)
            rt.check(mode == want, "umask %03o: profile mode %03o, want %03o" % (umask, mode, want))
            run = run_as([rt.prog("exitcode")], cwd, {"TMPDIR": td, "WALLPROF_OUTPUT": missing},
                         umask=umask)
            path = os.path.join(td, "wallprof.%d.json" % run.pid)
            rt.check(os.path.isfile(path), "umask %03o: no fallback profile %s (%s)"
                     % (umask, path, run.describe()))
            mode = stat.S_IMODE(os.stat(path).st_mode)
            rt.check(mode == want, "umask %03o: fallback mode %03o, want %03o" % (umask, mode, want))
        scan("umask", tmp)

    def test_fd_numbers(tmp):
        """open() returns the numbers it would without the library: the first
        one is 3, and a daemon-style close(0) + open gets 0 back every time
        while threads come and go at 1000 Hz (the sampler's /proc reads
        happen in a descriptor table of its own)."""
        argv = [rt.prog("files"), "2"]
        plain = rt.run_plain(argv, tmp)
        rt.check(plain.rc == 0 and "got another number: 0 times" in plain.stdout,
                 "files without the library: %s" % plain.describe())
        run = rt.run_under_preload(argv, {"WALLPROF_HZ": "1000"}, cwd=tmp)
        same_behaviour("fd numbers", plain, run)
        rt.check(run.profile_path(), "fd numbers: no profile (%s)" % run.describe())
        rt.check_valid(rt.load_profile(run.profile_path()), "fd numbers profile")

    def test_fd_list(tmp):
        """The process holds no descriptor of the library's that the program
        can see (CPython's test_subprocess closes or lists them): libunwind's
        validation pipe used to sit at 768/769; now none exists."""
        argv = [rt.prog("files"), "list"]
        plain = rt.run_plain(argv, tmp)
        rt.check(plain.rc == 0 and plain.stdout.startswith("fds:"),
                 "files list without the library: %s" % plain.describe())
        run = rt.run_under_preload(argv, {"WALLPROF_HZ": "1000"}, cwd=tmp)
        rt.check(run.rc == 0, "files list under the preload: %s" % run.describe())
        rt.check(run.stdout == plain.stdout, "descriptors under the preload %r, without %r"
                 % (run.stdout.strip(), plain.stdout.strip()))

    def test_closed_stdout_eof(tmp):
        """A program that closes stdout and stderr and runs on (until its
        stdin ends): its reader sees end-of-file at once, since no copy of
        ours holds the pipe open."""
        env = rt.clean_env({"WALLPROF_HZ": "1000"})
        proc = subprocess.Popen([rt.prog("files"), "closeout"], cwd=tmp, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        got = []
        reader = threading.Thread(target=lambda: got.append(proc.stdout.read()))
        reader.start()
        reader.join(timeout=20)  # a bound on failure only: EOF comes at once
        eof = not reader.is_alive()
        proc.stdin.close()
        rc = proc.wait(timeout=30)
        reader.join()
        proc.stdout.close()
        rt.check(eof, "no end-of-file on the program's stdout in 20 s after it closed it: "
                 "something of the profiler's holds the pipe open")
        rt.check(got == [b"closing\n"], "closeout printed %r" % got)
        rt.check(rc == 0, "closeout exited %s" % rc)
        path = os.path.join(tmp, "wallprof.%d.json" % proc.pid)
        rt.check(os.path.isfile(path), "no profile %s" % path)
        rt.check_valid(rt.load_profile(path), "closeout profile")

    return [
        ("files_fd_numbers", test_fd_numbers),
        ("files_fd_list", test_fd_list),
        ("files_closed_stdout_eof", test_closed_stdout_eof),
        ("files_garbage_config", test_garbage_config),
        ("files_config_control_chars", test_config_control_chars),
        ("files_missing_dir", test_missing_dir),
        ("files_unwritable_dir", test_unwritable_dir),
        ("files_readonly_cwd", test_readonly_cwd),
        ("files_full_disk", test_full_disk),
        ("files_fsize_limit", test_fsize_limit),
        ("files_symlink", test_symlink),
        ("files_symlink_fallback", test_symlink_fallback),
        ("files_umask", test_umask),
    ]
