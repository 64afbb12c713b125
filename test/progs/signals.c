/* signals: programs that use signals themselves. Usage: signals MODE
 *   prof    own SIGPROF handler + setitimer(ITIMER_PROF, 10 ms) during 1 s of
 *           process CPU time (wpt_sig_work); prints "prof: handler ran N times"
 *   timer   timer_create(CLOCK_MONOTONIC, SIGEV_SIGNAL SIGALRM), 5 ms period, for
 *           0.5 s of wall time; prints "timer: handler ran N times, overruns M"
 *   reset   every signal 1..64 (but SIGKILL, SIGSTOP) set to SIG_DFL with sigaction
 *           and signal(), then 1 s of work in 2 threads
 *   mask    main blocks SIGPROF for its whole life and works 1 s
 *   mask_thread  the same, with a second thread that unblocks SIGPROF and works 1 s
 *           (wpt_unmasked_work)
 *   query   prints what sigaction reports for a few signals, before and after
 *           installing and resetting its own handlers
 *   queuefull  RLIMIT_SIGPENDING 64, the user's signal queue filled with a
 *           blocked real-time signal, then a thread works 0.6 s
 *           (wpt_sig_work): a signal sent with siginfo then arrives without
 *           it; prints "queuefull: done", the queue drained
 *   setxid  0.3 s of work, then setgid and setuid to its own ids (glibc
 *           signals every thread with SIGSETXID and waits for each); prints
 *           "setxid: done"
 * Exits 0. */
/* noipa on the named functions: no inlining, cloning or identical-code folding
 * (two functions with the same body would otherwise share one name). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "sigqueue.h"

static volatile uint64_t sink;
static volatile sig_atomic_t handled;

static double clock_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t spin_until(clockid_t c, double end)
{
	uint64_t x = 88172645463325252ULL;

	do {
		for (int i = 0; i < 20000; i++) {
			x = (x * 6364136223846793005ULL + 1442695040888963407ULL) ^ (x >> 29);
			__asm__ volatile("" : "+r"(x));
		}
	} while (clock_s(c) < end);
	return x;
}

__attribute__((noipa)) static void wpt_sig_work(clockid_t c, double seconds)
{
	sink += spin_until(c, clock_s(c) + seconds);
	__asm__ volatile("" ::: "memory");
}

static void count_handler(int sig)
{
	(void)sig;
	handled++;
}

static void fail(const char *what)
{
	fprintf(stderr, "signals: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int mode_prof(void)
{
	struct sigaction sa;
	struct itimerval it = { { 0, 10000 }, { 0, 10000 } }, off = { { 0, 0 }, { 0, 0 } };

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = count_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGPROF, &sa, NULL) < 0)
		fail("sigaction");
	if (setitimer(ITIMER_PROF, &it, NULL) < 0)
		fail("setitimer");
	wpt_sig_work(CLOCK_PROCESS_CPUTIME_ID, 1.0);
	setitimer(ITIMER_PROF, &off, NULL);
	printf("prof: handler ran %d times\n", (int)handled);
	return 0;
}

static int mode_timer(void)
{
	struct sigaction sa;
	struct sigevent sev;
	struct itimerspec its = { { 0, 5000000 }, { 0, 5000000 } };
	timer_t t;
	int overruns;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = count_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) < 0)
		fail("sigaction");
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGALRM;
	if (timer_create(CLOCK_MONOTONIC, &sev, &t) < 0)
		fail("timer_create");
	if (timer_settime(t, 0, &its, NULL) < 0)
		fail("timer_settime");
	wpt_sig_work(CLOCK_MONOTONIC, 0.5);
	overruns = timer_getoverrun(t);
	timer_delete(t);
	printf("timer: handler ran %d times, overruns %d\n", (int)handled, overruns);
	return 0;
}

static void *reset_worker(void *arg)
{
	(void)arg;
	wpt_sig_work(CLOCK_MONOTONIC, 1.0);
	return NULL;
}

static int mode_reset(void)
{
	struct sigaction sa;
	pthread_t t[2];
	int sig, set = 0;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	for (sig = 1; sig <= 64; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		/* glibc refuses its internal signals (32, 33): ignored */
		if (sigaction(sig, &sa, NULL) == 0)
			set++;
		signal(sig, SIG_DFL);
	}
	printf("reset: %d dispositions set to SIG_DFL\n", set);
	fflush(stdout);
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, reset_worker, NULL))
			fail("pthread_create");
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	printf("reset: done\n");
	return 0;
}

__attribute__((noipa)) static void wpt_unmasked_work(double seconds)
{
	sink += spin_until(CLOCK_MONOTONIC, clock_s(CLOCK_MONOTONIC) + seconds);
	__asm__ volatile("" ::: "memory");
}

static void *unmasked_worker(void *arg)
{
	sigset_t s;

	(void)arg;
	sigemptyset(&s);
	sigaddset(&s, SIGPROF);
	pthread_sigmask(SIG_UNBLOCK, &s, NULL);
	wpt_unmasked_work(1.0);
	return NULL;
}

static int mode_mask(int with_thread)
{
	sigset_t s;
	pthread_t t;

	sigemptyset(&s);
	sigaddset(&s, SIGPROF);
	if (sigprocmask(SIG_BLOCK, &s, NULL) < 0)
		fail("sigprocmask");
	if (with_thread && pthread_create(&t, NULL, unmasked_worker, NULL))
		fail("pthread_create");
	wpt_sig_work(CLOCK_MONOTONIC, 1.0);
	if (with_thread)
		pthread_join(t, NULL);
	printf("mask: done\n");
	return 0;
}

static void other_handler(int sig)
{
	(void)sig;
}

static void show(const char *when, int sig, const char *name)
{
	struct sigaction old;
	const char *h;

	memset(&old, 0xa5, sizeof(old));
	if (sigaction(sig, NULL, &old) < 0) {
		printf("%s %s: sigaction failed: %s\n", when, name, strerror(errno));
		return;
	}
	if (old.sa_flags & SA_SIGINFO)
		h = "(siginfo handler)";
	else if (old.sa_handler == SIG_DFL)
		h = "SIG_DFL";
	else if (old.sa_handler == SIG_IGN)
		h = "SIG_IGN";
	else if (old.sa_handler == count_handler)
		h = "count_handler";
	else if (old.sa_handler == other_handler)
		h = "other_handler";
	else
		h = "(foreign handler)";
	printf("%s %s: %s flags restart=%d siginfo=%d resethand=%d\n", when, name, h,
	       !!(old.sa_flags & SA_RESTART), !!(old.sa_flags & SA_SIGINFO),
	       !!(old.sa_flags & SA_RESETHAND));
}

static int mode_query(void)
{
	static const struct {
		int sig;
		const char *name;
	} sigs[] = { { SIGPROF, "SIGPROF" },
		     { SIGUSR2, "SIGUSR2" },
		     { SIGVTALRM, "SIGVTALRM" },
		     { SIGALRM, "SIGALRM" },
		     { SIGUSR1, "SIGUSR1" } };
	const size_t n = sizeof(sigs) / sizeof(sigs[0]);
	struct sigaction sa;
	sigset_t cur;

	for (size_t i = 0; i < n; i++)
		show("start", sigs[i].sig, sigs[i].name);
	sigprocmask(SIG_BLOCK, NULL, &cur);
	printf("start mask: SIGPROF %d SIGUSR2 %d\n", sigismember(&cur, SIGPROF),
	       sigismember(&cur, SIGUSR2));

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = count_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPROF, &sa, NULL);
	show("installed", SIGPROF, "SIGPROF");
	printf("signal() returned %s\n", signal(SIGPROF, other_handler) == count_handler
						 ? "count_handler"
						 : "something else");
	show("signal()", SIGPROF, "SIGPROF");
	printf("signal() returned %s\n",
	       signal(SIGPROF, SIG_IGN) == other_handler ? "other_handler" : "something else");
	show("ignored", SIGPROF, "SIGPROF");
	sa.sa_handler = SIG_DFL;
	sa.sa_flags = 0;
	sigaction(SIGPROF, &sa, NULL);
	show("reset", SIGPROF, "SIGPROF");
	wpt_sig_work(CLOCK_MONOTONIC, 0.3);
	show("end", SIGPROF, "SIGPROF");
	return 0;
}

static void *queuefull_work(void *arg)
{
	(void)arg;
	wpt_sig_work(CLOCK_MONOTONIC, 0.6);
	return NULL;
}

static int mode_queuefull(void)
{
	sigset_t set;
	pthread_t t;

	if (wpt_sigqueue_fill(SIGRTMIN + 2, 0, &set) < 0)
		return 1;
	if (pthread_create(&t, NULL, queuefull_work, NULL))
		return 1;
	pthread_join(t, NULL);
	wpt_sigqueue_drain(&set);
	printf("queuefull: done\n");
	return 0;
}

/* setgid and setuid in a process of several threads (ours included): glibc
 * carries the change to every thread with a signal of its own (SIGSETXID)
 * and waits until each has taken it, so a thread that blocks it hangs the
 * call. Once the sampler ticks, then the calls (to the same ids: allowed
 * to anyone). */
static int mode_setxid(void)
{
	wpt_sig_work(CLOCK_MONOTONIC, 0.3);
	if (setgid(getgid()) != 0 || setuid(getuid()) != 0) {
		perror("setxid");
		return 1;
	}
	printf("setxid: done\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc == 2 ? argv[1] : "";

	if (strcmp(mode, "prof") == 0)
		return mode_prof();
	if (strcmp(mode, "timer") == 0)
		return mode_timer();
	if (strcmp(mode, "reset") == 0)
		return mode_reset();
	if (strcmp(mode, "mask") == 0)
		return mode_mask(0);
	if (strcmp(mode, "mask_thread") == 0)
		return mode_mask(1);
	if (strcmp(mode, "query") == 0)
		return mode_query();
	if (strcmp(mode, "queuefull") == 0)
		return mode_queuefull();
	if (strcmp(mode, "setxid") == 0)
		return mode_setxid();
	fprintf(stderr,
		"usage: signals prof|timer|reset|mask|mask_thread|query|queuefull|setxid\n");
	return 2;
}
