"""`build/wallprof convert` on input it must not trust: files that are not
regular files (/dev/zero, a directory, a FIFO), empty, random or foreign
files, every kind of prefix of a real raw dump (`exits segv` under the
preload), and dumps crafted so that a few hundred KB would ask for hundreds
of MB of frames or JSON (stacks overlapping the whole frame arena, a long
module path repeated in every frame). Each run is bounded: 200 MB of address
space, 64 MB of output file, a timeout; a refusal is exit 1 with exactly one
"wallprof: " line on stderr."""

import os
import re
import resource
import struct
import subprocess

CONVERT_TIMEOUT = 20    # seconds; these end in well under one
AS_LIMIT = 200 << 20    # RLIMIT_AS of each converter run
FSIZE_LIMIT = 64 << 20  # RLIMIT_FSIZE: no run may write a huge JSON file
JSON_BOUND = (16, 65536)  # raw_read.c: JSON bytes <= 16 * dump bytes + 64 KiB

M64 = (1 << 64) - 1


def checksum(data):
    """wp_raw_checksum (output/raw.c): 8-byte little-endian words, the last
    one zero-padded, mixed, the length folded in at the end."""
    h = 0x6a09e667f3bcc908
    pad = data + b"\0" * (-len(data) % 8)
    for (w,) in struct.iter_unpack("<Q", pad):
        x = h ^ ((w * 0x9e3779b97f4a7c15) & M64)
        x = ((x << 29) | (x >> 35)) & M64
        h = (x * 0xbf58476d1ce4e5b9 + 0x94d049bb133111eb) & M64
    h ^= len(data)
    h ^= h >> 33
    h = (h * 0xff51afd7ed558ccd) & M64
    h ^= h >> 33
    h = (h * 0xc4ceb9fe1a85ec53) & M64
    h ^= h >> 33
    return h


def section(tag, payload):
    head = tag + struct.pack("<IQ", 1, len(payload))
    return head + payload + struct.pack("<Q", checksum(head + payload))


def dump(mods, ring):
    """A raw dump (layout in output/raw.h): META, CTRS, one MODL per
    (path bytes, start, end), an empty THRD, the RING payload, END!."""
    out = b"WPRAWDMP" + struct.pack("<II", 1, 0x0a0b0c0d)
    cmd = b"crafted"
    out += section(b"META", struct.pack("<5IiqQQII", 4242, 7, 100, 30, 128, 11, 0, 0, 0,
                                        len(cmd), 0) + cmd)
    out += section(b"CTRS", struct.pack("<II", 0, 0))
    for path, start, end in mods:
        out += section(b"MODL", struct.pack("<QQQIIII", start, start, end, 0, 0, len(path), 0)
                       + b"\0" * 64 + path)
    out += section(b"THRD", struct.pack("<II", 0, 0))
    out += section(b"RING", ring)
    return out + section(b"END!", struct.pack("<QII", len(out), 4 + len(mods), 0))


def ring_payload(samples, pcs, stacks, words):
    """samples [(t, tid, stack)], pcs [addr] (exact PCs), stacks [(off, len)], words."""
    ns, np_, nst, nw = len(samples), len(pcs), len(stacks), len(words)
    out = struct.pack("<14Q", ns, np_, nst, nw, 30 * 10**9, ns, 0, 0, 0, 0, ns, np_, nst, nw)
    out += b"".join(struct.pack("<QIIII", t, tid, st, 1, 0) for t, tid, st in samples)
    out += b"".join(struct.pack("<QII", a, 1, 0) for a in pcs)
    out += b"".join(struct.pack("<II", o, n) for o, n in stacks)
    return out + struct.pack("<%dI" % nw, *words)


def sections(data):
    """[(tag, offset, payload length)] of a well-formed dump."""
    out, off = [], 16
    while off + 24 <= len(data):
        tag = data[off:off + 4]
        (plen,) = struct.unpack_from("<Q", data, off + 8)
        out.append((tag, off, plen))
        off += 24 + plen
    return out


def tests(rt):
    check = rt.check
    convert_bin = os.path.join(rt.BUILD, "wallprof")

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def convert(tmp, path, out_name="out.json"):
        """(exit status or -signal, stdout, stderr, output path); a run that
        does not end in time is a failure."""
        check(os.access(convert_bin, os.X_OK), "build/wallprof not built")
        out = os.path.join(tmp, out_name)
        try:
            p = subprocess.run([convert_bin, "convert", path, "-o", out], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               timeout=CONVERT_TIMEOUT, env=rt.clean_env(preload=False),
                               preexec_fn=limits)
        except subprocess.TimeoutExpired:
            raise rt.Failure("wallprof convert %s did not end within %d s" % (path, CONVERT_TIMEOUT))
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), out

    def refused(tmp, path, want, what):
        """wallprof convert refuses `path`: exit 1, nothing on stdout, one
        "wallprof: " line on stderr matching `want`, no output file."""
        rc, out, err, json_path = convert(tmp, path)
        lines = err.splitlines()
        check(rc == 1, "%s: exit status %s, want 1 (stderr %r)" % (what, rc, err[-300:]))
        check(len(lines) == 1 and err.endswith("\n") and lines[0].startswith("wallprof: "),
              "%s: stderr is not one wallprof: line: %r" % (what, err[-300:]))
        check(re.search(want, lines[0]), "%s: %r does not say %r" % (what, lines[0], want))
        check(out == "", "%s: stdout %r" % (what, out[-200:]))
        check(not os.path.exists(json_path), "%s: %s written" % (what, json_path))
        return lines[0]

    def real_dump(tmp):
        """The raw dump of exits dying of SIGSEGV under the preload (no
        converter: the dump stays)."""
        r = rt.run_bounded([rt.prog("exits"), "segv"], tmp, timeout=15,
                           env_extra={"WALLPROF_CONVERTER": os.path.join(tmp, "none")})
        m = re.search(r"wallprof:.*?(\S*wallprof\.%d\.raw)" % r.pid, r.stderr)
        check(m, "no raw dump named on stderr (%s)" % r.describe())
        path = os.path.join(tmp, m.group(1).rstrip(",;:)"))
        with open(path, "rb") as f:
            data = f.read()
        for tag, off, plen in sections(data):
            (got,) = struct.unpack_from("<Q", data, off + 16 + plen)
            check(got == checksum(data[off:off + 16 + plen]),
                  "the test's checksum disagrees with the writer's (section %r)" % tag)
        return path, data

    def write(tmp, name, data):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    # ---- files that are not dumps ----

    def test_not_regular(tmp):
        refused(tmp, "/dev/zero", r"/dev/zero: not a regular file \(a character device\)",
                "/dev/zero")
        refused(tmp, tmp, r"not a regular file \(a directory\)", "a directory")
        fifo = os.path.join(tmp, "fifo.raw")
        os.mkfifo(fifo)
        refused(tmp, fifo, r"not a regular file \(a FIFO\)", "a FIFO with no writer")
        refused(tmp, os.path.join(tmp, "missing.raw"), r"cannot open: No such file", "a missing file")

    def test_not_dumps(tmp):
        refused(tmp, write(tmp, "empty.raw", b""), r"empty file", "an empty file")
        # The first byte is fixed: random bytes that begin (after blanks)
        # with "{" or "[" are JSON to the converter (1 run in about 130
        # failed with "not JSON" before).
        refused(tmp, write(tmp, "random.raw", b"\x01" + os.urandom(99999)),
                r"not a wallprof raw dump", "random bytes")
        _, data = real_dump(tmp)
        v2 = data[:8] + struct.pack("<I", 2) + data[12:]
        refused(tmp, write(tmp, "v2.raw", v2), r"unsupported raw dump version 2",
                "a real dump marked version 2")
        big = os.path.join(tmp, "sparse.raw")
        with open(big, "wb") as f:
            f.truncate(4 << 30)  # sparse: refused from its header, never read in
        refused(tmp, big, r"bad magic", "a 4 GiB file of zeros")

    def test_prefixes(tmp):
        """Prefixes of a real dump, cut at every byte of the header and around
        every section boundary and at 100 more places: each refused with one
        line (no END! marker), never a crash or a hang; the whole converts."""
        path, data = real_dump(tmp)
        rc, out, err, json_path = convert(tmp, path)
        check(rc == 0 and os.path.exists(json_path),
              "the whole dump did not convert under the limits: %s %r" % (rc, err[-300:]))
        os.unlink(json_path)
        cuts = set(range(0, 40))
        for _, off, plen in sections(data):
            for at in (off, off + 16, off + 16 + plen, off + 24 + plen):
                cuts.update(range(at - 3, at + 4))
        cuts.update(range(0, len(data), max(1, len(data) // 100)))
        cuts = sorted(c for c in cuts if 0 <= c < len(data))
        for n in cuts:
            refused(tmp, write(tmp, "cut.raw", data[:n]),
                    r"truncated|empty file|bad magic", "the dump cut at byte %d of %d" % (n, len(data)))
        rt.note("%d prefixes of a %d-byte dump refused" % (len(cuts), len(data)))

    # ---- crafted dumps ----

    def test_overlapping_stacks(tmp):
        """The report: 576 KB whose 8192 stacks each span the whole 16384-word
        frame arena asked for 134 M frames (513 MB of JSON, 1 GB of memory).
        Overlapping stacks do not hold together: one line, exit 1."""
        nst, nw = 8192, 16384
        ring = ring_payload([(1000 + i, 7, i) for i in range(nst)],
                            [0x401000 + 16 * i for i in range(nw)],
                            [(0, nw)] * nst, list(range(nw)))
        data = dump([(b"/bin/true", 0x400000, 0x800000)], ring)
        check(len(data) > 576 << 10, "the crafted dump has %d bytes" % len(data))
        refused(tmp, write(tmp, "overlap.raw", data),
                r"no usable samples: 8192 samples and 8192 stacks did not hold together",
                "8192 stacks spanning the whole arena")

        # one disjoint stack among them, sampled twice (a Sentry profile
        # needs two samples on a thread): converted, with one warning line,
        # the JSON within the bound
        stacks = [(0, nw)] * (nst - 1) + [(nw, 64)]
        ring = ring_payload([(1000 + i, 7, i) for i in range(nst)] + [(1000 + nst, 7, nst - 1)],
                            [0x401000 + 16 * i for i in range(nw)],
                            stacks, list(range(nw)) + list(range(64)))
        data = dump([(b"/bin/true", 0x400000, 0x800000)], ring)
        path = write(tmp, "overlap1.raw", data)
        rc, out, err, json_path = convert(tmp, path)
        check(rc == 0, "one good stack among overlapping ones: exit %s (%r)" % (rc, err[-300:]))
        check(len(err.splitlines()) == 1 and
              re.match(r"wallprof: .*dropped 8191 samples and 8191 stacks", err),
              "stderr %r, want one line on the dropped samples and stacks" % err[-300:])
        size = os.path.getsize(json_path)
        check(size <= JSON_BOUND[0] * len(data) + JSON_BOUND[1],
              "%d bytes of JSON from a %d-byte dump" % (size, len(data)))
        prof = rt.load_profile(json_path)
        check(len(rt.profile_part(prof)["samples"]) == 2, "not the two samples of the good stack")

    def test_module_path_budget(tmp):
        """A 4 KB module path of control characters (6 bytes of JSON each)
        named in every one of 16384 frames: 400 MB of JSON from 400 KB."""
        nw = 16384
        path = b"/" + b"\x01" * 4094
        ring = ring_payload([(1000, 7, 0)], [0x10000 + 16 * i for i in range(nw)],
                            [(0, nw)], list(range(nw)))
        data = dump([(path, 0x1000, 1 << 40)], ring)
        refused(tmp, write(tmp, "path.raw", data), r"module paths", "a 4 KB path in 16384 frames")

    return [
        ("convert_untrusted_not_regular", test_not_regular),
        ("convert_untrusted_not_dumps", test_not_dumps),
        ("convert_untrusted_prefixes", test_prefixes),
        ("convert_untrusted_overlapping_stacks", test_overlapping_stacks),
        ("convert_untrusted_module_path", test_module_path_budget),
    ]
