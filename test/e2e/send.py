"""Uploads from the library (convert/send.c), against the local receiver
(test/receiver.py, loopback only): an exit profile goes to Sentry as a
profile with its transaction; with WALLPROF_CHUNK_SECONDS, chunks go as
profile_chunk envelopes in order with one profiler_id, instead of files;
a 429 with Retry-After holds everything back for its time and loses
nothing; a receiver down at exit leaves the envelope in the spool and the
next run delivers it; a 413 is dropped and said; an address that never
answers delays the exit by at most WALLPROF_UPLOAD_TIMEOUT; Pyroscope gets
pprof at /ingest with the labels asked for, thread labels only on request;
a DSN that does not parse is one line and the profile is still written.
The program behaves as without the profiler in every case."""

import email.parser
import email.policy
import glob
import gzip
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import receiver  # noqa: E402
import sentry_check  # noqa: E402

KEY = "0123456789abcdef0123456789abcdef"


def pb_fields(data):
    """Top-level fields of a protobuf message: [(number, wire type, value)]
    (bytes for length-delimited, int for varints)."""
    out, i = [], 0

    def varint():
        nonlocal i
        v, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < len(data):
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            out.append((num, wt, varint()))
        elif wt == 2:
            n = varint()
            out.append((num, wt, data[i:i + n]))
            i += n
        elif wt == 1:
            out.append((num, wt, data[i:i + 8]))
            i += 8
        elif wt == 5:
            out.append((num, wt, data[i:i + 4]))
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
    return out


def multipart_parts(content_type, body):
    """{name: bytes} of a multipart/form-data body ({} when it is not one)."""
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    if not msg.is_multipart():
        return {}
    return {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
            for part in msg.iter_parts()}


def pprof_summary(gz):
    """(string table, samples counted: the sum of each Sample's first
    value) of a gzipped profile.proto."""
    fields = pb_fields(gzip.decompress(gz))
    strings = [v.decode() for n, wt, v in fields if n == 6 and wt == 2]
    count = 0
    for n, wt, v in fields:
        if n != 2 or wt != 2:
            continue
        for sn, swt, sv in pb_fields(v):
            if sn == 2 and swt == 2:  # value, packed
                v0, shift = 0, 0
                for b in sv:  # its first varint
                    v0 |= (b & 0x7F) << shift
                    shift += 7
                    if not b & 0x80:
                        break
                count += v0
                break
            if sn == 2 and swt == 0:
                count += sv
                break
    return strings, count


def tests(rt):
    check = rt.check

    def env(extra):
        e = {"WALLPROF_UPLOAD_TIMEOUT": "5"}
        e.update(extra)
        return e

    def run(tmp, seconds, extra, preload=True):
        """The chunks program for `seconds` s; its Run. The proxies of the
        machine are dropped: loopback only."""
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.lower().endswith("_proxy")}
        try:
            return rt.run_bounded([rt.prog("chunks"), str(seconds)], tmp, env_extra=env(extra),
                                  preload=preload)
        finally:
            os.environ.update(saved)

    def same_as_plain(tmp, r, seconds):
        plain = run(tmp, seconds, {}, preload=False)
        check(r.rc == plain.rc == 0 and r.stdout == plain.stdout,
              "under the preload: %s" % r.describe())
        check(not r.other_stderr(), "stderr besides our lines: %r" % r.other_stderr())

    def clean(rx):
        for q in rx.requests:
            check(not q.errors, "the receiver found errors in %r: %s" % (q, q.errors))
            if q.kind == "envelope":
                errs = sentry_check.check_envelope(q.body)
                check(not errs, "envelope: %s" % errs[:5])
                check(q.auth.get("sentry_key") == KEY and q.auth.get("sentry_version") == "7",
                      "X-Sentry-Auth: %r" % q.auth)

    def spooled(spool):
        return glob.glob(os.path.join(spool, "*", "*.item"))

    def functions(obj):
        return {f.get("function") for f in obj["profile"]["frames"]}

    def test_exit_profile(tmp):
        """Chunks off: the exit profile as a profile with its transaction,
        their ids agreeing; WALLPROF_SEND_ARGS=0 names the transaction
        after the program alone."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            r = run(tmp, 1.5, {"WALLPROF_SENTRY_DSN": rx.dsn("42"), "WALLPROF_SPOOL_DIR": spool,
                               "WALLPROF_SENTRY_ENVIRONMENT": "test",
                               "WALLPROF_SENTRY_RELEASE": "chunks@1.0",
                               "WALLPROF_SEND_ARGS": "0"})
            same_as_plain(tmp, r, 1.5)
            check(rt.exit_profile(r) is not None, "no profile file")
            check(len(rx.requests) == 1, "requests: %s" % rx.requests)
            clean(rx)
            q = rx.requests[0]
            check(q.item_types() == ["transaction", "profile"], "items %s" % q.item_types())
            txn = json.loads(q.items[0][1])
            prof = json.loads(q.items[1][1])
            check(q.envelope.get("event_id") == txn["event_id"] == prof["transaction"]["id"],
                  "ids: envelope %s, transaction %s, profile %s"
                  % (q.envelope.get("event_id"), txn["event_id"], prof["transaction"]["id"]))
            check(txn["contexts"]["trace"]["trace_id"] == prof["transaction"]["trace_id"],
                  "trace ids differ")
            check(prof["transaction"]["name"] == rt.prog("chunks"),
                  "transaction name %r with WALLPROF_SEND_ARGS=0" % prof["transaction"]["name"])
            check(prof.get("environment") == "test" and prof.get("release") == "chunks@1.0",
                  "environment %r, release %r" % (prof.get("environment"), prof.get("release")))
            check({"spin_work", "nap_work"} <= functions(prof), "functions %s" % functions(prof))
            check(not spooled(spool), "items left in the spool: %s" % spooled(spool))

    def test_chunks(tmp):
        """Chunks every 2 s for 7 s: 4 profile_chunk envelopes (the last at
        exit), in order, one profiler_id, fresh chunk_ids, following each
        other; no chunk files; the exit profile file still written."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            r = run(tmp, 7, {"WALLPROF_SENTRY_DSN": rx.dsn("42"), "WALLPROF_SPOOL_DIR": spool,
                             "WALLPROF_CHUNK_SECONDS": "2"})
            same_as_plain(tmp, r, 7)
            clean(rx)
            chunks = [json.loads(p) for _, p in rx.items("profile_chunk")]
            check(len(chunks) == 4 and len(rx.requests) == 4,
                  "%d chunks in %d requests" % (len(chunks), len(rx.requests)))
            check(len({c["profiler_id"] for c in chunks}) == 1, "profiler ids differ")
            check(len({c["chunk_id"] for c in chunks}) == 4, "chunk ids repeat")
            last = 0
            total = 0
            for k, c in enumerate(chunks, 1):
                ts = [s["timestamp"] for s in c["profile"]["samples"]]
                check(ts == sorted(ts), "chunk %d: samples out of order" % k)
                check(ts[0] > last and (last == 0 or ts[0] - last < 0.2),
                      "chunk %d starts %.3f s after the one before" % (k, ts[0] - last))
                check(ts[-1] - ts[0] <= 2.1, "chunk %d spans %.2f s" % (k, ts[-1] - ts[0]))
                check("spin_work" in functions(c), "chunk %d: functions %s" % (k, functions(c)))
                last = ts[-1]
                total += len(ts)
            n = len(rt.profile_part(rt.exit_profile(r))["samples"])
            check(abs(total - n) <= max(2, n // 100),
                  "the chunks hold %d samples, the exit profile %d" % (total, n))
            check(not glob.glob(os.path.join(tmp, "*.chunk*")), "chunk files: %s"
                  % os.listdir(tmp))

    def test_429(tmp):
        """A 429 with Retry-After: 3 on the first chunk: nothing reaches the
        receiver for 3 s after it, then every chunk does (nothing lost)."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(429, {"Retry-After": "3"})])
            r = run(tmp, 5.5, {"WALLPROF_SENTRY_DSN": rx.dsn("42"), "WALLPROF_SPOOL_DIR": spool,
                               "WALLPROF_CHUNK_SECONDS": "1"})
            same_as_plain(tmp, r, 5.5)
            clean(rx)
            reqs = rx.requests
            check(reqs and reqs[0].status == 429, "first answer %r" % reqs[:1])
            after = [q.time - reqs[0].time for q in reqs[1:]]
            check(after and min(after) >= 3.0, "requests %.2f s after the 429" % min(after or [0]))
            got = {}
            for q in reqs[1:]:
                for _, p in q.items:
                    c = json.loads(p)
                    got[c["chunk_id"]] = c
            firsts = sorted(c["profile"]["samples"][0]["timestamp"] for c in got.values())
            total = sum(len(c["profile"]["samples"]) for c in got.values())
            n = len(rt.profile_part(rt.exit_profile(r))["samples"])
            rt.note("429: %d requests, %d chunks delivered, %d samples (exit profile %d)"
                    % (len(reqs), len(got), total, n))
            check(len(got) >= 5, "%d chunks delivered" % len(got))
            check(abs(total - n) <= max(2, n // 100), "delivered %d samples of %d: lost some"
                  % (total, n))
            check(firsts == sorted(firsts), "order")
            check(not spooled(spool), "left in the spool: %s" % spooled(spool))

    def test_down_then_up(tmp):
        """The receiver down at exit: the envelope stays in the spool, the
        exit says so in one line; the next run, with the receiver up,
        delivers both."""
        spool = os.path.join(tmp, "spool")
        port = receiver.free_port()
        dsn = "http://%s@127.0.0.1:%d/42" % (KEY, port)
        r1 = run(tmp, 1.2, {"WALLPROF_SENTRY_DSN": dsn, "WALLPROF_SPOOL_DIR": spool})
        check(r1.rc == 0, r1.describe())
        lines = [l for l in r1.wallprof_lines() if "spool" in l]
        check(len(lines) == 1 and "1 left" in lines[0], "lines: %s" % r1.wallprof_lines())
        check(len(spooled(spool)) == 1, "spool: %s" % spooled(spool))
        with receiver.Receiver(key=KEY, port=port) as rx:
            r2 = run(tmp, 1.2, {"WALLPROF_SENTRY_DSN": dsn, "WALLPROF_SPOOL_DIR": spool})
            same_as_plain(tmp, r2, 1.2)
            clean(rx)
            pids = sorted(json.loads(p)["wallprof"]["pid"] for _, p in rx.items("profile"))
            check(pids == sorted([r1.pid, r2.pid]), "profiles of %s, runs %d and %d"
                  % (pids, r1.pid, r2.pid))
            check(not spooled(spool), "left: %s" % spooled(spool))

    def test_chunks_down(tmp):
        """Chunks with the receiver down: they wait in the spool, and the
        first process's exit says so in one line."""
        spool = os.path.join(tmp, "spool")
        port = receiver.free_port()
        r = run(tmp, 2.5, {"WALLPROF_SENTRY_DSN": "http://%s@127.0.0.1:%d/42" % (KEY, port),
                           "WALLPROF_SPOOL_DIR": spool, "WALLPROF_CHUNK_SECONDS": "1"})
        same_as_plain(tmp, r, 2.5)
        lines = [l for l in r.wallprof_lines() if "spool" in l]
        check(len(lines) == 1 and "3 left" in lines[0], "lines: %s" % r.wallprof_lines())
        check(len(spooled(spool)) == 3, "spool: %s" % spooled(spool))

    def test_tree(tmp):
        """A shell's two children send their chunks too, each with its own
        profiler_id; the shell's own come with theirs."""
        spool = os.path.join(tmp, "spool")
        prog = rt.prog("chunks")
        with receiver.Receiver(key=KEY) as rx:
            saved = {k: os.environ.pop(k) for k in list(os.environ)
                     if k.lower().endswith("_proxy")}
            try:
                r = rt.run_bounded(["sh", "-c", "%s 2.2 & %s 2.2; wait" % (prog, prog)], tmp,
                                   env_extra=env({"WALLPROF_SENTRY_DSN": rx.dsn("42"),
                                                  "WALLPROF_SPOOL_DIR": spool,
                                                  "WALLPROF_CHUNK_SECONDS": "1"}))
            finally:
                os.environ.update(saved)
            check(r.rc == 0, r.describe())
            clean(rx)
            ids = {}
            for _, p in rx.items("profile_chunk"):
                c = json.loads(p)
                ids.setdefault(c["profiler_id"], []).append(c)
            with_spin = [k for k, cs in ids.items()
                         if any("spin_work" in functions(c) for c in cs)]
            check(len(with_spin) == 2 and all(len(ids[k]) >= 2 for k in with_spin),
                  "chunks per profiler id: %s" % {k: len(v) for k, v in ids.items()})
            check(not spooled(spool), "left: %s" % spooled(spool))

    def test_sigterm_tail(tmp):
        """Chunks on and the process killed by SIGTERM between two periods:
        what no chunk took goes as the next chunk, so the chunks sent hold
        every sample the death's profile holds."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            saved = {k: os.environ.pop(k) for k in list(os.environ)
                     if k.lower().endswith("_proxy")}
            try:
                proc = subprocess.Popen(
                    [rt.prog("chunks"), "0"], cwd=tmp, stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                    env=rt.clean_env(env({"WALLPROF_SENTRY_DSN": rx.dsn("42"),
                                          "WALLPROF_SPOOL_DIR": spool,
                                          "WALLPROF_CHUNK_SECONDS": "2"})))
            finally:
                os.environ.update(saved)
            try:
                check(rx.wait_for(1, timeout=15), "no chunk arrived")
                # Half a period of samples after the first chunk: what the
                # tail is to carry (time is the quantity here).
                time.sleep(1.0)
                os.kill(proc.pid, signal.SIGTERM)
                proc.communicate(timeout=30)
            finally:
                rt.kill_group(proc)
            check(proc.returncode == -signal.SIGTERM, "rc %r" % proc.returncode)
            clean(rx)
            chunks = [json.loads(p) for _, p in rx.items("profile_chunk")]
            total = sum(len(c["profile"]["samples"]) for c in chunks)
            death = rt.load_profile(os.path.join(tmp, "wallprof.%d.json" % proc.pid))
            n = len(rt.profile_part(death)["samples"])
            rt.note("SIGTERM: %d chunks, %d samples; the death's profile %d"
                    % (len(chunks), total, n))
            check(len(chunks) == 2, "%d chunks" % len(chunks))
            check(abs(total - n) <= max(2, n // 50), "the chunks hold %d samples, the "
                  "profile of the death %d" % (total, n))

    def test_chunks_bound(tmp):
        """A slow server (1.5 s an answer), chunks every second, a 2 s
        timeout: the exit is delayed by about the timeout, not by the
        chunks still waiting to be sent; what is not sent stays."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(200, {}, 1.5)] * 40)
            t0 = time.monotonic()
            run(tmp, 4, {})
            base = time.monotonic() - t0
            t0 = time.monotonic()
            r = run(tmp, 4, {"WALLPROF_SENTRY_DSN": rx.dsn("42"), "WALLPROF_SPOOL_DIR": spool,
                             "WALLPROF_CHUNK_SECONDS": "1", "WALLPROF_UPLOAD_TIMEOUT": "2"})
            took = time.monotonic() - t0
        rt.note("slow server, 1 s chunks: exit %.2f s, without uploads %.2f s (timeout 2 s)"
                % (took, base))
        check(r.rc == 0, r.describe())
        check(took - base <= 2.0 + 0.8, "the exit took %.2f s longer (timeout 2 s)"
              % (took - base))

    def test_chunks_bad_value(tmp):
        """WALLPROF_CHUNK_SECONDS=10s: the library says it is not a number and
        writes no chunks, so the exit profile is what gets sent."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            r = run(tmp, 1.2, {"WALLPROF_SENTRY_DSN": rx.dsn("42"), "WALLPROF_SPOOL_DIR": spool,
                               "WALLPROF_CHUNK_SECONDS": "10s"})
            check(r.rc == 0, r.describe())
            clean(rx)
            check([q.item_types() for q in rx.requests] == [["transaction", "profile"]],
                  "requests: %s" % rx.requests)

    def test_tail_without_file(tmp):
        """The profile cannot be written (RLIMIT_FSIZE below its size, the
        raw dumps fit): what no chunk took is still sent as the last chunk."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            saved = {k: os.environ.pop(k) for k in list(os.environ)
                     if k.lower().endswith("_proxy")}
            try:
                p = subprocess.run(
                    [rt.prog("chunks"), "1.5"], cwd=tmp, capture_output=True, text=True,
                    timeout=60, env=rt.clean_env(env({"WALLPROF_SENTRY_DSN": rx.dsn("42"),
                                                      "WALLPROF_SPOOL_DIR": spool,
                                                      "WALLPROF_CHUNK_SECONDS": "1"})),
                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                          (30000, 30000)))
            finally:
                os.environ.update(saved)
            check(p.returncode == 0, "rc %d: %s" % (p.returncode, p.stderr[-300:]))
            check("profile not written" in p.stderr, "the profile was written: %s" % p.stderr)
            clean(rx)
            chunks = [json.loads(x) for _, x in rx.items("profile_chunk")]
            check(len(chunks) == 2, "%d chunks" % len(chunks))
            check(len(chunks[-1]["profile"]["samples"]) >= 100,
                  "the last chunk holds %d samples" % len(chunks[-1]["profile"]["samples"]))

    def test_url_secrets(tmp):
        """A Pyroscope URL without a scheme that holds user:password@ is not
        echoed in the line that refuses it; a URL too long with its labels
        is refused with one line, the program unharmed."""
        r = run(tmp, 0.5, {"WALLPROF_PYROSCOPE_URL": "user:hunter2@pyro.example:4040",
                           "WALLPROF_SPOOL_DIR": os.path.join(tmp, "spool")})
        check(r.rc == 0, r.describe())
        lines = [l for l in r.wallprof_lines() if "PYROSCOPE_URL" in l]
        check(len(lines) == 1 and "hunter2" not in r.stderr, "lines: %s" % r.wallprof_lines())
        with receiver.Receiver(key=KEY) as rx:
            # 980 bytes of URL and 11 labels of 40 '/' (each sent as %2F)
            r = run(tmp, 1.2, {"WALLPROF_PYROSCOPE_URL": rx.url("/" + "p" * 950),
                               "WALLPROF_PYROSCOPE_LABELS": ",".join(
                                   "k%d=%s" % (i, "/" * 40) for i in range(11)),
                               "WALLPROF_SPOOL_DIR": os.path.join(tmp, "spool2")})
            same_as_plain(tmp, r, 1.2)
            lines = [l for l in r.wallprof_lines() if "longer than" in l]
            check(len(lines) == 1 and not rx.requests, "lines %s, requests %s"
                  % (r.wallprof_lines(), rx.requests))

    def test_413(tmp):
        """413: dropped, one line says so, nothing kept."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(413, {})])
            r = run(tmp, 1.2, {"WALLPROF_SENTRY_DSN": rx.dsn("42"), "WALLPROF_SPOOL_DIR": spool})
            check(r.rc == 0, r.describe())
            check(len(rx.requests) == 1, "requests %s" % rx.requests)
            lines = [l for l in r.wallprof_lines() if "413" in l]
            check(len(lines) == 1, "lines: %s" % r.wallprof_lines())
            check(not spooled(spool), "kept: %s" % spooled(spool))

    def test_unreachable(tmp):
        """An address that never answers (a full listen backlog): the exit
        takes at most WALLPROF_UPLOAD_TIMEOUT (2 s) longer; the envelope
        stays in the spool."""
        spool = os.path.join(tmp, "spool")
        with receiver.Blackhole() as port:
            t0 = time.monotonic()
            run(tmp, 1, {})
            base = time.monotonic() - t0
            t0 = time.monotonic()
            r = run(tmp, 1, {"WALLPROF_SENTRY_DSN": "http://%s@127.0.0.1:%d/42" % (KEY, port),
                             "WALLPROF_SPOOL_DIR": spool, "WALLPROF_UPLOAD_TIMEOUT": "2"})
            took = time.monotonic() - t0
        rt.note("exit with an unreachable DSN: %.2f s, without a DSN %.2f s (timeout 2 s)"
                % (took, base))
        check(r.rc == 0, r.describe())
        check(took - base <= 2.0 + 0.7, "the exit took %.2f s longer (timeout 2 s)"
              % (took - base))
        check(len(spooled(spool)) == 1, "spool: %s" % spooled(spool))

    def test_no_libcurl(tmp):
        """libcurl is loaded when a flush first sends, not linked: with it
        unloadable (its files hidden under /dev/null in a mount namespace of
        the run's own), the program runs as without the preload, its profile
        is written, one line says why nothing was sent, and the envelope
        stays in the spool. Skipped where a mount namespace cannot be had
        (not root)."""
        ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
        if not shutil.which("unshare") or not os.access(ldconfig, os.X_OK):
            print("    note: skipped: no unshare or ldconfig here")
            return
        libs = sorted(set(re.findall(r"(/\S*/libcurl(?:-gnutls)?\.so\.4)\b",
                                     subprocess.run([ldconfig, "-p"], capture_output=True,
                                                    text=True, timeout=30).stdout)))
        check(libs, "test problem: ldconfig -p lists no libcurl.so.4")
        hide = " ".join("mount --bind /dev/null %s || exit 97;" % l for l in libs)
        probe = subprocess.run(["unshare", "-m", "sh", "-c", hide + " exit 0"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            print("    note: skipped: no mount namespace here (%s)"
                  % probe.stderr.strip()[:120])
            return
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            extra = {"WALLPROF_SENTRY_DSN": rx.dsn("42"), "WALLPROF_SPOOL_DIR": spool}
            argv = ["unshare", "-m", "sh", "-c", hide + ' exec env LD_PRELOAD="$0" "$@"',
                    rt.LIB, rt.prog("chunks"), "1"]
            saved = {k: os.environ.pop(k) for k in list(os.environ)
                     if k.lower().endswith("_proxy")}
            try:
                r = rt.run_bounded(argv, tmp, env_extra=env(extra), preload=False)
            finally:
                os.environ.update(saved)
            plain = run(tmp, 1, {}, preload=False)
            check(r.rc == plain.rc == 0 and r.stdout == plain.stdout,
                  "with libcurl hidden: %s" % r.describe())
            check(not r.other_stderr(), "stderr besides our lines: %r" % r.other_stderr())
            check(rt.exit_profile(r) is not None, "no profile file: %s" % r.describe())
            lines = r.wallprof_lines()
            said = [l for l in lines if "cannot load libcurl" in l]
            check(len(said) == 1 and "left in the spool" in said[0],
                  "not one line saying libcurl could not be loaded and what is kept: %s"
                  % lines)
            check(not rx.requests, "requests: %s" % rx.requests)
        check(len(spooled(spool)) == 1, "spool: %s" % spooled(spool))

    def test_pyroscope(tmp):
        """Pyroscope: one /ingest push of pprof, name app{labels}, the time
        range, the rate; no thread labels unless asked."""
        for threads in ("0", "1"):
            spool = os.path.join(tmp, "spool" + threads)
            with receiver.Receiver(key=KEY) as rx:
                t0 = time.time()
                r = run(tmp, 1.2, {"WALLPROF_PYROSCOPE_URL": rx.url("/"),
                                   "WALLPROF_PYROSCOPE_TENANT": "team-a",
                                   "WALLPROF_PYROSCOPE_TOKEN": "s3cret",
                                   "WALLPROF_PYROSCOPE_APP": "chunky",
                                   "WALLPROF_PYROSCOPE_LABELS": "env=test,region=eu-1",
                                   "WALLPROF_PYROSCOPE_THREADS": threads,
                                   "WALLPROF_SPOOL_DIR": spool})
                same_as_plain(tmp, r, 1.2)
                check(len(rx.requests) == 1 and rx.requests[0].path == "/ingest",
                      "requests %s" % rx.requests)
                q = rx.requests[0]
                qs = {k: v[0] for k, v in q.query.items()}
                check(qs.get("name") == "chunky{env=test,region=eu-1}", "name %r" % qs.get("name"))
                check(qs.get("format") == "pprof" and qs.get("sampleRate") == "101"
                      and qs.get("spyName") == "libwallprof", "query %s" % qs)
                check(t0 - 1 <= int(qs["from"]) < int(qs["until"]) <= time.time() + 1,
                      "from %s until %s" % (qs["from"], qs["until"]))
                check(q.headers.get("x-scope-orgid") == "team-a" and
                      q.headers.get("authorization") == "Bearer s3cret",
                      "headers %s" % q.headers)
                parts = multipart_parts(q.headers.get("content-type", ""), q.body)
                check(set(parts) == {"profile", "sample_type_config"}, "parts %s" % list(parts))
                config = json.loads(parts.get("sample_type_config") or b"{}")
                check(list(config) == ["samples"] and config["samples"]["units"] == "samples"
                      and config["samples"]["display-name"] == "wall"
                      and config["samples"]["sampled"] is True, "config %s" % config)
                strings, n = pprof_summary(parts["profile"])
                check(n > 100 and "spin_work" in strings, "pprof: %d samples" % n)
                check(("thread_name" in strings) == (threads == "1"),
                      "thread labels with WALLPROF_PYROSCOPE_THREADS=%s" % threads)

    def test_bad_dsn(tmp):
        """A DSN that does not parse: one line at start, the profile
        written, nothing else changes."""
        r = run(tmp, 1, {"WALLPROF_SENTRY_DSN": "https://sentry.example/42",
                         "WALLPROF_SPOOL_DIR": os.path.join(tmp, "spool")})
        same_as_plain(tmp, r, 1)
        lines = [l for l in r.wallprof_lines() if "WALLPROF_SENTRY_DSN" in l]
        check(len(lines) == 1, "lines: %s" % r.wallprof_lines())
        check(rt.exit_profile(r) is not None, "no profile")
        check(not os.path.exists(os.path.join(tmp, "spool")), "a spool for a bad DSN")

    return [
        ("send_exit_profile", test_exit_profile),
        ("send_chunks", test_chunks),
        ("send_429", test_429),
        ("send_down_then_up", test_down_then_up),
        ("send_chunks_down", test_chunks_down),
        ("send_tree", test_tree),
        ("send_sigterm_tail", test_sigterm_tail),
        ("send_chunks_bound", test_chunks_bound),
        ("send_chunks_bad_value", test_chunks_bad_value),
        ("send_tail_without_file", test_tail_without_file),
        ("send_url_secrets", test_url_secrets),
        ("send_413", test_413),
        ("send_unreachable", test_unreachable),
        ("send_no_libcurl", test_no_libcurl),
        ("send_pyroscope", test_pyroscope),
        ("send_bad_dsn", test_bad_dsn),
    ]
