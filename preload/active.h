/* active: which slots the sampler looks at each tick.
 *
 * A tick must cost what the running threads cost, not what every thread
 * costs: a thread parked in a wrapped blocking call (sample.c parks it once
 * its stack is known) is not visited tick after tick. The sampler keeps the
 * slots it visits in a list (the active list); a slot enters it when it is
 * claimed (the claimer pushes it on a lock-free stack the sampler drains at
 * its next tick) or when its parked thread moves (the thread sets the
 * slot's bit in the wake map, which the sampler drains), and leaves it when
 * it is parked or released.
 *
 * Parking is a bit of the slot's blk_pin word (WP_PIN_PARKED), which the
 * thread already reads on every way out of a wrapped call: set by the
 * sampler, cleared by whoever wakes the slot. The thread's side
 * (wp_active_wake) is async-signal-safe; the rest is the sampler's (and,
 * once the sampler has stopped and been joined, the exiting thread's). */
#ifndef WP_ACTIVE_H
#define WP_ACTIVE_H

#include <stdint.h>

#include "as_safe.h"

struct wp_slot;

/* blk_pin's bits (slots.h): the sampler pins the slot while it reads the
 * thread's stack; the thread waits on the futex; the sampler parked the
 * slot. */
#define WP_PIN_HELD 0x1u
#define WP_PIN_WAITING 0x2u
#define WP_PIN_PARKED 0x4u

/* Maps the list, the wake map and the claim stack for `nr_slots` slots.
 * Returns 0 or -1 (errno). At start. */
int wp_active_alloc(uint32_t nr_slots);

/* A claimer made `s` S_IDLE: the sampler adds it to its list at its next
 * gather. async-signal-safe */
WP_AS_SAFE void wp_active_claimed(struct wp_slot *s);

/* The thread of parked slot `s` moved (left its call, or a handler of the
 * program runs over it): clears WP_PIN_PARKED and tells the sampler, once
 * whoever of several calls it. Returns the blk_pin value left (without the
 * parked bit). async-signal-safe */
WP_AS_SAFE uint32_t wp_active_wake(struct wp_slot *s);

/* Sampler: takes in the slots claimed since it last looked (added to the
 * list). Before it releases slots: one still on the claim stack must not be
 * released (it could be claimed and pushed again while on the stack). */
void wp_active_gather_claims(void);

/* Sampler: the parked slots whose threads moved since it last looked:
 * `unpark` is called for each (which puts it back on the list). */
void wp_active_gather_wakes(void (*unpark)(struct wp_slot *s));

/* Sampler, with its list empty after a tick: whether it may rest, that is
 * sleep through the ticks that would only number themselves and roll
 * parked slots over (tick.c), until a claim or a wake. Sets `resting`,
 * then looks at the claim stack and the wake map: with anything there, it
 * does not rest. Any claimer or waker that comes later sees `resting`,
 * clears it, notes the time and sets EV_WAKE (a Dekker pair: one of the
 * two sees the other). Each rest has a number, in `resting` and in the
 * mark the time replaces: a claimer or waker held up past the end of its
 * rest notes nothing in the next one's. */
int wp_active_rest_begin(void);

/* Sampler: the rest is over (its end, an event, EV_WAKE): `resting` and
 * EV_WAKE cleared. Returns the time the claimer or waker that ended it
 * took (CLOCK_MONOTONIC ns), or 0 (none did, or it has not noted its time
 * yet). A waker that took `resting` just before may still set EV_WAKE
 * after this: the sampler clears EV_WAKE wherever it waits for its ticks. */
uint64_t wp_active_rest_end(void);

/* Sampler: the list, to iterate with an index (removal moves the last slot
 * into the place of the one removed: re-read the place after a call that
 * may remove). */
uint32_t wp_active_count(void);
struct wp_slot *wp_active_at(uint32_t i);

/* Sampler: `s` off the list (parked, or released), back on it (unparked).
 * Both do nothing when it is already so. */
void wp_active_remove(struct wp_slot *s);
void wp_active_add(struct wp_slot *s);

/* The list as it would be at a start: every slot in use on it, nothing
 * pending. A forked child (its only thread) and a restarted sampler. */
void wp_active_reset(void);

#endif
