/* blocked_stacks: one named thread blocked in each kind of blocking call,
 * for the profile of blocked threads. Each "t_<call>" thread blocks from its
 * own caller chain <call>_main -> wpt_<call>_outer -> wpt_<call>_inner -> the
 * libc call, while a "busy" thread spins in wpt_busy_loop:
 *
 *   t_nanosleep  nanosleep(10 s), in a loop until told to stop
 *   t_poll       poll(pipe, -1)
 *   t_epoll      epoll_wait(-1) on the same pipe
 *   t_select     select(pipe, no timeout)
 *   t_read       read(another pipe)
 *   t_cond       pthread_cond_wait
 *   t_mutex      pthread_mutex_lock of a mutex the main thread holds
 *   t_sem        sem_wait
 *   t_sigwait    sigtimedwait(SIGUSR1, 60 s), SIGUSR1 blocked
 *
 * Prints "ready" once every t_ thread has announced it is about to block and
 * the busy thread has burnt 200 ms, then waits for a line (or EOF) on stdin,
 * wakes everyone (pipe writes, cond signal, unlock, post, thread-directed
 * SIGUSR1), joins them, prints "blocked_stacks: done" and exits 0. Every
 * wait retries on EINTR, so the program behaves the same with any profiler. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#define WARM_BURN_NS 200000000LL /* busy time before "ready" */
#define NAP_S 10   /* t_nanosleep: one nanosleep */
#define SIGWAIT_S 60             /* t_sigwait: one sigtimedwait */
#define NOIPA __attribute__((noipa))

static int wake_pipe[2];  /* t_poll, t_epoll, t_select: readable once written */
static int read_pipe[2];  /* t_read */
static int epoll_fd;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER; /* main holds it for t_mutex */
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int cond_go;          /* under cond_lock */
static sem_t sem;
static atomic_int stop_nap, nap_done, stop_busy;
static volatile uint64_t sink;

static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t count_cond = PTHREAD_COND_INITIALIZER;
static int nr_blocking;  /* t_ threads about to block; under count_lock */
static sem_t warm;       /* posted by the busy thread after WARM_BURN_NS */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "blocked_stacks: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void nap_ms(long ms)
{
	int64_t t = now_ns() + ms * 1000000LL;
	struct timespec ts = { t / 1000000000LL, t % 1000000000LL };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void write_byte(int fd)
{
	while (write(fd, "x", 1) < 0)
		if (errno != EINTR)
			die("write");
}

/* Called by each t_ thread right before its blocking call. */
static void about_to_block(void)
{
	pthread_mutex_lock(&count_lock);
	nr_blocking++;
	pthread_cond_broadcast(&count_cond);
	pthread_mutex_unlock(&count_lock);
}

/* Keeps the result of a call alive after it, so no call is a tail call. */
static void keep(long v)
{
	sink += (uint64_t)v;
}

/* ---- the blocking chains ---- */

NOIPA static long wpt_nanosleep_inner(void)
{
	struct timespec ts = { NAP_S, 0 };
	long naps = 0;

	about_to_block();
	while (!atomic_load(&stop_nap)) {
		nanosleep(&ts, NULL); /* returns early (EINTR) on the wake-up signal */
		naps++;
	}
	keep(naps);
	return naps;
}

NOIPA static long wpt_nanosleep_outer(void)
{
	long r = wpt_nanosleep_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_poll_inner(void)
{
	struct pollfd p = { .fd = wake_pipe[0], .events = POLLIN };
	int r;

	about_to_block();
	while ((r = poll(&p, 1, -1)) < 0 && errno == EINTR)
		;
	keep(r);
	return r;
}

NOIPA static long wpt_poll_outer(void)
{
	long r = wpt_poll_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_epoll_inner(void)
{
	struct epoll_event ev;
	int r;

	about_to_block();
	while ((r = epoll_wait(epoll_fd, &ev, 1, -1)) < 0 && errno == EINTR)
		;
	keep(r);
	return r;
}

NOIPA static long wpt_epoll_outer(void)
{
	long r = wpt_epoll_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_select_inner(void)
{
	fd_set rd;
	int r;

	about_to_block();
	do {
		FD_ZERO(&rd);
		FD_SET(wake_pipe[0], &rd);
		r = select(wake_pipe[0] + 1, &rd, NULL, NULL, NULL);
	} while (r < 0 && errno == EINTR);
	keep(r);
	return r;
}

NOIPA static long wpt_select_outer(void)
{
	long r = wpt_select_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_read_inner(void)
{
	char c;
	ssize_t r;

	about_to_block();
	while ((r = read(read_pipe[0], &c, 1)) < 0 && errno == EINTR)
		;
	keep(r);
	return r;
}

NOIPA static long wpt_read_outer(void)
{
	long r = wpt_read_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_cond_inner(void)
{
	long waits = 0;

	pthread_mutex_lock(&cond_lock);
	about_to_block();
	while (!cond_go) {
		pthread_cond_wait(&cond, &cond_lock);
		waits++;
	}
	pthread_mutex_unlock(&cond_lock);
	keep(waits);
	return waits;
}

NOIPA static long wpt_cond_outer(void)
{
	long r = wpt_cond_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_mutex_inner(void)
{
	int r;

	about_to_block();
	r = pthread_mutex_lock(&held);
	if (r == 0)
		pthread_mutex_unlock(&held);
	keep(r);
	return r;
}

NOIPA static long wpt_mutex_outer(void)
{
	long r = wpt_mutex_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_sem_inner(void)
{
	int r;

	about_to_block();
	while ((r = sem_wait(&sem)) < 0 && errno == EINTR)
		;
	keep(r);
	return r;
}

NOIPA static long wpt_sem_outer(void)
{
	long r = wpt_sem_inner();

	keep(r);
	return r;
}

NOIPA static long wpt_sigwait_inner(void)
{
	struct timespec ts = { SIGWAIT_S, 0 };
	sigset_t set;
	int r;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	about_to_block();
	while ((r = sigtimedwait(&set, NULL, &ts)) < 0 && (errno == EINTR || errno == EAGAIN))
		;
	keep(r);
	return r;
}

NOIPA static long wpt_sigwait_outer(void)
{
	long r = wpt_sigwait_inner();

	keep(r);
	return r;
}

/* ---- thread bodies ---- */

#define THREAD_MAIN(call)                                       \
	static void *call##_main(void *arg)                     \
	{                                                       \
		(void)arg;                                      \
		pthread_setname_np(pthread_self(), "t_" #call); \
		keep(wpt_##call##_outer());                     \
		return NULL;                                    \
	}

THREAD_MAIN(poll)
THREAD_MAIN(epoll)
THREAD_MAIN(select)
THREAD_MAIN(read)
THREAD_MAIN(cond)
THREAD_MAIN(mutex)
THREAD_MAIN(sem)
THREAD_MAIN(sigwait)

static void *nanosleep_main(void *arg)
{
	sigset_t set;

	(void)arg;
	pthread_setname_np(pthread_self(), "t_nanosleep");
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* the wake-up signal */
	keep(wpt_nanosleep_outer());
	atomic_store(&nap_done, 1);
	return NULL;
}

NOIPA static void wpt_busy_loop(void)
{
	int64_t warm_at = now_ns() + WARM_BURN_NS;
	int warmed = 0;
	uint64_t x = 88172645463325252ULL;

	while (!atomic_load(&stop_busy)) {
		for (int i = 0; i < 100000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			__asm__ volatile("" : "+r"(x));
		}
		if (!warmed && now_ns() >= warm_at) {
			warmed = 1;
			sem_post(&warm);
		}
	}
	sink = x;
}

static void *busy_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "busy");
	wpt_busy_loop();
	return NULL;
}

/* Returns once a newline or EOF (or a read error) is seen on stdin. */
NOIPA static void wpt_wait_stdin(void)
{
	char c;
	ssize_t n;

	for (;;) {
		n = read(0, &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || c == '\n')
			return;
	}
}

static void noop_handler(int sig)
{
	(void)sig;
}

struct blocker {
	void *(*fn)(void *);
	pthread_t t;
};

static struct blocker blockers[] = {
	{ nanosleep_main, 0 }, { poll_main, 0 }, { epoll_main, 0 },
	{ select_main, 0 },    { read_main, 0 }, { cond_main, 0 },
	{ mutex_main, 0 },     { sem_main, 0 },  { sigwait_main, 0 },
};

#define NR_BLOCKERS (int)(sizeof blockers / sizeof blockers[0])

static pthread_t start(void *(*fn)(void *))
{
	pthread_t t;
	int err = pthread_create(&t, NULL, fn, NULL);

	if (err) {
		fprintf(stderr, "blocked_stacks: pthread_create: %s\n", strerror(err));
		exit(2);
	}
	return t;
}

int main(void)
{
	struct sigaction sa;
	struct epoll_event ev;
	sigset_t set;
	pthread_t busy, sigwaiter = 0, napper = 0;

	/* SIGUSR1: wakes t_nanosleep (handler, no SA_RESTART) and is what
	 * t_sigwait waits for; blocked everywhere else. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = noop_handler;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) != 0)
		die("sigaction");
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	if (pipe(wake_pipe) != 0 || pipe(read_pipe) != 0)
		die("pipe");
	epoll_fd = epoll_create1(0);
	if (epoll_fd < 0)
		die("epoll_create1");
	ev.events = EPOLLIN;
	ev.data.fd = wake_pipe[0];
	if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_pipe[0], &ev) != 0)
		die("epoll_ctl");
	sem_init(&sem, 0, 0);
	sem_init(&warm, 0, 0);
	pthread_mutex_lock(&held);

	for (int i = 0; i < NR_BLOCKERS; i++) {
		blockers[i].t = start(blockers[i].fn);
		if (blockers[i].fn == sigwait_main)
			sigwaiter = blockers[i].t;
		if (blockers[i].fn == nanosleep_main)
			napper = blockers[i].t;
	}
	pthread_mutex_lock(&count_lock);
	while (nr_blocking < NR_BLOCKERS)
		pthread_cond_wait(&count_cond, &count_lock);
	pthread_mutex_unlock(&count_lock);

	/* The busy thread starts once the others block, so they never wait
	 * for a CPU on their way into their calls. */
	busy = start(busy_main);
	while (sem_wait(&warm) != 0 && errno == EINTR)
		;
	printf("ready\n");
	fflush(stdout);

	wpt_wait_stdin();

	atomic_store(&stop_busy, 1);
	pthread_join(busy, NULL);
	write_byte(wake_pipe[1]);
	write_byte(read_pipe[1]);
	pthread_mutex_lock(&cond_lock);
	cond_go = 1;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&cond_lock);
	pthread_mutex_unlock(&held);
	sem_post(&sem);
	pthread_kill(sigwaiter, SIGUSR1);
	atomic_store(&stop_nap, 1);
	/* The signal can land between the stop check and nanosleep: resend. */
	while (!atomic_load(&nap_done)) {
		pthread_kill(napper, SIGUSR1);
		nap_ms(20);
	}
	for (int i = 0; i < NR_BLOCKERS; i++)
		pthread_join(blockers[i].t, NULL);

	printf("blocked_stacks: done\n");
	return 0;
}
