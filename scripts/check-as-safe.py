#!/usr/bin/env python3
"""Checks the async-signal-safety tags of the injected runtime.

Usage: scripts/check-as-safe.py [-v] [--no-stack] [--cc CC]

1. Tags. Parses preload/*.c and preload/*.h (and, for the call graph only,
   the library's other sources: unwind/, the shared output/ files) into
   function definitions, declarations and the calls each body makes by name.
   From the roots (our signal handlers on_sample_signal, on_snapshot_signal,
   on_fatal_signal and the sigaction trampoline; every function whose own
   comment says "async-signal-safe"; every function tagged WP_AS_SAFE) it
   follows the calls and reports every function defined under preload/ that
   is reached but whose definition and declarations all lack WP_AS_SAFE
   (preload/as_safe.h), and every call to a libc function that is not
   async-signal-safe (malloc, stdio, dlsym, ...).

2. Stack. Compiles the library's sources with -fstack-usage into a
   temporary directory and sums, for each handler, the frames on its
   deepest call path (a function inlined away counts 0: its frame is its
   caller's). Each handler has a budget that fits an 8 KiB alternate signal
   stack once the kernel's signal frame (3.3 KiB with AVX-512) is on it;
   exit_altstack_depth measures the fatal path at run time against the
   same 2 KiB.

The graph is by name and good enough for this codebase: calls through
function pointers (the program's handlers, libc's real functions) and
through macros are not followed, and frames of other libraries (libc,
libunwind: about 8 KiB in our handler, checked at run time by
room_for_unwind) are not counted.

Exits 1 on a violation, 0 otherwise. Python standard library only.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TAG = "WP_AS_SAFE"

# The signal handlers and the trampoline: roots whatever their comments say.
HANDLERS = ("on_sample_signal", "on_snapshot_signal", "on_fatal_signal", "trampoline")

# Bytes of our own frames allowed below each handler. An 8 KiB alternate
# stack holds the kernel's signal frame (3.3 KiB with AVX-512) and this; the
# fatal path's budget is the one exit_altstack_depth enforces at run time.
BUDGETS = {
    "on_fatal_signal": 2048,
    "on_snapshot_signal": 2048,
    # ours, before the program's handler runs on top of it
    "trampoline": 2048,
    # ours; libunwind's ~8 KiB comes on top, and room_for_unwind checks
    # that an alternate stack has room for it before unwinding
    "on_sample_signal": 2048,
}
# Every other async-signal-safe function: its deepest path is listed with
# -v, not held to a budget (a root such as wp_ring_raw_write, the unit
# tests' writer with its 2 KiB buffer, never runs on a handler's stack).
DEFAULT_BUDGET = None

# The library's sources besides preload/ and unwind/ (Makefile SHARED_SRCS),
# used when the Makefile does not say.
SHARED_SRCS = ["output/raw.c", "output/event.c", "output/write.c", "output/profile.c",
               "symbolize/build_id.c"]

# libc functions that are not async-signal-safe (signal-safety(7) does not
# list them) and that this codebase might reach for.
UNSAFE_LIBC = {
    "malloc", "calloc", "realloc", "free", "strdup", "strndup", "asprintf",
    "printf", "fprintf", "sprintf", "snprintf", "vprintf", "vfprintf", "vsprintf",
    "vsnprintf", "puts", "fputs", "fputc", "putchar", "fwrite", "fread", "fgets",
    "fgetc", "fopen", "fdopen", "fclose", "fflush", "sscanf", "perror", "strerror",
    "dlsym", "dlopen", "dlclose", "dladdr", "dl_iterate_phdr", "qsort", "getenv",
    "setenv", "unsetenv", "exit", "atexit", "syslog", "localtime", "gmtime",
    "pthread_create", "pthread_join", "pthread_mutex_lock", "pthread_key_create",
    "pthread_atfork", "pthread_once", "opendir", "readdir", "closedir",
}

KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "_Alignof", "alignof",
    "__attribute__", "typeof", "__typeof__", "defined", "__asm__", "asm",
    "__volatile__", "volatile", "_Static_assert", "_Generic", "__builtin_expect",
    "__builtin_frame_address", "__builtin_unreachable", "do", "else", "case",
    "ElfW", "offsetof", "va_arg", "va_start", "va_end", "va_copy",
}

# A function's comment states its contract with "async-signal-safe" as a
# sentence of its own ("... Returns 0. async-signal-safe */", or the whole
# comment), not inside another ("Not async-signal-safe", "the thaw is
# async-signal-safe").
SAFE_RE = re.compile(r"(?:^|[.;:] )async-signal-safe\b")


def says_safe(comment):
    """Whether one comment states that its function is async-signal-safe."""
    lines = [re.sub(r"^\s*(/\*+|\*+/|\*|//)?", "", l) for l in comment.split("\n")]
    text = re.sub(r"\s+", " ", " ".join(lines).replace("*/", " ")).strip()
    return SAFE_RE.search(text) is not None


class Func:
    def __init__(self, name, path, line, static, head, body, doc):
        self.name = name
        self.path = path          # relative to ROOT
        self.line = line
        self.static = static
        self.tagged = TAG in re.findall(r"\w+", head)
        self.body = body
        self.doc = doc
        self.calls = []           # names called, in order


def strip_source(text):
    """Code with comments, string and character literals and preprocessor
    lines blanked out (offsets and newlines kept), and the comments as
    (start, end, text)."""
    out = list(text)
    comments = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                j += 1
            # comments inside directives stay blanked with the directive
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c in " \t":
            i += 1
            continue
        line_start = c == "\n"
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            comments.append((i, j, text[i:j]))
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append((i, j, text[i:j]))
            for k in range(i, j):
                out[k] = " "
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 1
            continue
        i += 1
    return "".join(out), comments


def doc_before(comments, code, start, end):
    """The comments directly above the declaration whose text (after the
    previous one) spans code[start:end]: the last comment before its first
    token, and those just above it (no blank line in between)."""
    first = start
    while first < end and code[first].isspace():
        first += 1
    inside = [c for c in comments if start <= c[0] and c[1] <= first]
    docs = []
    limit = first
    for c in reversed(inside):
        gap = code[c[1]:limit]
        if gap.strip() or gap.count("\n") > 1:
            break
        docs.insert(0, c[2])
        limit = c[0]
    return "\n".join(docs)


def head_name(head):
    """The function name a declaration head (up to, not including, '{' or
    ';') declares, or None: the identifier before the last top-level
    parenthesised group, trailing attributes skipped."""
    h = head.rstrip()
    while h.endswith(")"):
        depth, i = 0, len(h) - 1
        while i >= 0:
            if h[i] == ")":
                depth += 1
            elif h[i] == "(":
                depth -= 1
                if depth == 0:
                    break
            i -= 1
        if i < 0:
            return None
        before = h[:i].rstrip()
        m = re.search(r"([A-Za-z_]\w*)$", before)
        if not m:
            return None
        name = m.group(1)
        if name == "__attribute__":
            # the group was `__attribute__((...))` after the parameters
            h = before[:m.start()].rstrip()
            # `__attribute__((x))`: the group just skipped was the inner one
            continue
        if name in KEYWORDS:
            return None
        return name
    return None


def skip_statement(code, i):
    """The end of the statement or block starting at or after code[i]."""
    n = len(code)
    while i < n and code[i].isspace():
        i += 1
    if i < n and code[i] == "{":
        d = 0
        while i < n:
            d += code[i] == "{"
            d -= code[i] == "}"
            i += 1
            if d == 0:
                return i
        return n
    if code.startswith("if", i) and not (code[i + 2:i + 3].isalnum() or code[i + 2:i + 3] == "_"):
        j = code.find("(", i)
        k, d = j, 0
        while k < n:
            d += code[k] == "("
            d -= code[k] == ")"
            k += 1
            if d == 0:
                break
        k = skip_statement(code, k)
        m = re.match(r"\s*else\b", code[k:])
        return skip_statement(code, k + m.end()) if m else k
    d = 0
    while i < n:
        d += code[i] in "(["
        d -= code[i] in ")]"
        if code[i] == ";" and d == 0:
            return i + 1
        i += 1
    return n


def prune_condition(body, cond):
    """The body as it runs when the parameter `cond` is non-zero: the
    statement under `if (!cond)` and the else branch of `if (cond)` are
    blanked out."""
    out = body
    for m in re.finditer(r"\bif\s*\(\s*(!?)\s*%s\s*\)" % re.escape(cond), body):
        then_end = skip_statement(body, m.end())
        if m.group(1):
            out = out[:m.end()] + " " * (then_end - m.end()) + out[then_end:]
            continue
        e = re.match(r"\s*else\b", body[then_end:])
        if e:
            else_end = skip_statement(body, then_end + e.end())
            out = out[:then_end] + " " * (else_end - then_end) + out[else_end:]
    return out


def parse(path):
    text = open(os.path.join(ROOT, path), encoding="utf-8", errors="replace").read()
    code, comments = strip_source(text)
    funcs, decls = [], []
    depth, stmt = 0, 0
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            if depth == 0:
                head = code[stmt:i]
                name = head_name(head)
                j, d = i, 0
                while j < n:
                    if code[j] == "{":
                        d += 1
                    elif code[j] == "}":
                        d -= 1
                        if d == 0:
                            break
                    j += 1
                if name:
                    line = text.count("\n", 0, stmt + len(head) - len(head.lstrip())) + 1
                    f = Func(name, path, line, re.search(r"\bstatic\b", head) is not None,
                             head, code[i:j + 1], doc_before(comments, code, stmt, i))
                    body = f.body
                    # "async-signal-safe when `as_safe`": checked as it runs
                    # with that parameter set, the only way a handler calls it
                    for cond in re.findall(r"async-signal-safe when `(\w+)`", f.doc):
                        body = prune_condition(body, cond)
                    f.calls = [m.group(1) for m in
                               re.finditer(r"(?<![\w.>])([A-Za-z_]\w*)\s*\(", body)
                               if m.group(1) not in KEYWORDS]
                    funcs.append(f)
                    i = j + 1
                    stmt = i
                    continue
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                stmt = i + 1
        elif c == ";" and depth == 0:
            head = code[stmt:i]
            name = head_name(head)
            if name and "=" not in head:
                decls.append((name, path, TAG in re.findall(r"\w+", head),
                              doc_before(comments, code, stmt, i)))
            stmt = i + 1
        i += 1
    return funcs, decls


def shared_srcs():
    try:
        mk = open(os.path.join(ROOT, "Makefile")).read()
    except OSError:
        return SHARED_SRCS
    m = re.search(r"^SHARED_SRCS\s*:?=\s*(.+)$", mk, re.M)
    return m.group(1).split() if m else SHARED_SRCS


def lib_sources():
    srcs = sorted(glob.glob(os.path.join(ROOT, "preload", "*.c")))
    srcs += sorted(glob.glob(os.path.join(ROOT, "unwind", "*.c")))
    srcs = [os.path.relpath(s, ROOT) for s in srcs]
    srcs += [s for s in shared_srcs() if os.path.exists(os.path.join(ROOT, s))]
    return srcs


def headers():
    hs = sorted(glob.glob(os.path.join(ROOT, "preload", "*.h")))
    hs += sorted(glob.glob(os.path.join(ROOT, "unwind", "*.h")))
    return [os.path.relpath(h, ROOT) for h in hs]


class Graph:
    def __init__(self, funcs, decls):
        self.defs = {}            # name -> [Func]
        for f in funcs:
            self.defs.setdefault(f.name, []).append(f)
        self.decls = {}           # name -> [(path, tagged, doc)]
        for name, path, tagged, doc in decls:
            self.decls.setdefault(name, []).append((path, tagged, doc))

    def resolve(self, name, caller):
        """The definition a call to `name` from `caller` reaches: a static
        one in the caller's file, else the one with external linkage, else
        a static inline one in a header."""
        cands = self.defs.get(name, [])
        for f in cands:
            if f.static and f.path == caller.path:
                return f
        for f in cands:
            if not f.static:
                return f
        for f in cands:
            if f.static and f.path.endswith(".h"):
                return f
        return None

    def tagged(self, f):
        if f.tagged:
            return True
        return any(t for p, t, _ in self.decls.get(f.name, [])
                   if f.static is False or p == f.path)

    def says_safe(self, f):
        docs = [f.doc] + [d for p, _, d in self.decls.get(f.name, [])
                          if not f.static or p == f.path]
        return any(says_safe(c) for d in docs if d for c in d.split("\n/*"))


def load_su(tmp, srcs, cc, verbose):
    """{(source path, function) : bytes} from gcc -fstack-usage, clones
    (.constprop, .isra, .part, .cold) folded into their function."""
    def pkg(*names):
        try:
            return subprocess.run(["pkg-config", "--cflags"] + list(names), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, check=True).stdout.split()
        except (OSError, subprocess.CalledProcessError):
            return []
    cflags = os.environ.get("CFLAGS", "-O2 -g").split()
    base = ["-std=gnu11", "-fvisibility=hidden", "-fPIC", "-fexceptions", "-D_GNU_SOURCE"]
    base += pkg("libunwind", "libdw")
    su = {}
    for i, src in enumerate(srcs):
        obj = os.path.join(tmp, "%d.o" % i)
        cmd = [cc] + base + cflags + ["-fstack-usage", "-c", "-o", obj, os.path.join(ROOT, src)]
        r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            sys.stderr.write("check-as-safe: %s does not compile:\n%s" % (src, r.stdout))
            return None
        with open(os.path.join(tmp, "%d.su" % i)) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 3:
                    continue
                loc, size, kind = parts[0], int(parts[1]), parts[2]
                where, _, fn = loc.rpartition(":")
                fpath = where.rsplit(":", 2)[0]
                fpath = os.path.relpath(os.path.join(ROOT, fpath), ROOT) \
                    if not os.path.isabs(fpath) else os.path.relpath(fpath, ROOT)
                fn = fn.split(".")[0]
                if "dynamic" in kind and "bounded" not in kind:
                    size += 1 << 20  # unbounded: always over budget
                key = (fpath, fn)
                su[key] = max(su.get(key, 0), size)
        if verbose:
            print("  compiled %s" % src)
    return su


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-v", action="store_true", help="list the roots, the reached functions and "
                    "every handler's deepest path")
    ap.add_argument("--no-stack", action="store_true", help="skip the -fstack-usage check")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"), help="compiler (default $CC or cc)")
    args = ap.parse_args()

    srcs = lib_sources()
    funcs, decls = [], []
    for path in srcs + headers():
        f, d = parse(path)
        funcs += f
        decls += d
    gr = Graph(funcs, decls)

    roots = []
    for f in funcs:
        in_preload = f.path.startswith("preload/")
        if (in_preload and f.name in HANDLERS) or gr.tagged(f) or \
                (in_preload and gr.says_safe(f)):
            roots.append(f)
    missing = [h for h in HANDLERS if h not in gr.defs]
    problems = []
    for h in missing:
        problems.append("handler %s: no definition found under preload/" % h)

    # Reach: BFS keeping the first path to each function.
    via = {}
    queue = []
    for r in roots:
        if id(r) not in via:
            via[id(r)] = (r, None)
            queue.append(r)
    unsafe_calls = []
    while queue:
        f = queue.pop(0)
        for name in f.calls:
            callee = gr.resolve(name, f)
            if callee is None:
                if name in UNSAFE_LIBC:
                    unsafe_calls.append((f, name))
                continue
            if id(callee) not in via:
                via[id(callee)] = (callee, f)
                queue.append(callee)

    def chain(f):
        names = []
        while f is not None:
            names.append(f.name)
            f = via[id(f)][1]
        return " <- ".join(names)

    reached = [v[0] for v in via.values()]
    for f in sorted(reached, key=lambda f: (f.path, f.line)):
        if f.path.startswith("preload/") and not gr.tagged(f):
            problems.append("%s:%d: %s is reached from a signal handler or an async-signal-safe "
                            "function but is not tagged %s (%s)"
                            % (f.path, f.line, f.name, TAG, chain(f)))
    for f, name in unsafe_calls:
        problems.append("%s:%d: %s calls %s, which is not async-signal-safe (%s)"
                        % (f.path, f.line, f.name, name, chain(f)))

    if args.v:
        print("roots (%d): %s" % (len(roots), ", ".join(sorted({r.name for r in roots}))))
        outside = sorted({f.name for f in reached if not f.path.startswith("preload/")})
        print("reached outside preload/ (not checked for tags): %s" % ", ".join(outside))

    stack_lines = []
    if not args.no_stack:
        if not shutil.which(args.cc):
            problems.append("no compiler %r for the stack check (--no-stack skips it)" % args.cc)
        else:
            with tempfile.TemporaryDirectory(prefix="check-as-safe.") as tmp:
                su = load_su(tmp, srcs, args.cc, args.v)
            if su is None:
                return 1

            memo = {}

            def deepest(f, onpath):
                """(bytes, path) of the deepest call path from f."""
                if id(f) in memo:
                    return memo[id(f)]
                own = su.get((f.path, f.name), 0)
                best = (0, [])
                for name in dict.fromkeys(f.calls):
                    callee = gr.resolve(name, f)
                    if callee is None:
                        continue
                    if id(callee) in onpath:
                        problems.append("%s:%d: %s calls %s recursively on a signal path"
                                        % (f.path, f.line, f.name, callee.name))
                        continue
                    onpath.add(id(callee))
                    sub = deepest(callee, onpath)
                    onpath.discard(id(callee))
                    if sub[0] > best[0]:
                        best = sub
                res = (own + best[0], ["%s %d" % (f.name, own)] + best[1])
                memo[id(f)] = res
                return res

            seen = set()
            for r in sorted(roots, key=lambda f: (f.name not in HANDLERS, f.name)):
                if r.name in seen or not r.path.startswith("preload/"):
                    continue
                seen.add(r.name)
                total, path = deepest(r, {id(r)})
                budget = BUDGETS.get(r.name, DEFAULT_BUDGET)
                if r.name in HANDLERS or args.v:
                    stack_lines.append("  %-32s %5d bytes (%s): %s"
                                       % (r.name, total,
                                          "budget %d" % budget if budget else "no budget",
                                          " > ".join(path)))
                if budget is not None and total > budget:
                    problems.append("%s:%d: %s: %d bytes of our frames on its deepest path, over "
                                    "its budget of %d (%s)"
                                    % (r.path, r.line, r.name, total, budget, " > ".join(path)))

    print("check-as-safe: %d roots, %d functions reached (%d under preload/, all must be tagged %s)"
          % (len(roots), len(reached), sum(f.path.startswith("preload/") for f in reached), TAG))
    for line in stack_lines:
        print(line)
    for p in problems:
        print("check-as-safe: " + p)
    if problems:
        print("check-as-safe: %d problem(s)" % len(problems))
        return 1
    print("check-as-safe: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
