#!/usr/bin/env python3
"""sentry_check: the test suite's own check of a Sentry sample-format v1
profile, a v2 profile chunk, or an envelope carrying them, against the rules
Relay applies at ingestion (types, then the normalization that can leave
nothing behind, then the envelope's framing and items). Standard library
only.

    python3 test/sentry_check.py [--chunk | --envelope] FILE
        -> "OK <samples> <stacks> <frames> <threads>" (an envelope: of its
           first profile or chunk) or "ERROR <path>: <message>" lines, exit 1.
           Without a flag the kind is told from the file: a JSON object with
           "version":"2" is a chunk, other JSON a v1 profile, anything whose
           first line alone is a JSON object an envelope.
    python3 test/sentry_check.py --self-test

As a module: check(obj) -> list of "path: message" strings (empty when
valid; a chunk, "version":"2", is checked as one); check_chunk(obj) for a
chunk; check_envelope(data: bytes) for an envelope; check_text(text) also
catches what json.loads hides (duplicate keys, NaN).

Envelope rules of our own, beyond Relay's: every item header has "length";
an item header's "platform" is the payload's; a profile's transaction.id,
trace_id and segment_id are the transaction event's event_id, trace_id and
span_id, and the envelope's event_id the event's.

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
MAX_CHUNK_SECONDS = 66  # Relay: MAX_PROFILE_CHUNK_DURATION
MAX_PROFILE_BYTES = 50 * 2**20  # Relay: max_profile_size
MAX_ENVELOPE_BYTES = 200 * 2**20  # Relay: max_envelope_size
UI_PLATFORMS = {"cocoa", "android", "javascript"}  # Relay: ProfileType::from_platform
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
        stacks, frames = self.stacks_frames(prof)
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
        self.thread_metadata(prof, tids, canonical=True)

        kept = self.normalize(top, rows, stacks)
        if not kept:
            self.bad("profile.samples", "no sample survives normalization: every thread needs "
                     ">= 2 samples and a non-empty stack (NotEnoughSamples)")
        elif kept[-1][2] is not None and kept[-1][2] > MAX_ELAPSED_NS:
            self.bad("profile.samples", "last sample at %d ns is beyond 30 s (DurationIsTooLong)"
                     % kept[-1][2])
        return (len(samples), len(stacks), len(frames), len(tids))

    def stacks_frames(self, prof):
        """The frames and stacks (v1 and v2 alike), checked."""
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
        return stacks, frames

    def thread_metadata(self, prof, tids, canonical):
        """Keys name threads with samples: v1 compares the canonical decimal
        form of the u64 thread ids, v2 the thread_id strings as they are."""
        tm = prof.get("thread_metadata")
        if tm is None or self.obj(tm, "profile.thread_metadata") is None:
            return
        for key, meta in tm.items():
            p = "profile.thread_metadata[%r]" % key
            if canonical and not (isinstance(key, str) and re.match(r"^(0|[1-9][0-9]*)$", key)):
                self.bad(p, "key must be a canonical decimal thread id")
            elif (int(key) if canonical else key) not in tids:
                self.bad(p, "thread has no samples")
            if self.obj(meta, p) is not None:
                if "name" in meta:
                    self.string(meta["name"], p + ".name", nullable=True)
                if "priority" in meta:
                    self.uint(meta["priority"], p + ".priority", U32_MAX)

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

    # --- v2: the profile chunk ---
    def chunk(self, o):
        """Types, then Relay's v2 normalization and its rejections."""
        if self.obj(o, "$") is None:
            return (0, 0, 0, 0)
        s = self.string
        if o.get("version") != "2":
            self.bad("version", "expected the string \"2\" (sample format v2), got %r"
                     % (o.get("version"),))
        if "chunk_id" in o and "event_id" in o:
            self.bad("$", "both 'chunk_id' and its alias 'event_id' (duplicate field)")
        if "chunk_id" not in o and "event_id" not in o:
            self.bad("$", "missing required field 'chunk_id'")
        self.fields(o, "$", {
            "chunk_id": (False, self.uuid),
            "event_id": (False, self.uuid),
            "profiler_id": (True, self.uuid),
            "platform": (True, s),
            "client_sdk": (True, lambda v, p: self.obj(v, p) is not None and self.fields(v, p, {
                "name": (True, s), "version": (True, s)})),
            "release": (False, lambda v, p: self.string(v, p, nullable=True)),
            "environment": (False, lambda v, p: self.string(v, p, nullable=True)),
            "dist": (False, lambda v, p: self.string(v, p, nullable=True)),
            "debug_meta": (False, self.debug_meta),
            "measurements": (False, self.chunk_measurements),
        })
        prof = self.obj(o.get("profile"), "profile")
        if prof is None:
            return (0, 0, 0, 0)
        samples = self.array(prof.get("samples"), "profile.samples") or []
        stacks, frames = self.stacks_frames(prof)
        rows = []  # (stack_id, tid, timestamp) of well-typed samples
        for i, smp in enumerate(samples):
            p = "profile.samples[%d]" % i
            if self.obj(smp, p) is None:
                continue
            sid = self.uint(smp.get("stack_id"), p + ".stack_id")
            tid = self.string(smp.get("thread_id"), p + ".thread_id")
            ts = self.seconds(smp.get("timestamp"), p + ".timestamp")
            if sid is not None and sid >= len(stacks):
                self.bad(p + ".stack_id", "%d >= %d stacks (MalformedSamples)" % (sid, len(stacks)))
            rows.append((sid, tid, ts))
        self.thread_metadata(prof, {r[1] for r in rows if r[1] is not None}, canonical=False)
        # remove_single_samples_per_thread: threads with <= 1 non-idle sample go.
        busy = {}
        for r in rows:
            if (r[0] is not None and r[0] < len(stacks) and isinstance(stacks[r[0]], list)
                    and stacks[r[0]]):
                busy[r[1]] = busy.get(r[1], 0) + 1
        kept = [r for r in rows if busy.get(r[1], 0) >= 2]
        if not kept:
            self.bad("profile.samples", "no thread has 2 samples with a non-empty stack "
                     "(NotEnoughSamples)")
        else:
            times = sorted(r[2] for r in kept if r[2] is not None)
            if times and times[-1] - times[0] > MAX_CHUNK_SECONDS:
                self.bad("profile.samples", "the samples span %.3f s, over %d s (DurationIsTooLong)"
                         % (times[-1] - times[0], MAX_CHUNK_SECONDS))
        return (len(samples), len(stacks), len(frames), len({r[1] for r in kept}))

    def seconds(self, v, path):
        """FiniteF64: a JSON number (not a string, not a boolean)."""
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (
                float("inf"), float("-inf")):
            return self.bad(path, "expected a number of Unix seconds, got %r" % (v,))
        return float(v)

    def chunk_measurements(self, m, path):
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
                if self.obj(x, q) is not None:
                    self.seconds(x.get("timestamp"), q + ".timestamp")
                    self.seconds(x.get("value"), q + ".value")

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


def is_chunk(obj):
    return isinstance(obj, dict) and obj.get("version") == "2"


def check(obj):
    """Errors ("path: message") Relay would reject `obj` with; [] if none.
    A v2 chunk ("version":"2") is checked as one."""
    return check_counts(obj)[0]


def check_chunk(obj):
    """Errors Relay would reject the v2 profile chunk `obj` with."""
    c = Checker()
    c.chunk(obj)
    return c.errors


def check_counts(obj):
    c = Checker()
    counts = c.chunk(obj) if is_chunk(obj) else c.top(obj)
    return c.errors, counts


def profile_type(platform):
    return "ui" if platform in UI_PLATFORMS else "backend"


def envelope_items(data):
    """(header object, [(item header, payload bytes, path)], errors) of an
    envelope: a JSON header line, then items, each a JSON header line and
    a payload of "length" bytes (or up to the next newline) and a newline."""
    errs = []
    nl = data.find(b"\n")
    line = data if nl < 0 else data[:nl]
    head, e = parse_bytes(line, "envelope header")
    errs += e
    pos = len(data) if nl < 0 else nl + 1
    items = []
    while pos < len(data):
        path = "items[%d]" % len(items)
        nl = data.find(b"\n", pos)
        line = data[pos:] if nl < 0 else data[pos:nl]
        if not line.strip() and nl < 0:
            break  # trailing whitespace
        ih, e = parse_bytes(line, path + ".header")
        errs += e
        if not isinstance(ih, dict):
            errs.append("%s.header: expected a JSON object" % path)
            break
        pos = len(data) if nl < 0 else nl + 1
        length = ih.get("length")
        if length is None:
            errs.append("%s.header: no \"length\" (ours: every item gives it)" % path)
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl
            payload, pos = data[pos:end], end + 1
        elif isinstance(length, bool) or not isinstance(length, int) or length < 0:
            errs.append("%s.header.length: expected a byte count, got %r" % (path, length))
            break
        else:
            if pos + length > len(data):
                errs.append("%s: length %d runs past the end of the envelope (%d bytes left)"
                            % (path, length, len(data) - pos))
                break
            payload = data[pos:pos + length]
            pos += length
            if pos < len(data) and data[pos:pos + 1] != b"\n":
                errs.append("%s: the payload of length %d is not followed by a newline" % (path, length))
                break
            pos += 1
        items.append((ih, payload, path))
    return head, items, errs


def parse_bytes(b, path):
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, ["%s: not UTF-8: %s" % (path, e)]
    obj, errs = parse(text)
    return obj, [e.replace("$", path, 1) for e in errs]


def check_transaction_event(ev, path, c):
    """The transaction event Relay needs beside a profile."""
    if c.obj(ev, path) is None:
        return
    if ev.get("type") != "transaction":
        c.bad(path + ".type", "expected \"transaction\", got %r" % (ev.get("type"),))
    c.fields(ev, path, {
        "event_id": (True, lambda v, p: c.uuid(v, p, non_nil=True)),
        "transaction": (True, c.string),
        "start_timestamp": (True, lambda v, p: c.timestamp(v, p) if isinstance(v, str)
                            else c.seconds(v, p)),
        "timestamp": (True, lambda v, p: c.timestamp(v, p) if isinstance(v, str)
                      else c.seconds(v, p)),
        "platform": (False, c.string),
        "release": (False, lambda v, p: c.string(v, p, nullable=True)),
        "environment": (False, lambda v, p: c.string(v, p, nullable=True)),
        "sdk": (False, lambda v, p: c.obj(v, p) is not None and c.fields(v, p, {
            "name": (True, c.string), "version": (True, c.string)})),
    })
    if isinstance(ev.get("transaction"), str) and not ev["transaction"]:
        c.bad(path + ".transaction", "must not be empty")
    a, b = ev.get("start_timestamp"), ev.get("timestamp")
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)) and b < a:
        c.bad(path + ".timestamp", "ends before start_timestamp")
    trace = (ev.get("contexts") or {}).get("trace") if isinstance(ev.get("contexts"), dict) else None
    if c.obj(trace, path + ".contexts.trace") is not None:
        c.fields(trace, path + ".contexts.trace", {
            "trace_id": (True, lambda v, p: c.uuid(v, p, non_nil=True)),
            "span_id": (True, c.span_id),
            "op": (False, c.string),
        })


def check_envelope(data):
    """Errors ("path: message") Relay, or our own envelope rules (module
    docstring), find in the envelope `data` (bytes); [] if none."""
    return check_envelope_counts(data)[0]


def check_envelope_counts(data):
    c = Checker()
    counts = (0, 0, 0, 0)
    if len(data) > MAX_ENVELOPE_BYTES:
        c.bad("$", "the envelope is over %d bytes" % MAX_ENVELOPE_BYTES)
    head, items, errs = envelope_items(data)
    c.errors += errs
    if c.obj(head, "header") is None:
        return c.errors, counts
    c.fields(head, "header", {
        "event_id": (False, c.uuid),
        "sent_at": (False, c.timestamp),
        "sdk": (False, lambda v, p: c.obj(v, p) is not None and c.fields(v, p, {
            "name": (True, c.string), "version": (True, c.string)})),
    })
    types = [ih.get("type") for ih, _, _ in items]
    txns = [(i, p) for i, p in zip(items, types) if p == "transaction"]
    if len(txns) > 1:
        c.bad("$", "%d transaction items (at most one)" % len(txns))
    event = None
    for (ih, payload, path), _ in txns[:1]:
        event, e = parse_bytes(payload, path)
        c.errors += e
        check_transaction_event(event, path, c)
        if "event_id" not in head:
            c.bad("header", "missing 'event_id', required with a transaction item")
        elif isinstance(event, dict) and event.get("event_id") != head["event_id"]:
            c.bad("header.event_id", "is not the transaction's event_id (ours)")
    profiles = 0
    for ih, payload, path in items:
        kind = ih.get("type")
        if kind not in ("profile", "profile_chunk"):
            continue
        if kind == "profile":
            profiles += 1
            if profiles > 1:
                c.bad(path, "a second profile item (TooManyProfiles): only the first is kept")
                continue
            if not txns and ih.get("sampled") is not False:
                c.bad(path, "a profile item without a transaction item in the envelope: "
                      "Relay drops it")
        if kind == "profile_chunk" and "meta_length" in ih:
            c.bad(path + ".header.meta_length", "not on a JSON chunk (InvalidSampledProfile)")
        if len(payload) > MAX_PROFILE_BYTES:
            c.bad(path, "the payload is over %d bytes (ExceedSizeLimit)" % MAX_PROFILE_BYTES)
        obj, e = parse_bytes(payload, path)
        c.errors += e
        if obj is None:
            continue
        if kind == "profile_chunk" and not is_chunk(obj):
            c.bad(path, "a profile_chunk item whose payload is not a v2 chunk")
        if kind == "profile" and is_chunk(obj):
            c.bad(path, "a profile item whose payload is a v2 chunk")
        more, cnt = check_counts(obj)
        c.errors += ["%s.%s" % (path, m) for m in more]
        if counts == (0, 0, 0, 0):
            counts = cnt
        plat = ih.get("platform")
        if plat is not None and isinstance(obj, dict):
            if profile_type(plat) != profile_type(obj.get("platform")):
                c.bad(path + ".header.platform", "%r is not of the payload's profile type "
                      "(InvalidProfileType)" % (plat,))
            elif plat != obj.get("platform"):
                c.bad(path + ".header.platform", "%r is not the payload's platform %r (ours)"
                      % (plat, obj.get("platform")))
        elif plat is None:
            c.bad(path + ".header", "no \"platform\" (ours: it gives the data category)")
        if kind == "profile" and isinstance(event, dict) and isinstance(obj, dict):
            t = obj.get("transaction") or {}
            trace = (event.get("contexts") or {}).get("trace") or {}
            for mine, theirs, what in [(t.get("id"), event.get("event_id"), "id"),
                                       (t.get("trace_id"), trace.get("trace_id"), "trace_id"),
                                       (t.get("segment_id"), trace.get("span_id"), "segment_id"),
                                       (t.get("name"), event.get("transaction"), "name")]:
                if mine != theirs:
                    c.bad("%s.transaction.%s" % (path, what),
                          "%r is not the transaction event's %r (ours)" % (mine, theirs))
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


def good_chunk():
    d = good_profile()
    samples = [{"stack_id": s["stack_id"], "thread_id": s["thread_id"],
                "timestamp": 1767225600.0 + int(s["elapsed_since_start_ns"]) / 1e9}
               for s in d["profile"]["samples"]]
    return {"version": "2", "chunk_id": "e" * 32, "profiler_id": "f" * 32, "platform": "native",
            "release": "app@1.0", "environment": "production",
            "client_sdk": {"name": "libwallprof", "version": "0.1.0"},
            "debug_meta": d["debug_meta"],
            "profile": dict(d["profile"], samples=samples)}


def envelope(header, items):
    """Bytes of an envelope: items are (header dict, payload bytes); a None
    length in a header is filled in."""
    out = [json.dumps(header).encode()]
    for h, payload in items:
        h = dict(h)
        if h.get("length", 0) is None:
            h["length"] = len(payload)
        out += [json.dumps(h).encode(), payload]
    return b"\n".join(out) + b"\n"


def good_txn_event(profile):
    t = profile["transaction"]
    return {"type": "transaction", "event_id": t["id"], "transaction": t["name"],
            "start_timestamp": 1767225600.0, "timestamp": 1767225600.5,
            "contexts": {"trace": {"trace_id": t["trace_id"], "span_id": t["segment_id"],
                                   "op": "process"}},
            "platform": "native", "sdk": {"name": "libwallprof", "version": "0.1.0"}}


def good_envelope_parts(profile=None, event=None):
    profile = profile or good_profile()
    event = event or good_txn_event(profile)
    head = {"event_id": event["event_id"], "sent_at": "2026-01-01T00:00:01.000000Z",
            "sdk": {"name": "libwallprof", "version": "0.1.0"}}
    return head, [({"type": "transaction", "length": None}, json.dumps(event).encode()),
                  ({"type": "profile", "platform": "native", "length": None},
                   json.dumps(profile).encode())]


def good_envelope():
    return envelope(*good_envelope_parts())


def good_chunk_envelope(chunk=None):
    return envelope({"sent_at": "2026-01-01T00:00:01Z", "sdk": {"name": "libwallprof", "version": "0.1.0"}},
                    [({"type": "profile_chunk", "platform": "native", "length": None},
                      json.dumps(chunk or good_chunk()).encode())])


def chunk_cases():
    def mut(fn):
        d = good_chunk()
        fn(d)
        return d

    def smp(i, **kw):
        return lambda d: d["profile"]["samples"][i].update(kw)

    return [
        ("chunk: valid", good_chunk(), None),
        ("chunk: integer timestamps, null release", mut(lambda d: (
            [s.__setitem__("timestamp", 1767225600 + i) for i, s in enumerate(d["profile"]["samples"])],
            d.__setitem__("release", None))), None),
        ("chunk: thread with one busy sample left in (Relay drops it)", mut(lambda d: (
            d["profile"]["samples"].append({"stack_id": 0, "thread_id": "12", "timestamp": 1767225600.1}),
            d["profile"]["thread_metadata"].__setitem__("12", {"name": "x"}))), None),
        ("chunk: version 1", mut(lambda d: d.__setitem__("version", "1")), "version"),
        ("chunk: no chunk_id", mut(lambda d: d.pop("chunk_id")), "chunk_id"),
        ("chunk: chunk_id and event_id", mut(lambda d: d.__setitem__("event_id", "a" * 32)), "alias"),
        ("chunk: bad profiler_id", mut(lambda d: d.__setitem__("profiler_id", "xyz")), "UUID"),
        ("chunk: no client_sdk", mut(lambda d: d.pop("client_sdk")), "client_sdk"),
        ("chunk: no platform", mut(lambda d: d.pop("platform")), "platform"),
        ("chunk: string timestamp", mut(smp(0, timestamp="1767225600.0")), "Unix seconds"),
        ("chunk: integer thread_id", mut(smp(0, thread_id=10)), "thread_id"),
        ("chunk: stack_id out of range", mut(smp(0, stack_id=9)), "MalformedSamples"),
        ("chunk: frame index out of range", mut(lambda d: d["profile"]["stacks"].append([9])),
         "MalformedStacks"),
        ("chunk: one busy sample per thread", mut(lambda d: d["profile"].__setitem__(
            "samples", d["profile"]["samples"][:2])), "NotEnoughSamples"),
        ("chunk: only idle stacks", mut(lambda d: [s.__setitem__("stack_id", 2)
                                                   for s in d["profile"]["samples"]]),
         "NotEnoughSamples"),
        ("chunk: longer than 66 s", mut(smp(4, timestamp=1767225667.5)), "DurationIsTooLong"),
        ("chunk: 66 s exactly", mut(smp(4, timestamp=1767225666.0)), None),
        ("chunk: null debug_meta", mut(lambda d: d.__setitem__("debug_meta", None)), "debug_meta"),
        ("chunk: metadata of a thread without samples", mut(
            lambda d: d["profile"]["thread_metadata"].__setitem__("99", {})), "no samples"),
    ]


def envelope_cases():
    def parts(fn):
        head, items = good_envelope_parts()
        fn(head, items)
        return envelope(head, items)

    def with_profile(fn):
        p = good_profile()
        fn(p)
        return envelope(*good_envelope_parts(profile=p, event=good_txn_event(good_profile())))

    good = good_envelope()
    prof_item = good_envelope_parts()[1][1]
    return [
        ("envelope: valid", good, None),
        ("envelope: chunk, valid", good_chunk_envelope(), None),
        ("envelope: no trailing newline", good[:-1], None),
        ("envelope: length one short", parts(lambda h, it: it[1][0].__setitem__(
            "length", len(it[1][1]) - 1)), "newline"),
        ("envelope: length past the end", parts(lambda h, it: it[1][0].__setitem__(
            "length", len(it[1][1]) + 10)), "past the end"),
        ("envelope: no length", parts(lambda h, it: it[1][0].pop("length")), "length"),
        ("envelope: profile without transaction", parts(lambda h, it: it.pop(0)),
         "without a transaction"),
        ("envelope: unsampled profile without transaction", parts(lambda h, it: (
            it.pop(0), h.pop("event_id"), it[0][0].__setitem__("sampled", False))), None),
        ("envelope: two profiles", parts(lambda h, it: it.append(prof_item)), "TooManyProfiles"),
        ("envelope: no event_id with a transaction", parts(lambda h, it: h.pop("event_id")),
         "event_id"),
        ("envelope: event_id not the transaction's", parts(
            lambda h, it: h.__setitem__("event_id", "9" * 32)), "event_id"),
        ("envelope: bad sent_at", parts(lambda h, it: h.__setitem__("sent_at", "yesterday")),
         "RFC 3339"),
        ("envelope: profile's transaction id differs", with_profile(
            lambda p: p["transaction"].__setitem__("id", "9" * 32)), "transaction.id"),
        ("envelope: profile's trace id differs", with_profile(
            lambda p: p["transaction"].__setitem__("trace_id", "9" * 32)), "trace_id"),
        ("envelope: platform header of another type", parts(lambda h, it: it[1][0].__setitem__(
            "platform", "cocoa")), "InvalidProfileType"),
        ("envelope: platform header not the payload's", parts(lambda h, it: it[1][0].__setitem__(
            "platform", "rust")), "payload's platform"),
        ("envelope: no platform header", parts(lambda h, it: it[1][0].pop("platform")), "platform"),
        ("envelope: transaction ends before it starts", parts(lambda h, it: it.__setitem__(0, (
            it[0][0], json.dumps(dict(json.loads(it[0][1]), timestamp=1.0)).encode()))),
         "before start"),
        ("envelope: transaction without trace context", parts(lambda h, it: it.__setitem__(0, (
            it[0][0], json.dumps(dict(json.loads(it[0][1]), contexts={})).encode()))), "trace"),
        ("envelope: invalid profile inside", parts(lambda h, it: it.__setitem__(1, (
            it[1][0], json.dumps(dict(good_profile(), version=1)).encode()))), "version"),
        ("envelope: chunk over 66 s", good_chunk_envelope(dict(good_chunk(), profile=dict(
            good_chunk()["profile"], samples=good_chunk()["profile"]["samples"][:4] + [
                dict(good_chunk()["profile"]["samples"][4], timestamp=1767225700.0)]))),
         "DurationIsTooLong"),
        ("envelope: chunk without 2 busy samples in a thread", good_chunk_envelope(dict(
            good_chunk(), profile=dict(good_chunk()["profile"],
                                       samples=good_chunk()["profile"]["samples"][:2]))),
         "NotEnoughSamples"),
        ("envelope: chunk with meta_length", envelope(
            {"sent_at": "2026-01-01T00:00:01Z"},
            [({"type": "profile_chunk", "platform": "native", "meta_length": 3, "length": None},
              json.dumps(good_chunk()).encode())]), "InvalidSampledProfile"),
        ("envelope: header not JSON", b"nope\n" + good.split(b"\n", 1)[1], "envelope header"),
    ]


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
    chunk_checks = [(n, o, w, check_chunk) for n, o, w in chunk_cases()]
    chunk_checks.append(("check() of a chunk checks it as one", good_chunk(), None, check))
    for name, obj, want, fn in [c + (check,) for c in cases] + chunk_checks:
        errs = fn(obj)
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
    for name, data, want in envelope_cases():
        errs = check_envelope(data)
        ok = (not errs) if want is None else any(want in e for e in errs)
        failed += not ok
        print("%s %s%s" % ("pass" if ok else "FAIL", name, "" if ok else ": %r" % errs))
    print("sentry_check self-test: %d failed" % failed)
    return 1 if failed else 0


def looks_like_envelope(data):
    """Not one JSON document, but its first line is a JSON object."""
    try:
        json.loads(data.decode("utf-8"))
        return False
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        return isinstance(json.loads(data.split(b"\n", 1)[0].decode("utf-8")), dict)
    except (ValueError, UnicodeDecodeError):
        return False


def main(argv):
    args = argv[1:]
    if args == ["--self-test"]:
        return self_test()
    kind = None
    if args and args[0] in ("--chunk", "--envelope"):
        kind = args.pop(0)[2:]
    if len(args) != 1:
        print("usage: sentry_check.py [--chunk | --envelope] FILE | --self-test", file=sys.stderr)
        return 2
    try:
        with open(args[0], "rb") as f:
            data = f.read()
    except OSError as e:
        print("ERROR $: cannot read %s: %s" % (args[0], e))
        return 1
    if kind is None:
        kind = "envelope" if looks_like_envelope(data) else None
    counts = (0, 0, 0, 0)
    if kind == "envelope":
        errs, counts = check_envelope_counts(data)
    else:
        obj, errs = parse_bytes(data, "$")
        if obj is not None:
            if kind == "chunk":
                c = Checker()
                counts = c.chunk(obj)
                more = c.errors
            else:
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
