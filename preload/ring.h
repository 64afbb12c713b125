/* ring: the bounded per-process store of recent samples. A circular array
 * of timed samples plus deduplicated frame (unique address) and stack tables,
 * all preallocated. Owned by ONE thread at a time (the sampler thread, or the
 * exiting thread after the sampler has stopped): none locks, and none is
 * async-signal-safe except the raw dump writers marked so. What it holds
 * leaves it only as its raw dump (wp_ring_raw_emit); the raw reader
 * (output/raw_read.c) makes the profile's window of it. */
#ifndef WP_RING_H
#define WP_RING_H

#include <stddef.h>
#include <stdint.h>

#include "../output/profile.h"
#include "as_safe.h"

/* Bytes of one record of the ring (its sample array's element). */
#define WP_RING_RECORD_BYTES 32
/* Tick times a ring remembers at most. */
#define WP_RING_MAX_TICKS (1u << 22)
/* Threads whose stack changes at every tick that the library's sizing
 * keeps the whole window of (tick.c). */
#define WP_RING_BUSY_THREADS 64

struct wp_ring_config {
	size_t nr_samples; /* samples kept at most */
	size_t nr_pcs;     /* unique addresses kept at most */
	size_t nr_stacks;  /* unique stacks kept at most */
	size_t nr_words;   /* total frames of all unique stacks at most */
	uint64_t window_ns;/* samples older than the newest minus this expire */
	size_t nr_ticks;   /* tick times remembered (rounded up to a power of two;
			    * 0: 4096): must cover the window plus max_run */
	uint32_t max_run;  /* ticks one record holds at most (0: 128) */
};

struct wp_ring_stats {
	uint64_t nr_added;       /* samples stored (a record's every tick counts) */
	uint64_t nr_overwritten; /* samples lost to capacity while inside the window */
	uint64_t nr_dropped_full;/* samples refused: frame/stack tables full after compaction */
	uint64_t nr_compactions; /* garbage collections of the frame/stack tables */
};

struct wp_ring;

/* Bytes the ring needs for `cfg` (for logging and caps). */
WP_AS_SAFE size_t wp_ring_bytes(const struct wp_ring_config *cfg);

/* The library's sizing before WALLPROF_RING_MB: `samples` records (capped
 * at 4 Mi) over `window_ns`, 64 Ki addresses, 64 Ki stacks, 2 Mi frame
 * words. */
void wp_ring_default_config(struct wp_ring_config *cfg, uint64_t samples, uint64_t window_ns);

/* Maps and zero-fills all memory up front. Returns NULL on failure (errno).
 * The mapping is not inherited by a forked child (MADV_DONTFORK). */
struct wp_ring *wp_ring_create(const struct wp_ring_config *cfg);

void wp_ring_destroy(struct wp_ring *r);

/* Samples are run-length records: { time of the first tick, thread, stack,
 * flags, syscall, first tick's number, count }. The ring numbers the ticks
 * itself: a sample whose time is newer than every tick it knows is a new
 * tick; one whose time is a tick it remembers has that tick's number;
 * any other (a test's arbitrary time) has none and never extends a record.
 * A sample extends the thread's newest record instead of adding one when
 * the caller passes that record (`run`), the thread, stack, flags and
 * syscall are the same, the sample's tick is the one right after the
 * record's last, and the record holds fewer than max_run ticks. Records
 * expire when their last tick leaves the window. */

/* The thread's newest record, kept by the caller between samples (a zeroed
 * one is none). */
struct wp_ring_run {
	uint64_t rec;    /* absolute record number + 1 */
	uint64_t serial; /* the ring it belongs to */
};

/* Stores one sample. pcs[0] is the interrupted PC when `exact_leaf` is set,
 * the rest are return addresses; n >= 1. Samples must come in time order.
 * When the tables are full, unreferenced frames and stacks are collected; if
 * that is not enough the sample is dropped and counted. Returns 0 or -1. */
int wp_ring_add(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t flags, uint32_t syscall,
		const uint64_t *pcs, unsigned n, int exact_leaf);

/* The sampler's tick at `t_ns` (newer than every tick before): numbered
 * even when no sample is stored at it, so that open records (below) grow
 * by one; what left the window expires. */
void wp_ring_tick(struct wp_ring *r, uint64_t t_ns);

/* Open records: a thread that stays where it is (blocked in one call) is
 * not sampled again tick after tick. Its newest record, stored at the
 * newest tick, is opened: it stands for every tick from its first to the
 * ring's newest, without a store per tick, until closed. It never expires
 * nor is extended while open; the raw dump writes it with its flag and the
 * reader counts its ticks to the newest. Returns 0, or -1 when `run` is not
 * a record of this ring that ends at the newest tick (nothing opened). */
int wp_ring_run_open(struct wp_ring *r, const struct wp_ring_run *run);

/* Closes `run` if it is open: it then ends at the tick before the newest
 * (the thread was seen to move at the newest). Returns the ticks it
 * stands for then (0 if it was not open, or is gone: overwritten). */
uint32_t wp_ring_run_close(struct wp_ring *r, const struct wp_ring_run *run);

/* Ticks of a parked thread lost with its open record (overwritten for room
 * before it was closed): counted as overwritten. */
void wp_ring_lost(struct wp_ring *r, uint64_t ticks);

/* The ticks `run` stands for now (an open one: to the newest tick), 0 if
 * it is gone. */
uint32_t wp_ring_run_ticks(const struct wp_ring *r, const struct wp_ring_run *run);

/* A stack already in the ring, valid until the next compaction: lets a
 * thread whose stack did not change add a sample without hashing it again.
 * A zeroed ref is invalid. */
struct wp_ring_ref {
	uint32_t stack;
	uint64_t gen;
};

/* wp_ring_add() that also fills `ref` (may be NULL) for wp_ring_add_ref(),
 * and extends or replaces the thread's record `run` (may be NULL). */
int wp_ring_add_get_ref(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t flags,
			uint32_t syscall, const uint64_t *pcs, unsigned n, int exact_leaf,
			struct wp_ring_ref *ref, struct wp_ring_run *run);

/* Stores one sample of a stack added before, extending `run` (may be NULL)
 * when it can. Returns -1 when `ref` is no longer valid (a compaction
 * renumbered the stacks): add it in full. */
int wp_ring_add_ref(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t flags,
		    uint32_t syscall, const struct wp_ring_ref *ref, struct wp_ring_run *run);

const struct wp_ring_stats *wp_ring_stats(const struct wp_ring *r);

/* Raw dump of the ring for a dying process: one section, tag "RING",
 * version 2, whose layout output/raw.h gives with the rest of the dump's.
 *
 * Every live sample is written (the reader applies the window). The ring
 * may be mid-update by another thread: every count is read once and capped
 * to the ring's capacity, the sample position is taken modulo it, and no
 * index stored in the tables is followed, so the writer never reads outside
 * the ring's memory; the reader validates stack and frame ids and drops
 * what does not hold together. */

/* Writes the RING section through `o` (no file header); with `from_ns`
 * not 0, without the samples older than it at the start of the ring (a
 * chunk's dump: the reader keeps its range anyway). async-signal-safe */
struct wp_raw_out;
WP_AS_SAFE void wp_ring_raw_emit(const struct wp_ring *r, struct wp_raw_out *o, uint64_t from_ns);

/* Writes the RING section alone to `fd`. Returns 0, or -1 when a write
 * failed. May change errno. async-signal-safe */
WP_AS_SAFE int wp_ring_raw_write(const struct wp_ring *r, int fd);

/* Tests only (the WP_TEST_HOOKS build): makes the ring's internals
 * inconsistent the way a torn update could (WP_RING_SCRAMBLE_*), or worse.
 * The ring is then only fit for wp_ring_raw_write() and wp_ring_destroy(). */
#define WP_RING_SCRAMBLE_SAMPLE_STACK 0x1 /* a live sample's stack id out of range */
#define WP_RING_SCRAMBLE_STACK_FRAME 0x2  /* a stack's frame id out of range */
#define WP_RING_SCRAMBLE_STACK_EXTENT 0x4 /* a stack's extent past the arena */
#define WP_RING_SCRAMBLE_COUNTS 0x8       /* head and every count past capacity */
#ifdef WP_TEST_HOOKS
void wp_ring_test_scramble(struct wp_ring *r, unsigned what);
#endif

/* Live counts, for tests (records: a run counts once). */
size_t wp_ring_nr_samples(const struct wp_ring *r);
size_t wp_ring_nr_stacks(const struct wp_ring *r);
size_t wp_ring_nr_pcs(const struct wp_ring *r);

#endif
