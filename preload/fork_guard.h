/* fork_guard: no walk of ours is half done when the program forks.
 *
 * A walk (libunwind's, in a handler or the sampler's /proc walker) and the
 * sampler's dl_iterate_phdr calls take locks: libunwind's own and the
 * loader's. A fork copies them held by a thread the child does not have,
 * and the child's first walk, or its exit, which waits for its sampler,
 * would wait forever. And the forking thread itself, interrupted by our
 * signal inside fork, while glibc holds every malloc lock for the copy,
 * must not walk: libunwind's thread-local cache may make the loader
 * allocate. So a fork (pthread_atfork, ours runs last among the prepare
 * handlers) waits until no walk is under way, at most FORK_GUARD_WAIT_MS,
 * and while it lasts no new one starts: a handler keeps the PC alone, the
 * sampler waits for the fork to end. */
#ifndef WP_FORK_GUARD_H
#define WP_FORK_GUARD_H

#include "as_safe.h"

/* Before a walk in a handler: 0 when it may go on (then
 * wp_fork_guard_leave() after it), -1 while a fork is under way (no walk).
 * async-signal-safe */
WP_AS_SAFE int wp_fork_guard_try(void);

/* Before a walk or a dl_iterate_phdr on the sampler thread: waits while a
 * fork is under way. Then wp_fork_guard_leave(). */
void wp_fork_guard_wait(void);

/* After a walk begun by either of the above. async-signal-safe */
WP_AS_SAFE void wp_fork_guard_leave(void);

/* The pthread_atfork handlers' part: the forking thread takes no walk from
 * prepare to parent or child; prepare waits for the walks under way
 * (unless this thread is inside the loader, whose lock they may wait
 * for); in the child, only this thread's state is left. */
void wp_fork_guard_prepare(void);
void wp_fork_guard_parent(void);
void wp_fork_guard_child(void);

#endif
