/* block: interposed blocking libc calls: sleeping, waiting for descriptors,
 * signals, threads and children (files and sockets: block_io.c; System V and
 * POSIX IPC and syscall(): block_ipc.c). On entry each one publishes the
 * caller's registers in the thread's slot (slots.h), so the sampler can take
 * the blocked thread's stack without signalling it; on exit it retracts them.
 * If our signal interrupted the call anyway (it raced into the call), the
 * call is retried with the time it had left, and only then: an EINTR from
 * any other signal reaches the program exactly as without the profiler.
 * Most wrappers are rows of BLOCK_CALLS, in the classes of block_int.h; the
 * others are written out below it. These symbols carry libc's names
 * (interposition needs them). */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "block.h"
#include "block_int.h"
#include "sigmask.h"
#include "test_hooks.h"
#include "../unwind/unwind.h"


/* ---- the table ---------------------------------------------------------- */

#define BLOCK_CALLS(X)                                                                             \
	X(RETRY_MS, int, poll, SYS_poll, (struct pollfd * fds, nfds_t n, int timeout),             \
	  (fds, n, left_), timeout)                                                                \
	X(RETRY_TS, int, ppoll, SYS_ppoll,                                                         \
	  (struct pollfd * fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask),       \
	  (fds, n, left_, mask), tmo)                                                              \
	X(RETRY_TS, int, pselect, SYS_pselect6,                                                    \
	  (int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,                  \
	   const sigset_t *mask),                                                                  \
	  (nfds, r, w, e, left_, mask), tmo)                                                       \
	X(RETRY_MS, int, epoll_wait, SYS_epoll_wait,                                               \
	  (int epfd, struct epoll_event *ev, int max, int timeout), (epfd, ev, max, left_),        \
	  timeout)                                                                                 \
	X(RETRY_MS, int, epoll_pwait, SYS_epoll_pwait,                                             \
	  (int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask),          \
	  (epfd, ev, max, left_, mask), timeout)                                                   \
	X(RETRY_TS, int, epoll_pwait2, SYS_epoll_pwait2,                                           \
	  (int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,                  \
	   const sigset_t *mask),                                                                  \
	  (epfd, ev, max, left_, mask), tmo)                                                       \
	X(RETRY, int, pause, SYS_pause, (void), (), 0)                                             \
	X(RETRY, int, sigsuspend, SYS_rt_sigsuspend, (const sigset_t *mask), (mask), 0)            \
	X(RETRY, int, sem_wait, SYS_futex, (sem_t * sem), (sem), 0)                                \
	X(RETRY, int, sem_timedwait, SYS_futex, (sem_t * sem, const struct timespec *abs),         \
	  (sem, abs), 0)                                                                           \
	X(RETRY, int, sem_clockwait, SYS_futex,                                                    \
	  (sem_t * sem, clockid_t clk, const struct timespec *abs), (sem, clk, abs), 0)            \
	X(RESTART_ERRNUM, int, pthread_cond_wait, SYS_futex,                                       \
	  (pthread_cond_t * c, pthread_mutex_t * m), (c, m), 0)                                    \
	X(RESTART_ERRNUM, int, pthread_cond_timedwait, SYS_futex,                                  \
	  (pthread_cond_t * c, pthread_mutex_t * m, const struct timespec *abs), (c, m, abs), 0)   \
	X(RESTART_ERRNUM, int, pthread_cond_clockwait, SYS_futex,                                  \
	  (pthread_cond_t * c, pthread_mutex_t * m, clockid_t clk, const struct timespec *abs),    \
	  (c, m, clk, abs), 0)                                                                     \
	X(RESTART_ERRNUM, int, pthread_join, SYS_futex, (pthread_t t, void **ret), (t, ret), 0)    \
	X(RESTART_ERRNUM, int, pthread_timedjoin_np, SYS_futex,                                    \
	  (pthread_t t, void **ret, const struct timespec *abs), (t, ret, abs), 0)                 \
	X(RESTART_ERRNUM, int, pthread_clockjoin_np, SYS_futex,                                    \
	  (pthread_t t, void **ret, clockid_t clk, const struct timespec *abs),                    \
	  (t, ret, clk, abs), 0)                                                                   \
	X(RESTART_ERRNUM, int, pthread_mutex_timedlock, SYS_futex,                                 \
	  (pthread_mutex_t * m, const struct timespec *abs), (m, abs), 0)                          \
	X(RESTART_ERRNUM, int, pthread_mutex_clocklock, SYS_futex,                                 \
	  (pthread_mutex_t * m, clockid_t clk, const struct timespec *abs), (m, clk, abs), 0)      \
	X(RESTART_ERRNUM, int, pthread_rwlock_timedrdlock, SYS_futex,                              \
	  (pthread_rwlock_t * l, const struct timespec *abs), (l, abs), 0)                         \
	X(RESTART_ERRNUM, int, pthread_rwlock_timedwrlock, SYS_futex,                              \
	  (pthread_rwlock_t * l, const struct timespec *abs), (l, abs), 0)                         \
	X(RESTART_ERRNUM, int, pthread_rwlock_clockrdlock, SYS_futex,                              \
	  (pthread_rwlock_t * l, clockid_t clk, const struct timespec *abs), (l, clk, abs), 0)     \
	X(RESTART_ERRNUM, int, pthread_rwlock_clockwrlock, SYS_futex,                              \
	  (pthread_rwlock_t * l, clockid_t clk, const struct timespec *abs), (l, clk, abs), 0)     \
	X(RESTART, pid_t, waitpid, SYS_wait4, (pid_t pid, int *status, int options),               \
	  (pid, status, options), 0)                                                               \
	X(RESTART, pid_t, wait, SYS_wait4, (int *status), (status), 0)                             \
	X(RESTART, pid_t, wait4, SYS_wait4,                                                        \
	  (pid_t pid, int *status, int options, struct rusage *ru), (pid, status, options, ru), 0) \
	X(RESTART, int, waitid, SYS_waitid,                                                        \
	  (idtype_t type, id_t id, siginfo_t * info, int options), (type, id, info, options), 0)

BLOCK_CALLS(WP_DECLARE_REAL)
BLOCK_CALLS(WP_DEFINE_WRAPPER)

/* Written out below. */
static unsigned (*real_sleep)(unsigned);
static int (*real_usleep)(useconds_t);
static int (*real_nanosleep)(const struct timespec *, struct timespec *);
static int (*real_clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
static int (*real_select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
static int (*real_sigtimedwait)(const sigset_t *, siginfo_t *, const struct timespec *);
static int (*real_sigwaitinfo)(const sigset_t *, siginfo_t *);
static int (*real_sigwait)(const sigset_t *, int *);
static int (*real_pthread_mutex_lock)(pthread_mutex_t *);
static int (*real_pthread_mutex_trylock)(pthread_mutex_t *);
static int (*real_pthread_rwlock_rdlock)(pthread_rwlock_t *);
static int (*real_pthread_rwlock_tryrdlock)(pthread_rwlock_t *);
static int (*real_pthread_rwlock_wrlock)(pthread_rwlock_t *);
static int (*real_pthread_rwlock_trywrlock)(pthread_rwlock_t *);
static int (*real_dl_iterate_phdr)(int (*)(struct dl_phdr_info *, size_t, void *), void *);
static int (*real_dlclose)(void *);

void *wp_block_lookup(const char *name, const char *version)
{
	void *p = version ? dlvsym(RTLD_NEXT, name, version) : NULL;

	return p ? p : dlsym(RTLD_NEXT, name);
}

void wp_block_init(void)
{
	/* The current condvar ABI, not the 2.2.5 compatibility one. */
	(void)RESOLVE_V(pthread_cond_wait, "GLIBC_2.3.2");
	(void)RESOLVE_V(pthread_cond_timedwait, "GLIBC_2.3.2");
	BLOCK_CALLS(WP_RESOLVE_REAL)
	(void)RESOLVE(sleep);
	(void)RESOLVE(usleep);
	(void)RESOLVE(nanosleep);
	(void)RESOLVE(clock_nanosleep);
	(void)RESOLVE(select);
	(void)RESOLVE(sigtimedwait);
	(void)RESOLVE(sigwaitinfo);
	(void)RESOLVE(sigwait);
	(void)RESOLVE(pthread_mutex_lock);
	(void)RESOLVE(pthread_mutex_trylock);
	(void)RESOLVE(pthread_rwlock_rdlock);
	(void)RESOLVE(pthread_rwlock_tryrdlock);
	(void)RESOLVE(pthread_rwlock_wrlock);
	(void)RESOLVE(pthread_rwlock_trywrlock);
	(void)RESOLVE(dl_iterate_phdr);
	(void)RESOLVE(dlclose);
	wp_block_io_init();
	wp_block_ipc_init();
	wp_sigmask_init();
}

/* ---- sleeping ------------------------------------------------------------ */

/* nanosleep, usleep and sleep: `leaf` is the libc function the program
 * called, for the stack. The kernel reports the time left (in the caller's
 * remainder when it gave one): retry with exactly that. The caller's
 * pointers go to the kernel as they are, so a bad one gets EFAULT as
 * without us. */
static int nap(const struct timespec *req, struct timespec *rem, void *leaf)
{
	struct timespec r, left, *out = rem ? rem : &left;
	int rc;

	if (!RESOLVE(nanosleep))
		NO_REAL(-1);
	BLOCK(SYS_clock_nanosleep, leaf);
	while ((rc = real_nanosleep(req, out)) < 0 && errno == EINTR && OURS()) {
		r = *out;
		req = &r;
	}
	return rc;
}

WP_EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
	(void)RESOLVE(nanosleep);
	return nap(req, rem, real_nanosleep);
}

WP_EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req,
			      struct timespec *rem)
{
	struct timespec r, left, *out = rem ? rem : &left;
	const struct timespec *in = req;
	int rc;

	if (!RESOLVE(clock_nanosleep))
		return ENOSYS;
	BLOCK(SYS_clock_nanosleep, real_clock_nanosleep);
	/* Returns the error number itself; an absolute deadline needs no change. */
	while ((rc = real_clock_nanosleep(clk, flags, in, out)) == EINTR && OURS())
		if (!(flags & TIMER_ABSTIME)) {
			r = *out;
			in = &r;
		}
	return rc;
}

/* glibc's usleep is nanosleep without a remainder. */
WP_EXPORT int usleep(useconds_t us)
{
	struct timespec r = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	(void)RESOLVE(usleep);
	return nap(&r, NULL, real_usleep);
}

WP_EXPORT unsigned sleep(unsigned seconds)
{
	struct timespec r = { (time_t)seconds, 0 }, left;
	int saved = errno;

	(void)RESOLVE(sleep);
	if (nap(&r, &left, real_sleep) < 0)
		return errno == EINTR ? (unsigned)left.tv_sec
				      : seconds; /* the whole seconds not slept */
	errno = saved;
	return 0;
}

WP_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	int rc;

	if (!RESOLVE(select))
		NO_REAL(-1);
	BLOCK(SYS_pselect6, real_select);
	/* On EINTR the kernel leaves the fd sets as they were and Linux's
	 * select leaves the time left in *tv: the same call again. */
	while ((rc = real_select(nfds, r, w, e, tv)) < 0 && errno == EINTR && OURS())
		;
	return rc;
}

/* ---- signals ------------------------------------------------------------ */

/* The sampling signal is never in the set waited for (sigmask.c): the
 * program must not receive it. A signal of the program's with that number
 * held while it "blocked" it is taken first. */

/* sigtimedwait, sigwaitinfo (tmo NULL) and sigwait share this; `leaf` is
 * the libc function the program called, for the stack. */
static int wait_signal(const sigset_t *set, siginfo_t *info, const struct timespec *tmo, void *leaf)
{
	const struct timespec *left = tmo;
	struct deadline d = { 0, 0 };
	struct timespec t;
	uint64_t t0 = wp_now_ns();
	const sigset_t *ask = set;
	sigset_t tmp;
	int rc;

	if (!RESOLVE(sigtimedwait))
		NO_REAL(-1);
	if ((rc = wp_sigmask_take_deferred(ask, info)) > 0)
		return rc;
	BLOCK(SYS_rt_sigtimedwait, leaf);
	set = wp_sigmask_wait_set(set, &tmp);
	for (;;) {
		rc = real_sigtimedwait(set, info, left);
		if (!(rc < 0 && errno == EINTR))
			return rc;
		/* A signal of the program's held while it blocks it: its own. */
		if ((rc = wp_sigmask_take_deferred(ask, info)) > 0)
			return rc;
		errno = EINTR;
		if (!OURS())
			return -1;
		if (left) {
			if (left == tmo)
				deadline_from(&d, t0, tmo);
			t = left_ts(&d);
			left = &t;
		}
	}
}

WP_EXPORT int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *tmo)
{
	(void)RESOLVE(sigtimedwait);
	return wait_signal(set, info, tmo, real_sigtimedwait);
}

WP_EXPORT int sigwaitinfo(const sigset_t *set, siginfo_t *info)
{
	(void)RESOLVE(sigwaitinfo);
	return wait_signal(set, info, NULL, real_sigwaitinfo);
}

WP_EXPORT int sigwait(const sigset_t *set, int *sig)
{
	int rc, saved = errno;

	if (!RESOLVE(sigwait))
		return ENOSYS;
	/* glibc's sigwait retries EINTR inside itself, where a held signal of
	 * the program's would never be seen: wait_signal, retried here. */
	while ((rc = wait_signal(set, NULL, NULL, real_sigwait)) < 0 && errno == EINTR)
		;
	if (rc < 0) {
		rc = errno;
		errno = saved;
		return rc;
	}
	*sig = rc;
	errno = saved;
	return 0;
}

/* ---- locks ---------------------------------------------------------------- */

/* Uncontended: no publication at all (these are hot in some programs).
 * Nor for libunwind's own locks (its caller's address in its code): a
 * thread that got one would wait at the wrapper's end while the sampler,
 * which pinned it, walks another stack with libunwind and waits for that
 * very lock (a program that calls libunwind itself). */
#define TRY_THEN_BLOCK(name, tryname, arg)                       \
	do {                                                     \
		int rc_;                                         \
		if (!RESOLVE(name) || !RESOLVE(tryname))         \
			return ENOSYS;                           \
		rc_ = real_##tryname(arg);                       \
		if (rc_ != EBUSY)                                \
			return rc_;                              \
		if (wp_unwind_owns(__builtin_return_address(0))) \
			return real_##name(arg);                 \
		{                                                \
			BLOCK(SYS_futex, real_##name);           \
			return real_##name(arg);                 \
		}                                                \
	} while (0)

WP_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
	TRY_THEN_BLOCK(pthread_mutex_lock, pthread_mutex_trylock, m);
}

WP_EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
	TRY_THEN_BLOCK(pthread_rwlock_rdlock, pthread_rwlock_tryrdlock, l);
}

WP_EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t *l)
{
	TRY_THEN_BLOCK(pthread_rwlock_wrlock, pthread_rwlock_trywrlock, l);
}

/* ---- fortified variants (-D_FORTIFY_SOURCE) --------------------------------- */

WP_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return poll(fds, n, timeout);
}

WP_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo,
			  const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, tmo, mask);
}

/* ---- the dynamic loader ----------------------------------------------------- */

/* A profiling signal landing in here takes a PC-only sample (see the
 * handler): unwinding would walk the loader's structures again. dlopen is
 * not wrapped: it resolves RUNPATH and $ORIGIN from its caller's address. */
struct held_phdr {
	int (*cb)(struct dl_phdr_info *, size_t, void *);
	void *data;
	unsigned hold_us; /* held before the first module, then 0 */
};

/* Tests (wp_sampler_loader_hold_us): the lock held a while, inside. */
static int hold_then_call(struct dl_phdr_info *info, size_t size, void *p)
{
	struct held_phdr *h = p;

	wp_test_hold_us(h->hold_us);
	h->hold_us = 0;
	return h->cb(info, size, h->data);
}

WP_EXPORT int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	struct held_phdr h = { cb, data, 0 };
	int rc;

	if (!RESOLVE(dl_iterate_phdr))
		return 0;
	/* Our own walk's lookups (libunwind's, in a handler or the sampler):
	 * not a program thread in the loader, whose callback may wait. */
	if (wp_unwind_active())
		return real_dl_iterate_phdr(cb, data);
	wp_sampler_loader_enter();
	h.hold_us = wp_sampler_loader_hold_us();
	rc = h.hold_us ? real_dl_iterate_phdr(hold_then_call, &h) : real_dl_iterate_phdr(cb, data);
	wp_sampler_loader_leave();
	return rc;
}

WP_EXPORT int dlclose(void *h)
{
	int rc;

	if (!RESOLVE(dlclose))
		return -1;
	wp_sampler_loader_enter();
	rc = real_dlclose(h);
	wp_sampler_loader_leave();
	return rc;
}
