/* snapshot: a long-running target for on-demand snapshots. A "busy" and a
 * "sleeper" thread run until a line (or EOF) arrives on stdin. "ready" is
 * printed once both have done a warm-up share of work, so a snapshot taken
 * right after it already holds samples of both. */
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

#define NAP_NS 20000000L       /* sleeper period */
#define WARM_NAPS 15           /* sleeper naps before it counts as warm (0.3 s) */
#define WARM_BURN_NS 300000000 /* busy time before it counts as warm */

static atomic_int stop;
static pthread_mutex_t warm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t warm_cond = PTHREAD_COND_INITIALIZER;
static int nr_warm; /* threads done warming up; under warm_lock */
static volatile uint64_t sink;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void mark_warm(void)
{
	pthread_mutex_lock(&warm_lock);
	nr_warm++;
	pthread_cond_broadcast(&warm_cond);
	pthread_mutex_unlock(&warm_lock);
}

__attribute__((noinline)) static uint64_t wpt_snap_burn(void)
{
	int64_t warm_at = now_ns() + WARM_BURN_NS;
	int warm = 0;
	uint64_t x = 1;

	while (!atomic_load(&stop)) {
		for (int i = 0; i < 100000; i++) {
			x = x * 6364136223846793005ULL + 1;
			__asm__ volatile("" : "+r"(x));
		}
		if (!warm && now_ns() >= warm_at) {
			warm = 1;
			mark_warm();
		}
	}
	return x;
}

__attribute__((noinline)) static long wpt_snap_nap(void)
{
	struct timespec next;
	long naps = 0;

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(&stop)) {
		next.tv_nsec += NAP_NS;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		if (++naps == WARM_NAPS)
			mark_warm();
	}
	return naps;
}

static void *busy_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "busy");
	sink = wpt_snap_burn();
	return NULL;
}

static void *sleeper_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sleeper");
	wpt_snap_nap();
	return NULL;
}

/* Returns once a newline or EOF (or a read error) is seen on stdin. */
__attribute__((noinline)) static void wpt_wait_stdin(void)
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

int main(void)
{
	pthread_t busy, sleeper;

	if (pthread_create(&busy, NULL, busy_main, NULL) ||
	    pthread_create(&sleeper, NULL, sleeper_main, NULL)) {
		fprintf(stderr, "snapshot: pthread_create failed\n");
		return 2;
	}
	pthread_mutex_lock(&warm_lock);
	while (nr_warm < 2)
		pthread_cond_wait(&warm_cond, &warm_lock);
	pthread_mutex_unlock(&warm_lock);
	printf("ready\n");
	fflush(stdout);

	wpt_wait_stdin();
	atomic_store(&stop, 1);
	pthread_join(busy, NULL);
	pthread_join(sleeper, NULL);
	printf("snapshot: done\n");
	return 0;
}
