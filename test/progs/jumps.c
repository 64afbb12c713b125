/* jumps: threads that leave wrapped blocking calls in ways the wrappers do
 * not see return, or that make wrapped calls from signal handlers. Usage:
 *   jumps spin       main and a thread "jumper" each block in read() on a pipe
 *                    nobody writes, are taken out of it 150 ms later by a
 *                    timer signal whose handler siglongjmps (main: setitimer
 *                    SIGALRM, jumper: a thread timer, SIGUSR1), then spin 1 s
 *                    (wpt_main_spin, wpt_jumper_spin)
 *   jumps repl       main blocks in read() 5 times from wpt_prompt_short (ended
 *                    after 50 ms) and 5 times from wpt_prompt_long (150 ms),
 *                    alternately, each read ended by a SIGALRM handler that
 *                    siglongjmps, the next read started right away
 *   jumps recycle    15 threads "rjumper" at once leave read() so after 150 ms
 *                    (a scan of /proc/self/task lists them) and exit; then a
 *                    thread "spinner" makes one wrapped call (usleep 1 ms) and
 *                    spins 1 s (wpt_spinner_spin). Run with
 *                    WALLPROF_MAX_THREADS=16: the spinner gets one of the
 *                    slots they left
 *   jumps dead       10 threads "dead" in turn leave read() so after 20 ms and
 *                    exit; then main spins 1 s
 *   jumps nested     main blocks 1.5 s in read() (wpt_nested_read) while a
 *                    SIGALRM every 20 ms runs a handler that sleeps 1 ms in
 *                    nanosleep; a thread "writer" ends the read
 *   jumps nested_alt  the same in a thread "altreader", the handler on an
 *                    alternate signal stack mapped before the thread's stack
 *                    (above it)
 *   jumps scan       needs WALLPROF_TEST_SCAN_HOLD_US: 3 waves of 15 threads
 *                    that live across a scan of /proc/self/task, then 4
 *                    threads "victim", each started while a scan is held
 *                    between listing the threads and releasing the missing
 *                    ones (the sampler thread sits in nanosleep then), makes
 *                    one wrapped call and spins 250 ms (wpt_victim_spin),
 *                    while "steady" spins all along (wpt_steady_spin); prints
 *                    each one's lifetime on stderr ("life NAME SECONDS")
 * Prints one deterministic result line per mode on stdout, exits 0. */
/* noipa on the named functions: no inlining, cloning or identical-code folding
 * (two functions with the same body would otherwise share one name). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "work.h"

WPT_WORK(wpt_main_spin)
WPT_WORK(wpt_jumper_spin)
WPT_WORK(wpt_spinner_spin)
WPT_WORK(wpt_victim_spin)
WPT_WORK(wpt_steady_spin)

static void die(const char *what, int rc)
{
	fprintf(stderr, "jumps: %s: %s\n", what, strerror(rc));
	exit(1);
}

/* A pipe nobody writes: read() on it blocks until a signal ends it. */
static int quiet[2];

/* Where the timeout handler jumps to, per thread; NULL when not armed. */
static __thread sigjmp_buf *tls_env;

static void on_timeout(int sig)
{
	(void)sig;
	if (tls_env)
		siglongjmp(*tls_env, 1);
}

static void handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) < 0)
		die("sigaction", errno);
}

static void mask(int how, int sig)
{
	sigset_t m;

	sigemptyset(&m);
	sigaddset(&m, sig);
	pthread_sigmask(how, &m, NULL);
}

__attribute__((noipa)) static ssize_t wpt_blocking_read(int fd)
{
	char c;

	return read(fd, &c, 1);
}

/* Arms a one-shot timer of `ms` that sends `sig` to this thread (SIGALRM:
 * setitimer, to the process; the others block it). */
static timer_t arm(int sig, int ms)
{
	timer_t t = 0;

	if (sig == SIGALRM) {
		struct itimerval it = { { 0, 0 }, { ms / 1000, (ms % 1000) * 1000 } };

		setitimer(ITIMER_REAL, &it, NULL);
	} else {
		struct sigevent ev;
		struct itimerspec its = { { 0, 0 }, { ms / 1000, (ms % 1000) * 1000000L } };

		memset(&ev, 0, sizeof(ev));
		ev.sigev_notify = SIGEV_THREAD_ID;
		ev.sigev_signo = sig;
		ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
		if (timer_create(CLOCK_MONOTONIC, &ev, &t) < 0)
			die("timer_create", errno);
		timer_settime(t, 0, &its, NULL);
	}
	return t;
}

/* Blocks in read() on the quiet pipe until the timer's handler jumps out.
 * Returns 1 when it did. */
__attribute__((noipa)) static int wpt_read_until_jump(int sig, int ms)
{
	sigjmp_buf env;
	timer_t volatile t = 0;

	if (sigsetjmp(env, 1)) {
		tls_env = NULL;
		if (t)
			timer_delete(t);
		return 1;
	}
	tls_env = &env;
	t = arm(sig, ms);
	wpt_blocking_read(quiet[0]);
	tls_env = NULL;
	return 0;
}

/* ---- spin ---- */

static void *jumper(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "jumper");
	mask(SIG_BLOCK, SIGALRM);
	mask(SIG_UNBLOCK, SIGUSR1);
	if (!wpt_read_until_jump(SIGUSR1, 150))
		return NULL;
	wpt_jumper_spin(1.0);
	return (void *)1;
}

static int mode_spin(void)
{
	pthread_t t;
	void *r = NULL;
	int rc, main_jumped;

	handle(SIGALRM, on_timeout, 0);
	handle(SIGUSR1, on_timeout, 0);
	mask(SIG_BLOCK, SIGUSR1); /* inherited by the thread, which unblocks it */
	if ((rc = pthread_create(&t, NULL, jumper, NULL)))
		die("pthread_create", rc);
	main_jumped = wpt_read_until_jump(SIGALRM, 150);
	if (main_jumped)
		wpt_main_spin(1.0);
	pthread_join(t, &r);
	printf("spin: main %s read by siglongjmp, jumper %s\n",
	       main_jumped ? "left" : "did not leave", r ? "too" : "did not");
	return 0;
}

/* ---- repl ---- */

/* Two prompts that wait for input from different places, each ended by a
 * timeout that jumps back; the next read starts right away. (Not tail
 * calls: the prompt's frame stays on the stack.) */
__attribute__((noipa)) static int wpt_prompt_short(void)
{
	int r = wpt_read_until_jump(SIGALRM, 50);

	__asm__ volatile("" ::: "memory");
	return r;
}

__attribute__((noipa)) static int wpt_prompt_long(void)
{
	int r = wpt_read_until_jump(SIGALRM, 150);

	__asm__ volatile("" ::: "memory");
	return r;
}

static int mode_repl(void)
{
	int i, n = 0;

	handle(SIGALRM, on_timeout, 0);
	for (i = 0; i < 5; i++) {
		n += wpt_prompt_short();
		n += wpt_prompt_long();
	}
	printf("repl: %d of 10 reads left by siglongjmp\n", n);
	return 0;
}

/* ---- recycle, dead ---- */

static void *recycled_jumper(void *arg)
{
	pthread_setname_np(pthread_self(), (const char *)arg);
	mask(SIG_UNBLOCK, SIGUSR1);
	return (void *)(intptr_t)wpt_read_until_jump(SIGUSR1, !strcmp(arg, "dead") ? 20 : 150);
}

static void *spinner(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "spinner");
	usleep(1000);
	wpt_spinner_spin(1.0);
	return NULL;
}

static int mode_recycle(void)
{
	pthread_t t[15];
	int i, rc, jumped = 0;
	void *r;

	handle(SIGUSR1, on_timeout, 0);
	mask(SIG_BLOCK, SIGUSR1);
	for (i = 0; i < 15; i++)
		if ((rc = pthread_create(&t[i], NULL, recycled_jumper, "rjumper")))
			die("pthread_create", rc);
	for (i = 0; i < 15; i++) {
		pthread_join(t[i], &r);
		jumped += r != NULL;
	}
	if ((rc = pthread_create(&t[0], NULL, spinner, NULL)))
		die("pthread_create", rc);
	pthread_join(t[0], NULL);
	printf("recycle: %d of 15 threads left read by siglongjmp, then the spinner ran\n", jumped);
	return 0;
}

static int mode_dead(void)
{
	pthread_t t;
	int i, rc, jumped = 0;
	void *r;

	handle(SIGUSR1, on_timeout, 0);
	mask(SIG_BLOCK, SIGUSR1);
	for (i = 0; i < 10; i++) {
		if ((rc = pthread_create(&t, NULL, recycled_jumper, "dead")))
			die("pthread_create", rc);
		pthread_join(t, &r);
		jumped += r != NULL;
	}
	wpt_main_spin(1.0);
	printf("dead: %d of 10 threads left read by siglongjmp and exited\n", jumped);
	return 0;
}

/* ---- nested ---- */

static volatile sig_atomic_t nr_ticks;

static void on_tick(int sig)
{
	struct timespec ms = { 0, 1000000 };
	int saved = errno;

	(void)sig;
	nanosleep(&ms, NULL);
	nr_ticks++;
	errno = saved;
}

static int handoff[2];

static void *writer(void *arg)
{
	struct timespec t = { 1, 500000000 };

	(void)arg;
	pthread_setname_np(pthread_self(), "writer");
	mask(SIG_BLOCK, SIGALRM);
	while (nanosleep(&t, &t) < 0 && errno == EINTR)
		;
	if (write(handoff[1], "x", 1) != 1)
		die("write", errno);
	return NULL;
}

__attribute__((noipa)) static ssize_t wpt_nested_read(int fd)
{
	char c;
	ssize_t n;

	while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
		;
	return n;
}

/* The blocked read with the ticking handler; `alt`: the handler's
 * alternate signal stack, or NULL. */
static ssize_t nested_read(void *alt)
{
	struct itimerval it = { { 0, 20000 }, { 0, 20000 } }, off = { { 0, 0 }, { 0, 0 } };
	pthread_t t;
	ssize_t n;
	int rc;

	if (pipe(handoff) < 0)
		die("pipe", errno);
	if (alt) {
		stack_t ss = { .ss_sp = alt, .ss_size = 64 * 1024, .ss_flags = 0 };

		if (sigaltstack(&ss, NULL) < 0)
			die("sigaltstack", errno);
	}
	handle(SIGALRM, on_tick, SA_RESTART | (alt ? SA_ONSTACK : 0));
	if ((rc = pthread_create(&t, NULL, writer, NULL)))
		die("pthread_create", rc);
	setitimer(ITIMER_REAL, &it, NULL);
	n = wpt_nested_read(handoff[0]);
	setitimer(ITIMER_REAL, &off, NULL);
	pthread_join(t, NULL);
	return n;
}

static void *alt_reader(void *alt)
{
	pthread_setname_np(pthread_self(), "altreader");
	mask(SIG_UNBLOCK, SIGALRM);
	return (void *)nested_read(alt);
}

static int mode_nested(int onstack)
{
	ssize_t n;

	if (onstack) {
		/* Mapped before the thread's stack, so above it: the handler's
		 * stack pointer is above the read's frame. */
		void *alt = mmap(NULL, 64 * 1024, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		pthread_t t;
		void *r;
		int rc;

		if (alt == MAP_FAILED)
			die("mmap", errno);
		mask(SIG_BLOCK, SIGALRM);
		if ((rc = pthread_create(&t, NULL, alt_reader, alt)))
			die("pthread_create", rc);
		pthread_join(t, &r);
		n = (ssize_t)r;
	} else {
		n = nested_read(NULL);
	}
	printf("nested: read returned %zd, the handler ran %s\n", n,
	       nr_ticks >= 20 ? "at least 20 times" : "fewer than 20 times");
	return 0;
}

/* ---- scan ---- */

static pid_t sampler_tid(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	pid_t found = 0;

	while (d && !found && (e = readdir(d))) {
		char path[300], name[32] = "";
		int fd;
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if ((fd = open(path, O_RDONLY)) < 0)
			continue;
		n = read(fd, name, sizeof(name) - 1);
		close(fd);
		if (n > 0 && !strncmp(name, "wallprof\n", 9))
			found = atoi(e->d_name);
	}
	if (d)
		closedir(d);
	return found;
}

/* Whether thread `tid` is in nanosleep or clock_nanosleep. */
static int in_nanosleep(pid_t tid)
{
	char path[64], buf[64] = "";
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	if ((fd = open(path, O_RDONLY)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	n = atoi(buf);
	return n == SYS_nanosleep || n == SYS_clock_nanosleep;
}

/* Returns once the sampler sits in a held scan, having just listed the
 * threads (or after 5 s: the hold is not configured). */
static void wait_held_scan(pid_t sampler)
{
	double end = now_s() + 5;

	while (in_nanosleep(sampler) && now_s() < end)
		; /* the end of a hold that was under way */
	while (!in_nanosleep(sampler) && now_s() < end)
		;
}

static pthread_mutex_t wave_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wave_cond = PTHREAD_COND_INITIALIZER;
static int wave_done;

static void *wave_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wave_lock);
	while (!wave_done)
		pthread_cond_wait(&wave_cond, &wave_lock); /* a wrapped call: takes a slot */
	pthread_mutex_unlock(&wave_lock);
	return NULL;
}

static void *victim(void *arg)
{
	intptr_t i = (intptr_t)arg;
	double t0 = now_s();

	pthread_setname_np(pthread_self(), "victim");
	usleep(100); /* a wrapped call: the thread takes a slot now */
	wpt_victim_spin(0.25);
	fprintf(stderr, "life victim%d %.4f\n", (int)i, now_s() - t0);
	return NULL;
}

static volatile int steady_stop;

static void *steady(void *arg)
{
	double t0 = now_s();

	(void)arg;
	pthread_setname_np(pthread_self(), "steady");
	while (!steady_stop)
		wpt_steady_spin(0.01);
	fprintf(stderr, "life steady %.4f\n", now_s() - t0);
	return NULL;
}

static int mode_scan(void)
{
	pthread_t w[15], v[4], s;
	pid_t sampler;
	int i, k, rc;

	while (!(sampler = sampler_tid()))
		;
	for (k = 0; k < 3; k++) {
		wave_done = 0;
		for (i = 0; i < 15; i++)
			if ((rc = pthread_create(&w[i], NULL, wave_thread, NULL)))
				die("pthread_create", rc);
		wait_held_scan(sampler); /* listed */
		pthread_mutex_lock(&wave_lock);
		wave_done = 1;
		pthread_cond_broadcast(&wave_cond);
		pthread_mutex_unlock(&wave_lock);
		for (i = 0; i < 15; i++)
			pthread_join(w[i], NULL);
	}
	if ((rc = pthread_create(&s, NULL, steady, NULL)))
		die("pthread_create", rc);
	for (i = 0; i < 4; i++) {
		wait_held_scan(sampler);
		if ((rc = pthread_create(&v[i], NULL, victim, (void *)(intptr_t)i)))
			die("pthread_create", rc);
	}
	for (i = 0; i < 4; i++)
		pthread_join(v[i], NULL);
	steady_stop = 1;
	pthread_join(s, NULL);
	printf("scan: 4 victims ran\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (pipe(quiet) < 0)
		die("pipe", errno);
	if (!strcmp(mode, "spin"))
		return mode_spin();
	if (!strcmp(mode, "repl"))
		return mode_repl();
	if (!strcmp(mode, "recycle"))
		return mode_recycle();
	if (!strcmp(mode, "dead"))
		return mode_dead();
	if (!strcmp(mode, "nested"))
		return mode_nested(0);
	if (!strcmp(mode, "nested_alt"))
		return mode_nested(1);
	if (!strcmp(mode, "scan"))
		return mode_scan();
	fprintf(stderr, "usage: jumps spin|repl|recycle|dead|nested|nested_alt|scan\n");
	return 2;
}
