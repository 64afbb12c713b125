/* ring_int: the ring's layout, shared by its store (ring.c) and its raw
 * dump's writer (ring_raw.c) and by nothing else: a record, the ring's
 * tables, and the two reads of a record both need. Callers use ring.h. */
#ifndef WP_RING_INT_H
#define WP_RING_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "../output/raw.h"

#define RING_MAX_FRAMES 4096 /* longest stack accepted; longer ones are cut */

/* rsample.count: the raw dump's count word (output/raw.h) */
#define COUNT_TICKED WP_RAW_COUNT_TICKED
#define COUNT_OPEN WP_RAW_COUNT_OPEN
#define COUNT_MASK WP_RAW_COUNT_MASK

/* One run-length record: `count` samples of one thread with one stack,
 * flags and syscall at consecutive ticks, the first at t_ns. */
struct rsample {
	uint64_t t_ns;
	uint32_t tid;
	uint32_t stack;
	uint32_t flags;
	uint32_t syscall;
	uint32_t count; /* ticks (COUNT_MASK), | COUNT_TICKED, | COUNT_OPEN */
	uint32_t tick;  /* the first tick's number, when COUNT_TICKED */
};

_Static_assert(sizeof(struct rsample) == WP_RING_RECORD_BYTES, "record size");

struct wp_ring {
	struct wp_ring_config cfg;
	uint64_t serial;         /* which ring this is: refs from another never match */
	struct wp_ring_stats stats;

	struct rsample *samples; /* circular: [head, head + count) mod cap */
	size_t head, count;
	uint64_t base;           /* absolute number of the record at head */

	uint64_t *ticks;         /* tick number n's time at ticks[n & tick_mask] */
	uint32_t tick_mask;
	uint32_t tick_newest;    /* the newest tick's number (wraps) */
	uint64_t tick_nr;        /* ticks remembered: at most tick_mask + 1 */

	struct wp_pc *pcs;       /* frame table */
	size_t nr_pcs;
	uint32_t *pc_hash;       /* pc_hash_size slots */
	size_t pc_hash_size;

	uint32_t *words;         /* stack arena */
	size_t nr_words;
	uint32_t *stack_off;     /* stack i: words[stack_off[i] .. + stack_len[i]) */
	uint32_t *stack_len;
	uint32_t *stack_hashv;   /* full hash of stack i */
	size_t nr_stacks;
	uint32_t *stack_hash;    /* stack_hash_size slots */
	size_t stack_hash_size;

	uint32_t scratch[RING_MAX_FRAMES];
	void *map;
	size_t map_len;
};

static inline struct rsample *sample_at(const struct wp_ring *r, size_t k)
{
	return &r->samples[(r->head + k) % r->cfg.nr_samples];
}

/* Time of a record's last tick; 0 when that tick is forgotten (older than
 * every tick remembered, so long out of the window). Reads only inside the
 * ring's memory whatever the record holds. async-signal-safe */
WP_AS_SAFE static inline uint64_t rec_end(const struct wp_ring *r, const struct rsample *x)
{
	uint32_t count = *(const volatile uint32_t *)&x->count, n = count & COUNT_MASK, last;

	if ((count & (COUNT_TICKED | COUNT_OPEN)) == (COUNT_TICKED | COUNT_OPEN))
		return r->ticks[r->tick_newest & r->tick_mask];
	if (n <= 1 || !(count & COUNT_TICKED))
		return x->t_ns;
	last = x->tick + n - 1;
	if ((uint32_t)(r->tick_newest - last) >= r->tick_nr)
		return 0;
	return r->ticks[last & r->tick_mask];
}

#endif
