/* stack_bounds: where the stacks of threads seen blocked in wrapped calls
 * lie, so that the words a replayed walk depends on are read with plain
 * loads, and the main thread's [stack] (see stack_bounds.h). Sampler thread
 * only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "slots.h"
#include "stack_bounds.h"

static int cmp_slot_tp(const void *a, const void *b)
{
	uint64_t x = (*(struct wp_slot *const *)a)->smp.stk_tp,
		 y = (*(struct wp_slot *const *)b)->smp.stk_tp;

	return x < y ? -1 : x > y;
}

/* For threads seen blocked in wrapped calls, the memory their stack words
 * can be read from with plain loads: the mapping that holds the thread's
 * control block (pthread_self()), from its start up to the control block.
 * glibc puts the control block at the top of the thread's stack mapping (the
 * guard page below it is a mapping of its own), so this is the thread's
 * stack, and it stays mapped while the thread lives. Whatever else it may be
 * (a program-provided stack, a heap), the stack pointer must lie in it for
 * the bounds to be used, and the thread, pinned, is running on it. One read
 * of /proc/thread-self/maps for all of them, at most every ticks_per_scan ticks;
 * until then their words are read through the kernel. The same read finds
 * the main thread's [stack] mapping, which only ever grows downwards. */
void wp_stack_bounds_find(void)
{
	uint32_t i, k = 0, hw = atomic_load(&g->tab.hiwater);
	struct wp_slot **want;
	unsigned long lo, hi;
	char line[512];
	FILE *f;

	g->smp.want_stacks = 0;
	g->smp.stacks_tick = g->smp.ctr.nr_ticks;
	want = malloc(hw * sizeof(*want) + 1);
	if (!want)
		return;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];
		uint32_t gen = atomic_load(&s->gen);

		if (atomic_load(&s->state) < S_IDLE || !s->thr.tp ||
		    atomic_load(&s->tid) == (uint32_t)g->fix.pid ||
		    (s->smp.stk_gen == gen + 1 && s->smp.stk_tp == s->thr.tp))
			continue;
		s->smp.stk_gen = gen + 1; /* not found unless a mapping holds it */
		s->smp.stk_tp = s->thr.tp;
		s->smp.stk_lo = s->smp.stk_hi = 0;
		want[k++] = s;
	}
	qsort(want, k, sizeof(*want), cmp_slot_tp);
	/* thread-self: once the leader has exited, /proc/self/maps is empty. */
	f = k || !g->smp.main_stk_hi ? fopen("/proc/thread-self/maps", "re") : NULL;
	i = 0;
	while (f && (i < k || !g->smp.main_stk_hi) && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);

		if (n && line[n - 1] != '\n') { /* a long path: skip the rest of the line */
			int c;

			while ((c = fgetc(f)) != EOF && c != '\n')
				;
		}
		if (sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		if (n > 8 && !strcmp(line + n - 8, "[stack]\n")) {
			g->smp.main_stk_lo = lo;
			g->smp.main_stk_hi = hi;
		}
		while (i < k && want[i]->smp.stk_tp < lo)
			i++;
		for (; i < k && want[i]->smp.stk_tp < hi; i++) {
			want[i]->smp.stk_lo = lo;
			want[i]->smp.stk_hi = want[i]->smp.stk_tp;
		}
	}
	if (f) {
		/* The loop read to the end if it did not find [stack]: none.
		 * [0, 1) holds no stack word and is never looked up again. */
		if (!g->smp.main_stk_hi)
			g->smp.main_stk_hi = 1;
		fclose(f);
	}
	free(want);
}
