/* block_ipc: System V and POSIX message queues and semaphores, and
 * syscall() itself for the blocking numbers (runtimes and event loops call
 * the kernel through it). The kernel ends all of these with EINTR after any
 * handler, so each is retried when our signal alone interrupted it, with
 * the time it had left. See block.c for the scheme, block_int.h for the
 * classes. */
#include <errno.h>
#include <linux/futex.h>
#include <mqueue.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <time.h>

#include "../unwind/unwind.h"
#include "block_int.h"
#include "sigmask.h"
#include "../output/sys.h"

#define IPC_CALLS(X)                                                                               \
	X(RETRY, ssize_t, msgrcv, SYS_msgrcv, (int id, void *p, size_t n, long type, int flags),   \
	  (id, p, n, type, flags), 0)                                                              \
	X(RETRY, int, msgsnd, SYS_msgsnd, (int id, const void *p, size_t n, int flags),            \
	  (id, p, n, flags), 0)                                                                    \
	X(RETRY, int, semop, SYS_semop, (int id, struct sembuf *ops, size_t n), (id, ops, n), 0)   \
	X(RETRY_TS, int, semtimedop, SYS_semtimedop,                                               \
	  (int id, struct sembuf *ops, size_t n, const struct timespec *tmo), (id, ops, n, left_), \
	  tmo)                                                                                     \
	X(RETRY, ssize_t, mq_receive, SYS_mq_timedreceive,                                         \
	  (mqd_t q, char *p, size_t n, unsigned *prio), (q, p, n, prio), 0)                        \
	X(RETRY, ssize_t, mq_timedreceive, SYS_mq_timedreceive,                                    \
	  (mqd_t q, char *p, size_t n, unsigned *prio, const struct timespec *abs),                \
	  (q, p, n, prio, abs), 0)                                                                 \
	X(RETRY, int, mq_send, SYS_mq_timedsend,                                                   \
	  (mqd_t q, const char *p, size_t n, unsigned prio), (q, p, n, prio), 0)                   \
	X(RETRY, int, mq_timedsend, SYS_mq_timedsend,                                              \
	  (mqd_t q, const char *p, size_t n, unsigned prio, const struct timespec *abs),           \
	  (q, p, n, prio, abs), 0)

IPC_CALLS(WP_DECLARE_REAL)
IPC_CALLS(WP_DEFINE_WRAPPER)

static long (*real_syscall)(long, ...);

void wp_block_ipc_init(void)
{
	IPC_CALLS(WP_RESOLVE_REAL)
	(void)RESOLVE(syscall);
}

/* ---- syscall() ------------------------------------------------------------ */

/* How syscall() treats a number: where its relative timeout is, if any. */
enum { SYS_PASS, SYS_PUBLISH, SYS_RETRY, SYS_RETRY_MS, SYS_RETRY_TS, SYS_SLEEP };

static int sys_class(long nr, const long *a, int *arg)
{
	*arg = -1;
	switch (nr) {
	case SYS_nanosleep:
		*arg = 0;
		return SYS_SLEEP;
	case SYS_clock_nanosleep:
		*arg = 2;
		return (a[1] & TIMER_ABSTIME) ? SYS_RETRY : SYS_SLEEP;
	case SYS_poll:
		*arg = 2;
		return SYS_RETRY_MS;
	case SYS_epoll_wait:
	case SYS_epoll_pwait:
		*arg = 3;
		return SYS_RETRY_MS;
	case SYS_epoll_pwait2:
		*arg = 3;
		return SYS_RETRY_TS;
	case SYS_semtimedop:
		*arg = 3;
		return SYS_RETRY_TS;
	case SYS_io_getevents:
		*arg = 4;
		return SYS_RETRY_TS;
	case SYS_rt_sigtimedwait:
		*arg = 2;
		return SYS_RETRY_TS;
	case SYS_futex:
		switch (a[1] & FUTEX_CMD_MASK) {
		case FUTEX_WAIT:
			*arg = 3;
			return SYS_RETRY_TS;
		case FUTEX_WAIT_BITSET:
		case FUTEX_LOCK_PI:
		case FUTEX_LOCK_PI2:
		case FUTEX_WAIT_REQUEUE_PI:
			return SYS_RETRY; /* absolute deadlines */
		default:
			return SYS_PASS;
		}
	/* the kernel updates the timeout itself, or there is none */
	case SYS_ppoll:
	case SYS_select:
	case SYS_pselect6:
	case SYS_semop:
	case SYS_msgrcv:
	case SYS_msgsnd:
	case SYS_mq_timedreceive:
	case SYS_mq_timedsend:
	case SYS_pause:
	case SYS_rt_sigsuspend:
	case SYS_read:
	case SYS_readv:
	case SYS_recvfrom:
	case SYS_recvmsg:
	case SYS_accept:
	case SYS_accept4:
		return SYS_RETRY;
	case SYS_wait4:
	case SYS_waitid:
	case SYS_flock:
		return SYS_PUBLISH;
	default:
		return SYS_PASS;
	}
}

static long raw(long nr, const long *a)
{
	return wp_sys_ret(wp_sys6(nr, a[0], a[1], a[2], a[3], a[4], a[5]));
}

/* Reads six argument words whatever the number takes, as glibc's own
 * syscall() passes six registers on. */
WP_EXPORT long syscall(long nr, ...)
{
	struct deadline d = { 0, 0 };
	struct timespec t, left;
	sigset_t tmp;
	va_list ap;
	long a[6], rc;
	int cls, arg, i;

	va_start(ap, nr);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (nr == SYS_write && a[0] == WP_UNW_FAKE_WFD)
		return wp_unwind_fake_write((const void *)a[1], (size_t)a[2]);
	cls = sys_class(nr, a, &arg);
	if (cls == SYS_PASS)
		return raw(nr, a);
	if (nr == SYS_rt_sigtimedwait) /* never ours to receive (sigmask.c) */
		a[0] = (long)wp_sigmask_wait_set((const sigset_t *)a[0], &tmp);
	(void)RESOLVE(syscall);
	BLOCK((unsigned)nr, real_syscall);
	switch (cls) {
	case SYS_SLEEP: { /* the kernel reports the time left */
		struct timespec *out = a[arg + 1] ? (struct timespec *)a[arg + 1] : &left;

		/* The caller's pointers go to the kernel as they are: a bad one
		 * gets EFAULT, as without us. */
		a[arg + 1] = (long)out;
		while ((rc = raw(nr, a)) < 0 && errno == EINTR && OURS()) {
			t = *out;
			a[arg] = (long)&t;
		}
		return rc;
	}
	case SYS_RETRY_MS:
		deadline_ms(&d, (int)a[arg]);
		while ((rc = raw(nr, a)) < 0 && errno == EINTR && OURS())
			a[arg] = left_ms(&d);
		return rc;
	case SYS_RETRY_TS: {
		const struct timespec *tmo = (const struct timespec *)a[arg];
		uint64_t t0 = wp_now_ns();

		/* Read only after the kernel did (deadline_from). */
		while ((rc = raw(nr, a)) < 0 && errno == EINTR && OURS())
			if (tmo) {
				if (a[arg] == (long)tmo)
					deadline_from(&d, t0, tmo);
				t = left_ts(&d);
				a[arg] = (long)&t;
			}
		return rc;
	}
	case SYS_RETRY:
		while ((rc = raw(nr, a)) < 0 && errno == EINTR && OURS())
			;
		return rc;
	default:
		return raw(nr, a);
	}
}
