"""The profiled process tree says nothing on its children's stderr: a
parent that reads a child's stderr (a test runner parsing its workers, `git`
relaying a hook) reads what it reads without the profiler. The command the
user started reports once for the whole tree, from the index file its
descendants append to (files written, where fallbacks went, too-short
processes). WALLPROF_LOG, when set, applies to every process again."""

import fcntl
import glob
import json
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time

PY = sys.executable or "/usr/bin/python3"

# A child that works ~300 ms (enough for a profile at 101 Hz) and writes to
# its stderr; the parent captures that stderr and prints it.
CHILD = ("import sys, time\n"
         "def wpt_child_work():\n"
         "    t = time.time()\n"
         "    while time.time() - t < 0.3: pass\n"
         "wpt_child_work()\n"
         "sys.stderr.write('child stderr line\\n')\n")

PARENT = ("import os, subprocess, sys\n"
          "env = dict(os.environ)\n"
          "env.update(dict(a.split('=', 1) for a in sys.argv[2:]))\n"
          "r = subprocess.run([sys.executable, '-c', sys.argv[1]], stderr=subprocess.PIPE,\n"
          "                   env=env)\n"
          "print('child rc', r.returncode, 'stderr', repr(r.stderr.decode()))\n")

# A forked child (no exec) that works, then leaves by os._exit, sharing the
# parent's stderr.
FORKER = ("import os, time\n"
          "def wpt_fork_work():\n"
          "    t = time.time()\n"
          "    while time.time() - t < 0.3: pass\n"
          "pid = os.fork()\n"
          "if pid == 0:\n"
          "    wpt_fork_work()\n"
          "    os._exit(0)\n"
          "print('child status', os.waitpid(pid, 0)[1])\n")

REPORT_RE = re.compile(r"^wallprof: (\d+) child process(?:es)?: (\d+) files? written(.*); "
                       r"see (\S+)$")


def tests(rt):
    check = rt.check

    def index_lines(path):
        out = []
        with open(path) as f:
            for line in f:
                # five fields; a raw line's message is "<profile> TAB <fallback>"
                parts = line.rstrip("\n").split("\t", 4)
                check(len(parts) == 5, "index line with %d fields: %r" % (len(parts), line))
                check("\t" not in parts[4] or (parts[1] == "raw" and parts[4].count("\t") == 1),
                      "a tab in the message of a %s line: %r" % (parts[1], line))
                out.append(parts)
        return out

    def root_lines(r):
        """The root's own wallprof lines: its profile, then the report."""
        lines = r.wallprof_lines()
        own = "wallprof.%d.json" % r.pid
        check(lines and own in lines[0] and lines[0].startswith("wallprof: wrote "),
              "the root's first line is not its own profile: %s" % lines)
        reports = [m for m in (REPORT_RE.match(l) for l in lines) if m]
        check(len(reports) == 1, "want one report line for the tree, got %s" % lines)
        return lines, reports[0]

    def pair(tmp, argv, env=None):
        plain = rt.run_bounded(argv, tmp, env_extra=env, preload=False, timeout=60)
        r = rt.run_bounded(argv, tmp, env_extra=env, timeout=60)
        check(plain.rc == 0 and r.rc == 0, "rc %s bare, %s preloaded (%s)"
              % (plain.rc, r.rc, r.describe()))
        check(r.stdout == plain.stdout, "stdout differs: preloaded %r, bare %r"
              % (r.stdout, plain.stdout))
        check(r.other_stderr() == plain.other_stderr(), "stderr differs besides wallprof: "
              "lines: %s vs %s" % (r.other_stderr()[:3], plain.other_stderr()[:3]))
        return r

    def test_tree_child_stderr(tmp):
        """The parent sees exactly the child's own stderr; the root reports
        the child's profile, listed in the index."""
        r = pair(tmp, [PY, "-c", PARENT, CHILD])
        check("'child stderr line\\n'" in r.stdout, "the child's stderr: %r" % r.stdout)
        lines, m = root_lines(r)
        check(len(lines) == 2, "root's lines: %s" % lines)
        check(int(m.group(1)) >= 1 and int(m.group(2)) >= 1, "report: %s" % lines[-1])
        index = m.group(4)
        check(index == os.path.join(tmp, "wallprof.%d.index" % r.pid), "index at %s" % index)
        wrote = [l for l in index_lines(index) if l[1] == "wrote" and l[0] != str(r.pid)]
        check(wrote, "the index lists no profile of a child: %s" % index_lines(index))
        child = rt.load_profile(wrote[0][2])
        rt.check_valid(child)
        fns = set()
        for s in rt.profile_part(child)["samples"]:
            fns.update(f for f in rt.stack_functions(child, s["stack_id"]) if f)
        check(any("PyEval" in f for f in fns),
              "the child's profile shows no interpreter frames: %s" % sorted(fns)[:10])
        own = [l for l in index_lines(index) if l[0] == str(r.pid)]
        check([l for l in own if l[1] == "wrote"], "the root's own file is not in the index: %s"
              % own)

    def test_tree_fork_child(tmp):
        """A fork()ed child shares the root's stderr: it writes nothing there."""
        r = pair(tmp, [PY, "-c", FORKER])
        lines, m = root_lines(r)
        check(len(lines) == 2, "only the root may speak, got: %s" % lines)
        wrote = [l for l in index_lines(m.group(4)) if l[1] == "wrote" and l[0] != str(r.pid)]
        check(len(wrote) == 1, "the forked child's profile: %s" % wrote)
        rt.check_valid(rt.load_profile(wrote[0][2]))

    def test_tree_fallback_reported(tmp):
        """A child whose output directory is missing writes to $TMPDIR; the
        root says where, on its own stderr."""
        tmpdir = os.path.join(tmp, "fallback")
        os.mkdir(tmpdir)
        r = pair(tmp, [PY, "-c", PARENT, CHILD,
                       "WALLPROF_OUTPUT=%s/missing/p.%%p.json" % tmp],
                 env={"TMPDIR": tmpdir})
        check("'child stderr line\\n'" in r.stdout, "the child's stderr: %r" % r.stdout)
        lines, m = root_lines(r)
        fb = [l for l in lines if re.match(r"^wallprof: child \d+: .*wrote the profile to "
                                           r"%s/wallprof\.\d+\.json instead$" % re.escape(tmpdir), l)]
        check(fb, "no fallback line for the child in the root's report: %s" % lines)
        path = fb[0].split("wrote the profile to ")[1].split(" instead")[0]
        rt.check_valid(rt.load_profile(path))

    def test_tree_log_raises(tmp):
        """WALLPROF_LOG=info set by the user: children speak again."""
        r = rt.run_bounded([PY, "-c", PARENT, CHILD], tmp, env_extra={"WALLPROF_LOG": "info"},
                           timeout=60)
        check(r.rc == 0, r.describe())
        check("wallprof: wrote " in r.stdout, "the child said nothing with WALLPROF_LOG=info: "
              "%r" % r.stdout)

    def test_tree_short_child(tmp):
        """A child too short for a Sentry profile (fewer than 2 samples on
        every thread) writes none, and the report counts it."""
        r = pair(tmp, [PY, "-c", "import subprocess; print(subprocess.run(['true']).returncode)"])
        lines, m = root_lines(r)
        check("too short for a profile" in m.group(3), "report: %s" % lines[-1])
        shorts = [l for l in index_lines(m.group(4)) if l[1] == "short"]
        check(shorts, "no 'short' line in the index")
        for l in shorts:
            check(not os.path.exists(os.path.join(tmp, "wallprof.%s.json" % l[0])),
                  "a profile for the short child %s was written" % l[0])

    def test_tree_no_children_no_index(tmp):
        """A process without profiled children: one line, no index file."""
        r = rt.run_bounded([PY, "-c", CHILD], tmp, timeout=60)
        check(r.rc == 0, r.describe())
        check(len(r.wallprof_lines()) == 1, "lines: %s" % r.wallprof_lines())
        check(not [n for n in os.listdir(tmp) if n.endswith(".index")],
              "an index without children: %s" % os.listdir(tmp))

    def test_tree_closed_stderr(tmp):
        """A program that closes its stderr before exit (and opens a file
        that takes number 2): our line goes to the index, not into that
        file."""
        code = CHILD + ("import os\nos.close(2)\n"
                        "fd = os.open('own.log', os.O_WRONLY | os.O_CREAT, 0o644)\n"
                        "print('fd', fd)\n")
        r = pair(tmp, [PY, "-c", code])
        with open(os.path.join(tmp, "own.log")) as f:
            check(f.read() == "", "our line went into the program's own file")
        index = os.path.join(tmp, "wallprof.%d.index" % r.pid)
        check(os.path.exists(index), "no index for the line stderr could not show: %s"
              % os.listdir(tmp))
        lines = index_lines(index)
        check(any(l[0] == str(r.pid) and l[1] == "wrote" for l in lines), "index: %s" % lines)

    def run_stderr_to(tmp, argv, path, mode="a", timeout=60, preload=True):
        """Runs `argv` (under the preload unless told) with stdout and stderr
        on the file `path`, opened as the shell's `>>path 2>&1` (mode "a")
        or `>path 2>&1` ("w"); returns (rc, pid)."""
        with open(path, mode) as out:
            proc = subprocess.Popen(argv, cwd=tmp, env=rt.clean_env(preload=preload),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    start_new_session=True)
        try:
            return proc.wait(timeout=timeout), proc.pid
        except subprocess.TimeoutExpired:
            rt.kill_group(proc)
            raise rt.Failure("%s did not end in %d s" % (argv[0], timeout))

    def indexed_line(tmp, pid):
        """The index in `tmp` holds the root's "wrote" line."""
        indexes = glob.glob(os.path.join(tmp, "*.index"))
        check(indexes, "no index for the line stderr could not show: %s" % os.listdir(tmp))
        lines = [l for i in indexes for l in index_lines(i)]
        check(any(l[0] == str(pid) and l[1] == "wrote" for l in lines), "index: %s" % lines)

    def test_tree_closed_stderr_file(tmp):
        """coreutils' `sleep` closes its stderr at exit (close_stdout), before
        our exit dump: the line still reaches the file its stderr was (opened
        for appending), opened again by its path; no index is made for it."""
        err = os.path.join(tmp, "err.txt")
        rc, pid = run_stderr_to(tmp, ["sleep", "0.3"], err)
        check(rc == 0, "sleep: rc %s" % rc)
        with open(err) as f:
            lines = f.read().splitlines()
        own = os.path.join(tmp, "wallprof.%d.json" % pid)
        check(len(lines) == 1 and lines[0].startswith("wallprof: wrote %s " % own),
              "want the one line for %s in the stderr file, got %s" % (own, lines))
        check(not glob.glob(os.path.join(tmp, "*.index")),
              "an index for a line stderr showed: %s" % os.listdir(tmp))

    def test_tree_closed_stderr_shared_offset(tmp):
        """A log opened without O_APPEND (`>log 2>&1`) that the shell goes on
        writing after the profiled `sleep` closed its stderr: a line of ours
        appended there would be written over by the shell's next line (they
        share one offset, ours would not). The log is what the shell and
        sleep wrote, byte for byte; the line goes to the index."""
        log = os.path.join(tmp, "log")
        script = ("echo before; LD_PRELOAD=%s sleep 0.3; echo after the profiled program"
                  % rt.clean_env()["LD_PRELOAD"])
        rc, _ = run_stderr_to(tmp, ["sh", "-c", script], log, mode="w", preload=False)
        check(rc == 0, "rc %s" % rc)
        with open(log) as f:
            text = f.read()
        check(text == "before\nafter the profiled program\n", "the log: %r" % text)
        profiles = glob.glob(os.path.join(tmp, "wallprof.*.json"))
        check(len(profiles) == 1, "profiles: %s" % os.listdir(tmp))
        indexed_line(tmp, int(os.path.basename(profiles[0]).split(".")[1]))

    def test_tree_closed_stderr_fifo(tmp):
        """The path of the stderr file names a FIFO by the time the program
        closes its stderr: opening it again must not wait for a reader (the
        program would hang at exit); the line goes to the index."""
        err = os.path.join(tmp, "err.txt")
        code = CHILD + ("import os\nos.unlink('err.txt')\nos.mkfifo('err.txt')\n"
                        "os.close(1)\nos.close(2)\n")
        rc, pid = run_stderr_to(tmp, [PY, "-c", code], err, timeout=30)
        check(rc == 0, "rc %s" % rc)
        indexed_line(tmp, pid)

    def on_terminal(tmp, argv, controlling=False, preload=True, timeout=60):
        """Runs `argv` (under the preload unless told) with stdin, stdout and
        stderr on a new terminal (its controlling terminal when asked, in a
        session of its own); returns (rc, pid, what the terminal showed)."""
        master, slave = pty.openpty()

        def take_terminal():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            proc = subprocess.Popen(argv, cwd=tmp, env=rt.clean_env(preload=preload), stdin=slave,
                                    stdout=slave, stderr=slave, start_new_session=True,
                                    preexec_fn=take_terminal if controlling else None)
            os.close(slave)
            slave = -1
            out = b""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    break
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: every writer of the terminal is gone
                    break
                if not chunk:
                    break
                out += chunk
            try:
                rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rt.kill_group(proc)
                raise rt.Failure("the program on a terminal did not end: %r" % out[-300:])
        finally:
            os.close(master)
            if slave >= 0:
                os.close(slave)
        return rc, proc.pid, out.decode(errors="replace").replace("\r\n", "\n")

    def test_tree_closed_stderr_tty(tmp):
        """On a terminal: a program that closes its stderr and opens a file
        that takes number 2; our line goes to the terminal, not that file."""
        code = CHILD + ("import os\nos.close(2)\n"
                        "fd = os.open('own.log', os.O_WRONLY | os.O_CREAT, 0o644)\n"
                        "print('fd', fd, flush=True)\n")
        rc, pid, text = on_terminal(tmp, [PY, "-c", code])
        check(rc == 0 and "fd 2" in text, "rc %s, terminal: %r" % (rc, text))
        own = os.path.join(tmp, "wallprof.%d.json" % pid)
        lines = [l for l in text.splitlines() if l.startswith("wallprof:")]
        check(len(lines) == 1 and lines[0].startswith("wallprof: wrote %s " % own),
              "want the one line for %s on the terminal, got %r" % (own, text))
        with open(os.path.join(tmp, "own.log")) as f:
            check(f.read() == "", "our line went into the program's own file")

    def test_tree_background_tostop(tmp):
        """A background job on a terminal with `stty tostop`: writing there
        would stop it (SIGTTOU), and `sleep` and a program that only works
        write nothing there themselves. Under the preload both still end
        (`Done`, status 0) and our line is on the terminal: for `sleep` from
        the reopened terminal (it closed its stderr), for the other from fd
        2."""
        lib = rt.clean_env()["LD_PRELOAD"]
        quiet = "import time; t = time.time()\nwhile time.time() - t < 0.3: pass"
        for what, cmd in (("sleep", "sleep 0.3"), ("python", "%s -c '%s'" % (PY, quiet))):
            script = ("set -m; stty tostop; LD_PRELOAD=%s %s & wait $!; echo status=$?"
                      % (lib, cmd))
            rc, _, text = on_terminal(tmp, ["bash", "-c", script], controlling=True,
                                      preload=False)
            check(rc == 0 and "status=0" in text,
                  "%s in the background was stopped or failed: rc %s, terminal %r"
                  % (what, rc, text[-400:]))
            check(re.search(r"^wallprof: wrote \S+ ", text, re.M),
                  "%s: no line of ours on the terminal: %r" % (what, text[-400:]))

    def test_tree_closed_stderr_replaced(tmp):
        """The program closes its stderr, removes the file it was and makes
        another under its name (which may get the freed inode's number:
        ext4 gives it at once): that other file gets nothing, the line goes
        to the index."""
        err = os.path.join(tmp, "err.txt")
        code = CHILD + ("import os\nold = os.fstat(2).st_ino\nos.close(1)\nos.close(2)\n"
                        "os.unlink('err.txt')\n"
                        "fd = os.open('err.txt', os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)\n"
                        "reused = os.fstat(fd).st_ino == old\nos.close(fd)\n"
                        "with open('reused.txt', 'w') as f: f.write(str(reused))\n")
        rc, pid = run_stderr_to(tmp, [PY, "-c", code], err)
        check(rc == 0, "rc %s" % rc)
        with open(err) as f:
            check(f.read() == "", "our line went into another file under stderr's name")
        indexed_line(tmp, pid)
        with open(os.path.join(tmp, "reused.txt")) as f:
            rt.note("the new file %s the old one's inode number"
                    % ("got" if f.read() == "True" else "did not get"))

    def test_tree_child_crash(tmp):
        """A child dying of SIGSEGV: its profile, converted in the background
        from its raw dump, is listed in the index (the root's report waited
        for it), the dump is gone, and the parent reads the same (empty)
        stderr from it as without us."""
        code = ("import subprocess, sys\n"
                "r = subprocess.run(sys.argv[1:], stderr=subprocess.PIPE)\n"
                "print('child rc', r.returncode, 'stderr', repr(r.stderr.decode()))\n")
        r = pair(tmp, [PY, "-c", code, rt.prog("exits"), "segv"])
        check("child rc -11" in r.stdout, "child: %r" % r.stdout)
        lines, m = root_lines(r)
        child = [l for l in index_lines(m.group(4)) if l[0] != str(r.pid)]
        wrote = [l for l in child if l[1] == "wrote"]
        check(len(wrote) == 1 and wrote[0][2].endswith(".json") and "SIGSEGV" in wrote[0][4],
              "the child's profile in the index: %s" % child)
        check(os.path.exists(wrote[0][2]), "%s is missing" % wrote[0][2])
        raws = [l[2] for l in child if l[1] == "raw"]
        check(len(raws) == 1 and not os.path.exists(raws[0]),
              "the raw dump handed to the converter is still there: %s" % raws)

    def test_tree_same_pid_other_process(tmp):
        """WALLPROF_TREE naming this pid but another start time (the pid of a
        root that is gone, reused; pid 1 of another namespace): not the
        root, so not a word on stderr."""
        idx = os.path.join(tmp, "other.index")
        r = rt.run_bounded(["sh", "-c", "WALLPROF_TREE=$$.1:%s exec %s -c \"%s\""
                            % (idx, PY, CHILD.replace('"', '\\"'))], tmp, timeout=60)
        check(r.rc == 0, r.describe())
        check(r.wallprof_lines() == [], "a process that is not the root spoke: %s"
              % r.wallprof_lines())
        check(os.path.exists(idx), "its line did not go to the index it was given")

    def test_tree_exec_root(tmp):
        """The root that execs stays the root (its WALLPROF_TREE names its
        own pid and start time, read only then): the exec'd image speaks on
        stderr, its profile under the root's pid, and there is no index."""
        r = pair(tmp, ["sh", "-c", "exec %s -c \"%s\"" % (PY, CHILD.replace('"', '\\"'))])
        lines = r.wallprof_lines()
        own = os.path.join(tmp, "wallprof.%d.json" % r.pid)
        check(len(lines) == 1 and lines[0].startswith("wallprof: wrote %s " % own),
              "want the root's one line for %s, got %s" % (own, lines))
        obj = rt.load_profile(own)
        rt.check_valid(obj)
        fns = set()
        for smp in rt.profile_part(obj)["samples"]:
            fns.update(f for f in rt.stack_functions(obj, smp["stack_id"]) if f)
        check(any("PyEval" in f for f in fns), "the exec'd image's frames are not in the "
              "root's profile: %s" % sorted(fns)[:10])

    def test_env_read_once(tmp):
        """The environment is read once, at start: a program that changes
        TMPDIR later (setenv races with a getenv of ours at exit) does not
        move our fallback."""
        first, later = os.path.join(tmp, "first"), os.path.join(tmp, "later")
        os.mkdir(first)
        os.mkdir(later)
        code = "import os\nos.environ['TMPDIR'] = %r\n" % later + CHILD
        r = rt.run_bounded([PY, "-c", code], tmp,
                           {"TMPDIR": first,
                            "WALLPROF_OUTPUT": os.path.join(tmp, "missing", "p.%p.json")},
                           timeout=60)
        check(r.rc == 0, r.describe())
        want = os.path.join(first, "wallprof.%d.json" % r.pid)
        check(os.path.exists(want), "the fallback is not in the TMPDIR of the start: %s, %s; %s"
              % (os.listdir(first), os.listdir(later), r.wallprof_lines()))

    return [("tree_child_stderr", test_tree_child_stderr),
            ("tree_env_read_once", test_env_read_once),
            ("tree_same_pid_other_process", test_tree_same_pid_other_process),
            ("tree_exec_root", test_tree_exec_root),
            ("tree_child_crash", test_tree_child_crash),
            ("tree_closed_stderr", test_tree_closed_stderr),
            ("tree_closed_stderr_file", test_tree_closed_stderr_file),
            ("tree_closed_stderr_shared_offset", test_tree_closed_stderr_shared_offset),
            ("tree_closed_stderr_fifo", test_tree_closed_stderr_fifo),
            ("tree_closed_stderr_tty", test_tree_closed_stderr_tty),
            ("tree_background_tostop", test_tree_background_tostop),
            ("tree_closed_stderr_replaced", test_tree_closed_stderr_replaced),
            ("tree_fork_child", test_tree_fork_child),
            ("tree_fallback_reported", test_tree_fallback_reported),
            ("tree_log_raises", test_tree_log_raises),
            ("tree_short_child", test_tree_short_child),
            ("tree_no_children_no_index", test_tree_no_children_no_index)]
