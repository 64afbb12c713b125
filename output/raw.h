/* raw: the raw dump the profiled process writes with async-signal-safe
 * calls only (ring, module map, threads, counters, settings; no symbols):
 * its layout, the building blocks of its writer, and its reader, which makes
 * the profile of it: the one place the window, the module shadowing and the
 * per-tid thread merge are done. The runtime composes a dump with these
 * blocks (preload/raw_dump.h; the ring's section, preload/ring.h); the
 * converter only reads. Writing is async-signal-safe; reading is not. */
#ifndef WP_RAW_H
#define WP_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "profile.h"

/*
 * File layout, version 1. Every integer is little-endian (x86-64 native).
 *
 *   file header, 16 bytes: "WPRAWDMP", u32 version (1), u32 0x0a0b0c0d (byte order)
 *   sections, in this order:  META  RUN!  CTRS  MODL (one per module)  THRD  RING  END!
 *
 * Every section is framed the same way:
 *   u32 tag (4 ASCII bytes), u32 section version, u64 payload length,
 *   payload, u64 checksum (wp_raw_checksum of the 16 header bytes + payload).
 *
 *   META v2  u32 pid, main_tid, hz, ring_seconds, max_depth; i32 signal;
 *            i64 realtime_offset_ns; u64 start_ns; u64 dump_ns (CLOCK_MONOTONIC
 *            when the dump began); u32 cmdline_len (< 1024), u32 snapshot (its
 *            number, 0 for the exit profile); u64 ring_bytes (the ring's
 *            memory); cmdline bytes. (v1: no ring_bytes, the snapshot word 0.)
 *   RUN! v1  u8 profiler_id[16] (random, one per process: a forked child
 *            gets its own); u32 chunk, u32 flags (WP_RUN_*); u64 chunk_from_ns,
 *            chunk_to_ns (CLOCK_MONOTONIC). A periodic chunk (flags without
 *            WP_RUN_TAIL, chunk its number >= 1) holds the samples of
 *            [from, to) only. With WP_RUN_TAIL the dump is a whole window
 *            (an exit, a fatal signal) whose samples of [from, to) no chunk
 *            holds: they make chunk number `chunk`. Optional: a dump
 *            without it has no profiler id and is no chunk.
 *   CTRS v1  u32 n, u32 0; n x u64 in struct wp_counters order (readers take
 *            what they know; nr_overwritten/nr_dropped_full come from RING)
 *   MODL v1  u64 bias, start, end; u32 flags, build_id_len (<= 64), path_len
 *            (< WP_RAW_PATH_MAX), 0; u8 build_id[64]; path bytes (no NUL)
 *   THRD v1  u32 n, u32 0; n x { u32 tid; char name[16]; u32 flags (WP_THREAD_*);
 *            u64 nr_signals, nr_samples } (40 bytes; in the caller's order, newest
 *            entry last; a tid reused by a later thread has several entries)
 *   RING v2  u64 cap_samples, cap_pcs, cap_stacks, cap_words, window_ns (config);
 *            u64 nr_added, nr_overwritten, nr_dropped_full, nr_compactions (stats);
 *            u64 head, nr_samples, nr_pcs, nr_stacks, nr_words (as read, capped);
 *            u64 nr_ticks (tick times written), tick_newest (the newest
 *            tick's number, u32 arithmetic), 0;
 *            nr_samples x { u64 t_ns; u32 tid, stack, flags, syscall, count,
 *            tick } (32 bytes, ring order, oldest first: a run-length record
 *            of count & 0x3fffffff samples of one thread with one stack at
 *            consecutive ticks of the sampler, the first at t_ns; when count
 *            has bit 31, `tick` is the first tick's number, and with bit 30
 *            as well the record is open: its samples are those of every
 *            tick from that one to tick_newest, whatever count says; tick number
 *            x's time is the (nr_ticks - 1 - (tick_newest - x))-th of the
 *            tick times, for the ticks written); nr_ticks x u64 (the tick
 *            times, CLOCK_MONOTONIC, oldest first: every tick from the first
 *            tick of the oldest record written, as far as the ring still
 *            knows, to the newest); nr_pcs x { u64 addr; u32 flags, 0 } (16
 *            bytes: the frame table); nr_stacks x { u32 off, len } (8 bytes:
 *            the stack's frames are words[off, off+len)); nr_words x u32
 *            (frame indices, leaf first). Every live record is written (the
 *            reader applies the window), but a chunk's dump leaves out those
 *            that ended before its range; a ring caught mid-update may hold
 *            ids that do not hold together, which the reader drops
 *            (preload/ring.h says what its writer guarantees). RING v1 (read
 *            too): 14 head words, 24-byte records { u64 t_ns; u32 tid, stack,
 *            flags, syscall } of one sample each, no tick table
 *   END! v1  u64 offset of this section, u32 sections before it, u32 0
 *
 * Nothing follows END!. A dump cut short (the process was killed while
 * writing, the disk filled) has no END! and is rejected as truncated.
 */
/* A RING v2 record's count word: the ticks (WP_RAW_COUNT_MASK); bit 31,
 * its `tick` field is the first tick's number; bit 30, the record is open
 * (it stands for every tick from its first to the newest). */
#define WP_RAW_COUNT_TICKED 0x80000000u
#define WP_RAW_COUNT_OPEN 0x40000000u
#define WP_RAW_COUNT_MASK 0x3fffffffu
/* Tick times a RING v2 section may carry (a reader's limit; the library
 * writes at most WP_RING_MAX_TICKS, preload/ring.h). */
#define WP_RAW_MAX_TICKS (1u << 24)

#define WP_RAW_MAGIC "WPRAWDMP"
#define WP_RAW_VERSION 1u
#define WP_RAW_BYTE_ORDER 0x0a0b0c0du
#define WP_RAW_TAG(a, b, c, d) \
	((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define WP_RAW_TAG_META WP_RAW_TAG('M', 'E', 'T', 'A')
#define WP_RAW_TAG_CTRS WP_RAW_TAG('C', 'T', 'R', 'S')
#define WP_RAW_TAG_MODL WP_RAW_TAG('M', 'O', 'D', 'L')
#define WP_RAW_TAG_THRD WP_RAW_TAG('T', 'H', 'R', 'D')
#define WP_RAW_TAG_RING WP_RAW_TAG('R', 'I', 'N', 'G')
#define WP_RAW_TAG_END WP_RAW_TAG('E', 'N', 'D', '!')
#define WP_RAW_TAG_RUN WP_RAW_TAG('R', 'U', 'N', '!')

/* RUN!'s flags. */
#define WP_RUN_CHUNKS_ON 0x1 /* the process writes periodic chunks */
#define WP_RUN_TAIL 0x2      /* the window's [from, to) is the next chunk's */
#define WP_RAW_SECTION_OVERHEAD 24 /* 16-byte section header + 8-byte checksum */

#define WP_RAW_PATH_MAX 4096       /* module paths longer than this are cut */
#define WP_RAW_MAX_MODULES (1u << 20)
#define WP_RAW_MAX_THREADS (1u << 24)

/* What the dying process knows besides the ring. */
struct wp_raw_meta {
	uint32_t pid, main_tid, hz, ring_seconds, max_depth;
	int64_t realtime_offset_ns; /* CLOCK_REALTIME = CLOCK_MONOTONIC + this */
	uint64_t start_ns;          /* CLOCK_MONOTONIC when profiling started */
	char cmdline[1024];         /* NUL-terminated (read up to 1023 bytes) */
	int signal;                 /* the fatal signal, 0 if none */
	uint32_t snapshot;          /* snapshot number, 0 for the exit profile */
	uint64_t ring_bytes;        /* memory the ring was given */
	uint8_t profiler_id[16];    /* RUN!: the process's profiler id */
	uint32_t chunk;             /* RUN!: the chunk's number, 0 when not a chunk */
	uint32_t run_flags;         /* RUN!: WP_RUN_* */
	uint64_t chunk_from_ns, chunk_to_ns; /* RUN!: a chunk's samples: [from, to) */
};

/* What the reader saw besides the profile (for the converter's messages). */
struct wp_raw_info {
	int signal;              /* the fatal signal recorded, 0 if none */
	uint64_t dump_ns;        /* CLOCK_MONOTONIC when the dump began */
	uint64_t start_ns;       /* CLOCK_MONOTONIC when profiling started */
	size_t nr_ring_samples;  /* samples in the dump, before the window */
	size_t nr_bad_samples;   /* dropped: stack id out of range or its stack invalid */
	size_t nr_bad_stacks;    /* stacks in the table with a frame id or extent out of range,
				  * or an extent overlapping another stack's */
	size_t bytes;            /* size of the dump */
};

/* Reads the raw dump at `path` into `out`: samples of the window (the
 * ring's window_ns, ring_seconds) ending at the newest sample in ring order
 * (of a chunk's, those of its [from, to) only; RUN! above),
 * sorted by time (then tid); only the stacks and frames they use, stacks
 * numbered in the order those samples (in ring order) first use them,
 * frames in the order those stacks first use them; the module map (minus
 * unloaded objects whose range a live one reuses); one thread entry per tid
 * that has samples in the window or was alive at the dump (the newest
 * entry's name; signal and sample counts summed over the tid's entries,
 * flags or'ed; newest first); counters (overwritten and dropped_full from
 * the ring); settings; the snapshot number. Samples whose stack id is out of range,
 * and stacks with an out-of-range frame id or extent, or an extent that
 * overlaps another stack's (a ring caught mid-update), are dropped and
 * counted in `info`. The file is untrusted: only a regular file is read (a
 * FIFO, a device, a directory are refused unread), and work, memory and the
 * JSON the profile makes are bounded by its size (raw_read.c states the
 * bound; a dump whose frames would repeat more module path bytes than that
 * allows is refused). `fatal_signal` (may be NULL) gets the recorded signal.
 * On failure `out` is left empty and `err` holds a one-line reason (not a
 * regular file, truncated, corrupt, foreign, I/O, memory).
 * Returns 0 or -1. Not async-signal-safe. */
int wp_raw_read(const char *path, struct wp_profile *out, int *fatal_signal, char *err,
		size_t errlen);

/* wp_raw_read() with the extra information (`info` may be NULL). */
int wp_raw_read_ex(const char *path, struct wp_profile *out, struct wp_raw_info *info, char *err,
		   size_t errlen);

/* The same from a dump already in memory (`data` is not modified or kept). */
int wp_raw_read_mem(const void *data, size_t len, struct wp_profile *out, struct wp_raw_info *info,
		    char *err, size_t errlen);

/* ---- the writer's building blocks (preload/raw_dump.c, ring.c) ------- */

/* The section checksum: 64-bit, over 8-byte little-endian words (the last
 * one zero-padded), the length mixed in at the end. Detects any change
 * confined to one word; not cryptographic. */
struct wp_raw_sum {
	uint64_t h, acc, total;
	unsigned nacc; /* bytes in acc */
};
void wp_raw_sum_init(struct wp_raw_sum *s);                           /* async-signal-safe */
void wp_raw_sum_update(struct wp_raw_sum *s, const void *p, size_t n); /* async-signal-safe */
uint64_t wp_raw_sum_final(const struct wp_raw_sum *s);                /* async-signal-safe */
uint64_t wp_raw_checksum(const void *p, size_t n);                   /* async-signal-safe */

#define WP_RAW_BUF_SIZE 2048

/* A buffered writer over a file descriptor that frames sections: bytes are
 * copied into `buf` before they are checksummed and written, so what is
 * written always matches its checksum, even if the source changes meanwhile.
 * A section declares its payload length up front; putting more is refused,
 * putting less is padded with zeros at wp_raw_sec_end(). After any failure
 * every call is a no-op and wp_raw_out_flush() returns -1. */
struct wp_raw_out {
	int fd;
	int failed;
	uint64_t off;         /* bytes of the file so far (written + buffered) */
	uint32_t nr_sections; /* sections ended so far */
	int in_section;
	uint64_t sec_left;    /* payload bytes the open section still expects */
	struct wp_raw_sum sum;
	size_t len;           /* bytes in buf */
	size_t sum_from;      /* buf[sum_from .. len) not yet added to sum */
	unsigned char buf[WP_RAW_BUF_SIZE];
};

void wp_raw_out_init(struct wp_raw_out *o, int fd);                      /* async-signal-safe */
void wp_raw_out_bytes(struct wp_raw_out *o, const void *p, size_t n);    /* async-signal-safe */
void wp_raw_out_zeros(struct wp_raw_out *o, size_t n);                   /* async-signal-safe */
void wp_raw_out_u32(struct wp_raw_out *o, uint32_t v);                   /* async-signal-safe */
void wp_raw_out_u64(struct wp_raw_out *o, uint64_t v);                   /* async-signal-safe */
void wp_raw_sec_begin(struct wp_raw_out *o, uint32_t tag, uint32_t version,
		      uint64_t payload_len);                             /* async-signal-safe */
void wp_raw_sec_end(struct wp_raw_out *o);                               /* async-signal-safe */
/* Writes out what is buffered. Returns 0, or -1 if anything failed so far. */
int wp_raw_out_flush(struct wp_raw_out *o);                              /* async-signal-safe */

/* Fault injection for tests: when > 0, the n-th write(2) issued by the raw
 * writer from now on fails with ENOSPC. 0 disables. */
#ifdef WP_TEST_HOOKS
extern int wp_raw_fail_write_at;
#endif

#endif
