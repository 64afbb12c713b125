#!/usr/bin/env python3
"""Checks the source layout: which top-level folder may include which, and
how long a source file may grow.

Usage: scripts/check-layout.py [--graph]

1. Include edges. Every `#include "..."` of a .c, .h, .cc or .inc file under
   the top-level folders below is resolved against the including file's
   folder; an include that crosses folders is an edge of the folder graph.
   The graph must have no cycle, and every edge must be one ALLOWED lists:
   the direction the data flows (docs/DESIGN.md, "Source layout"):

       test ──> anything
       convert (the converter) ──> upload ──> output ──> symbolize
       convert                 ──> output, symbolize
       preload (the runtime)   ──> output, symbolize, unwind

   so the converter never compiles a line of the runtime, output/ (the
   formats, their writers and readers, shared by both) includes nothing of
   preload/, and upload/ (the spool and its sender: libcurl) is included by
   the converter and the tests only.

2. Links. The converter's archive (CORE_SRCS in the Makefile) takes sources
   only from folders the converter may include; the upload archive
   (UPLOAD_SRCS) only from upload/, and the library's sources (RUNTIME_SRCS,
   SHARED_SRCS) nothing from upload/.

3. Size. No .c or .h file in preload/, unwind/, symbolize/, output/,
   convert/ or upload/ is longer than MAX_LINES, unless LONG lists it with
   a reason.

--graph prints the folder graph (each edge with its count and one include
that makes it) and the files over the limit, then checks as usual.

Exits 1 on a violation, 0 otherwise. Python standard library only.
"""

import argparse
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FOLDERS = ("preload", "unwind", "symbolize", "output", "upload", "convert", "scripts", "test")

# Who may include whom (folder -> folders it may include).
ALLOWED = {
    "test": {"preload", "unwind", "symbolize", "output", "upload", "convert", "scripts"},
    "convert": {"upload", "output", "symbolize"},
    "upload": {"output"},
    "scripts": set(),
    "preload": {"unwind", "output", "symbolize"},
    "output": {"symbolize"},
    "unwind": set(),
    "symbolize": set(),
}

SIZED = ("preload", "unwind", "symbolize", "output", "upload", "convert")
MAX_LINES = 800

# Files allowed over MAX_LINES, each with its reason.
LONG = {}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCE_EXT = (".c", ".h", ".cc", ".inc")


def rel(path):
    return os.path.relpath(path, ROOT)


def top(relpath):
    """The top-level folder of a path relative to ROOT, or None."""
    head = relpath.split(os.sep, 1)[0]
    return head if head in FOLDERS else None


def sources(folders):
    out = []
    for f in folders:
        for dirpath, _, files in os.walk(os.path.join(ROOT, f)):
            out += [os.path.join(dirpath, n) for n in files if n.endswith(SOURCE_EXT)]
    return sorted(out)


def include_edges():
    """{(from, to): [(file, included path), ...]} across folders, and the
    includes that name no file (for a note)."""
    edges, missing = {}, []
    for path in sources(FOLDERS):
        src = top(rel(path))
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in INCLUDE_RE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(path), name))
            if not os.path.exists(target):
                missing.append((rel(path), name))
                continue
            dst = top(rel(target))
            if dst and dst != src:
                edges.setdefault((src, dst), []).append((rel(path), rel(target)))
    return edges, missing


def cycles(edges):
    """The folder cycles of the graph: each as a list of folders, once."""
    succ = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    found = set()
    out = []

    def walk(start, node, path, seen):
        for nxt in sorted(succ.get(node, ())):
            if nxt == start:
                cyc = path[:]
                i = cyc.index(min(cyc))
                key = tuple(cyc[i:] + cyc[:i])
                if key not in found:
                    found.add(key)
                    out.append(list(key) + [key[0]])
            elif nxt not in seen and nxt > start:
                walk(start, nxt, path + [nxt], seen | {nxt})

    for s in sorted(succ):
        walk(s, s, [s], {s})
    return out


def make_srcs(var):
    """The tokens of the Makefile's list `var` (CORE_SRCS, ...; wildcards
    left as written), or None."""
    try:
        with open(os.path.join(ROOT, "Makefile")) as f:
            mk = f.read()
    except OSError:
        return None
    m = re.search(r"^%s\s*:?=\s*(.+)$" % var, mk, re.M)
    if not m:
        return None
    return re.findall(r"\$\(wildcard\s+([^)]+)\)|(\S+)", m.group(1))


def core_srcs():
    return make_srcs("CORE_SRCS")


def long_files():
    out = []
    for path in sources(SIZED):
        if not path.endswith((".c", ".h")):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            out.append((rel(path), n))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", action="store_true", help="print the folder graph")
    args = ap.parse_args()

    errors, notes = [], []
    edges, missing = include_edges()
    if args.graph:
        print("folder graph (from -> to: includes, e.g.):")
        for (a, b), incs in sorted(edges.items()):
            mark = "" if b in ALLOWED.get(a, ()) else "   <- not allowed"
            print("  %-9s -> %-9s %3d  %s includes %s%s" % (a, b, len(incs), incs[0][0],
                                                           incs[0][1], mark))

    for (a, b), incs in sorted(edges.items()):
        if b not in ALLOWED.get(a, ()):
            for f, t in incs:
                errors.append("%s includes %s: %s/ may not include %s/ (allowed: %s)"
                              % (f, t, a, b, ", ".join(sorted(ALLOWED.get(a, ()))) or "none"))
    for c in cycles(edges):
        errors.append("include cycle between folders: " + " -> ".join(c))
    for f, name in missing:
        notes.append("%s: #include \"%s\" names no file here" % (f, name))

    toks = core_srcs()
    if toks is None:
        notes.append("Makefile: no CORE_SRCS line found; the converter's sources not checked")
    else:
        for wild, plain in toks:
            for t in (wild or plain).split():
                folder = top(os.path.normpath(t))
                if folder not in ALLOWED["convert"]:
                    errors.append("Makefile: CORE_SRCS (the converter's archive) takes %s, "
                                  "from %s/, which the converter may not use" % (t, folder))

    # Which folders each other archive may take sources from (None: any but
    # those listed after it).
    for var, only, never in (("UPLOAD_SRCS", {"upload"}, None),
                             ("RUNTIME_SRCS", None, {"upload"}),
                             ("SHARED_SRCS", None, {"upload"})):
        toks = make_srcs(var)
        if toks is None:
            notes.append("Makefile: no %s line found; not checked" % var)
            continue
        for wild, plain in toks:
            for t in (wild or plain).split():
                folder = top(os.path.normpath(t))
                if (only and folder not in only) or (never and folder in never):
                    errors.append("Makefile: %s takes %s, from %s/, which it may not"
                                  % (var, t, folder))

    over = long_files()
    if args.graph:
        print("files over %d lines:" % MAX_LINES)
        for f, n in over:
            print("  %-28s %5d  %s" % (f, n, LONG.get(f, "<- not listed")))
    for f, n in over:
        if f not in LONG:
            errors.append("%s: %d lines, over %d (split it by responsibility, or list it in "
                          "scripts/check-layout.py's LONG with a reason)" % (f, n, MAX_LINES))
    for f in sorted(set(LONG) - {f for f, _ in over}):
        notes.append("%s is listed in LONG but is not over %d lines (any more): drop it"
                     % (f, MAX_LINES))

    for n in notes:
        print("check-layout: note: " + n)
    for e in errors:
        print("check-layout: " + e)
    if errors:
        print("check-layout: %d violation(s)" % len(errors))
        return 1
    print("check-layout: ok (%d folder edges, no cycle; %d files over %d lines, all listed)"
          % (len(edges), len(over), MAX_LINES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
