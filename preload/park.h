/* park: a thread blocked in a wrapped call whose stack the sampler knows
 * is parked: its newest record is opened in the ring (it stands for every
 * tick to come, without a visit per tick) and its slot leaves the active
 * list (active.h), until the thread moves: it leaves the call, or a
 * handler of the program's runs over it; both clear WP_PIN_PARKED and set
 * the slot's wake bit, which the next tick reads. A share of the parked
 * slots is rolled over every tick (a record ends and the next begins), so
 * that no record passes max_run ticks and the counts catch up.
 * Sampler thread only (and the exiting thread once the sampler is
 * joined). None of it is async-signal-safe. */
#ifndef WP_PARK_H
#define WP_PARK_H

#include <stdint.h>

struct wp_slot;

/* Parks `s`, whose sample at this tick came from the wrapped call with
 * sequence `seq` it is in; leaves it watched tick by tick when that cannot
 * be (a signal in flight, the thread moved already, its record is not the
 * newest). */
void wp_park(struct wp_slot *s, uint32_t seq);

/* The parked thread of `s` moved: its open record ends at the tick before
 * this one, and the slot is back on the active list. */
void wp_park_wake(struct wp_slot *s);

/* Every tick, a share of the parked slots (one slot in max_run) have their
 * open record ended and a new one begun at `now`. */
void wp_park_roll(uint64_t now);

/* The thread of `s` is gone (its slot is being released): if it was
 * parked, its open record ends and its ticks are counted. */
void wp_park_release(struct wp_slot *s);

/* Brings the counters of parked threads up to date (the ticks of their
 * open records): before a dump reads them (snapshot, chunk, exit). */
void wp_park_count(void);

#endif
