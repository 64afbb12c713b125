#!/usr/bin/env python3
"""libwallprof test driver (run by `make test`).

Runs every unit test binary (build/unit/test_*, build/asan/test_*) and the
end-to-end tests: sample programs from test/progs/ run under the preload in a
fresh temporary directory, and assertions are made on the profile they leave
(presence, ratios and ranges, never exact counts) and on the program's own
behaviour (same exit code and stdout as without the preload).

The end-to-end tests live in test/e2e/, one module per feature. Each module
defines tests(rt), rt being test/harness.py (running programs, reading
profiles, check/note/Failure), and returns its (name, function) pairs; a test
function takes its temporary directory. The driver gives every test a fresh
temporary directory with TMPDIR inside it, then checks every profile the
test left there against test/sentry_check.py, whatever the test asserted.

A program in test/progs/ is named after the module that runs it (jumps.c
for e2e/jumps.py), with a suffix when a module has more than one (code.c,
code_sites.c and libcode_plugin.c for e2e/code.py). exitcode.c and
libwpt_plugin.c, which several modules use, and demo.c and soak.c (make
demo, make soak) keep names of their own.

Usage: test/run_tests.py [-k SUBSTRING] [--list] [-v]
Prints "PASS name" or "FAIL name: reason" per test, then "N passed, M failed";
exits 1 when a test failed.
"""

import argparse
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import harness
from harness import BUILD, ROOT, TEST_DIR, Failure, check, clean_env, note, sentry_errors

UNIT_TIMEOUT = 300     # seconds for one unit test binary (ASan is slow)


def unit_tests():
    """(name, function) for every built unit test binary."""
    out = []
    for kind in ("unit", "asan"):
        for path in sorted(glob.glob(os.path.join(BUILD, kind, "test_*"))):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                out.append(("%s/%s" % (kind, os.path.basename(path)),
                            lambda tmp, path=path: run_unit(path, tmp)))
    return out


def run_unit(path, tmp):
    """Runs one unit test binary from the source root (fixtures are found
    relative to it), with TMPDIR pointing at the test's temporary directory."""
    env = clean_env(preload=False)
    env["TMPDIR"] = tmp
    try:
        p = subprocess.run([path], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=UNIT_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise Failure("did not finish within %d s" % UNIT_TIMEOUT)
    if p.returncode != 0:
        lines = p.stdout.decode(errors="replace").strip().splitlines()
        raise Failure("exit status %d%s" % (p.returncode, (": " + lines[-1]) if lines else ""),
                      lines[-20:])


def profiles_under(tmp):
    """Every Sentry profile (a JSON object with "version" and "profile")
    left anywhere under `tmp`."""
    for d, _, names in os.walk(tmp):
        for n in names:
            if not n.endswith(".json") or ".tmp." in n:
                continue
            path = os.path.join(d, n)
            if os.path.islink(path):
                continue  # planted by a test; we never write through one
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            try:
                obj = json.loads(data)
            except ValueError as e:
                # Ours if it looks like one: a truncated profile is the
                # worst output there is.
                check(b'"profile"' not in data[:4096] and not n.startswith("wallprof"),
                      "%s, written during the test, is not JSON: %s" % (path, e))
                continue
            if isinstance(obj, dict) and "version" in obj and "profile" in obj:
                yield path, obj


def check_all_profiles(tmp):
    """Whatever a test asserted, every profile it left must pass Sentry's
    ingestion rules (test/sentry_check.py)."""
    n = 0
    for path, obj in profiles_under(tmp):
        n += 1
        errors = sentry_errors(obj)
        check(not errors, "%s, written during the test, fails sentry_check (%d errors): %s"
              % (os.path.relpath(path, tmp), len(errors), "; ".join(str(e) for e in errors[:3])))
    note("%d profile(s) left by the test pass sentry_check" % n)


def run_one(name, fn):
    tmp = tempfile.mkdtemp(prefix="wallprof-test-")
    t0 = time.monotonic()
    details = []
    saved_tmpdir = os.environ.get("TMPDIR")
    # Fallback profiles ($TMPDIR) land where check_all_profiles looks,
    # unless a test sets TMPDIR itself.
    os.mkdir(os.path.join(tmp, "tmpdir"))
    os.environ["TMPDIR"] = os.path.join(tmp, "tmpdir")
    try:
        fn(tmp)
        check_all_profiles(tmp)
        ok, reason = True, None
    except Failure as e:
        ok, reason, details = False, str(e), e.details
    except Exception as e:  # a bug in the test or a malformed profile
        ok, reason = False, "%s: %s" % (type(e).__name__, e)
    finally:
        if saved_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_tmpdir
        shutil.rmtree(tmp, ignore_errors=True)
    reason = " ".join((reason or "").split())
    if len(reason) > 600:
        reason = reason[:600] + "..."
    if ok:
        print("PASS %s" % name)
    else:
        print("FAIL %s: %s" % (name, reason))
        for line in details:
            line = "".join(c if c.isprintable() else "?" for c in line)
            print("    " + (line[:300] + "..." if len(line) > 300 else line))
    note("%.1f s" % (time.monotonic() - t0))
    sys.stdout.flush()
    return ok


def module_tests():
    """(name, function) from every test/e2e/*.py module, in file name order:
    each defines tests(rt), rt being test/harness.py (run_under_preload,
    check, exit_profile, ...), and returns its (name, function) pairs."""
    out = []
    for path in sorted(glob.glob(os.path.join(TEST_DIR, "e2e", "*.py"))):
        name = "e2e_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out += mod.tests(harness)
    return out


def main():
    ap = argparse.ArgumentParser(description="libwallprof test suite")
    ap.add_argument("-k", metavar="SUBSTRING", help="only tests whose name contains SUBSTRING")
    ap.add_argument("--list", action="store_true", help="list test names and exit")
    ap.add_argument("-v", action="store_true", help="print measurements and timings")
    args = ap.parse_args()
    harness.VERBOSE = args.v

    tests = unit_tests() + module_tests()
    if args.k:
        tests = [(n, f) for n, f in tests if args.k in n]
    if args.list:
        for n, _ in tests:
            print(n)
        return 0
    passed = failed = 0
    # The converter's per-user caches (the debug cache's copies, the
    # spool's default) go to a directory of this run, not the user's.
    cache_home = tempfile.mkdtemp(prefix="wallprof-test-cache-")
    os.environ["XDG_CACHE_HOME"] = cache_home
    try:
        for name, fn in tests:
            if run_one(name, fn):
                passed += 1
            else:
                failed += 1
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
