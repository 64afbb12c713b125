/* park: threads parked in their wrapped calls (park.h). Sampler thread
 * only (and the exiting thread once the sampler is joined). */
#include <stdatomic.h>
#include <stdint.h>

#include "test_hooks.h"
#include "active.h"
#include "park.h"
#include "runtime.h"
#include "sample.h"
#include "slots.h"
#include "threads.h"

/* Parks a thread whose sample at this tick came from the wrapped call
 * with sequence `seq` it is in: its record is opened in the ring (it
 * stands for every tick to come, without a visit per tick) and the slot
 * leaves the active list, until the thread moves (it leaves the call, or a
 * handler of the program's runs over it: both clear WP_PIN_PARKED and set
 * its wake bit, which the next tick reads) or its record is rolled over
 * (wp_park_roll). A Dekker pair with the thread: the sampler sets the
 * bit then looks at the call, the thread moves then looks at the bit. */
void wp_park(struct wp_slot *s, uint32_t seq)
{
	if (s->smp.sampled_seq != seq || !s->smp.nr_cached_ok ||
	    atomic_load_explicit(&s->state, memory_order_acquire) != S_IDLE ||
	    (WP_TESTING && g->fix.cfg.test_signal_blocked))
		return;
	atomic_fetch_or_explicit(&s->blk_pin, WP_PIN_PARKED, memory_order_seq_cst);
	/* hdl_depth before hdl_seq: the thread's read-modify-write of
	 * hdl_depth publishes the hdl_seq it stored before it. */
	if (atomic_load_explicit(&s->thr.blk_seq, memory_order_seq_cst) != seq ||
	    (atomic_load_explicit(&s->thr.hdl_depth, memory_order_seq_cst) &&
	     atomic_load_explicit(&s->thr.hdl_seq, memory_order_seq_cst) == seq) ||
	    wp_ring_run_open(g->smp.ring, &s->smp.run) < 0) {
		/* It moved already (a wake bit it may have set is ignored: the
		 * slot is not parked), or its record is not the newest. */
		atomic_fetch_and(&s->blk_pin, ~WP_PIN_PARKED);
		return;
	}
	s->smp.parked = 1;
	s->smp.park_tick = g->smp.ctr.nr_ticks;
	s->smp.park_counted = wp_ring_run_ticks(g->smp.ring, &s->smp.run);
	wp_active_remove(s);
}

/* The ticks a parked thread's open record stands for, `ticks`, of which
 * park_counted are in the counters already: the others are counted as
 * samples now (reused: the same stack, tick after tick). */
static void count_parked(struct wp_slot *s, uint32_t ticks, uint64_t now)
{
	struct wp_thread *t;
	uint32_t gained = ticks > s->smp.park_counted ? ticks - s->smp.park_counted : 0;

	s->smp.park_counted = ticks;
	if (!gained)
		return;
	g->smp.ctr.nr_samples += gained;
	g->smp.ctr.nr_reused += gained;
	t = wp_threads_of(s);
	if (t) {
		t->nr_samples += gained;
		t->last_ns = now;
	}
}

/* Ends the open record of parked `s` at the tick before this one and
 * counts its ticks. A record overwritten for room meanwhile counted the
 * ticks it was stored with as overwritten; the ticks it stood for since,
 * those between the one it was opened at and this one, are lost too. */
static void close_parked(struct wp_slot *s)
{
	uint32_t ticks = wp_ring_run_close(g->smp.ring, &s->smp.run);

	if (ticks)
		count_parked(s, ticks, g->smp.prev_tick_ns);
	else if (g->smp.ctr.nr_ticks > s->smp.park_tick + 1)
		wp_ring_lost(g->smp.ring, g->smp.ctr.nr_ticks - s->smp.park_tick - 1);
	s->smp.park_counted = 0;
}

/* `s` is watched tick by tick again. */
static void unpark(struct wp_slot *s)
{
	s->smp.parked = 0;
	atomic_fetch_and(&s->blk_pin, ~WP_PIN_PARKED);
	wp_active_add(s);
}

void wp_park_wake(struct wp_slot *s)
{
	close_parked(s);
	unpark(s);
}

void wp_park_roll(uint64_t now)
{
	uint32_t every = g->fix.ring_cfg.max_run ? g->fix.ring_cfg.max_run : 1,
		 hw = atomic_load(&g->tab.hiwater), i;

	for (i = (uint32_t)(g->smp.ctr.nr_ticks % every); i < hw; i += every) {
		struct wp_slot *s = &g->tab.slots[i];

		if (!s->smp.parked || s->smp.park_tick == g->smp.ctr.nr_ticks)
			continue;
		/* Its record ends at the last tick; this tick starts the next
		 * one (or extends it, if it is still short), opened again. */
		close_parked(s);
		g->smp.ctr.nr_reused++;
		wp_sample_cached(s, now);
		s->smp.park_tick = g->smp.ctr.nr_ticks;
		if (wp_ring_run_open(g->smp.ring, &s->smp.run) < 0)
			unpark(s); /* (not stored: the tables are full) */
		else
			s->smp.park_counted = wp_ring_run_ticks(g->smp.ring, &s->smp.run);
	}
}

void wp_park_release(struct wp_slot *s)
{
	if (!s->smp.parked)
		return;
	if (g->smp.ring)
		close_parked(s);
	s->smp.parked = 0;
	atomic_fetch_and(&s->blk_pin, ~WP_PIN_PARKED);
}

void wp_park_count(void)
{
	uint32_t hw = atomic_load(&g->tab.hiwater), i;

	if (!g->smp.ring)
		return;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];
		uint32_t ticks;

		/* (a record overwritten meanwhile is counted when it is closed) */
		if (s->smp.parked && (ticks = wp_ring_run_ticks(g->smp.ring, &s->smp.run)) != 0)
			count_parked(s, ticks, g->smp.prev_tick_ns);
	}
}
