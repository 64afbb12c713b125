"""`wallprof upload` against a local receiver (test/receiver.py, loopback
only): the spool's items written here in the documented format
(docs/FORMATS.md, "The upload spool"), then flushed; what the receiver got
and when, what the spool keeps, the summary line and the exit status.

Covers Sentry's transport rules (2xx sent and deleted; 429 with Retry-After
kept and not re-sent before its end; 413 dropped and counted;
X-Sentry-Rate-Limits on a 200 holding a category back in the next flush;
connection refused kept and backed off, then delivered), the deadline with
an address that never answers, the spool's bounds (oldest dropped first),
two concurrent flushes of one run (each item sent once), runs of live
processes left alone and counted apart, a dead run busy with another flush
skipped at once, redirects and unparsable URLs dropped, credentials never
shown, corrupt items deleted, and the usage errors."""

import fcntl
import gzip
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import receiver  # noqa: E402
import sentry_check  # noqa: E402

TIMEOUT = 60
KEY = "0123456789abcdef0123456789abcdef"
ENVELOPE = "application/x-sentry-envelope"
SUMMARY = re.compile(r"^wallprof: sent (\d+), dropped (\d+), left (\d+) \(rate-limited (\d+)\), "
                     r"(\d+) more of running processes$")


def dead_pid():
    """The pid of a process that has ended (reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def run_name(pid):
    return "%d-%s" % (pid, os.urandom(16).hex())


def envelope(tag, kind="profile"):
    """A Sentry envelope with one item: a valid profile (sentry_check's
    good one) or a chunk-like JSON, tagged so that tests can tell them apart."""
    if kind == "profile":
        obj = sentry_check.good_profile()
        obj["transaction"]["name"] = tag
    else:
        obj = sentry_check.good_chunk()
        obj["release"] = tag
    payload = json.dumps(obj).encode()
    head = json.dumps({"event_id": os.urandom(16).hex()}).encode()
    ih = json.dumps({"type": kind, "length": len(payload)}).encode()
    return head + b"\n" + ih + b"\n" + payload + b"\n"


def item_tag(ih, payload):
    obj = json.loads(payload)
    return obj["transaction"]["name"] if ih.get("type") == "profile" else obj.get("release")


_seq = [0]


def put(spool, run, url, body, category="profile", ctype=ENVELOPE, headers=None, gz=False,
        what="", ms=None):
    """Writes one item file (the spool format) into run `run`; returns its path."""
    d = os.path.join(spool, run)
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(spool, 0o700)
    if headers is None:
        headers = ["X-Sentry-Auth: Sentry sentry_key=%s, sentry_version=7, "
                   "sentry_client=libwallprof/test" % KEY]
    if gz:
        body = gzip.compress(body)
    lines = ["WALLPROF-SPOOL 1", "url: " + url]
    if category:
        lines.append("category: " + category)
    lines.append("content-type: " + ctype)
    lines += ["header: " + h for h in headers]
    lines.append("gzip: %d" % (1 if gz else 0))
    if what:
        lines.append("what: " + what)
    lines.append("length: %d" % len(body))
    _seq[0] += 1
    name = "%016d-%06d-%s.item" % (ms if ms is not None else int(time.time() * 1000),
                                   _seq[0] % 1000000, os.urandom(4).hex())
    tmp = os.path.join(d, ".tmp-" + name)
    with open(tmp, "wb") as f:
        f.write(("\n".join(lines) + "\n\n").encode() + body)
    os.rename(tmp, os.path.join(d, name))
    return os.path.join(d, name)


def items_in(spool):
    out = []
    for d, _, names in os.walk(spool):
        out += [os.path.join(d, n) for n in names if n.endswith(".item")]
    return sorted(out)


def tests(rt):
    check = rt.check
    wallprof = os.path.join(rt.BUILD, "wallprof")

    def upload(spool, *args, env=None, timeout=TIMEOUT):
        """Runs `wallprof upload --spool SPOOL ARGS`; (rc, stdout, stderr, seconds)."""
        e = rt.clean_env(env, preload=False)
        for k in [k for k in e if k.lower().endswith("_proxy")]:
            del e[k]  # loopback only, never through a proxy
        t0 = time.monotonic()
        p = subprocess.run([wallprof, "upload", "--spool", spool] + list(args),
                           capture_output=True, text=True, env=e, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0

    def summary(out, running=0):
        """(sent, dropped, left, rate-limited) of the summary line, which must
        count `running` items of running processes."""
        m = SUMMARY.match(out.strip())
        check(m and len(out.strip().splitlines()) == 1, "not one summary line: %r" % out)
        n = tuple(int(x) for x in m.groups())
        check(n[4] == running, "%d items of running processes, want %d: %r"
              % (n[4], running, out))
        return n[:4]

    def clean(rx):
        for r in rx.requests:
            check(not r.errors, "the receiver found errors in %r: %s" % (r, r.errors))

    def test_delivered(tmp):
        """200: every item delivered once (an envelope, one gzip-compressed,
        a Pyroscope push) and deleted; the dead run's directory removed."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            run = run_name(dead_pid())
            put(spool, run, rx.envelope_url(), envelope("plain"), what="profile of test")
            put(spool, run, rx.envelope_url(), envelope("zipped"), gz=True)
            put(spool, run, rx.url("/ingest?name=app&from=1&until=2"), b"pprof-bytes",
                category=None, ctype="application/octet-stream", headers=[])
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out) == (3, 0, 0, 0),
                  "rc %s, stdout %r, stderr %r" % (rc, out, err))
            check(not err, "stderr: %r" % err)
            clean(rx)
            check(len(rx.requests) == 3, "%d requests, want 3" % len(rx.requests))
            tags = sorted(item_tag(h, p) for h, p in rx.items())
            check(tags == ["plain", "zipped"], "items received: %s" % tags)
            check(rx.requests[1].headers.get("content-encoding") == "gzip",
                  "the gzip item went without Content-Encoding: gzip")
            ua = rx.requests[0].headers.get("user-agent", "")
            check(ua.startswith("libwallprof/"), "User-Agent %r" % ua)
            ing = rx.requests[2]
            check(ing.kind == "ingest" and ing.body == b"pprof-bytes" and
                  ing.query.get("name") == ["app"], "Pyroscope push: %r" % ing)
            check(not items_in(spool), "items left: %s" % items_in(spool))
            check(not os.path.exists(os.path.join(spool, run)),
                  "the dead run's empty directory is still there")

    def test_429_retry_after(tmp):
        """429 with Retry-After: 3, then 200: kept, nothing re-sent before
        3 s after the 429 (a flush in between skips it), then delivered;
        nothing lost."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(429, {"Retry-After": "3"}), (200, {})])
            run = run_name(dead_pid())
            put(spool, run, rx.envelope_url(), envelope("once"))
            rc, out, err, _ = upload(spool)
            check(rc == 1 and summary(out) == (0, 0, 1, 1),
                  "after the 429: rc %s, stdout %r, stderr %r" % (rc, out, err))
            check(len(rx.requests) == 1, "%d requests" % len(rx.requests))
            t429 = rx.requests[0].time
            rc, out, err, _ = upload(spool)
            check(rc == 1 and summary(out) == (0, 0, 1, 1) and len(rx.requests) == 1,
                  "a flush within the limit sent it (rc %s, %r, %d requests)"
                  % (rc, out, len(rx.requests)))
            # The limit's end is what is under test: wait until it is over.
            time.sleep(max(0.0, t429 + 3.05 - time.monotonic()))
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out) == (1, 0, 0, 0),
                  "after the limit: rc %s, stdout %r, stderr %r" % (rc, out, err))
            check(len(rx.requests) == 2, "%d requests, want 2" % len(rx.requests))
            gap = rx.requests[1].time - t429
            rt.note("re-sent %.2f s after the 429" % gap)
            check(gap >= 3.0, "re-sent %.2f s after the 429 (Retry-After: 3)" % gap)
            clean(rx)
            check([item_tag(h, p) for h, p in rx.items()] == ["once", "once"],
                  "items: %s" % rx.items())

    def test_413_dropped(tmp):
        """413: the item deleted, counted as dropped, one line says so; the
        next item still goes."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(413, {})])
            run = run_name(dead_pid())
            put(spool, run, rx.envelope_url(), envelope("big"), what="big profile", ms=1000)
            put(spool, run, rx.envelope_url(), envelope("small"), ms=2000)
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out) == (1, 1, 0, 0),
                  "rc %s, stdout %r, stderr %r" % (rc, out, err))
            lines = err.splitlines()
            check(len(lines) == 1 and "dropped big profile: HTTP 413" in lines[0],
                  "stderr: %r" % err)
            check(not items_in(spool), "items left")

    def test_rate_limits_header(tmp):
        """X-Sentry-Rate-Limits on a 200 ("2.5:profile:organization", a float,
        plus a limit on categories we never send): the profile category is
        held back in the next flush, profile_chunk is not."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(200, {"X-Sentry-Rate-Limits":
                              "60.5:profile:organization:quota, 3600:error;security:project"})])
            run = run_name(dead_pid())
            put(spool, run, rx.envelope_url(), envelope("first"))
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out) == (1, 0, 0, 0), "first: %r %r" % (out, err))
            put(spool, run, rx.envelope_url(), envelope("second"), ms=int(time.time() * 1000))
            put(spool, run, rx.envelope_url(), envelope("chunk", "profile_chunk"),
                category="profile_chunk")
            rc, out, err, _ = upload(spool)
            check(rc == 1 and summary(out) == (1, 0, 1, 1),
                  "second flush: rc %s, stdout %r, stderr %r" % (rc, out, err))
            check(len(rx.requests) == 2 and rx.requests[1].item_types() == ["profile_chunk"],
                  "requests: %s" % rx.requests)
            states = [n for n in os.listdir(spool) if n.startswith("state-")]
            check(len(states) == 1, "state files: %s" % states)
            with open(os.path.join(spool, states[0])) as f:
                text = f.read()
            check(re.search(r"^limit profile \d+$", text, re.M) and
                  "limit profile_chunk" not in text, "state file:\n%s" % text)

    def test_refused_then_up(tmp):
        """Connection refused: the item stays, the endpoint is backed off
        (a flush during the backoff does not even connect); once the
        receiver is up and the backoff over, a flush delivers it."""
        spool = os.path.join(tmp, "spool")
        port = receiver.free_port()
        url = "http://127.0.0.1:%d/api/42/envelope/" % port
        run = run_name(dead_pid())
        put(spool, run, url, envelope("late"))
        rc, out, err, _ = upload(spool)
        check(rc == 1 and summary(out) == (0, 0, 1, 0),
              "refused: rc %s, stdout %r, stderr %r" % (rc, out, err))
        check(len(err.splitlines()) == 1 and "kept" in err, "stderr: %r" % err)
        with receiver.Receiver(key=KEY, port=port) as rx:
            rc, out, err, _ = upload(spool)
            check(rc == 1 and summary(out) == (0, 0, 1, 0) and not rx.requests,
                  "during the backoff: rc %s, %r, %d requests" % (rc, out, len(rx.requests)))
            states = [n for n in os.listdir(spool) if n.startswith("state-")]
            with open(os.path.join(spool, states[0])) as f:
                m = re.search(r"^backoff (\d+) (\d+)$", f.read(), re.M)
            check(m and int(m.group(2)) == 1000, "no 1 s backoff in the state file")
            # The backoff's end is what is under test: wait until it is over.
            time.sleep(max(0.0, int(m.group(1)) / 1e3 + 0.05 - time.time()))
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out) == (1, 0, 0, 0),
                  "once up: rc %s, stdout %r, stderr %r" % (rc, out, err))
            clean(rx)
            check([item_tag(h, p) for h, p in rx.items()] == ["late"], "items: %s" % rx.items())

    def test_deadline_unreachable(tmp):
        """An address that never answers (a listening socket whose backlog is
        full: SYNs are dropped): the flush ends within its --timeout, the
        item kept."""
        with receiver.Blackhole() as port:
            spool = os.path.join(tmp, "spool")
            run = run_name(dead_pid())
            put(spool, run, "http://127.0.0.1:%d/api/42/envelope/" % port, envelope("x"))
            rc, out, err, took = upload(spool, "--timeout", "1.5")
            rt.note("flush with an unreachable endpoint took %.2f s (--timeout 1.5)" % took)
            check(took <= 1.5 + 0.5, "the flush took %.2f s, over its 1.5 s timeout" % took)
            check(rc == 1 and summary(out) == (0, 0, 1, 0),
                  "rc %s, stdout %r, stderr %r" % (rc, out, err))
            check("timed out" in err or "Timeout" in err, "stderr: %r" % err)

    def test_bounds(tmp):
        """Over its bounds (WALLPROF_SPOOL_MAX_FILES=3, five items in two
        runs), the spool drops the oldest first, counted as dropped."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            a, b = run_name(dead_pid()), run_name(dead_pid())
            for i, run in enumerate([a, b, a, b, a]):
                put(spool, run, rx.envelope_url(), envelope("n%d" % i), ms=1000 + i)
            rc, out, err, _ = upload(spool, env={"WALLPROF_SPOOL_MAX_FILES": "3"})
            check(rc == 0 and summary(out) == (3, 2, 0, 0),
                  "rc %s, stdout %r, stderr %r" % (rc, out, err))
            tags = sorted(item_tag(h, p) for h, p in rx.items())
            check(tags == ["n2", "n3", "n4"], "kept and sent: %s" % tags)
            rc, out, err, _ = upload(spool, env={"WALLPROF_SPOOL_MAX_FILES": "0"})
            check(rc == 1 and "WALLPROF_SPOOL_MAX_FILES" in err and not out,
                  "a bad bound: rc %s, %r, %r" % (rc, out, err))

    def test_concurrent(tmp):
        """Two flushes of the same run at once (a slow receiver): each item
        reaches the receiver exactly once, all through the flush that holds
        the run's lock (the other skips it, not waiting)."""
        spool = os.path.join(tmp, "spool")
        n = 12
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(200, {}, 0.03)] * (2 * n))
            run = run_name(dead_pid())
            for i in range(n):
                put(spool, run, rx.envelope_url(), envelope("c%d" % i), ms=1000 + i)
            results = []

            def one():
                results.append(upload(spool))

            threads = [threading.Thread(target=one) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(TIMEOUT)
            check(len(results) == 2, "a flush did not finish")
            sent = sum(summary(r[1])[0] for r in results)
            # One sends them all; the other found the run busy (skipped at
            # once, its items counted as left: exit 1) or already empty.
            check(sent == n and any(r[0] == 0 and summary(r[1])[0] == n for r in results),
                  "results: %s" % [(r[0], r[1]) for r in results])
            tags = sorted(item_tag(h, p) for h, p in rx.items())
            check(tags == sorted("c%d" % i for i in range(n)),
                  "received %d items: %s" % (len(tags), tags))
            clean(rx)

    def test_live_run_kept(tmp):
        """The run of a live process (ours) with a fresh item is its own
        converters' to send: left alone, counted apart (not as left: exit
        0)."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            run = run_name(os.getpid())
            put(spool, run, rx.envelope_url(), envelope("mine"))
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out, running=1) == (0, 0, 0, 0) and not rx.requests,
                  "rc %s, stdout %r, %d requests" % (rc, out, len(rx.requests)))

    def test_busy_run_skipped(tmp):
        """A dead run whose lock another flush holds is skipped at once, not
        waited for until the --timeout: its item counted as left (exit 1),
        nothing sent; once free, the next flush sends it."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            run = run_name(dead_pid())
            put(spool, run, rx.envelope_url(), envelope("busy"))
            with open(os.path.join(spool, run, "lock"), "w") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                rc, out, err, took = upload(spool, "--timeout", "6")
            rt.note("a flush with the only run busy took %.2f s (--timeout 6)" % took)
            check(took < 3, "the flush took %.2f s: it waited for the busy run" % took)
            check(rc == 1 and summary(out) == (0, 0, 1, 0) and not rx.requests,
                  "rc %s, stdout %r, stderr %r, %d requests" % (rc, out, err, len(rx.requests)))
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out) == (1, 0, 0, 0),
                  "once free: rc %s, stdout %r, stderr %r" % (rc, out, err))
            clean(rx)

    def test_corrupt(tmp):
        """Items that do not parse (truncated, garbage, an unknown line) are
        deleted with one line each; a symlink named like an item is not
        followed; a good item beside them goes."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            run = run_name(dead_pid())
            good = put(spool, run, rx.envelope_url(), envelope("good"), ms=5000)
            trunc = put(spool, run, rx.envelope_url(), envelope("t"), ms=1000)
            with open(trunc, "r+b") as f:
                f.truncate(os.path.getsize(trunc) - 10)
            junk = put(spool, run, rx.envelope_url(), envelope("j"), ms=2000)
            with open(junk, "wb") as f:
                f.write(os.urandom(300))
            odd = put(spool, run, rx.envelope_url(), envelope("o"), ms=3000)
            with open(odd, "rb") as f:
                data = f.read()
            with open(odd, "wb") as f:
                f.write(data.replace(b"\ngzip: 0\n", b"\ngzip: 0\nfoo: bar\n", 1))
            secret = os.path.join(tmp, "secret")
            with open(secret, "wb") as f:
                f.write(open(good, "rb").read())
            link = os.path.join(spool, run, "%016d-000000-00000000.item" % 4000)
            os.symlink(secret, link)
            rc, out, err, _ = upload(spool)
            check(summary(out)[:2] == (1, 3), "stdout %r, stderr %r" % (out, err))
            lines = err.splitlines()
            check(len(lines) == 3 and all(l.startswith("wallprof: spool: deleted ") for l in lines),
                  "stderr: %r" % err)
            check(any("truncated" in l for l in lines), "no 'truncated': %r" % err)
            check(os.path.exists(secret) and os.path.islink(link),
                  "the symlink or its target was touched")
            check([item_tag(h, p) for h, p in rx.items()] == ["good"], "items: %s" % rx.items())

    def test_redirect_dropped(tmp):
        """A 3xx (redirects are not followed): the item dropped with one line
        naming its Location (credentials in it shown as ***), the endpoint not
        backed off: the next item goes in the same flush."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(301, {"Location": "https://mv:pw9@elsewhere.example/api/42/envelope/"}),
                       (200, {})])
            run = run_name(dead_pid())
            put(spool, run, rx.envelope_url(), envelope("moved"), what="moved one", ms=1000)
            put(spool, run, rx.envelope_url(), envelope("next"), ms=2000)
            rc, out, err, _ = upload(spool)
            check(rc == 0 and summary(out) == (1, 1, 0, 0),
                  "rc %s, stdout %r, stderr %r" % (rc, out, err))
            lines = err.splitlines()
            check(len(lines) == 1 and "dropped moved one: HTTP 301" in lines[0] and
                  "https://***@elsewhere.example/api/42/envelope/" in lines[0] and
                  "pw9" not in err, "stderr: %r" % err)
            check(len(rx.requests) == 2 and not items_in(spool),
                  "requests %s, left %s" % (rx.requests, items_in(spool)))

    def test_bad_url_dropped(tmp):
        """A URL libcurl cannot parse (no request can ever go): dropped with
        one line, not kept and retried forever; no backoff saved."""
        spool = os.path.join(tmp, "spool")
        run = run_name(dead_pid())
        put(spool, run, "http://[::1/api/42/envelope/", envelope("bad"), what="bad one")
        rc, out, err, _ = upload(spool)
        check(rc == 0 and summary(out) == (0, 1, 0, 0),
              "rc %s, stdout %r, stderr %r" % (rc, out, err))
        check(len(err.splitlines()) == 1 and err.startswith("wallprof: dropped bad one: "),
              "stderr: %r" % err)
        check(not [n for n in os.listdir(spool) if n.startswith("state-")],
              "a state file: %s" % os.listdir(spool))

    def test_credentials_redacted(tmp):
        """A URL with user:pass@ (sent, as Basic auth): the line about its
        5xx shows https://***@host, never the password; the state file
        keeping its backoff is the user's alone (0600)."""
        spool = os.path.join(tmp, "spool")
        with receiver.Receiver(key=KEY) as rx:
            rx.script([(500, {})])
            run = run_name(dead_pid())
            url = "http://wpuser:s3cret@127.0.0.1:%d/api/42/envelope/" % rx.port
            put(spool, run, url, envelope("creds"))
            rc, out, err, _ = upload(spool)
            check(rc == 1 and summary(out) == (0, 0, 1, 0),
                  "rc %s, stdout %r, stderr %r" % (rc, out, err))
            check(len(rx.requests) == 1 and
                  rx.requests[0].headers.get("authorization", "").startswith("Basic "),
                  "requests: %s" % rx.requests)
            want = "http://***@127.0.0.1:%d/api/42/envelope/" % rx.port
            check(len(err.splitlines()) == 1 and want in err and "HTTP 500" in err,
                  "stderr: %r" % err)
            check("s3cret" not in err + out and "wpuser" not in err + out,
                  "credentials shown: %r %r" % (out, err))
            states = [n for n in os.listdir(spool) if n.startswith("state-")]
            check(len(states) == 1 and
                  os.stat(os.path.join(spool, states[0])).st_mode & 0o777 == 0o600,
                  "state files: %s" % states)

    def test_usage(tmp):
        """--help, bad arguments (exit 2), a spool someone else could write
        (sticky or not) or owns (exit 1, one line: one spool per user)."""
        p = subprocess.run([wallprof, "upload", "--help"], capture_output=True, text=True,
                           env=rt.clean_env(preload=False), timeout=TIMEOUT)
        check(p.returncode == 0 and p.stdout.startswith("usage: wallprof upload"), p.stdout)
        for args in (["--timeout"], ["--timeout", "0"], ["--timeout", "nan"], ["--bogus"],
                     ["--spool", ""]):
            p = subprocess.run([wallprof, "upload"] + args, capture_output=True, text=True,
                               env=rt.clean_env(preload=False), timeout=TIMEOUT)
            check(p.returncode == 2 and len(p.stderr.splitlines()) == 1 and
                  p.stderr.startswith("wallprof: upload: "),
                  "%s: rc %s, stderr %r" % (args, p.returncode, p.stderr))
        spool = os.path.join(tmp, "open")
        os.mkdir(spool)
        os.chmod(spool, 0o777)
        rc, out, err, _ = upload(spool)
        check(rc == 1 and not out and len(err.splitlines()) == 1 and "writable" in err,
              "world-writable spool: rc %s, %r, %r" % (rc, out, err))
        # sticky and shared (WALLPROF_SPOOL_DIR=/tmp/spool for several users):
        # refused too, one line saying the spool must be one per user
        shared = os.path.join(tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        rc, out, err, _ = upload(shared)
        check(rc == 1 and not out and len(err.splitlines()) == 1 and "one per user" in err,
              "sticky shared spool: rc %s, %r, %r" % (rc, out, err))
        if os.geteuid() == 0:
            theirs = os.path.join(tmp, "theirs")
            os.mkdir(theirs, 0o700)
            os.chown(theirs, 65534, 65534)
            rc, out, err, _ = upload(theirs)
            check(rc == 1 and not out and len(err.splitlines()) == 1 and
                  "owned by another user" in err and "one per user" in err,
                  "another user's spool: rc %s, %r, %r" % (rc, out, err))
        rc, out, err, _ = upload(os.path.join(tmp, "missing"))
        check(rc == 0 and summary(out) == (0, 0, 0, 0), "no spool: rc %s, %r" % (rc, out))

    return [("upload_delivered", test_delivered),
            ("upload_429_retry_after", test_429_retry_after),
            ("upload_413_dropped", test_413_dropped),
            ("upload_rate_limits_header", test_rate_limits_header),
            ("upload_refused_then_up", test_refused_then_up),
            ("upload_deadline_unreachable", test_deadline_unreachable),
            ("upload_bounds", test_bounds),
            ("upload_concurrent", test_concurrent),
            ("upload_live_run_kept", test_live_run_kept),
            ("upload_busy_run_skipped", test_busy_run_skipped),
            ("upload_corrupt", test_corrupt),
            ("upload_redirect_dropped", test_redirect_dropped),
            ("upload_bad_url_dropped", test_bad_url_dropped),
            ("upload_credentials_redacted", test_credentials_redacted),
            ("upload_usage", test_usage)]
