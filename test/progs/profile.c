/* profile: the main end-to-end target (test/e2e/profile.py). Three named
 * threads, one per kind of wall time: "busy" spins on the CPU, "sleeper" naps
 * in an absolute-deadline loop, "piper" blocks in read() on a pipe.
 * Usage: profile [seconds] (2.0).
 * Every wait survives the profiler's SA_RESTART signal (retry on EINTR). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NAP_NS 50000000L /* sleeper granularity: how late a stop request is seen */

static double run_seconds = 2.0;
static atomic_int stop_sleeper;
static int pipe_fds[2];
static volatile uint64_t sink; /* keeps the busy loop's result alive */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One step of a 64-bit LCG with an xorshift: a long dependency chain, so the
 * samples of the busy thread land on this line most of the time. */
static inline __attribute__((always_inline)) uint64_t wpt_inline_step(uint64_t x)
{
	uint64_t y = x >> 29;

	x = (x * 6364136223846793005ULL + 1442695040888963407ULL) ^ y; /* MARK:inline_step */
	return x;
}

__attribute__((noinline)) static uint64_t wpt_burn_cpu(double seconds)
{
	double end = now_s() + seconds;
	uint64_t x = 88172645463325252ULL;

	do {
		for (int i = 0; i < 200000; i++) {
			x = wpt_inline_step(x); /* MARK:inline_call */
			__asm__ volatile("" : "+r"(x));
		}
	} while (now_s() < end);
	return x;
}

/* Sleeps in NAP_NS steps on absolute deadlines until asked to stop; returns
 * the number of naps. */
__attribute__((noinline)) static long wpt_nap(void)
{
	struct timespec next;
	long naps = 0;

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(&stop_sleeper)) {
		next.tv_nsec += NAP_NS;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		naps++;
	}
	return naps;
}

/* Blocks until one byte (or EOF) arrives on the pipe. */
__attribute__((noinline)) static int wpt_wait_pipe(int fd)
{
	char c;
	ssize_t n;

	do
		n = read(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? c : -1;
}

static void *busy_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "busy");
	sink = wpt_burn_cpu(run_seconds);
	return NULL;
}

static void *sleeper_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sleeper");
	wpt_nap();
	return NULL;
}

static void *piper_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "piper");
	if (wpt_wait_pipe(pipe_fds[0]) != 'q')
		fprintf(stderr, "profile: piper: unexpected pipe data\n");
	return NULL;
}

static void start(pthread_t *t, void *(*fn)(void *))
{
	int err = pthread_create(t, NULL, fn, NULL);

	if (err) {
		fprintf(stderr, "profile: pthread_create: %s\n", strerror(err));
		exit(2);
	}
}

int main(int argc, char **argv)
{
	pthread_t busy, sleeper, piper;

	if (argc > 1) {
		run_seconds = strtod(argv[1], NULL);
		if (!(run_seconds > 0 && run_seconds < 3600)) {
			fprintf(stderr, "usage: profile [seconds]\n");
			return 2;
		}
	}
	if (pipe(pipe_fds) != 0) {
		perror("profile: pipe");
		return 2;
	}
	start(&busy, busy_main);
	start(&sleeper, sleeper_main);
	start(&piper, piper_main);

	pthread_join(busy, NULL);
	while (write(pipe_fds[1], "q", 1) < 0 && errno == EINTR)
		;
	atomic_store(&stop_sleeper, 1);
	pthread_join(piper, NULL);
	pthread_join(sleeper, NULL);

	printf("profile: done\n");
	return 0;
}
