/* sample: the sampler's per-thread policy (see sample.c). Sampler thread
 * only, except wp_sample_collect (also the exiting thread once the sampler
 * is joined, and a snapshot on the sampler). None of it is
 * async-signal-safe. */
#ifndef WP_SAMPLE_H
#define WP_SAMPLE_H

#include <stdint.h>

struct wp_slot;

/* Finds this library's executable segment, so that our wrappers' frames
 * can be left out of stacks. On the sampler thread, at its start. */
void wp_sample_find_own_code(void);

/* One thread, one tick at `now`: exactly one sample in the ring (or a
 * counted loss), with a signal only when the thread is running or its
 * blocking place is one the kernel restarts unseen. The look may come
 * later than `now` (a tick's later batch of signals, tick.c): the CPU time
 * the thread ran since the sampler's last look at it is measured against
 * the time between the two looks. Returns 1 when it sent a signal. The
 * slot is in S_IDLE or later; it may be released (the thread is gone). */
int wp_sample_thread(struct wp_slot *s, uint64_t now);

/* Moves every capture the handler finished (S_READY) into the ring, with
 * the ticks that waited for it, and into the slot's cache. */
void wp_sample_collect(void);

/* Records the slot's cached stack for this tick (by reference: no
 * hashing of its frames again). */
void wp_sample_cached(struct wp_slot *s, uint64_t now);

#endif
