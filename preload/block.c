/* block: interposed blocking libc calls. On entry each one publishes the
 * caller's registers in the thread's slot (slot.h), so the sampler can take
 * the blocked thread's stack without signalling it; on exit it retracts them.
 * If our signal interrupted the call anyway (it raced into the call), the
 * call is retried with the time it had left, and only then: an EINTR from
 * any other signal reaches the program exactly as without the profiler.
 * These symbols carry libc's names (interposition needs them). */
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
#include "sampler.h"
#include "slot.h"

#define WP_EXPORT __attribute__((visibility("default")))

/* ---- the real functions -------------------------------------------------- */

#define REAL(name) real_##name
#define DECLARE_REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__)

DECLARE_REAL(unsigned, sleep, unsigned);
DECLARE_REAL(int, usleep, useconds_t);
DECLARE_REAL(int, nanosleep, const struct timespec *, struct timespec *);
DECLARE_REAL(int, clock_nanosleep, clockid_t, int, const struct timespec *, struct timespec *);
DECLARE_REAL(int, poll, struct pollfd *, nfds_t, int);
DECLARE_REAL(int, ppoll, struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
DECLARE_REAL(int, select, int, fd_set *, fd_set *, fd_set *, struct timeval *);
DECLARE_REAL(int, pselect, int, fd_set *, fd_set *, fd_set *, const struct timespec *,
	     const sigset_t *);
DECLARE_REAL(int, epoll_wait, int, struct epoll_event *, int, int);
DECLARE_REAL(int, epoll_pwait, int, struct epoll_event *, int, int, const sigset_t *);
DECLARE_REAL(int, sigtimedwait, const sigset_t *, siginfo_t *, const struct timespec *);
DECLARE_REAL(int, sigwaitinfo, const sigset_t *, siginfo_t *);
DECLARE_REAL(int, sigwait, const sigset_t *, int *);
DECLARE_REAL(int, sem_wait, sem_t *);
DECLARE_REAL(int, sem_timedwait, sem_t *, const struct timespec *);
DECLARE_REAL(int, pthread_cond_wait, pthread_cond_t *, pthread_mutex_t *);
DECLARE_REAL(int, pthread_cond_timedwait, pthread_cond_t *, pthread_mutex_t *,
	     const struct timespec *);
DECLARE_REAL(int, pthread_join, pthread_t, void **);
DECLARE_REAL(int, pthread_mutex_lock, pthread_mutex_t *);
DECLARE_REAL(int, pthread_mutex_trylock, pthread_mutex_t *);
DECLARE_REAL(ssize_t, read, int, void *, size_t);
DECLARE_REAL(ssize_t, recv, int, void *, size_t, int);
DECLARE_REAL(ssize_t, recvfrom, int, void *, size_t, int, struct sockaddr *, socklen_t *);
DECLARE_REAL(ssize_t, recvmsg, int, struct msghdr *, int);
DECLARE_REAL(int, accept, int, struct sockaddr *, socklen_t *);
DECLARE_REAL(int, accept4, int, struct sockaddr *, socklen_t *, int);
DECLARE_REAL(int, connect, int, const struct sockaddr *, socklen_t);
DECLARE_REAL(pid_t, waitpid, pid_t, int *, int);
DECLARE_REAL(pid_t, wait, int *);
DECLARE_REAL(pid_t, wait4, pid_t, int *, int, struct rusage *);
DECLARE_REAL(int, waitid, idtype_t, id_t, siginfo_t *, int);
DECLARE_REAL(int, pause, void);
DECLARE_REAL(int, sigsuspend, const sigset_t *);
DECLARE_REAL(int, dl_iterate_phdr, int (*)(struct dl_phdr_info *, size_t, void *), void *);
DECLARE_REAL(int, dlclose, void *);

/* Looks a real function up; called from the constructor for all of them, and
 * lazily by a wrapper that runs before it (another library's constructor). */
static void *lookup(const char *name, const char *version)
{
	void *p = version ? dlvsym(RTLD_NEXT, name, version) : NULL;

	return p ? p : dlsym(RTLD_NEXT, name);
}

#define RESOLVE(name) \
	(real_##name ? 1 : (*(void **)&real_##name = lookup(#name, NULL)) != NULL)
#define RESOLVE_V(name, version) \
	(real_##name ? 1 : (*(void **)&real_##name = lookup(#name, version)) != NULL)

void wp_block_init(void)
{
	(void)RESOLVE(sleep);
	(void)RESOLVE(usleep);
	(void)RESOLVE(nanosleep);
	(void)RESOLVE(clock_nanosleep);
	(void)RESOLVE(poll);
	(void)RESOLVE(ppoll);
	(void)RESOLVE(select);
	(void)RESOLVE(pselect);
	(void)RESOLVE(epoll_wait);
	(void)RESOLVE(epoll_pwait);
	(void)RESOLVE(sigtimedwait);
	(void)RESOLVE(sigwaitinfo);
	(void)RESOLVE(sigwait);
	(void)RESOLVE(sem_wait);
	(void)RESOLVE(sem_timedwait);
	/* The current condvar ABI, not the 2.2.5 compatibility one. */
	(void)RESOLVE_V(pthread_cond_wait, "GLIBC_2.3.2");
	(void)RESOLVE_V(pthread_cond_timedwait, "GLIBC_2.3.2");
	(void)RESOLVE(pthread_join);
	(void)RESOLVE(pthread_mutex_lock);
	(void)RESOLVE(pthread_mutex_trylock);
	(void)RESOLVE(read);
	(void)RESOLVE(recv);
	(void)RESOLVE(recvfrom);
	(void)RESOLVE(recvmsg);
	(void)RESOLVE(accept);
	(void)RESOLVE(accept4);
	(void)RESOLVE(connect);
	(void)RESOLVE(waitpid);
	(void)RESOLVE(wait);
	(void)RESOLVE(wait4);
	(void)RESOLVE(waitid);
	(void)RESOLVE(pause);
	(void)RESOLVE(sigsuspend);
	(void)RESOLVE(dl_iterate_phdr);
	(void)RESOLVE(dlclose);
}

/* ---- the published-context scope ------------------------------------- */

struct blk {
	struct wp_slot *s;
	uint32_t seq;
};

/* Runs on every way out of the wrapper, thread cancellation included
 * (the library is built with -fexceptions). async-signal-safe */
static inline void blk_leave(struct blk *b)
{
	wp_block_leave(b->s, b->seq);
}

/* Publishes the context for the rest of the enclosing function. */
#define BLOCK(sysno, fn)                                                  \
	struct blk wp_b __attribute__((cleanup(blk_leave))) = { NULL, 0 }; \
	wp_b.s = wp_block_enter((sysno), (void *)(fn), &wp_b.seq)

/* The last EINTR was caused by our signal alone (only that is retried). */
#define OURS() (wp_block_ours(wp_b.s, wp_b.seq) && (wp_sampler_count_eintr_retry(), 1))

#define NO_REAL(ret)            \
	do {                    \
		errno = ENOSYS; \
		return (ret);   \
	} while (0)

/* ---- time left ------------------------------------------------------------ */

struct deadline {
	int infinite;
	uint64_t end_ns;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void deadline_ms(struct deadline *d, int ms)
{
	d->infinite = ms < 0;
	d->end_ns = ms > 0 ? now_ns() + (uint64_t)ms * 1000000ull : 0;
}

static void deadline_ts(struct deadline *d, const struct timespec *ts)
{
	d->infinite = ts == NULL;
	d->end_ns = ts ? now_ns() + (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec : 0;
}

static uint64_t left_ns(const struct deadline *d)
{
	uint64_t now = now_ns();

	return now >= d->end_ns ? 0 : d->end_ns - now;
}

/* Milliseconds left, rounded up so the retry never ends early; -1 forever. */
static int left_ms(const struct deadline *d)
{
	return d->infinite ? -1 : (int)((left_ns(d) + 999999) / 1000000);
}

static struct timespec left_ts(const struct deadline *d)
{
	uint64_t ns = left_ns(d);
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	return ts;
}

/* ---- sleeping ------------------------------------------------------------ */

WP_EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
	struct timespec r, left;
	int rc;

	if (!RESOLVE(nanosleep))
		NO_REAL(-1);
	BLOCK(SYS_clock_nanosleep, real_nanosleep);
	r = req ? *req : (struct timespec){ 0, 0 };
	/* The kernel reports the time left: retry with exactly that. */
	while ((rc = real_nanosleep(req ? &r : NULL, &left)) < 0 && errno == EINTR && OURS())
		r = left;
	if (rc < 0 && errno == EINTR && rem)
		*rem = left;
	return rc;
}

WP_EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req,
			      struct timespec *rem)
{
	struct timespec r, left;
	int rc;

	if (!RESOLVE(clock_nanosleep))
		return ENOSYS;
	BLOCK(SYS_clock_nanosleep, real_clock_nanosleep);
	r = req ? *req : (struct timespec){ 0, 0 };
	/* Returns the error number itself; an absolute deadline needs no change. */
	while ((rc = real_clock_nanosleep(clk, flags, req ? &r : NULL, &left)) == EINTR && OURS())
		if (!(flags & TIMER_ABSTIME))
			r = left;
	if (rc == EINTR && rem && !(flags & TIMER_ABSTIME))
		*rem = left;
	return rc;
}

WP_EXPORT int usleep(useconds_t us)
{
	struct timespec r = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 }, left;
	int rc;

	if (!RESOLVE(usleep) || !RESOLVE(nanosleep))
		NO_REAL(-1);
	BLOCK(SYS_clock_nanosleep, real_usleep);
	/* glibc's usleep is nanosleep without a remainder. */
	while ((rc = real_nanosleep(&r, &left)) < 0 && errno == EINTR && OURS())
		r = left;
	return rc;
}

WP_EXPORT unsigned sleep(unsigned seconds)
{
	struct timespec r = { (time_t)seconds, 0 }, left;
	int saved = errno, rc;

	if (!RESOLVE(sleep) || !RESOLVE(nanosleep))
		return seconds;
	BLOCK(SYS_clock_nanosleep, real_sleep);
	while ((rc = real_nanosleep(&r, &left)) < 0 && errno == EINTR && OURS())
		r = left;
	if (rc < 0)
		return (unsigned)left.tv_sec; /* glibc: the whole seconds not slept */
	errno = saved;
	return 0;
}

/* ---- waiting for file descriptors ----------------------------------------- */

WP_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	struct deadline d;
	int rc;

	if (!RESOLVE(poll))
		NO_REAL(-1);
	BLOCK(SYS_poll, real_poll);
	deadline_ms(&d, timeout);
	while ((rc = real_poll(fds, n, timeout)) < 0 && errno == EINTR && OURS())
		timeout = left_ms(&d);
	return rc;
}

WP_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
	struct deadline d;
	struct timespec t;
	int rc;

	if (!RESOLVE(ppoll))
		NO_REAL(-1);
	BLOCK(SYS_ppoll, real_ppoll);
	deadline_ts(&d, tmo);
	t = tmo ? *tmo : (struct timespec){ 0, 0 };
	while ((rc = real_ppoll(fds, n, tmo ? &t : NULL, mask)) < 0 && errno == EINTR && OURS())
		t = left_ts(&d);
	return rc;
}

WP_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	struct deadline d;
	struct timespec t;
	int rc;

	if (!RESOLVE(select))
		NO_REAL(-1);
	BLOCK(SYS_pselect6, real_select);
	if (tv) {
		t.tv_sec = tv->tv_sec;
		t.tv_nsec = tv->tv_usec * 1000;
	}
	deadline_ts(&d, tv ? &t : NULL);
	/* On EINTR the kernel leaves the fd sets as they were. */
	while ((rc = real_select(nfds, r, w, e, tv)) < 0 && errno == EINTR && OURS()) {
		if (tv) {
			t = left_ts(&d);
			tv->tv_sec = t.tv_sec;
			tv->tv_usec = (t.tv_nsec + 999) / 1000;
		}
	}
	return rc;
}

WP_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,
		      const sigset_t *mask)
{
	struct deadline d;
	struct timespec t;
	int rc;

	if (!RESOLVE(pselect))
		NO_REAL(-1);
	BLOCK(SYS_pselect6, real_pselect);
	deadline_ts(&d, tmo);
	t = tmo ? *tmo : (struct timespec){ 0, 0 };
	while ((rc = real_pselect(nfds, r, w, e, tmo ? &t : NULL, mask)) < 0 && errno == EINTR &&
	       OURS())
		t = left_ts(&d);
	return rc;
}

WP_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	struct deadline d;
	int rc;

	if (!RESOLVE(epoll_wait))
		NO_REAL(-1);
	BLOCK(SYS_epoll_wait, real_epoll_wait);
	deadline_ms(&d, timeout);
	while ((rc = real_epoll_wait(epfd, ev, max, timeout)) < 0 && errno == EINTR && OURS())
		timeout = left_ms(&d);
	return rc;
}

WP_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			  const sigset_t *mask)
{
	struct deadline d;
	int rc;

	if (!RESOLVE(epoll_pwait))
		NO_REAL(-1);
	BLOCK(SYS_epoll_pwait, real_epoll_pwait);
	deadline_ms(&d, timeout);
	while ((rc = real_epoll_pwait(epfd, ev, max, timeout, mask)) < 0 && errno == EINTR &&
	       OURS())
		timeout = left_ms(&d);
	return rc;
}

/* ---- signals --------------------------------------------------------------- */

WP_EXPORT int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *tmo)
{
	struct deadline d;
	struct timespec t;
	int rc;

	if (!RESOLVE(sigtimedwait))
		NO_REAL(-1);
	BLOCK(SYS_rt_sigtimedwait, real_sigtimedwait);
	deadline_ts(&d, tmo);
	t = tmo ? *tmo : (struct timespec){ 0, 0 };
	while ((rc = real_sigtimedwait(set, info, tmo ? &t : NULL)) < 0 && errno == EINTR && OURS())
		t = left_ts(&d);
	return rc;
}

WP_EXPORT int sigwaitinfo(const sigset_t *set, siginfo_t *info)
{
	int rc;

	if (!RESOLVE(sigwaitinfo))
		NO_REAL(-1);
	BLOCK(SYS_rt_sigtimedwait, real_sigwaitinfo);
	while ((rc = real_sigwaitinfo(set, info)) < 0 && errno == EINTR && OURS())
		;
	return rc;
}

WP_EXPORT int sigwait(const sigset_t *set, int *sig)
{
	if (!RESOLVE(sigwait))
		return ENOSYS;
	BLOCK(SYS_rt_sigtimedwait, real_sigwait);
	return real_sigwait(set, sig); /* glibc retries EINTR itself */
}

WP_EXPORT int pause(void)
{
	int rc;

	if (!RESOLVE(pause))
		NO_REAL(-1);
	BLOCK(SYS_pause, real_pause);
	while ((rc = real_pause()) < 0 && errno == EINTR && OURS())
		;
	return rc;
}

WP_EXPORT int sigsuspend(const sigset_t *mask)
{
	int rc;

	if (!RESOLVE(sigsuspend))
		NO_REAL(-1);
	BLOCK(SYS_rt_sigsuspend, real_sigsuspend);
	while ((rc = real_sigsuspend(mask)) < 0 && errno == EINTR && OURS())
		;
	return rc;
}

/* ---- threads ---------------------------------------------------------------- */

WP_EXPORT int sem_wait(sem_t *sem)
{
	int rc;

	if (!RESOLVE(sem_wait))
		NO_REAL(-1);
	BLOCK(SYS_futex, real_sem_wait);
	while ((rc = real_sem_wait(sem)) < 0 && errno == EINTR && OURS())
		;
	return rc;
}

WP_EXPORT int sem_timedwait(sem_t *sem, const struct timespec *abs)
{
	int rc;

	if (!RESOLVE(sem_timedwait))
		NO_REAL(-1);
	BLOCK(SYS_futex, real_sem_timedwait);
	while ((rc = real_sem_timedwait(sem, abs)) < 0 && errno == EINTR && OURS())
		;
	return rc;
}

WP_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	if (!RESOLVE_V(pthread_cond_wait, "GLIBC_2.3.2"))
		return ENOSYS;
	BLOCK(SYS_futex, real_pthread_cond_wait);
	return real_pthread_cond_wait(c, m);
}

WP_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
				     const struct timespec *abs)
{
	if (!RESOLVE_V(pthread_cond_timedwait, "GLIBC_2.3.2"))
		return ENOSYS;
	BLOCK(SYS_futex, real_pthread_cond_timedwait);
	return real_pthread_cond_timedwait(c, m, abs);
}

WP_EXPORT int pthread_join(pthread_t t, void **ret)
{
	if (!RESOLVE(pthread_join))
		return ENOSYS;
	BLOCK(SYS_futex, real_pthread_join);
	return real_pthread_join(t, ret);
}

WP_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
	int rc;

	if (!RESOLVE(pthread_mutex_lock) || !RESOLVE(pthread_mutex_trylock))
		return ENOSYS;
	/* Uncontended: no publication at all. */
	rc = real_pthread_mutex_trylock(m);
	if (rc != EBUSY)
		return rc;
	{
		BLOCK(SYS_futex, real_pthread_mutex_lock);
		return real_pthread_mutex_lock(m);
	}
}

/* ---- files and sockets ----------------------------------------------------- */

/* A socket call interrupted by our signal with SO_RCVTIMEO set would
 * restart its full timeout: retry with what is left of it instead. Our
 * signal only reaches a wrapped call it raced into right after the thread
 * was seen running, so the time already spent is taken from the moment the
 * EINTR came back (reading the clock on every call would cost the fast
 * path more than the error it avoids). Returns the option to restore
 * (tv_sec < 0: nothing to restore). */
static struct timeval shorten_timeout(int fd, int opt, uint64_t spent, int *expired)
{
	struct timeval tv, orig = { -1, 0 };
	socklen_t len = sizeof(tv);
	uint64_t full;

	*expired = 0;
	if (getsockopt(fd, SOL_SOCKET, opt, &tv, &len) < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0))
		return orig;
	full = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
	if (spent >= full) {
		*expired = 1;
		return orig;
	}
	orig = tv;
	tv.tv_sec = (time_t)((full - spent) / 1000000000ull);
	tv.tv_usec = (suseconds_t)(((full - spent) % 1000000000ull + 999) / 1000);
	setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
	return orig;
}

static void restore_timeout(int fd, int opt, struct timeval orig)
{
	if (orig.tv_sec >= 0)
		setsockopt(fd, SOL_SOCKET, opt, &orig, sizeof(orig));
}

/* Retries a receive-side call after our signal interrupted it. */
/* Calls `call` once, then again each time our signal alone interrupted it,
 * with SO_RCVTIMEO shortened to what is left. Every EINTR is judged by
 * OURS(): one from the program's own signal, even during a retry, returns. */
#define RETRY_RECV(fd, call)                                                   \
	do {                                                                   \
		uint64_t t0 = 0;                                               \
		int expired, e_;                                               \
		rc = (call);                                                   \
		while (rc < 0 && errno == EINTR && OURS()) {                   \
			uint64_t now = now_ns();                               \
			struct timeval o;                                      \
			if (!t0)                                               \
				t0 = now;                                      \
			o = shorten_timeout((fd), SO_RCVTIMEO, now - t0, &expired); \
			if (expired) {                                         \
				errno = EAGAIN;                                \
				break;                                         \
			}                                                      \
			rc = (call);                                           \
			e_ = errno;                                            \
			restore_timeout((fd), SO_RCVTIMEO, o);                 \
			errno = e_;                                            \
		}                                                              \
	} while (0)

WP_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	ssize_t rc;

	if (!RESOLVE(read))
		NO_REAL(-1);
	BLOCK(SYS_read, real_read);
	RETRY_RECV(fd, real_read(fd, buf, n));
	return rc;
}

WP_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	ssize_t rc;

	if (!RESOLVE(recv))
		NO_REAL(-1);
	BLOCK(SYS_recvfrom, real_recv);
	RETRY_RECV(fd, real_recv(fd, buf, n, flags));
	return rc;
}

WP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
			   socklen_t *alen)
{
	ssize_t rc;

	if (!RESOLVE(recvfrom))
		NO_REAL(-1);
	BLOCK(SYS_recvfrom, real_recvfrom);
	RETRY_RECV(fd, real_recvfrom(fd, buf, n, flags, addr, alen));
	return rc;
}

WP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	ssize_t rc;

	if (!RESOLVE(recvmsg))
		NO_REAL(-1);
	BLOCK(SYS_recvmsg, real_recvmsg);
	RETRY_RECV(fd, real_recvmsg(fd, msg, flags));
	return rc;
}

WP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	int rc;

	if (!RESOLVE(accept))
		NO_REAL(-1);
	BLOCK(SYS_accept, real_accept);
	RETRY_RECV(fd, real_accept(fd, addr, alen));
	return rc;
}

WP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	int rc;

	if (!RESOLVE(accept4))
		NO_REAL(-1);
	BLOCK(SYS_accept4, real_accept4);
	RETRY_RECV(fd, real_accept4(fd, addr, alen, flags));
	return rc;
}

WP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t alen)
{
	struct pollfd p = { fd, POLLOUT, 0 };
	struct deadline d;
	struct timeval tv;
	socklen_t len = sizeof(tv);
	int rc, err;

	if (!RESOLVE(connect) || !RESOLVE(poll))
		NO_REAL(-1);
	BLOCK(SYS_connect, real_connect);
	rc = real_connect(fd, addr, alen);
	if (!(rc < 0 && errno == EINTR && OURS()))
		return rc;
	/* Reissue it: an AF_UNIX connect starts over (with what is left of
	 * SO_SNDTIMEO); a TCP one goes on in the background and answers
	 * EALREADY (or EISCONN once done). */
	{
		uint64_t t0 = now_ns();
		int expired, e;

		do {
			struct timeval o = shorten_timeout(fd, SO_SNDTIMEO, now_ns() - t0, &expired);

			if (expired) {
				errno = EAGAIN;
				return -1;
			}
			rc = real_connect(fd, addr, alen);
			e = errno;
			restore_timeout(fd, SO_SNDTIMEO, o);
			errno = e;
		} while (rc < 0 && errno == EINTR && OURS());
	}
	if (rc == 0 || errno == EISCONN)
		return 0;
	if (errno != EALREADY)
		return rc;
	/* Wait for the background connection as the blocking call would have
	 * (SO_SNDTIMEO bounds it). */
	if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) == 0 && (tv.tv_sec || tv.tv_usec))
		deadline_ms(&d, (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000));
	else
		deadline_ms(&d, -1);
	while ((rc = real_poll(&p, 1, left_ms(&d))) < 0 && errno == EINTR && OURS())
		;
	if (rc < 0)
		return -1;
	if (rc == 0) {
		errno = EINPROGRESS; /* what a timed-out blocking connect reports */
		return -1;
	}
	len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -1;
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* ---- children ------------------------------------------------------------ */

/* With SA_RESTART the kernel restarts these itself: publishing is enough. */
WP_EXPORT pid_t waitpid(pid_t pid, int *status, int options)
{
	if (!RESOLVE(waitpid))
		NO_REAL(-1);
	BLOCK(SYS_wait4, real_waitpid);
	return real_waitpid(pid, status, options);
}

WP_EXPORT pid_t wait(int *status)
{
	if (!RESOLVE(wait))
		NO_REAL(-1);
	BLOCK(SYS_wait4, real_wait);
	return real_wait(status);
}

WP_EXPORT pid_t wait4(pid_t pid, int *status, int options, struct rusage *ru)
{
	if (!RESOLVE(wait4))
		NO_REAL(-1);
	BLOCK(SYS_wait4, real_wait4);
	return real_wait4(pid, status, options, ru);
}

WP_EXPORT int waitid(idtype_t type, id_t id, siginfo_t *info, int options)
{
	if (!RESOLVE(waitid))
		NO_REAL(-1);
	BLOCK(SYS_waitid, real_waitid);
	return real_waitid(type, id, info, options);
}

/* ---- the dynamic loader ----------------------------------------------------- */

/* A profiling signal landing in here takes a PC-only sample (see the
 * handler): unwinding would walk the loader's structures again. dlopen is
 * not wrapped: it resolves RUNPATH and $ORIGIN from its caller's address. */
WP_EXPORT int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	int rc;

	if (!RESOLVE(dl_iterate_phdr))
		return 0;
	wp_sampler_loader_enter();
	rc = real_dl_iterate_phdr(cb, data);
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
