/* fork_guard: no walk of ours is half done when the program forks (see
 * fork_guard.h). Two counters, in the pattern of a Dekker lock: a walker
 * adds itself, then looks for a fork; a fork announces itself, then looks
 * for walkers. Both sides are seq_cst, so at least one sees the other. */
#include <stdatomic.h>
#include <stdint.h>

#include <sys/syscall.h>

#include "fork_guard.h"
#include "loader_lock.h"
#include "runtime.h"
#include "slots.h"

#define FORK_GUARD_WAIT_MS 50 /* a walk that long is blocked: fork anyway */

static _Atomic uint32_t walkers; /* walks under way */
static _Atomic uint32_t forks;   /* threads between prepare and parent */
static __thread int tls_forking __attribute__((tls_model("initial-exec")));
static __thread uint32_t tls_walks __attribute__((tls_model("initial-exec"))); /* this thread's */

WP_AS_SAFE int wp_fork_guard_try(void)
{
	if (tls_forking)
		return -1;
	atomic_fetch_add(&walkers, 1);
	tls_walks++;
	if (atomic_load(&forks)) {
		wp_fork_guard_leave();
		return -1;
	}
	return 0;
}

void wp_fork_guard_wait(void)
{
	for (;;) {
		uint32_t f;

		atomic_fetch_add(&walkers, 1);
		tls_walks++;
		if (!(f = atomic_load(&forks)))
			return;
		wp_fork_guard_leave();
		wp_futex_wait_until(&forks, f, wp_mono_ns() + 10000000ull);
	}
}

WP_AS_SAFE void wp_fork_guard_leave(void)
{
	tls_walks--;
	atomic_fetch_sub(&walkers, 1);
	if (atomic_load(&forks))
		wp_futex_wake(&walkers);
}

void wp_fork_guard_prepare(void)
{
	uint64_t deadline = wp_mono_ns() + FORK_GUARD_WAIT_MS * 1000000ull;
	uint32_t w;

	tls_forking = 1;
	atomic_fetch_add(&forks, 1);
	/* The walks may wait for the loader's lock if this thread holds it
	 * (a dl_iterate_phdr callback, a library's constructor that forks). */
	if (wp_tls_in_loader || wp_loader_lock_unsafe((pid_t)wp_syscall(SYS_gettid)))
		return;
	/* Not for this thread's own walk, which a handler of the program's
	 * that forks may have interrupted. */
	while ((w = atomic_load(&walkers)) > tls_walks && wp_mono_ns() < deadline)
		wp_futex_wait_until(&walkers, w, deadline);
}

void wp_fork_guard_parent(void)
{
	tls_forking = 0;
	if (atomic_fetch_sub(&forks, 1) == 1)
		wp_futex_wake(&forks);
}

void wp_fork_guard_child(void)
{
	tls_forking = 0;
	atomic_store(&forks, 0);
	atomic_store(&walkers, tls_walks);
}
