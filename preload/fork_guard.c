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
static int no_walks;             /* this process was forked mid-walk */
static int unsafe_fork;          /* prepare to child: a walk was under way */
/* this thread's forks under way (nested: a handler that forks) and walks */
static __thread uint32_t tls_forking __attribute__((tls_model("initial-exec")));
static __thread uint32_t tls_walks __attribute__((tls_model("initial-exec")));

WP_AS_SAFE int wp_fork_guard_try_enter(void)
{
	if (tls_forking || no_walks)
		return -1;
	atomic_fetch_add(&walkers, 1);
	tls_walks++;
	if (atomic_load(&forks)) {
		wp_fork_guard_leave();
		return -1;
	}
	return 0;
}

int wp_fork_guard_enter(void)
{
	for (;;) {
		uint32_t f;

		if (no_walks || (atomic_load(&g->sh.events) & (EV_STOP | EV_FREEZE)))
			return -1;
		atomic_fetch_add(&walkers, 1);
		tls_walks++;
		if (!(f = atomic_load(&forks)))
			return 0;
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
	pid_t tid = (pid_t)wp_syscall(SYS_gettid);
	uint32_t w;

	tls_forking++;
	atomic_fetch_add(&forks, 1);
	/* The walks may wait for the loader's lock if this thread holds it
	 * (a fork from a dl_iterate_phdr callback): no wait. Not for this
	 * thread's own walk either, which a handler of the program's that
	 * forks may have interrupted. */
	if (!wp_tls_in_loader && !wp_loader_lock_unsafe(tid))
		while ((w = atomic_load(&walkers)) > tls_walks && wp_mono_ns() < deadline)
			wp_futex_wait_until(&walkers, w, deadline);
	/* What the child will inherit: a lock of libunwind's or the loader's
	 * taken by a walk still under way, or the loader's held by another
	 * thread (its dl_iterate_phdr callback; dlopen). */
	unsafe_fork = atomic_load(&walkers) > tls_walks || wp_loader_lock_held_by_other(tid);
}

void wp_fork_guard_parent(void)
{
	unsafe_fork = 0;
	tls_forking--;
	if (atomic_fetch_sub(&forks, 1) == 1)
		wp_futex_wake(&forks);
}

int wp_fork_guard_child(void)
{
	int now_unsafe;

	/* The loader's lock, held in the parent by a thread the child does
	 * not have (the program's dlopen or dlclose, taken after our prepare
	 * looked: it cannot be kept from being taken in between), is held
	 * for good here: no dl_iterate_phdr of ours may wait on it. */
	if (!wp_tls_in_loader && wp_loader_lock_taken())
		unsafe_fork = 1;
	now_unsafe = unsafe_fork && !no_walks;
	tls_forking--;
	atomic_store(&forks, 0);
	atomic_store(&walkers, tls_walks);
	no_walks |= unsafe_fork;
	unsafe_fork = 0;
	return now_unsafe;
}
