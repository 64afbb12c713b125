#!/usr/bin/env python3
"""receiver: a local HTTP receiver for the upload tests, standard library only.

It speaks Sentry's envelope endpoint, POST /api/<project>/envelope/ (checks
X-Sentry-Auth and its key, the Content-Type, decodes a gzip
Content-Encoding, parses the envelope: a header line, then per item a JSON
item header, its payload of `length` bytes (or up to the newline when no
length) and a newline), and Pyroscope's POST /ingest (keeps the query and
the body). Every request is recorded with its arrival time
(time.monotonic()) and, for an envelope, its items.

Answers are scriptable: a queue of responses, each (status, headers) or
(status, headers, delay_s), or CLOSE (the connection is closed without an
answer: a network error for the client). With the queue empty it answers
200. A request that fails a check is answered 400 (401 for a bad
X-Sentry-Auth) and its errors recorded, whatever the queue says.

Payload schemas are test/sentry_check.py's business: a `profile` item goes
through sentry_check.check(), a `profile_chunk` item through
sentry_check.check_chunk() when that exists; their errors land in the
request's `errors`.

As a module:

    from receiver import Receiver, CLOSE
    rx = Receiver(key="abc").start()      # 127.0.0.1, a free port
    rx.dsn("42")                          # "http://abc@127.0.0.1:PORT/42"
    rx.envelope_url("42"), rx.url("/ingest?name=x")
    rx.script([(429, {"Retry-After": "3"}), (200, {})])   # the next answers
    rx.wait_for(2, timeout=10)            # True once 2 requests arrived
    rx.requests                           # [Request], .time .path .query
                                          # .headers .body .items .errors .status
    rx.stop()

As a script (the demo, manual runs): each envelope item and Pyroscope body
is written to a file in DIR, one line per request on stdout:

    python3 test/receiver.py --port 9000 --dir OUT [--key KEY]
"""

import argparse
import gzip
import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
import zlib

CLOSE = "close"
ENVELOPE_TYPE = "application/x-sentry-envelope"
MAX_BODY = 256 << 20

try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sentry_check
except ImportError:  # pragma: no cover
    sentry_check = None


class Blackhole:
    """A loopback port that never answers: a listening socket whose backlog
    is full, so that new connections' SYNs are dropped (a client's connect
    hangs until its own timeout). `with Blackhole() as port: ...`"""

    def __enter__(self):
        self._lsock = socket.socket()
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(0)
        self.port = self._lsock.getsockname()[1]
        self._fillers = []
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", self.port))
            self._fillers.append(c)
        return self.port

    def __exit__(self, *exc):
        for c in self._fillers:
            c.close()
        self._lsock.close()
        return False


def free_port():
    """A loopback port nothing listens on (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Request:
    """One request as received."""

    def __init__(self, method, path, query, headers, body, t):
        self.method = method
        self.path = path
        self.query = query          # dict of lists (urllib.parse.parse_qs)
        self.headers = headers      # dict, names lowercased
        self.raw = body             # as sent (gzip-compressed or not)
        self.body = body            # decoded
        self.time = t               # time.monotonic() at arrival
        self.kind = None            # "envelope", "ingest", None
        self.envelope = None        # the envelope's header (dict)
        self.items = []             # [(item header dict, payload bytes)]
        self.auth = {}              # X-Sentry-Auth's fields
        self.errors = []
        self.status = None          # what we answered (None: closed)

    def item_types(self):
        return [h.get("type") for h, _ in self.items]

    def __repr__(self):
        return "<%s %s %s items=%s errors=%s>" % (self.method, self.path, self.status,
                                                  self.item_types(), self.errors)


def parse_auth(value):
    """X-Sentry-Auth: "Sentry k=v, k=v" -> dict, or None when not that form."""
    if not value or not value.startswith("Sentry "):
        return None
    out = {}
    for part in value[len("Sentry "):].split(","):
        k, sep, v = part.strip().partition("=")
        if not sep or not k:
            return None
        out[k] = v
    return out


def parse_envelope(data):
    """(header, [(item header, payload)], errors) of an envelope."""
    errors, items = [], []
    nl = data.find(b"\n")
    head_line = data if nl < 0 else data[:nl]
    try:
        header = json.loads(head_line)
        if not isinstance(header, dict):
            raise ValueError("not an object")
    except ValueError as e:
        return None, [], ["envelope header: %s" % e]
    pos = len(data) if nl < 0 else nl + 1
    while pos < len(data):
        nl = data.find(b"\n", pos)
        line = data[pos:] if nl < 0 else data[pos:nl]
        if not line.strip():
            pos = len(data) if nl < 0 else nl + 1
            continue
        try:
            ih = json.loads(line)
            if not isinstance(ih, dict):
                raise ValueError("not an object")
        except ValueError as e:
            errors.append("item %d header: %s" % (len(items), e))
            break
        pos = len(data) if nl < 0 else nl + 1
        if "length" in ih:
            n = ih["length"]
            if not isinstance(n, int) or isinstance(n, bool) or n < 0 or pos + n > len(data):
                errors.append("item %d: bad length %r (%d bytes left)"
                              % (len(items), n, len(data) - pos))
                break
            payload = data[pos:pos + n]
            pos += n
            if pos < len(data):
                if data[pos:pos + 1] != b"\n":
                    errors.append("item %d: no newline after its payload" % len(items))
                    break
                pos += 1
        else:
            nl = data.find(b"\n", pos)
            payload = data[pos:] if nl < 0 else data[pos:nl]
            pos = len(data) if nl < 0 else nl + 1
        if "type" not in ih:
            errors.append("item %d: no type" % len(items))
        items.append((ih, payload))
    return header, items, errors


def check_payload(ih, payload):
    """sentry_check's verdict on a profile or profile_chunk item."""
    kind = ih.get("type")
    fn = None
    if sentry_check is not None:
        if kind == "profile":
            fn = getattr(sentry_check, "check", None)
        elif kind == "profile_chunk":
            fn = getattr(sentry_check, "check_chunk", None)
    if fn is None:
        return []
    try:
        obj = json.loads(payload)
    except ValueError as e:
        return ["%s item: not JSON: %s" % (kind, e)]
    return ["%s item: %s" % (kind, e) for e in fn(obj)]


class Receiver:
    """A threaded HTTP server on 127.0.0.1 recording every request."""

    def __init__(self, key=None, port=0, on_request=None):
        self.key = key
        self.requests = []
        self._queue = []
        self._cond = threading.Condition()
        self._on_request = on_request
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = None

    # --- control ---
    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def script(self, responses):
        """Appends answers for the next requests: (status, headers[, delay_s]) or CLOSE."""
        with self._cond:
            self._queue.extend(responses)

    def url(self, path="/"):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def envelope_url(self, project="42"):
        return self.url("/api/%s/envelope/" % project)

    def dsn(self, project="42", key=None):
        return "http://%s@127.0.0.1:%d/%s" % (key or self.key or "public", self.port, project)

    def wait_for(self, n, timeout=10.0):
        """True once `n` requests have arrived (answered or not), False after `timeout` s."""
        end = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def items(self, kind=None):
        """Every envelope item received (answered 2xx or not), in order."""
        with self._cond:
            reqs = list(self.requests)
        return [(h, p) for r in reqs for h, p in r.items if kind is None or h.get("type") == kind]

    # --- serving ---
    def _next_answer(self):
        with self._cond:
            return self._queue.pop(0) if self._queue else (200, {})

    def _record(self, req):
        with self._cond:
            self.requests.append(req)
            self._cond.notify_all()
        if self._on_request:
            self._on_request(req)

    def _check(self, req, content_type):
        if req.path.startswith("/api/") and req.path.endswith("/envelope/"):
            req.kind = "envelope"
            auth = parse_auth(req.headers.get("x-sentry-auth"))
            if auth is None:
                req.errors.append("X-Sentry-Auth missing or not \"Sentry k=v, ...\"")
                return 401
            req.auth = auth
            if self.key is not None and auth.get("sentry_key") != self.key:
                req.errors.append("sentry_key %r, want %r" % (auth.get("sentry_key"), self.key))
                return 401
            if auth.get("sentry_version") != "7":
                req.errors.append("sentry_version %r" % auth.get("sentry_version"))
            if not auth.get("sentry_client", "").startswith("libwallprof/"):
                req.errors.append("sentry_client %r" % auth.get("sentry_client"))
            if content_type != ENVELOPE_TYPE:
                req.errors.append("Content-Type %r, want %s" % (content_type, ENVELOPE_TYPE))
            header, items, errors = parse_envelope(req.body)
            req.envelope, req.items = header, items
            req.errors += errors
            for ih, payload in items:
                req.errors += check_payload(ih, payload)
        elif req.path == "/ingest":
            req.kind = "ingest"
            if "name" not in req.query:
                req.errors.append("/ingest without name=")
        else:
            req.errors.append("unknown path %s" % req.path)
            return 404
        return 400 if req.errors else None

    def _handler(self):
        rx = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_POST(self):
                t = time.monotonic()
                u = urllib.parse.urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                n = int(headers.get("content-length", "0") or 0)
                body = self.rfile.read(n) if 0 <= n <= MAX_BODY else b""
                req = Request("POST", u.path, urllib.parse.parse_qs(u.query), headers, body, t)
                if n < 0 or n > MAX_BODY:
                    req.errors.append("Content-Length %d" % n)
                enc = headers.get("content-encoding", "")
                if enc == "gzip":
                    try:
                        req.body = gzip.decompress(body)
                    except (OSError, EOFError, zlib.error) as e:
                        req.errors.append("gzip body: %s" % e)
                elif enc:
                    req.errors.append("Content-Encoding %r" % enc)
                forced = rx._check(req, headers.get("content-type", "").split(";")[0].strip())
                answer = rx._next_answer()
                if answer == CLOSE and not forced:
                    rx._record(req)
                    self.close_connection = True
                    try:
                        self.connection.shutdown(2)
                    except OSError:
                        pass
                    return
                status, extra = (forced, {}) if forced else (answer[0], answer[1])
                if not forced and len(answer) > 2 and answer[2]:
                    time.sleep(answer[2])  # a slow server, as scripted
                req.status = status
                rx._record(req)
                out = json.dumps({"id": "0" * 32} if status < 300 else
                                 {"detail": "; ".join(req.errors) or "scripted"}).encode()
                try:
                    self.send_response(status)
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (its deadline): recorded anyway

            def do_GET(self):
                self.send_error(405)

        return Handler


def main(argv=None):
    ap = argparse.ArgumentParser(description="local Sentry envelope / Pyroscope ingest receiver")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free)")
    ap.add_argument("--dir", required=True, help="where each received item is written")
    ap.add_argument("--key", help="the public key X-Sentry-Auth must carry")
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    seq = [0]

    def save(req):
        seq[0] += 1
        if req.kind == "ingest":
            name = "%04d-pyroscope.bin" % seq[0]
            with open(os.path.join(args.dir, name), "wb") as f:
                f.write(req.body)
            with open(os.path.join(args.dir, name + ".query"), "w") as f:
                f.write(json.dumps(req.query) + "\n")
        for i, (ih, payload) in enumerate(req.items):
            with open(os.path.join(args.dir, "%04d-%d-%s.json" % (seq[0], i, ih.get("type"))),
                      "wb") as f:
                f.write(payload)
        print("%s %s -> %s items=%s%s" % (req.method, req.path, req.status, req.item_types(),
                                          (" errors: " + "; ".join(req.errors)) if req.errors
                                          else ""), flush=True)

    rx = Receiver(key=args.key, port=args.port, on_request=save).start()
    print("listening on %s (envelopes: %s, Pyroscope: %s)"
          % (rx.url(""), rx.envelope_url("<project>"), rx.url("/ingest")), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    rx.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
