"""Programs nobody here wrote, under the preload: each does what it does
without it (the same output, the same stderr apart from our lines, the same
exit status, the same files; redis-server, whose log has times and pids, by
what it says of its own work), and its profile shows its own code.

xz's threads, git's and make's process trees (with the compiler), sqlite3's
library, Node.js (V8 and libuv's threads), and redis-server (a daemon's event loop, a fork for its background
save, a snapshot on SIGUSR2) each found bugs our own test programs did not,
in this project or in the peers it learns from."""

import glob
import json
import os
import shutil
import signal
import subprocess
import time

# The same commits, hashes and log on every run.
GIT_ENV = {"GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def tests(rt):
    check = rt.check

    def need(*names):
        missing = [n for n in names if not shutil.which(n)]
        check(not missing, "%s not installed (make deps installs it)" % ", ".join(missing))

    def pair(tmp, script, env=None, setup=None, timeout=300):
        """`script` (sh) in two fresh directories, without and with the
        preload; fails unless both behave the same. Returns (bare, preloaded,
        preloaded run's directory)."""
        runs = []
        for name, preload in (("bare", False), ("pre", True)):
            d = os.path.join(tmp, name)
            os.mkdir(d)
            if setup:
                setup(d)
            r = rt.run_bounded(["sh", "-c", script], d, env, preload=preload, timeout=timeout)
            check(r.rc is not None, "%s run did not end in %d s" % (name, timeout))
            runs.append(r)
        bare, pre = runs
        check(bare.rc == 0, "without the preload: %s" % bare.describe())
        check(pre.rc == bare.rc, "exit status %s, %s without the preload (%s)"
              % (pre.rc, bare.rc, pre.describe()))
        check(pre.stdout == bare.stdout, "stdout differs: %r against %r"
              % (pre.stdout[-300:], bare.stdout[-300:]))
        check(pre.other_stderr() == bare.other_stderr(), "stderr differs: %s against %s"
              % (pre.other_stderr()[-5:], bare.other_stderr()[-5:]))
        return bare, pre, os.path.join(tmp, "pre")

    def index_profiles(run):
        """The profiles the tree's index lists as written, loaded."""
        path = os.path.join(run.cwd, "wallprof.%d.index" % run.pid)
        check(os.path.exists(path), "no index: %s" % run.wallprof_lines())
        out = []
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t", 4)
                if parts[1] == "wrote" and parts[2].endswith(".json"):
                    out.append((parts[2], rt.load_profile(parts[2])))
        return out

    def functions(obj):
        p = rt.profile_part(obj)
        return {p["frames"][i].get("function") for st in p["stacks"] for i in st}

    def modules(obj):
        p = rt.profile_part(obj)
        return {p["frames"][i].get("module") for st in p["stacks"] for i in st}

    def test_xz_threads(tmp):
        """xz -T2 with small blocks (two compressing threads and a main
        thread that waits for them): byte for byte the same .xz, and a
        profile with the workers on CPU and the main thread waiting."""
        need("xz")
        data = os.path.join(tmp, "data.txt")
        with open(data, "w") as f:
            for i in range(400000):
                f.write("%d %x line of text %d\n" % (i, i * 2654435761 % 2**32, i % 97))
        script = ("xz -T2 --block-size=1MiB -6 -c ../data.txt > out.xz && xz -t out.xz && "
                  "xz -dc out.xz | cmp - ../data.txt && echo same")
        bare, pre, d = pair(tmp, script)
        with open(os.path.join(tmp, "bare", "out.xz"), "rb") as a, \
                open(os.path.join(d, "out.xz"), "rb") as b:
            check(a.read() == b.read(), "xz made another file under the preload")
        # the sh root's report: xz is its child
        found = [(p, o) for p, o in index_profiles(pre) if any(
            "xz" in (m or "") for m in modules(o))]
        check(found, "no profile of xz in the index")
        path, obj = found[0]
        rt.check_valid(obj, os.path.basename(path))
        by_thread = rt.samples_by_thread(obj)
        busy = [t for t, s in by_thread.items() if len(s) >= 5 and rt.on_cpu_share(s) > 0.5]
        check(len(by_thread) >= 3 and len(busy) >= 2,
              "want xz's main thread and two busy workers: %s"
              % {t: (len(s), round(rt.on_cpu_share(s), 2)) for t, s in by_thread.items()})

    def test_git(tmp):
        """git init, three commits, log, gc (which runs pack-objects and
        others as children), fsck: the same output and objects, and every
        profile the tree wrote is valid."""
        need("git")
        script = ("git init -q r && cd r && for i in 1 2 3; do seq $i 20000 > f$i && "
                  "git add f$i && git commit -q -m c$i; done && git log --format='%H %s' && "
                  "git gc -q && git fsck --no-progress 2>&1 && git count-objects -v | "
                  "grep -v size")
        bare, pre, d = pair(tmp, script, GIT_ENV)
        check(len(bare.stdout.splitlines()) >= 3, "git log: %r" % bare.stdout)
        check(any(l.startswith("wallprof: wrote") for l in pre.wallprof_lines()),
              "no profile of the root: %s" % pre.wallprof_lines())
        for path, obj in index_profiles(pre):
            rt.check_valid(obj, os.path.basename(path))

    def test_make_compiler(tmp):
        """make -j2 of a small C tree: the same output and objects; the
        compiler (cc1, a program nobody here wrote, a descendant three
        levels down) has a profile of its own code."""
        need("make", "cc")

        def setup(d):
            for i in range(6):
                with open(os.path.join(d, "f%d.c" % i), "w") as f:
                    for k in range(300):
                        f.write("int f%d_%d(int x) { int s = 0; for (int i = 0; i < x; i++) "
                                "s += i * %d ^ (s >> 3); return s; }\n" % (i, k, k + 1))
            with open(os.path.join(d, "Makefile"), "w") as f:
                f.write("OBJS := $(patsubst %.c,%.o,$(wildcard f*.c))\n"
                        "all: $(OBJS)\n\t@echo built $(words $(OBJS))\n"
                        "%.o: %.c\n\t@cc -O2 -c $< -o $@\n")

        bare, pre, d = pair(tmp, "make -j2 -s && ls *.o", setup=setup)
        for o in glob.glob(os.path.join(tmp, "bare", "*.o")):
            check(os.path.exists(os.path.join(d, os.path.basename(o))), "%s missing" % o)
        cc1 = [(p, o) for p, o in index_profiles(pre)
               if any((m or "").endswith("/cc1") for m in modules(o))]
        check(cc1, "no profile of cc1 in the index")
        named = [f for f in functions(cc1[0][1]) if f and f not in ("main", "_start")]
        check(len(named) >= 20, "cc1's profile names few functions: %s" % sorted(named)[:20])

    def test_sqlite(tmp):
        """sqlite3's shell on a recursive query: the same result, and the
        library's exported entry point in the profile's stacks."""
        need("sqlite3")
        query = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE "
                 "x < 1500000) SELECT count(*), sum(x * x % 7) FROM c;")
        bare, pre, d = pair(tmp, "sqlite3 :memory: '%s'" % query)
        found = [(p, o) for p, o in index_profiles(pre) if "sqlite3_step" in functions(o)]
        check(found, "no profile with sqlite3_step in its stacks")
        rt.check_valid(found[0][1], "sqlite3's profile")

    NODE_SCRIPT = r"""
const { Worker, isMainThread, parentPort } = require('worker_threads');
const crypto = require('crypto');
const cp = require('child_process');
const fs = require('fs');
if (isMainThread) {
  let done = 0;
  for (let i = 0; i < 2; i++) {
    const w = new Worker(__filename);
    w.on('message', (m) => { console.log('worker', m.length); if (++done == 2) next(); });
  }
  function next() {
    crypto.pbkdf2('pw', 'salt', 300000, 32, 'sha256', (e, k) => {
      console.log('pbkdf2', k.toString('hex').slice(0, 16));
      console.log(cp.execSync('echo child').toString().trim());
      fs.writeFileSync('x.txt', 'a'.repeat(100000));
      console.log(fs.readFileSync('x.txt').length);
      setTimeout(() => { console.log('end'); }, 200);
    });
  }
} else {
  let s = '';
  for (let i = 0; i < 300000; i++) s += String.fromCharCode(65 + i % 26);
  parentPort.postMessage(s);
}
"""

    def test_node(tmp):
        """Node.js (V8, libuv's thread pool, worker threads, a child
        process): the same output, and a profile of its many threads whose
        C++ frames are demangled (v8::internal::...)."""
        need("node")
        script = os.path.join(tmp, "prog.js")
        with open(script, "w") as f:
            f.write(NODE_SCRIPT)
        bare, pre, d = pair(tmp, "node %s" % script)
        check("pbkdf2" in bare.stdout and "end" in bare.stdout, "node: %r" % bare.stdout)
        found = [(p, o) for p, o in index_profiles(pre)
                 if any((m or "").endswith("/node") for m in modules(o))]
        check(found, "no profile of node in the index")
        path, obj = max(found, key=lambda po: len(rt.samples_by_thread(po[1])))
        rt.check_valid(obj, os.path.basename(path))
        threads = rt.samples_by_thread(obj)
        v8 = [f for f in functions(obj) if f and f.startswith("v8::")]
        check(len(threads) >= 5 and v8, "node's profile: %d threads, V8 frames %s"
              % (len(threads), v8[:3]))

    def test_redis(tmp):
        """redis-server under the preload (on a Unix socket of its own): a
        benchmark against it, a background save (a fork whose child must end
        well: the server logs it), a snapshot (SIGUSR2), a shutdown. It exits
        0, its log says the save succeeded and nothing of ours, its stderr
        holds only our lines, and both profiles show its event loop waiting
        in epoll_wait."""
        need("redis-server", "redis-cli", "redis-benchmark")
        sock = os.path.join(tmp, "redis.sock")

        def cli(*args):
            return subprocess.run(["redis-cli", "-s", sock] + list(args), capture_output=True,
                                  text=True, timeout=30)

        proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock,
                                 "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                                 "--dir", tmp, "--logfile", ""],
                                cwd=tmp, env=rt.clean_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(sock) or cli("ping").stdout.strip() != "PONG":
                check(proc.poll() is None and time.monotonic() < deadline,
                      "redis-server did not answer (rc %s)" % proc.poll())
                time.sleep(0.05)
            b = subprocess.run(["redis-benchmark", "-s", sock, "-q", "-n", "20000", "-c", "8",
                                "-t", "set,get,lpush"], capture_output=True, text=True,
                               timeout=120)
            check(b.returncode == 0 and b.stdout.count("requests per second") == 3,
                  "redis-benchmark: %r" % b.stdout[-300:])
            check(cli("bgsave").returncode == 0, "bgsave")
            deadline = time.monotonic() + 60
            while "rdb_bgsave_in_progress:1" in cli("info", "persistence").stdout:
                check(time.monotonic() < deadline, "the background save did not end in 60 s")
                time.sleep(0.05)
            check(os.path.exists(os.path.join(tmp, "dump.rdb")), "no dump.rdb")
            snap = os.path.join(tmp, "wallprof.%d.1.json" % proc.pid)
            proc.send_signal(signal.SIGUSR2)
            rt.poll_for(snap, proc=proc)
            cli("shutdown", "nosave")
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                rt.kill_group(proc)
        log = out.decode(errors="replace")
        err = err.decode(errors="replace").splitlines()
        check(proc.returncode == 0, "redis-server: rc %s, stderr %s" % (proc.returncode, err[-5:]))
        check("Background saving terminated with success" in log and "wallprof:" not in log,
              "redis-server's log: %s" % log.splitlines()[-8:])
        ours = [l for l in err if l.startswith("wallprof:")]
        check(len(ours) == len(err), "stderr beyond our lines: %s"
              % [l for l in err if l not in ours][:5])
        exit_path = os.path.join(tmp, "wallprof.%d.json" % proc.pid)
        for path in (snap, exit_path):
            obj = rt.load_profile(path)
            rt.check_valid(obj, os.path.basename(path))
            main = rt.thread_samples(obj, "redis-server")
            share = rt.share_with_function(obj, main, "epoll_wait")
            check(share > 0.3, "%s: the event loop in epoll_wait in %.0f %% of the main "
                  "thread's %d samples" % (os.path.basename(path), 100 * share, len(main)))
        check(any("child process" in l for l in ours), "no report of the save's child: %s" % ours)

    return [("programs_xz_threads", test_xz_threads),
            ("programs_git", test_git),
            ("programs_make_compiler", test_make_compiler),
            ("programs_sqlite", test_sqlite),
            ("programs_node", test_node),
            ("programs_redis", test_redis)]
