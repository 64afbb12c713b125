/* active: the sampler's list of the slots it visits each tick, and the two
 * ways other threads put slots on it: the claim stack and the wake map
 * (active.h). */
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>

#include "active.h"
#include "runtime.h"
#include "slots.h"

static struct {
	uint32_t *list; /* slot indices; the sampler's */
	uint32_t nr;
} act;

int wp_active_alloc(uint32_t nr_slots)
{
	size_t words = (nr_slots + 63) / 64;
	void *l = mmap(NULL, nr_slots * sizeof(uint32_t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *w = mmap(NULL, words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (l == MAP_FAILED || w == MAP_FAILED) {
		if (l != MAP_FAILED)
			munmap(l, nr_slots * sizeof(uint32_t));
		if (w != MAP_FAILED)
			munmap(w, words * sizeof(uint64_t));
		return -1;
	}
	act.list = l;
	act.nr = 0;
	/* Written now: the sampler reads the map at every tick, and a read of
	 * an untouched page maps the zero page, which a thread's first wake
	 * bit must then replace with a flush of every CPU's TLB (ring.c,
	 * slot_load). */
	for (size_t i = 0; i < words; i += 4096 / sizeof(uint64_t))
		((volatile uint64_t *)w)[i] = 0;
	g->tab.wake_map = w;
	atomic_store(&g->tab.claim_head, 0);
	return 0;
}

/* After a claim or a wake (seq_cst, before this load): a resting sampler
 * is told, by the first who sees it rest, with the time: the ticks from
 * then on are not the rest's to make (tick.c, rest_over).
 * async-signal-safe */
WP_AS_SAFE static void rouse(void)
{
	uint32_t rest = atomic_load(&g->sh.resting);

	if (rest && atomic_compare_exchange_strong(&g->sh.resting, &rest, 0)) {
		/* Only into this rest's mark: a rouser held up past the end of
		 * its rest finds the mark of the next one (or 0) and writes
		 * nothing. */
		uint64_t mark = WP_REST_MARK | rest;

		atomic_compare_exchange_strong(&g->sh.rest_moved_ns, &mark, wp_mono_ns());
		atomic_fetch_or(&g->sh.events, EV_WAKE);
		wp_futex_wake(&g->sh.events);
	}
}

/* Whether anything was claimed or woken since the sampler last gathered:
 * the claim stack and the wake map up to hiwater (a wake bit is only ever
 * set for a slot the sampler parked, below it). */
static int pending(void)
{
	uint32_t w, words = (atomic_load(&g->tab.hiwater) + 63) / 64;

	if (atomic_load(&g->tab.claim_head))
		return 1;
	for (w = 0; w < words; w++)
		if (atomic_load(&g->tab.wake_map[w]))
			return 1;
	return 0;
}

/* A Treiber stack without pops: the sampler takes the whole of it at once
 * (an exchange), so no slot is ever read from it after it was taken, and
 * a slot is pushed again only after the sampler took it and released it.
 * The push is seq_cst: rouse's load comes after it (wp_active_rest_begin).
 * async-signal-safe */
WP_AS_SAFE void wp_active_claimed(struct wp_slot *s)
{
	uint32_t idx = (uint32_t)(s - g->tab.slots) + 1,
		 h = atomic_load_explicit(&g->tab.claim_head, memory_order_relaxed);

	do
		atomic_store_explicit(&s->claim_next, h, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&g->tab.claim_head, &h, idx,
						      memory_order_seq_cst, memory_order_relaxed));
	rouse();
}

/* async-signal-safe */
WP_AS_SAFE uint32_t wp_active_wake(struct wp_slot *s)
{
	uint32_t idx = (uint32_t)(s - g->tab.slots);
	uint32_t was = atomic_fetch_and(&s->blk_pin, ~WP_PIN_PARKED);

	if (was & WP_PIN_PARKED) {
		atomic_fetch_or(&g->tab.wake_map[idx / 64], 1ull << (idx % 64));
		rouse();
	}
	return was & ~WP_PIN_PARKED;
}

int wp_active_rest_begin(void)
{
	static uint32_t rests; /* the sampler's */

	if (++rests == 0) /* 0 is "not resting" */
		rests = 1;
	atomic_store(&g->sh.rest_moved_ns, WP_REST_MARK | rests);
	atomic_store(&g->sh.resting, rests);
	if (pending()) {
		atomic_store(&g->sh.resting, 0);
		return 0;
	}
	return 1;
}

uint64_t wp_active_rest_end(void)
{
	uint64_t moved;

	atomic_store(&g->sh.resting, 0);
	if (atomic_load(&g->sh.events) & EV_WAKE)
		atomic_fetch_and(&g->sh.events, ~(uint32_t)EV_WAKE);
	moved = atomic_exchange(&g->sh.rest_moved_ns, 0);
	return moved & WP_REST_MARK ? 0 : moved;
}

void wp_active_add(struct wp_slot *s)
{
	if (s->smp.act_pos)
		return;
	act.list[act.nr++] = (uint32_t)(s - g->tab.slots);
	s->smp.act_pos = act.nr;
}

void wp_active_remove(struct wp_slot *s)
{
	uint32_t pos = s->smp.act_pos, last;

	if (!pos)
		return;
	last = act.list[--act.nr];
	act.list[pos - 1] = last;
	g->tab.slots[last].smp.act_pos = pos;
	s->smp.act_pos = 0;
}

void wp_active_gather_claims(void)
{
	uint32_t i = atomic_exchange_explicit(&g->tab.claim_head, 0, memory_order_acquire);

	while (i) {
		struct wp_slot *s = &g->tab.slots[i - 1];

		i = atomic_load_explicit(&s->claim_next, memory_order_relaxed);
		if (atomic_load_explicit(&s->state, memory_order_acquire) >= S_IDLE &&
		    !s->smp.parked)
			wp_active_add(s);
	}
}

void wp_active_gather_wakes(void (*unpark)(struct wp_slot *s))
{
	/* Only up to the highest slot ever claimed: the map's words above it
	 * are all zero. */
	uint32_t w, words = (atomic_load(&g->tab.hiwater) + 63) / 64;

	for (w = 0; w < words; w++) {
		uint64_t bits;

		if (!atomic_load_explicit(&g->tab.wake_map[w], memory_order_relaxed))
			continue;
		bits = atomic_exchange(&g->tab.wake_map[w], 0);
		while (bits) {
			struct wp_slot *s = &g->tab.slots[w * 64 + (uint32_t)__builtin_ctzll(bits)];

			bits &= bits - 1;
			if (s->smp.parked)
				unpark(s);
		}
	}
}

uint32_t wp_active_count(void)
{
	return act.nr;
}

struct wp_slot *wp_active_at(uint32_t i)
{
	return &g->tab.slots[act.list[i]];
}

void wp_active_reset(void)
{
	uint32_t i, hw, words = (g->tab.nr_slots + 63) / 64;

	/* The claim stack is taken before hiwater is read: a slot claimed
	 * since is above neither, and is pushed after the exchange, so it
	 * stays on the stack for the next gather. */
	act.nr = 0;
	atomic_exchange(&g->tab.claim_head, 0);
	hw = atomic_load(&g->tab.hiwater);
	for (i = 0; i < words; i++)
		atomic_store(&g->tab.wake_map[i], 0);
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];

		s->smp.act_pos = 0;
		s->smp.parked = 0;
		atomic_fetch_and(&s->blk_pin, ~WP_PIN_PARKED);
		if (atomic_load(&s->state) >= S_IDLE)
			wp_active_add(s);
	}
}
