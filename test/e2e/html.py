"""The HTML flame graph (output/html.c, output/html/) in a real browser:
profiles of test/progs/html.c written as pages, loaded in headless
Chromium over the DevTools protocol (test/chromium.py), and checked
through the page's own API (window.wallprof) and its controls:

- no console errors or uncaught exceptions while loading and using it;
- the program's functions are drawn, and searching finds them with a
  match percentage ("/" focuses the search box, Esc resets);
- the thread filter and the on/off-CPU toggles change what is drawn;
- dragging over the timeline narrows the samples to a time range;
- the inverted view (callers of leaves) draws the same functions;
- a diff against a base profile colours the function that gained share
  red and the one that lost share blue.

Screenshots are left in build/test-artifacts/ for a person to look at.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import chromium  # noqa: E402  (test/chromium.py)

RUN_MS = "1200"
TIMEOUT = 60


def tests(rt):
    check = rt.check
    artifacts = os.path.join(rt.BUILD, "test-artifacts")

    def html_argv(raw, out, base=None):
        """The command that writes `raw`'s page to `out` (a diff against
        `base` when given)."""
        wallprof = os.path.join(rt.BUILD, "wallprof")
        if base:
            return [wallprof, "diff", base, raw, "-f", "html", "-o", out]
        return [wallprof, "convert", raw, "-f", "html", "-o", out]

    def profile(tmp, mode):
        """A raw dump of test/progs/html in `mode` (the converter kept away
        so that the raw dump stays)."""
        env = {"WALLPROF_CONVERTER": os.path.join(tmp, "no-converter")}
        r = rt.run_bounded([rt.prog("html"), mode, RUN_MS], tmp, env_extra=env, timeout=TIMEOUT)
        check(r.rc == 0, r.describe())
        raw = os.path.join(tmp, "wallprof.%d.raw" % r.pid)
        check(os.path.exists(raw), "no raw dump: %s" % r.wallprof_lines())
        return raw

    def page_of(tmp, raw, base=None):
        out = os.path.join(tmp, "flamegraph%s.html" % ("-diff" if base else ""))
        c = subprocess.run(html_argv(raw, out, base), capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(c.returncode == 0 and os.path.exists(out), "writing the page: %s" % c.stderr)
        return out

    def browse(tmp, path):
        check(chromium.find(), "chromium is not installed (scripts/install-deps.sh)")
        b = chromium.Browser(tmp).__enter__()
        try:
            page = b.open("file://" + path)
            check(page.evaluate("!!(window.wallprof && wallprof.ready)"),
                  "the page did not start: %s; %s" % (page.evaluate(
                      "window.wallprof ? wallprof.error : 'no window.wallprof'"), page.errors))
        except BaseException:
            b.__exit__(None, None, None)
            raise
        return b, page

    def no_errors(page, when):
        check(not page.errors, "%s: %s" % (when, page.errors[:5]))

    def labels(page):
        return set(page.evaluate("wallprof.labels()"))

    def key(page, k):
        for t in ("keyDown", "keyUp"):
            page.b.send("Input.dispatchKeyEvent",
                        {"type": t, "key": k, "code": {"/": "Slash", "Escape": "Escape"}[k],
                         "windowsVirtualKeyCode": {"/": 191, "Escape": 27}[k],
                         "text": k if k == "/" and t == "keyDown" else ""},
                        session=page.session)

    def drag(page, elem, x0, x1):
        """Drags the mouse over element `elem` from x0 to x1 (fractions of
        its width), in its middle."""
        r = page.evaluate("(() => { const r = document.getElementById('%s')"
                          ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height];"
                          " })()" % elem)
        y = r[1] + r[3] / 2
        steps = [("mousePressed", x0), ("mouseMoved", (x0 + x1) / 2), ("mouseMoved", x1),
                 ("mouseReleased", x1)]
        for t, f in steps:
            page.b.send("Input.dispatchMouseEvent",
                        {"type": t, "x": r[0] + f * r[2], "y": y, "button": "left",
                         "buttons": 0 if t == "mouseReleased" else 1, "clickCount": 1},
                        session=page.session)

    def test_page(tmp):
        raw = profile(tmp, "new")
        path = page_of(tmp, raw)
        check(os.path.getsize(path) < 2 * 1000 * 1000, "page of %d bytes" % os.path.getsize(path))
        b, page = browse(tmp, path)
        try:
            no_errors(page, "loading")
            drawn = labels(page)
            want = {"wpt_html_spin_a", "wpt_html_spin_b", "wpt_html_wait", "wpt_html_read",
                    "[read]", "main"}
            check(want <= drawn, "not drawn: %s (drawn: %s)" % (want - drawn, sorted(drawn)))
            total = page.evaluate("wallprof.selected()")
            check(total >= 100, "%s samples" % total)
            rt.note("%d samples, %d labels drawn" % (total, len(drawn)))

            # Search: through the API, then as a user would ("/" and typing).
            pct = page.evaluate("wallprof.search('wpt_html_spin_')")
            check(10 < pct < 60, "wpt_html_spin_ matched %.1f%% of the samples" % pct)
            check(page.evaluate("wallprof.search('no_such_function_here')") == 0,
                  "a search for nothing matched")
            page.evaluate("wallprof.reset()")
            key(page, "/")
            check(page.evaluate("document.activeElement.id") == "search", "'/' did not focus "
                  "the search box")
            page.b.send("Input.insertText", {"text": "wpt_html_read"}, session=page.session)
            shown = page.evaluate("document.getElementById('match').textContent")
            check(shown.startswith("Matched: ") and 10 < float(shown[9:].rstrip("%")) < 50,
                  "the reader's share as shown: %r" % shown)
            page.screenshot(os.path.join(tmp, "search.png"))
            key(page, "Escape")
            check(page.evaluate("wallprof.matched()") == 0 and
                  page.evaluate("document.getElementById('search').value") == "",
                  "Esc did not clear the search")

            # One thread: the sleeper's functions only.
            threads = {t["name"]: t for t in page.evaluate("wallprof.threads()")}
            check({"spinner", "sleeper", "reader"} <= set(threads), "threads: %s" % threads)
            page.evaluate("wallprof.setThread(%d)" % threads["sleeper"]["tid"])
            drawn = labels(page)
            check("wpt_html_wait" in drawn and "wpt_html_spin_b" not in drawn and
                  "wpt_html_read" not in drawn, "the sleeper alone draws %s" % sorted(drawn))
            check(page.evaluate("wallprof.selected()") == threads["sleeper"]["samples"],
                  "the sleeper's samples")
            page.evaluate("wallprof.setThread('all')")

            # On-CPU only, then off-CPU only.
            page.evaluate("wallprof.setStates(true, false)")
            drawn = labels(page)
            check("wpt_html_spin_b" in drawn and "wpt_html_wait" not in drawn and
                  "[read]" not in drawn, "on-CPU only draws %s" % sorted(drawn))
            check(page.evaluate("wallprof.onCpu() === wallprof.selected()"),
                  "off-CPU samples in the on-CPU view")
            page.evaluate("wallprof.setStates(false, true)")
            drawn = labels(page)
            check("wpt_html_spin_b" not in drawn and "wpt_html_wait" in drawn,
                  "off-CPU only draws %s" % sorted(drawn))
            sys_names = [s[0] for s in page.evaluate("wallprof.syscalls()")]
            check("read" in sys_names and "clock_nanosleep" in sys_names,
                  "off-CPU by system call: %s" % sys_names)
            page.evaluate("wallprof.setStates(true, true)")

            # The timeline: drag over its first half.
            drag(page, "timeline", 0.05, 0.5)
            part = page.evaluate("wallprof.selected()")
            check(0.2 * total < part < 0.75 * total,
                  "dragging over 45%% of the timeline selected %d of %d samples" % (part, total))
            page.screenshot(os.path.join(tmp, "range.png"))
            drag(page, "timeline", 0.3, 0.3)  # a click clears the range
            check(page.evaluate("wallprof.selected()") == total, "a click did not clear the range")

            # Inverted: callers of the leaves.
            page.evaluate("wallprof.setInvert(true)")
            drawn = labels(page)
            check({"wpt_html_wait", "wpt_html_read", "[read]"} <= drawn,
                  "inverted draws %s" % sorted(drawn))
            page.evaluate("wallprof.setInvert(false)")
            no_errors(page, "after using the page")
            os.makedirs(artifacts, exist_ok=True)
            page.evaluate("wallprof.search('wpt_html_spin_b')")
            page.screenshot(os.path.join(artifacts, "flamegraph.png"))
            rt.note("screenshot: %s" % os.path.join(artifacts, "flamegraph.png"))
        finally:
            b.__exit__(None, None, None)

    def test_diff(tmp):
        base = profile(tmp, "base")
        new = profile(tmp, "new")
        path = page_of(tmp, new, base)
        b, page = browse(tmp, path)
        try:
            no_errors(page, "loading")
            check(page.evaluate("document.body.classList.contains('diff')"), "no diff view")
            gain = page.evaluate("wallprof.diffOf('wpt_html_spin_b')")
            loss = page.evaluate("wallprof.diffOf('wpt_html_spin_a')")
            check(gain == "gain" and loss == "loss",
                  "wpt_html_spin_b (more time in the new run) is %s, wpt_html_spin_a is %s"
                  % (gain, loss))
            red = page.evaluate("wallprof.colourOf('wpt_html_spin_b')")
            blue = page.evaluate("wallprof.colourOf('wpt_html_spin_a')")
            check(red[0] > red[2] + 60 and blue[2] > blue[0] + 60,
                  "colours: gained %s, lost %s" % (red, blue))
            page.evaluate("wallprof.setDiff(false)")
            check(page.evaluate("wallprof.diffOf('wpt_html_spin_b')") == "none",
                  "the diff view did not turn off")
            page.evaluate("wallprof.setDiff(true)")
            no_errors(page, "after using the page")
            os.makedirs(artifacts, exist_ok=True)
            page.screenshot(os.path.join(artifacts, "flamegraph-diff.png"))
        finally:
            b.__exit__(None, None, None)

    return [
        ("html_page", test_page),
        ("html_diff", test_diff),
    ]
