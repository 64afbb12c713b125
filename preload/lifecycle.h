/* lifecycle: the runtime's state from start to the end of the process (or
 * of the image, at an exec), as one atomic word (g->sh.life), moved only
 * by lifecycle.c:
 *
 *   OFF -> RUNNING            start
 *   RUNNING -> JOINED         the last program thread after main's
 *                             pthread_exit stopped and joined the sampler
 *   RUNNING, JOINED -> STOPPED
 *                             an exit or exec outside a program's handler
 *                             took over; or an exit from a program's
 *                             handler, after its raw dump
 *   RUNNING -> PARKED, JOINED -> PARKED_JOINED
 *                             an exec from a program's handler, after its
 *                             raw dump (the sampler stays parked)
 *   PARKED -> RUNNING, PARKED_JOINED -> JOINED
 *                             that exec failed: the parked sampler goes on
 *                             (the thaw)
 *   STOPPED -> RUNNING        an exec failed: a new sampler, a fresh window,
 *                             unless a raw dump holds the process (STOPPED
 *                             again if the sampler cannot start)
 *   RUNNING, JOINED -> RUNNING or OFF
 *                             fork, in the child: followed (OFF if its
 *                             sampler cannot start), or not followed
 *
 * A fatal signal moves nothing: its raw dump runs from RUNNING or JOINED,
 * guarded by the dump's own once-per-process word (dump.c), and the process
 * dies. Every move is a compare-and-swap from the state the mover saw, so
 * that two threads ending at once (an exit racing the last thread's stop,
 * two failed execs) agree on one winner.
 *
 * Beside it, and not folded into it: g->sh.sampling (the handlers' and
 * wrappers' gate, read on every signal: on with RUNNING, off once an exit
 * path has collected the last captures, in a child not followed, without a
 * ring), g->sh.frozen (the sampler's answer to EV_FREEZE, a futex word the
 * dumper waits on) and g->sh.main_exited (a fact about the program's main
 * thread, not about us). */
#ifndef WP_LIFECYCLE_H
#define WP_LIFECYCLE_H

#include <stdatomic.h>

#include "as_safe.h"
#include "runtime.h"

enum wp_life {
	WP_LIFE_OFF,           /* not profiling: before start, WALLPROF_ENABLE=0, a failed
				* start, a forked child not followed or whose sampler did not
				* start */
	WP_LIFE_RUNNING,       /* the sampler thread runs (parked while a handler dumps) */
	WP_LIFE_JOINED,        /* the last counted thread after main's pthread_exit stopped
				* and joined the sampler: glibc's exit(0) comes next */
	WP_LIFE_STOPPED,       /* an exit or exec path took over: the sampler is stopped
				* (joined, or parked from a handler); final unless an exec
				* fails */
	WP_LIFE_PARKED,        /* an exec from a program's handler dumped with the sampler
				* parked: thawed if the exec fails */
	WP_LIFE_PARKED_JOINED, /* the same after JOINED (no sampler to thaw) */
};

/* The state now. async-signal-safe */
WP_AS_SAFE static inline enum wp_life wp_life_get(void)
{
	return (enum wp_life)atomic_load(&g->sh.life);
}

/* Whether the runtime runs and no exit or exec path has taken over yet
 * (RUNNING or JOINED): what every entry point checks first.
 * async-signal-safe */
WP_AS_SAFE static inline int wp_life_started(void)
{
	enum wp_life l = wp_life_get();

	return l == WP_LIFE_RUNNING || l == WP_LIFE_JOINED;
}

#endif
