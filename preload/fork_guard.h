/* fork_guard: no walk of ours is half done when the program forks.
 *
 * A walk (libunwind's, in a handler or on the sampler) and the sampler's
 * dl_iterate_phdr and dlsym calls take locks: libunwind's own and the
 * loader's. A fork copies them held by a thread the child does not have,
 * and the child's first walk, or its exit, which waits for its sampler,
 * would wait forever. And the forking thread itself, interrupted by our
 * signal inside fork, while glibc holds every malloc lock for the copy,
 * must not walk: libunwind's thread-local trace cache may make the loader
 * allocate. So a fork (our pthread_atfork prepare handler, which runs after
 * those of the program's registered after our start) waits until no walk
 * is under way, at most FORK_GUARD_WAIT_MS, and while it lasts no new one
 * starts: a handler keeps the PC alone, the sampler waits for the fork to
 * end. A child forked with a walk still under way (the wait ran out, or
 * another thread held the loader's lock) never walks: its stacks are the
 * PC alone, and one line says so. */
#ifndef WP_FORK_GUARD_H
#define WP_FORK_GUARD_H

#include "as_safe.h"

/* Before a walk in a handler: 0 when it may go on (then
 * wp_fork_guard_leave() after it), -1 while a fork is under way or in a
 * child that must not walk (no walk). async-signal-safe */
WP_AS_SAFE int wp_fork_guard_try_enter(void);

/* Before a walk, dl_iterate_phdr or dlsym on the sampler thread: waits
 * while a fork is under way; 0 when it may go on (then
 * wp_fork_guard_leave()), -1 when it must not (a child that must not walk,
 * or a stop or a raw dump asked for meanwhile). */
int wp_fork_guard_enter(void);

/* After a walk begun by either of the above. async-signal-safe */
WP_AS_SAFE void wp_fork_guard_leave(void);

/* The pthread_atfork handlers' part: the forking thread takes no walk from
 * prepare to parent or child; prepare waits for the walks under way; the
 * child keeps only this thread's state, and whether it may walk. */
void wp_fork_guard_prepare(void);
void wp_fork_guard_parent(void);

/* In the child: returns 1 when this fork made it a process that must not
 * walk (for its one line). */
int wp_fork_guard_child(void);

#endif
