/* stack_bounds: the stack bounds of threads seen blocked in wrapped calls
 * (see stack_bounds.c). Sampler thread only; not async-signal-safe. */
#ifndef WP_STACK_BOUNDS_H
#define WP_STACK_BOUNDS_H

/* Looks up, in one read of /proc/thread-self/maps, the stack bounds of
 * the threads whose walks asked for them (g->smp.want_stacks): each
 * slot's smp.stk_lo/stk_hi; and the main thread's [stack]
 * (g->smp.main_stk_lo/hi). */
void wp_stack_bounds_find(void);

#endif
