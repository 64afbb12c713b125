/* ring: the bounded per-process store of recent samples. A circular array
 * of timed samples plus deduplicated frame (unique address) and stack tables,
 * all preallocated. Owned by ONE thread at a time (the sampler thread, or the
 * exiting thread after the sampler has stopped): no function here is
 * async-signal-safe and none locks. */
#ifndef WP_RING_H
#define WP_RING_H

#include <stddef.h>
#include <stdint.h>

#include "../output/profile.h"

struct wp_ring_config {
	size_t nr_samples; /* samples kept at most */
	size_t nr_pcs;     /* unique addresses kept at most */
	size_t nr_stacks;  /* unique stacks kept at most */
	size_t nr_words;   /* total frames of all unique stacks at most */
	uint64_t window_ns;/* samples older than the newest minus this expire */
};

struct wp_ring_stats {
	uint64_t nr_added;       /* samples stored */
	uint64_t nr_overwritten; /* samples lost to capacity while inside the window */
	uint64_t nr_dropped_full;/* samples refused: frame/stack tables full after compaction */
	uint64_t nr_compactions; /* garbage collections of the frame/stack tables */
};

struct wp_ring;

/* Bytes the ring needs for `cfg` (for logging and caps). */
size_t wp_ring_bytes(const struct wp_ring_config *cfg);

/* Maps and zero-fills all memory up front. Returns NULL on failure (errno). */
struct wp_ring *wp_ring_create(const struct wp_ring_config *cfg);

void wp_ring_destroy(struct wp_ring *r);

/* Stores one sample. pcs[0] is the interrupted PC when `exact_leaf` is set,
 * the rest are return addresses; n >= 1. Samples must come in time order.
 * When the tables are full, unreferenced frames and stacks are collected; if
 * that is not enough the sample is dropped and counted. Returns 0 or -1. */
int wp_ring_add(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t flags,
		uint32_t syscall, const uint64_t *pcs, unsigned n, int exact_leaf);

/* Copies the samples of the window ending at the newest sample, with only the
 * frames and stacks they use, into out->pcs, stack_frames, stack_off, samples (malloc'd; other
 * fields untouched), sorted by time. Returns 0, or -1 on out of memory. */
int wp_ring_snapshot(const struct wp_ring *r, struct wp_profile *out);

const struct wp_ring_stats *wp_ring_stats(const struct wp_ring *r);

/* Live counts, for tests. */
size_t wp_ring_nr_samples(const struct wp_ring *r);
size_t wp_ring_nr_stacks(const struct wp_ring *r);
size_t wp_ring_nr_pcs(const struct wp_ring *r);

#endif
