#!/usr/bin/env python3
"""sentry_check: the test suite's own check of a Sentry sample-format v1
profile against the rules Relay applies at ingestion (types, then the
normalization that can leave nothing behind). Standard library only.

    python3 test/sentry_check.py FILE     -> "OK <samples> <stacks> <frames> <threads>"
                                             or "ERROR <path>: <message>" lines, exit 1
    python3 test/sentry_check.py --self-test

As a module: check(obj) -> list of "path: message" strings (empty when valid);
check_text(text) also catches what json.loads hides (duplicate keys, NaN).

Keys Relay does not know are ignored, as Relay ignores them: libwallprof's
"on_cpu" and "syscall" on samples, its top-level "wallprof" section. The one
rule of our own: a sample's "syscall", when present, is a non-empty string
(a system call name such as "futex", or "syscall_<nr>").
"""

import datetime
import json
import re
import sys

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
MAX_ELAPSED_NS = 30 * 10**9  # Relay: MAX_PROFILE_DURATION
IMAGE_TYPES = {"macho", "symbolic", "sourcemap", "proguard", "jvm"}
UNITS = {"nanosecond", "ns", "hertz", "hz", "byte", "percent", "nanojoule", "nj"}

HEX = "[0-9a-fA-F]"
UUID_FORMS = [
    re.compile(r"^%s{32}$" % HEX),
    re.compile(r"^%s{8}-%s{4}-%s{4}-%s{4}-%s{12}$" % ((HEX,) * 5)),
    re.compile(r"^\{%s{8}-%s{4}-%s{4}-%s{4}-%s{12}\}$" % ((HEX,) * 5)),
    re.compile(r"^urn:uuid:%s{8}-%s{4}-%s{4}-%s{4}-%s{12}$" % ((HEX,) * 5)),
]
DEBUG_ID = re.compile(r"^(%s{8}-?%s{4}-?%s{4}-?%s{4}-?%s{12})(-?%s{1,8})?$" % ((HEX,) * 6))
RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")
SPAN_ID = re.compile(r"^%s{16}$" % HEX)
DECIMAL = re.compile(r"^\+?[0-9]+$")


class Checker:
    def __init__(self):
        self.errors = []

    def bad(self, path, msg):
        self.errors.append("%s: %s" % (path, msg))
        return None

    # --- scalar types (each returns the value or None after an error) ---
    def is_int(self, v):
        return isinstance(v, int) and not isinstance(v, bool)

    def uint(self, v, path, top=U64_MAX):
        if not self.is_int(v) or v < 0 or v > top:
            return self.bad(path, "expected an integer in 0..%d, got %r" % (top, v))
        return v

    def u64_or_str(self, v, path):
        """Relay's deserialize_number_from_string: integer or decimal string."""
        if isinstance(v, str) and DECIMAL.match(v) and int(v) <= U64_MAX:
            return int(v)
        if self.is_int(v) and 0 <= v <= U64_MAX:
            return v
        return self.bad(path, "expected a u64 as integer or decimal string, got %r" % (v,))

    def string(self, v, path, nullable=False):
        if v is None and nullable:
            return None
        if not isinstance(v, str):
            return self.bad(path, "expected a string, got %r" % (v,))
        return v

    def uuid(self, v, path, non_nil=False):
        if not isinstance(v, str) or not any(r.match(v) for r in UUID_FORMS):
            return self.bad(path, "expected a UUID string, got %r" % (v,))
        if non_nil and int(re.sub("[^0-9a-fA-F]", "", v.replace("urn:uuid:", "")), 16) == 0:
            return self.bad(path, "must not be the nil UUID")
        return v

    def addr(self, v, path):
        """Relay's Addr: a string, "0x" hex or decimal, fitting in u64."""
        ok = False
        if isinstance(v, str):
            if v[:2] in ("0x", "0X") and re.match(r"^%s+$" % HEX, v[2:]):
                ok = int(v[2:], 16) <= U64_MAX
            elif re.match(r"^[0-9]+$", v):
                ok = int(v) <= U64_MAX
        if not ok:
            return self.bad(path, "expected an address string like \"0x1a2b\", got %r" % (v,))
        return v

    def obj(self, v, path):
        if not isinstance(v, dict):
            return self.bad(path, "expected an object, got %s" % type(v).__name__)
        return v

    def array(self, v, path):
        if not isinstance(v, list):
            return self.bad(path, "expected an array, got %s" % type(v).__name__)
        return v

    def aliases(self, o, path, pairs):
        """serde alias + name in one struct is a duplicate field."""
        for a, b in pairs:
            if a in o and b in o:
                self.bad(path, "both %r and its alias %r (duplicate field)" % (a, b))

    def fields(self, o, path, spec):
        """spec: key -> (required, checker(value, path))."""
        for key, (required, fn) in spec.items():
            if key in o:
                fn(o[key], key if path == "$" else "%s.%s" % (path, key))
            elif required:
                self.bad(path, "missing required field %r" % key)

    # --- structures ---
    def timestamp(self, v, path):
        m = RFC3339.match(v) if isinstance(v, str) else None
        try:
            if m:
                datetime.datetime(*(int(m.group(i)) for i in range(1, 7)))
                return v
        except ValueError:
            pass
        return self.bad(path, "expected an RFC 3339 timestamp, got %r" % (v,))

    def transaction(self, t, path):
        if self.obj(t, path) is None:
            return
        s, u = self.string, self.u64_or_str
        self.fields(t, path, {
            "id": (True, lambda v, p: self.uuid(v, p, non_nil=True)),
            "name": (True, s),
            "trace_id": (True, lambda v, p: self.uuid(v, p, non_nil=True)),
            "segment_id": (False, self.span_id),
            "active_thread_id": (False, u),
            "relative_start_ns": (False, u),
            "relative_end_ns": (False, u),
            "relative_cpu_start_ms": (False, self.uint),
            "relative_cpu_end_ms": (False, self.uint),
        })
        if isinstance(t.get("name"), str) and not t["name"]:
            self.bad(path + ".name", "must not be empty (InvalidTransactionMetadata)")

    def span_id(self, v, path):
        if not isinstance(v, str) or not SPAN_ID.match(v):
            return self.bad(path, "expected a span id of 16 hex characters, got %r" % (v,))
        return v

    def image(self, im, path):
        if self.obj(im, path) is None:
            return
        self.aliases(im, path, [("code_file", "name"), ("debug_id", "id"), ("uuid", "build_id")])
        if "build_id" in im:
            self.bad(path + ".build_id", "must not be sent: Relay parses it as a UUID")
        if im.get("type") not in IMAGE_TYPES:
            self.bad(path + ".type", "expected one of %s, got %r" % (sorted(IMAGE_TYPES), im.get("type")))
        for k in ("code_file", "name", "debug_file", "code_id", "arch"):
            if k in im:
                self.string(im[k], "%s.%s" % (path, k))
        for k in ("debug_id", "id"):
            if k in im and not (isinstance(im[k], str) and DEBUG_ID.match(im[k])):
                self.bad("%s.%s" % (path, k), "expected a debug id (UUID[-age]), got %r" % (im[k],))
        for k in ("image_addr", "image_vmaddr"):
            if k in im:
                self.addr(im[k], "%s.%s" % (path, k))
        if "image_size" in im:
            self.u64_or_str(im["image_size"], path + ".image_size")
        if "uuid" in im:
            self.uuid(im["uuid"], path + ".uuid")

    def frame(self, f, path):
        if self.obj(f, path) is None:
            return
        self.aliases(f, path, [("function", "name"), ("filename", "file"),
                               ("lineno", "line"), ("colno", "column")])
        for k in ("function", "name", "filename", "file", "abs_path", "module", "platform"):
            if k in f:
                self.string(f[k], "%s.%s" % (path, k))
        for k in ("lineno", "line", "colno", "column"):
            if k in f:
                self.uint(f[k], "%s.%s" % (path, k), U32_MAX)
        if "in_app" in f and not isinstance(f["in_app"], bool):
            self.bad(path + ".in_app", "expected a boolean, got %r" % (f["in_app"],))
        if "instruction_addr" in f:
            self.addr(f["instruction_addr"], path + ".instruction_addr")

    def measurements(self, m, path):
        if self.obj(m, path) is None:
            return
        for name, v in m.items():
            p = "%s.%s" % (path, name)
            if self.obj(v, p) is None:
                continue
            if v.get("unit") not in UNITS:
                self.bad(p + ".unit", "unknown unit %r" % (v.get("unit"),))
            for i, x in enumerate(self.array(v.get("values"), p + ".values") or []):
                q = "%s.values[%d]" % (p, i)
                if self.obj(x, q) is None:
                    continue
                self.u64_or_str(x.get("elapsed_since_start_ns"), q + ".elapsed_since_start_ns")
                val = x.get("value")
                if not ((isinstance(val, (int, float)) and not isinstance(val, bool))
                        or (isinstance(val, str) and re.match(r"^-?[0-9.eE+-]+$", val))):
                    self.bad(q + ".value", "expected a number, got %r" % (val,))

    def profile(self, top):
        """Types, then Relay's v1 normalization and its rejections."""
        prof = self.obj(top.get("profile"), "profile")
        if prof is None:
            return (0, 0, 0, 0)
        samples = self.array(prof.get("samples"), "profile.samples") or []
        stacks = self.array(prof.get("stacks"), "profile.stacks") or []
        frames = self.array(prof.get("frames"), "profile.frames") or []
        for i, f in enumerate(frames):
            self.frame(f, "profile.frames[%d]" % i)
        for i, st in enumerate(stacks):
            p = "profile.stacks[%d]" % i
            for j, idx in enumerate(self.array(st, p) or []):
                if self.uint(idx, "%s[%d]" % (p, j)) is not None and idx >= len(frames):
                    self.bad("%s[%d]" % (p, j), "frame index %d >= %d frames (MalformedStacks)"
                             % (idx, len(frames)))
        rows = []  # (stack_id, tid, elapsed) of well-typed samples
        for i, s in enumerate(samples):
            p = "profile.samples[%d]" % i
            if self.obj(s, p) is None:
                continue
            sid = self.uint(s.get("stack_id"), p + ".stack_id")
            tid = self.u64_or_str(s.get("thread_id"), p + ".thread_id")
            el = self.u64_or_str(s.get("elapsed_since_start_ns"), p + ".elapsed_since_start_ns")
            if "queue_address" in s:
                self.string(s["queue_address"], p + ".queue_address")
            if "syscall" in s and not (isinstance(s["syscall"], str) and s["syscall"]):
                # Not a Relay field (Relay drops it); libwallprof's own format.
                self.bad(p + ".syscall", "expected a non-empty system call name string, got %r"
                         % (s["syscall"],))
            if sid is not None and sid >= len(stacks):
                self.bad(p + ".stack_id", "%d >= %d stacks (MalformedSamples)" % (sid, len(stacks)))
            if rows and el is not None and rows[-1][2] is not None and el < rows[-1][2]:
                self.bad(p + ".elapsed_since_start_ns", "samples not sorted by time")
            rows.append((sid, tid, el))
        tids = {r[1] for r in rows if r[1] is not None}
        tm = prof.get("thread_metadata")
        if tm is not None and self.obj(tm, "profile.thread_metadata") is not None:
            for key, meta in tm.items():
                p = "profile.thread_metadata[%r]" % key
                if not (isinstance(key, str) and re.match(r"^(0|[1-9][0-9]*)$", key)):
                    self.bad(p, "key must be a canonical decimal thread id")
                elif int(key) not in tids:
                    self.bad(p, "thread has no samples")
                if self.obj(meta, p) is not None:
                    if "name" in meta:
                        self.string(meta["name"], p + ".name", nullable=True)
                    if "priority" in meta:
                        self.uint(meta["priority"], p + ".priority", U32_MAX)

        kept = self.normalize(top, rows, stacks)
        if not kept:
            self.bad("profile.samples", "no sample survives normalization: every thread needs "
                     ">= 2 samples and a non-empty stack (NotEnoughSamples)")
        elif kept[-1][2] is not None and kept[-1][2] > MAX_ELAPSED_NS:
            self.bad("profile.samples", "last sample at %d ns is beyond 30 s (DurationIsTooLong)"
                     % kept[-1][2])
        return (len(samples), len(stacks), len(frames), len(tids))

    def normalize(self, top, rows, stacks):
        """The samples Relay keeps, in array order."""
        txn = top.get("transaction") or {}
        start = end = 0
        if isinstance(txn, dict):
            start = self.quiet_u64(txn.get("relative_start_ns", 0))
            end = self.quiet_u64(txn.get("relative_end_ns", 0))
        if end > 0:
            rows = [r for r in rows if r[2] is not None and start <= r[2] <= end]
        # remove_idle_samples_at_the_edge: per thread, trim to the first and
        # last sample whose stack exists and is non-empty.
        def busy(r):
            return (r[0] is not None and r[0] < len(stacks)
                    and isinstance(stacks[r[0]], list) and len(stacks[r[0]]) > 0)
        span = {}
        for i, r in enumerate(rows):
            if busy(r):
                lo, _ = span.get(r[1], (i, i))
                span[r[1]] = (lo, i)
        rows = [r for i, r in enumerate(rows) if r[1] in span and span[r[1]][0] <= i <= span[r[1]][1]]
        # remove_single_samples_per_thread
        count = {}
        for r in rows:
            count[r[1]] = count.get(r[1], 0) + 1
        return [r for r in rows if count[r[1]] >= 2]

    def quiet_u64(self, v):
        if isinstance(v, str) and DECIMAL.match(v):
            return int(v)
        return v if self.is_int(v) and v >= 0 else 0

    def top(self, o):
        if self.obj(o, "$") is None:
            return (0, 0, 0, 0)
        s = self.string
        if "event_id" in o and "profile_id" in o:
            self.bad("$", "both 'event_id' and its alias 'profile_id' (duplicate field)")
        if "event_id" not in o and "profile_id" not in o:
            self.bad("$", "missing required field 'event_id'")
        if o.get("version") != "1":
            self.bad("version", "expected the string \"1\" (sample format v1), got %r"
                     % (o.get("version"),))
        opt_str = lambda v, p: self.string(v, p)  # present => string, null rejected
        self.fields(o, "$", {
            "event_id": (False, self.uuid),
            "profile_id": (False, self.uuid),
            "platform": (True, s),
            "timestamp": (True, self.timestamp),
            "device": (True, lambda v, p: self.obj(v, p) is not None and self.fields(v, p, {
                "architecture": (True, s), "is_emulator": (False, self.boolean),
                "locale": (False, s), "manufacturer": (False, s), "model": (False, s)})),
            "os": (True, lambda v, p: self.obj(v, p) is not None and self.fields(v, p, {
                "name": (True, s), "version": (True, s), "build_number": (False, s)})),
            "runtime": (False, lambda v, p: self.obj(v, p) is not None and self.fields(v, p, {
                "name": (True, s), "version": (True, s)})),
            "client_sdk": (False, lambda v, p: self.obj(v, p) is not None and self.fields(v, p, {
                "name": (True, s), "version": (True, s)})),
            "release": (False, lambda v, p: self.string(v, p, nullable=True)),
            "environment": (False, opt_str),
            "dist": (False, opt_str),
            "measurements": (False, self.measurements),
            "debug_meta": (False, self.debug_meta),
        })
        if "transaction" in o:
            self.transaction(o["transaction"], "transaction")
        elif isinstance(o.get("transactions"), list) and o["transactions"]:
            for i, t in enumerate(o["transactions"]):
                self.transaction(t, "transactions[%d]" % i)
        else:
            self.bad("$", "no transaction (NoTransactionAssociated)")
        return self.profile(o)

    def boolean(self, v, path):
        if not isinstance(v, bool):
            return self.bad(path, "expected a boolean, got %r" % (v,))
        return v

    def debug_meta(self, v, path):
        if self.obj(v, path) is None:
            return
        if "images" not in v:
            self.bad(path, "missing required field 'images'")
        for i, im in enumerate(self.array(v.get("images"), path + ".images") or []):
            self.image(im, "%s.images[%d]" % (path, i))


def check(obj):
    """Errors ("path: message") Relay would reject `obj` with; [] if none."""
    return check_counts(obj)[0]


def check_counts(obj):
    c = Checker()
    counts = c.top(obj)
    return c.errors, counts


def parse(text):
    """json.loads, plus the errors serde would raise that Python hides."""
    errs = []

    def pairs(kv):
        seen = set()
        for k, _ in kv:
            if k in seen:
                errs.append("$: duplicate key %r" % k)
            seen.add(k)
        return dict(kv)

    def constant(name):
        errs.append("$: %s is not valid JSON" % name)
        return 0

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant), errs
    except ValueError as e:
        return None, ["$: invalid JSON: %s" % e]


def check_text(text):
    obj, errs = parse(text)
    return errs if obj is None else errs + check(obj)


def good_profile():
    frames = [{"instruction_addr": "0x55d0c0001130", "function": "spin", "lineno": 12,
               "module": "/usr/bin/victim", "in_app": True},
              {"instruction_addr": "0x55d0c0001200", "in_app": True},
              {"instruction_addr": "0x7f0a00029d90", "module": "libc.so.6", "in_app": False}]
    samples = [{"stack_id": s, "thread_id": t, "elapsed_since_start_ns": str(e), "on_cpu": True}
               for s, t, e in [(0, "10", 0), (1, "11", 10), (0, "10", 20), (2, "11", 30), (1, "11", 40)]]
    return {
        "version": "1", "event_id": "a" * 32, "platform": "native",
        "timestamp": "2026-11-21T19:40:00.123456Z",
        "device": {"architecture": "x86_64"}, "os": {"name": "Linux", "version": "6.1"},
        "runtime": {"name": "glibc", "version": "2.36"},
        "transaction": {"id": "b" * 32, "name": "victim", "trace_id": "c" * 32,
                        "segment_id": "d" * 16, "active_thread_id": 10,
                        "relative_start_ns": "0", "relative_end_ns": "40"},
        "debug_meta": {"images": [{"type": "symbolic", "code_file": "/usr/bin/victim",
                                   "debug_id": "4247301c-14f1-5421-53a8-a777f6cdb3a2",
                                   "image_addr": "0x55d0c0000000", "image_size": 65536}]},
        "profile": {"samples": samples, "stacks": [[0, 1, 2], [1, 2], []], "frames": frames,
                    "thread_metadata": {"10": {"name": "main"}, "11": {"name": "worker"}}},
    }


def self_test():
    def mut(fn):
        d = good_profile()
        fn(d)
        return d

    def setp(path, value):
        def fn(d):
            o = d
            for k in path[:-1]:
                o = o[k]
            o[path[-1]] = value
        return fn

    P = ("profile",)
    cases = [
        ("valid", good_profile(), None),
        ("wallprof extras: sample syscall labels, counters, threads", mut(lambda d: (
            d["profile"]["samples"][1].update(on_cpu=False, syscall="futex"),
            d["profile"]["samples"][3].update(on_cpu=False, syscall="syscall_4000"),
            d.__setitem__("wallprof", {
                "version": "0.1.0", "signals": 9, "signals_blocked": 1, "eintr_retried": 2,
                "from_wrapper": 3, "reused": 4, "dl_guarded": 5,
                "threads": {"10": {"name": "main", "signals": 5, "samples": 5},
                            "12": {"name": "gone", "signals": 1, "samples": 0}}}))), None),
        ("numeric syscall", mut(lambda d: d["profile"]["samples"][1].__setitem__("syscall", 202)),
         "syscall"),
        ("empty syscall", mut(lambda d: d["profile"]["samples"][1].__setitem__("syscall", "")),
         "syscall"),
        ("null syscall", mut(lambda d: d["profile"]["samples"][1].__setitem__("syscall", None)),
         "syscall"),
        ("int thread ids, hyphenated uuid, space timestamp", mut(lambda d: (
            [s.__setitem__("thread_id", int(s["thread_id"])) for s in d["profile"]["samples"]],
            d.__setitem__("event_id", "4247301c-14f1-5421-53a8-a777f6cdb3a2"),
            d.__setitem__("timestamp", "2023-10-10 00:00:00Z"))), None),
        ("version as number", mut(setp(("version",), 1)), "version"),
        ("bad event_id", mut(setp(("event_id",), "xyz")), "UUID"),
        ("nil transaction id", mut(setp(("transaction", "id"), "0" * 32)), "nil"),
        ("empty transaction name", mut(setp(("transaction", "name"), "")), "InvalidTransactionMetadata"),
        ("short segment_id", mut(setp(("transaction", "segment_id"), "abc")), "span id"),
        ("bad timestamp", mut(setp(("timestamp",), "2026-13-01T00:00:00Z")), "RFC 3339"),
        ("numeric timestamp", mut(setp(("timestamp",), 1700000000)), "RFC 3339"),
        ("missing architecture", mut(setp(("device",), {})), "architecture"),
        ("image type elf", mut(lambda d: d["debug_meta"]["images"][0].__setitem__("type", "elf")), "type"),
        ("image build_id", mut(lambda d: d["debug_meta"]["images"][0].__setitem__("build_id", "ab")), "build_id"),
        ("image_addr integer", mut(lambda d: d["debug_meta"]["images"][0].__setitem__("image_addr", 4096)), "address"),
        ("bad debug_id", mut(lambda d: d["debug_meta"]["images"][0].__setitem__("debug_id", "1c30")), "debug id"),
        ("stack index out of range", mut(lambda d: d["profile"]["stacks"].append([7])), "MalformedStacks"),
        ("stack_id out of range", mut(lambda d: d["profile"]["samples"][0].__setitem__("stack_id", 9)), "MalformedSamples"),
        ("stack_id as string", mut(lambda d: d["profile"]["samples"][0].__setitem__("stack_id", "0")), "stack_id"),
        ("hex thread_id", mut(lambda d: d["profile"]["samples"][0].__setitem__("thread_id", "0xa")), "thread_id"),
        ("float elapsed", mut(lambda d: d["profile"]["samples"][1].__setitem__("elapsed_since_start_ns", 1.5)), "elapsed"),
        ("unsorted samples", mut(lambda d: d["profile"]["samples"][4].__setitem__("elapsed_since_start_ns", "5")), "sorted"),
        ("longer than 30 s", mut(lambda d: (
            d["profile"]["samples"][4].__setitem__("elapsed_since_start_ns", str(31 * 10**9)),
            d["transaction"].__setitem__("relative_end_ns", "0"))), "DurationIsTooLong"),
        ("one sample per thread", mut(lambda d: d["profile"].__setitem__("samples", d["profile"]["samples"][:2])),
         "NotEnoughSamples"),
        ("only idle stacks", mut(lambda d: [s.__setitem__("stack_id", 2) for s in d["profile"]["samples"]]),
         "NotEnoughSamples"),
        ("thread_metadata without samples", mut(lambda d: d["profile"]["thread_metadata"].__setitem__("12", {})),
         "no samples"),
        ("negative lineno", mut(lambda d: d["profile"]["frames"][0].__setitem__("lineno", -1)), "lineno"),
        ("function and name", mut(lambda d: d["profile"]["frames"][0].__setitem__("name", "x")), "alias"),
        ("integer instruction_addr", mut(lambda d: d["profile"]["frames"][1].__setitem__("instruction_addr", 4096)),
         "address"),
        ("in_app string", mut(lambda d: d["profile"]["frames"][1].__setitem__("in_app", "yes")), "boolean"),
        ("no transaction", mut(lambda d: d.pop("transaction")), "NoTransactionAssociated"),
        ("null environment", mut(setp(("environment",), None)), "environment"),
    ]
    failed = 0
    for name, obj, want in cases:
        errs = check(obj)
        ok = (not errs) if want is None else any(want in e for e in errs)
        failed += not ok
        print("%s %s%s" % ("pass" if ok else "FAIL", name, "" if ok else ": %r" % errs))
    for name, text, want in [
        ("duplicate key in text", json.dumps(good_profile())[:-1] + ', "platform": "x"}', "duplicate key"),
        ("NaN literal", json.dumps(good_profile()).replace('"lineno": 12', '"lineno": NaN'), "NaN"),
    ]:
        errs = check_text(text)
        ok = any(want in e for e in errs)
        failed += not ok
        print("%s %s%s" % ("pass" if ok else "FAIL", name, "" if ok else ": %r" % errs))
    print("sentry_check self-test: %d failed" % failed)
    return 1 if failed else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print("usage: sentry_check.py FILE | --self-test", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        print("ERROR $: cannot read %s: %s" % (argv[1], e))
        return 1
    obj, errs = parse(text)
    counts = (0, 0, 0, 0)
    if obj is not None:
        more, counts = check_counts(obj)
        errs += more
    for e in errs:
        print("ERROR " + e)
    if errs:
        return 1
    print("OK %d %d %d %d" % counts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
