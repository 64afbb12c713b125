/* timers: per-thread CPU-time timers for running threads (timers.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

#include "runtime.h"
#include "sampler.h"
#include "slots.h"
#include "timers.h"

/* prctl(PR_TIMER_CREATE_RESTORE_IDS, ...): with it on, timer_create takes
 * the id to give the timer from *timerid. Not in Debian 12's headers. */
#define WP_PR_TIMER_CREATE_RESTORE_IDS 77
#define WP_RESTORE_IDS_OFF 0
#define WP_RESTORE_IDS_ON 1
#define WP_RESTORE_IDS_GET 2

/* At most this many timers at once, and an eighth of the signal-queue
 * limit (each timer holds one entry of the user's RLIMIT_SIGPENDING for
 * its life: the program's own queued signals and timers must not run out). */
#define WP_TIMERS_MAX 4096

static struct {
	int on;         /* the kernel places ids, and timers are wanted */
	uint32_t cap;   /* timers at once at most */
	uint32_t live;  /* armed now */
	int failed;     /* a timer_create failed for want of room: no more tries */
} tm;

/* The program's own timers alive (through the interposed timer_create and
 * timer_delete): ours are armed only while it holds none, when the
 * kernel's next id can be read and put back exactly (create_placed).
 * Written under the lock. */
static uint32_t prog_live;

/* Held while the sampler has placed-id mode on, or the program is inside
 * timer_create or timer_delete: the two never overlap. A futex lock (0
 * free, 1 held, 2 held with waiters): a waiting thread of the program
 * sleeps, whatever its scheduling class. */
static _Atomic uint32_t place_lock;

static void lock(void)
{
	uint32_t c = 0;

	if (atomic_compare_exchange_strong(&place_lock, &c, 1))
		return;
	if (c != 2)
		c = atomic_exchange(&place_lock, 2);
	while (c != 0) {
		wp_syscall(SYS_futex, &place_lock, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
		c = atomic_exchange(&place_lock, 2);
	}
}

static void unlock(void)
{
	if (atomic_exchange(&place_lock, 0) == 2)
		wp_syscall(SYS_futex, &place_lock, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void wp_timers_init(void)
{
	struct rlimit rl;
	long mode;

	tm.on = 0;
	tm.live = 0;
	tm.failed = 0;
	if (!g->fix.cfg.cpu_timers)
		return;
	mode = wp_syscall(SYS_prctl, WP_PR_TIMER_CREATE_RESTORE_IDS, WP_RESTORE_IDS_GET, 0, 0, 0);
	if (mode < 0) {
		wp_log(WP_LOG_DEBUG,
		       "this kernel cannot place timer ids (PR_TIMER_CREATE_RESTORE_IDS): running "
		       "threads are sampled with signals from the sampler");
		return;
	}
	tm.cap = WP_TIMERS_MAX;
	if (getrlimit(RLIMIT_SIGPENDING, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 8 < tm.cap)
		tm.cap = (uint32_t)(rl.rlim_cur / 8);
	tm.on = tm.cap > 0;
}

int wp_timers_wanted(const struct wp_slot *s)
{
	return tm.on && !tm.failed && tm.live < tm.cap && !s->smp.timer_on &&
	       !__atomic_load_n(&prog_live, __ATOMIC_RELAXED);
}

/* timer_create through the kernel: at id *id in placed-id mode, else at the
 * kernel's next id, returned in *id. Returns 0 or -1 (errno). */
static long create(clockid_t clock, struct sigevent *sev, int *id)
{
	return wp_syscall(SYS_timer_create, clock, sev, id);
}

/* The placed-id mode on or off. Returns 0 or -1. */
static long placing(int on)
{
	return wp_syscall(SYS_prctl, WP_PR_TIMER_CREATE_RESTORE_IDS,
			  on ? WP_RESTORE_IDS_ON : WP_RESTORE_IDS_OFF, 0, 0, 0);
}

/* Whether the process has a timer that is not ours: 1, 0, or -1 when
 * /proc/self/timers cannot say (a kernel without it). It sees the timers
 * the interposers do not count: made by a raw system call (Go's runtime),
 * or through a pointer to libc's function. */
static int foreign_timers(void)
{
	char buf[4096];
	int fd = (int)wp_syscall(SYS_openat, AT_FDCWD, "/proc/self/timers", O_RDONLY | O_CLOEXEC);
	long n, lowest = INT_MAX - 1 - (long)g->tab.nr_slots;
	int foreign = 0, tail = 0;

	if (fd < 0)
		return -1;
	/* "ID: <n>" lines; a line cut at the buffer's end is read again */
	while (!foreign && (n = wp_syscall(SYS_read, fd, buf + tail, sizeof(buf) - 1 - tail)) > 0) {
		char *p = buf, *nl;

		n += tail;
		buf[n] = 0;
		while ((nl = strchr(p, '\n'))) {
			if (!strncmp(p, "ID: ", 4) && strtol(p + 4, NULL, 10) <= lowest)
				foreign = 1;
			p = nl + 1;
		}
		tail = (int)(buf + n - p);
		memmove(buf, p, (size_t)tail);
	}
	wp_syscall(SYS_close, fd);
	return foreign;
}

/* Creates the timer of `sev` on `clock` at id `want` (into *id) and leaves
 * the kernel's next id where it was: the program's next timer_create gets
 * the id it would without ours. The kernel gives a normal timer the first
 * free id from a counter and moves the counter past it; a placed timer
 * moves the counter past the placed id. Called only while the process
 * holds no timer but ours, when every id below ours is free: a normal
 * timer, deleted at once, shows the counter (its id p); ours is placed; a
 * placed timer at p - 1, deleted at once, sets the counter back to p. When
 * that last one cannot be made (the signal queue's limit: every timer
 * holds one entry of it), ours is deleted and it is tried again. Returns 0;
 * or -1 (errno) with no timer of ours, the counter put back; or -2 when
 * the counter could not be put back. Under the lock. */
static int create_placed(clockid_t clock, struct sigevent *sev, int want, int *id)
{
	struct sigevent none;
	int p, back, e = 0, rc = 0;

	memset(&none, 0, sizeof(none));
	none.sigev_notify = SIGEV_NONE;
	if (create(CLOCK_MONOTONIC, &none, &p) < 0)
		return -1;
	wp_syscall(SYS_timer_delete, p);
	if (placing(1) < 0)
		return -2;
	*id = want;
	if (create(clock, sev, id) < 0) {
		e = errno;
		rc = -1;
	}
	back = p == 0 ? INT_MAX : p - 1;
	if (create(CLOCK_MONOTONIC, &none, &back) < 0) {
		if (rc == 0) {
			wp_syscall(SYS_timer_delete, *id);
			e = errno;
			rc = -1;
		}
		back = p == 0 ? INT_MAX : p - 1;
		if (create(CLOCK_MONOTONIC, &none, &back) < 0)
			rc = -2;
	}
	if (rc != -2)
		wp_syscall(SYS_timer_delete, back);
	placing(0);
	errno = e;
	return rc;
}

int wp_timers_arm(struct wp_slot *s)
{
	uint32_t idx = (uint32_t)(s - g->tab.slots), tid = atomic_load(&s->tid);
	uint64_t period = 1000000000ull / g->fix.cfg.hz;
	struct itimerspec its = {
		{ (time_t)(period / 1000000000ull), (long)(period % 1000000000ull) },
		{ (time_t)(period / 1000000000ull), (long)(period % 1000000000ull) }
	};
	struct sigevent sev;
	int id = 0, rc;

	if (!wp_timers_wanted(s) || !tid)
		return -1;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = g->sig.signal;
	sev._sigev_un._tid = (pid_t)tid;
	sev.sigev_value.sival_ptr = (void *)(uintptr_t)((COOKIE_TIMER_MAGIC << 48) | idx);
	lock();
	/* the thread's CPU clock: CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD; ids
	 * from INT_MAX - 1 down (INT_MAX stays free for create_placed) */
	if (prog_live || foreign_timers() == 1) {
		unlock();
		return -1; /* the program's next timer id cannot be read now */
	}
	rc = create_placed((clockid_t)((~tid << 3) | 6), &sev, INT_MAX - 1 - (int)idx, &id);
	unlock();
	if (rc == -2) {
		tm.failed = 1;
		wp_log(WP_LOG_ERROR,
		       "the kernel's next timer id could not be put back after a CPU timer of "
		       "ours: the program's next timer may get another id than without us; no "
		       "more CPU timers");
		return -1;
	}
	if (rc < 0) {
		/* EAGAIN: the signal-queue limit (no more tries); EINVAL: the
		 * thread is gone. */
		if (errno == EAGAIN) {
			tm.failed = 1;
			wp_log(WP_LOG_DEBUG,
			       "no room for another CPU timer (RLIMIT_SIGPENDING): the running "
			       "threads without one are sampled with signals");
		}
		return -1;
	}
	if (wp_syscall(SYS_timer_settime, id, 0, &its, NULL) < 0) {
		wp_syscall(SYS_timer_delete, id);
		return -1;
	}
	s->smp.timer_id = id;
	s->smp.timer_on = 1;
	tm.live++;
	g->smp.ctr.nr_timers++;
	return 0;
}

void wp_timers_disarm(struct wp_slot *s)
{
	if (!s->smp.timer_on)
		return;
	wp_syscall(SYS_timer_delete, s->smp.timer_id);
	s->smp.timer_on = 0;
	if (tm.live)
		tm.live--;
}

void wp_timers_disarm_all(void)
{
	for (uint32_t i = 0; i < atomic_load(&g->tab.hiwater); i++)
		wp_timers_disarm(&g->tab.slots[i]);
	tm.live = 0;
}

void wp_timers_forget_all(void)
{
	for (uint32_t i = 0; i < atomic_load(&g->tab.hiwater); i++)
		g->tab.slots[i].smp.timer_on = 0;
	tm.live = 0;
	tm.failed = 0;
	/* The lock may have been held by a thread that is not in the child;
	 * the program's timers are not inherited either. */
	atomic_store(&place_lock, 0);
	prog_live = 0;
}

int wp_sampler_timer_create(int (*real)(clockid_t, struct sigevent *, timer_t *), clockid_t clock,
			    struct sigevent *sev, timer_t *id)
{
	int rc, e;

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	lock();
	rc = real(clock, sev, id);
	e = errno;
	if (rc == 0)
		prog_live++;
	unlock();
	errno = e;
	return rc;
}

int wp_sampler_timer_delete(int (*real)(timer_t), timer_t id)
{
	int rc, e;

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	lock();
	rc = real(id);
	e = errno;
	if (rc == 0 && prog_live)
		prog_live--;
	unlock();
	errno = e;
	return rc;
}
