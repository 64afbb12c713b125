"""Headless Chromium driven over the DevTools protocol, for the tests of
the HTML flame graph (test/e2e/html.py). Python's standard library only.

Chromium is started with --remote-debugging-pipe: it reads protocol
messages (JSON, each ended by a NUL byte) on its fd 3 and writes replies
and events on its fd 4. A Page is one tab attached in "flatten" mode, so
its commands carry a sessionId on the same pipe.

    with Browser(tmpdir) as b:
        page = b.open("file:///.../x.html")
        page.evaluate("wallprof.labels()")
        page.screenshot("shot.png")
        page.errors   # console errors, uncaught exceptions, failed loads
"""

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find():
    """The path of a Chromium binary, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(Exception):
    pass


class Browser:
    def __init__(self, tmpdir, width=1400, height=900, timeout=30):
        self.tmpdir = tmpdir
        self.width = width
        self.height = height
        self.timeout = timeout
        self.proc = None
        self.next_id = 0
        self.buf = b""
        self.events = []

    def __enter__(self):
        exe = find()
        if not exe:
            raise ProtocolError("no chromium found (scripts/install-deps.sh installs it)")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        profile = os.path.join(self.tmpdir, "chromium-profile")
        argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", "--user-data-dir=" + profile,
                "--window-size=%d,%d" % (self.width, self.height), "about:blank"]

        # Above 4, so that moving one end to 3 or 4 cannot clobber the other.
        hi_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 10)
        hi_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_chrome_r)
        os.close(from_chrome_w)

        def child_fds():
            os.dup2(hi_r, 3)  # dup2 leaves the copies inheritable
            os.dup2(hi_w, 4)

        self.log = open(os.path.join(self.tmpdir, "chromium.log"), "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, preexec_fn=child_fds,
                                     pass_fds=(3, 4), start_new_session=True)
        os.close(hi_r)
        os.close(hi_w)
        return self

    def __exit__(self, *exc):
        try:
            if self.proc and self.proc.poll() is None:
                try:
                    self.send("Browser.close")
                except (ProtocolError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self.to_chrome, self.from_chrome):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.log.close()

    # ---- the pipe ----------------------------------------------------------

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("chromium did not answer in %d s" % self.timeout)
            r, _, _ = select.select([self.from_chrome], [], [], left)
            if not r:
                continue
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise ProtocolError("chromium closed the pipe (exit %s)" % self.proc.poll())
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None):
        """Sends a command and returns its result; events read meanwhile are
        kept in self.events."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self.to_chrome, data)
            data = data[n:]
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise ProtocolError("%s: %s" % (method, m["error"].get("message")))
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method, session, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method and e.get("sessionId") == session:
                    return self.events.pop(i)
            m = self._read_message(deadline)
            if "method" in m:
                self.events.append(m)

    def open(self, url):
        """A new tab showing `url`, loaded."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Runtime", "Log", "Page"):
            self.send(domain + ".enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1,
                   "mobile": False}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        return page


class Page:
    def __init__(self, browser, session):
        self.b = browser
        self.session = session

    @property
    def errors(self):
        """Console errors, uncaught exceptions and failed loads so far."""
        out = []
        for e in self.b.events:
            if e.get("sessionId") != self.session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: %s %s" % (d.get("text"), d.get("exception", {})
                                                 .get("description", "")))
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error",
                                                                                 "assert"):
                out.append("console.%s: %s" % (p["type"], " ".join(
                    str(a.get("value", a.get("description"))) for a in p.get("args", []))))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: %s" % p["entry"].get("text"))
        return out

    def evaluate(self, expr):
        """The value of a JavaScript expression (JSON-able), or raises."""
        r = self.b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                             "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise ProtocolError("%s: %s" % (expr, d.get("exception", {}).get("description",
                                                                             d.get("text"))))
        return r["result"].get("value")

    def screenshot(self, path):
        r = self.b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport":
                                                    True}, session=self.session)
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
