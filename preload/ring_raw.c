/* ring_raw: the ring's section of a raw dump (layout in docs/FORMATS.md,
 * RING), written from any thread, a signal handler included, while the
 * sampler may be changing the ring: every count is read once and capped to
 * its capacity, and the reader checks the rest. */
#include <string.h>

#include "ring_int.h"
#include "test_hooks.h"

/* One read of a field another thread may be changing: the value is then
 * checked, and never read again behind the check's back. */
#define RAW_ONCE(x) (*(const volatile __typeof__(x) *)&(x))

#define RING_RAW_VERSION 2u
#define RING_RAW_HEAD_WORDS 17 /* u64 fields before the tables */
#define RING_RAW_REC 32        /* bytes of one record */

/* async-signal-safe */
WP_AS_SAFE void wp_ring_raw_emit(const struct wp_ring *r, struct wp_raw_out *o, uint64_t from_ns)
{
	uint64_t cap = 0, head = 0, ns = 0, np = 0, nst = 0, nw = 0, nt = 0, known = 0, k, i;
	uint32_t newest = 0;

	if (r) {
		cap = r->cfg.nr_samples;
		head = RAW_ONCE(r->head);
		ns = RAW_ONCE(r->count);
		np = RAW_ONCE(r->nr_pcs);
		nst = RAW_ONCE(r->nr_stacks);
		nw = RAW_ONCE(r->nr_words);
		newest = RAW_ONCE(r->tick_newest);
		known = RAW_ONCE(r->tick_nr);
		if (ns > cap)
			ns = cap;
		if (cap && head >= cap)
			head %= cap;
		if (np > r->cfg.nr_pcs)
			np = r->cfg.nr_pcs;
		if (nst > r->cfg.nr_stacks)
			nst = r->cfg.nr_stacks;
		if (nw > r->cfg.nr_words)
			nw = r->cfg.nr_words;
		if (known > (uint64_t)r->tick_mask + 1)
			known = (uint64_t)r->tick_mask + 1;
		/* Records that ended before from_ns left out: they come first
		 * in ring order (stored in time order, none longer than
		 * max_run ticks). */
		while (from_ns && ns > 0 && rec_end(r, &r->samples[head]) < from_ns) {
			ns--;
			if (++head == cap)
				head = 0;
		}
		/* The ticks the records written need: from the oldest first
		 * tick among them that the table still knows, to the newest. */
		for (k = 0, i = head; k < ns && nt < known; k++) {
			const struct rsample *x = &r->samples[i];
			uint32_t c = *(const volatile uint32_t *)&x->count;

			if ((c & COUNT_TICKED) && ((c & COUNT_MASK) > 1 || (c & COUNT_OPEN))) {
				uint64_t age = (uint32_t)(newest - x->tick);

				nt = age >= known ? known : age + 1 > nt ? age + 1 : nt;
			}
			if (++i == cap)
				i = 0;
		}
	}
	wp_raw_sec_begin(o, WP_RAW_TAG_RING, RING_RAW_VERSION,
			 RING_RAW_HEAD_WORDS * 8 + ns * RING_RAW_REC + nt * 8 + np * 16 + nst * 8 +
				 nw * 4);
	if (!r) {
		wp_raw_out_zeros(o, RING_RAW_HEAD_WORDS * 8);
		wp_raw_sec_end(o);
		return;
	}
	wp_raw_out_u64(o, cap);
	wp_raw_out_u64(o, r->cfg.nr_pcs);
	wp_raw_out_u64(o, r->cfg.nr_stacks);
	wp_raw_out_u64(o, r->cfg.nr_words);
	wp_raw_out_u64(o, r->cfg.window_ns);
	wp_raw_out_u64(o, RAW_ONCE(r->stats.nr_added));
	wp_raw_out_u64(o, RAW_ONCE(r->stats.nr_overwritten));
	wp_raw_out_u64(o, RAW_ONCE(r->stats.nr_dropped_full));
	wp_raw_out_u64(o, RAW_ONCE(r->stats.nr_compactions));
	wp_raw_out_u64(o, head);
	wp_raw_out_u64(o, ns);
	wp_raw_out_u64(o, np);
	wp_raw_out_u64(o, nst);
	wp_raw_out_u64(o, nw);
	wp_raw_out_u64(o, nt);
	wp_raw_out_u64(o, newest);
	wp_raw_out_u64(o, 0);
	/* Records in ring order: position head + k, wrapped (ns <= cap, so
	 * ns > 0 implies cap > 0). */
	for (k = 0, i = head; k < ns && !o->failed; k++) {
		const struct rsample *x = &r->samples[i];
		uint32_t rec[RING_RAW_REC / 4];
		uint64_t t = x->t_ns;

		memcpy(rec, &t, 8);
		rec[2] = x->tid;
		rec[3] = x->stack;
		rec[4] = x->flags;
		rec[5] = x->syscall;
		rec[6] = x->count;
		rec[7] = x->tick;
		wp_raw_out_bytes(o, rec, sizeof(rec));
		if (++i == cap)
			i = 0;
	}
	/* The nt newest ticks' times, oldest first. */
	for (k = 0; k < nt && !o->failed; k++) {
		uint32_t nr = newest - (uint32_t)(nt - 1 - k);

		wp_raw_out_u64(o, r->ticks[nr & r->tick_mask]);
	}
	for (k = 0; k < np && !o->failed; k++) {
		uint32_t rec[4] = { 0 };
		uint64_t a = r->pcs[k].addr;

		memcpy(rec, &a, 8);
		rec[2] = r->pcs[k].flags;
		wp_raw_out_bytes(o, rec, sizeof(rec));
	}
	for (k = 0; k < nst && !o->failed; k++) {
		uint32_t rec[2] = { r->stack_off[k], r->stack_len[k] };

		wp_raw_out_bytes(o, rec, sizeof(rec));
	}
	/* The arena as it is in memory: indices are checked by the reader. */
	for (k = 0; k < nw && !o->failed; k += 256) {
		uint64_t n = nw - k < 256 ? nw - k : 256;

		wp_raw_out_bytes(o, &r->words[k], n * sizeof(uint32_t));
	}
	wp_raw_sec_end(o);
}

#if WP_TESTING
/* async-signal-safe */
WP_AS_SAFE int wp_ring_raw_write(const struct wp_ring *r, int fd)
{
	struct wp_raw_out o;

	wp_raw_out_init(&o, fd);
	wp_ring_raw_emit(r, &o, 0);
	return wp_raw_out_flush(&o);
}

void wp_ring_test_scramble(struct wp_ring *r, unsigned what)
{
	if ((what & WP_RING_SCRAMBLE_SAMPLE_STACK) && r->count > 0)
		sample_at(r, r->count / 2)->stack = UINT32_MAX - 7;
	if ((what & WP_RING_SCRAMBLE_STACK_FRAME) && r->nr_stacks > 0 && r->stack_len[0] > 0)
		r->words[r->stack_off[0]] = (uint32_t)r->nr_pcs + 1000;
	if ((what & WP_RING_SCRAMBLE_STACK_EXTENT) && r->nr_stacks > 1)
		r->stack_off[1] = UINT32_MAX - 3;
	if (what & WP_RING_SCRAMBLE_COUNTS) {
		r->head = r->cfg.nr_samples * 3 + 1;
		r->count = r->cfg.nr_samples + 5;
		r->nr_pcs = (size_t)-1;
		r->nr_stacks = r->cfg.nr_stacks + 1;
		r->nr_words = r->cfg.nr_words * 2;
	}
}
#endif
