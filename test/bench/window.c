/* window: many blocked threads and a few busy ones, for the ring's window.
 *
 *   window NBLOCKED NBUSY SECONDS
 *
 * Starts NBLOCKED threads (64 KiB stacks) that wait in pthread_cond_wait
 * for the whole run and NBUSY that spin, lets them run for SECONDS, reads
 * VmRSS and VmHWM 100 ms before the end, then stops everything. One line
 * on stdout: rss_kb=... hwm_kb=... blocked=N busy=M seconds=S. The
 * benchmark reads how many seconds of history the exit profile holds. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stop;
static volatile int spin_stop;

static void *waiter(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	while (!stop)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return NULL;
}

__attribute__((noinline)) static void *busy(void *arg)
{
	uint64_t x = (uint64_t)(uintptr_t)arg;

	while (!spin_stop)
		for (int i = 0; i < 100000; i++)
			x = (x * 6364136223846793005ULL + 1) ^ (x >> 29);
	return (void *)(uintptr_t)x;
}

static long status_kb(const char *buf, const char *key)
{
	const char *p = strstr(buf, key);

	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) != 0)
		;
}

int main(int argc, char **argv)
{
	long nb, nu, i;
	double secs;
	pthread_t *t;
	pthread_attr_t at;
	char buf[4096];
	size_t len;
	FILE *f;

	if (argc < 4) {
		fprintf(stderr, "usage: window NBLOCKED NBUSY SECONDS\n");
		return 2;
	}
	nb = strtol(argv[1], NULL, 10);
	nu = strtol(argv[2], NULL, 10);
	secs = strtod(argv[3], NULL);
	if (nb < 0 || nu < 0 || secs < 0.2 || !(t = calloc((size_t)(nb + nu) + 1, sizeof(*t))))
		return 2;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 << 10);
	for (i = 0; i < nb; i++)
		if (pthread_create(&t[i], &at, waiter, NULL) != 0)
			return 2;
	for (i = 0; i < nu; i++)
		if (pthread_create(&t[nb + i], NULL, busy, (void *)(uintptr_t)(i + 1)) != 0)
			return 2;
	sleep_s(secs - 0.1);
	f = fopen("/proc/self/status", "r");
	if (!f)
		return 2;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	buf[len] = 0;
	fclose(f);
	printf("rss_kb=%ld hwm_kb=%ld blocked=%ld busy=%ld seconds=%.2f\n",
	       status_kb(buf, "VmRSS:"), status_kb(buf, "VmHWM:"), nb, nu, secs);
	fflush(stdout);
	sleep_s(0.1);
	spin_stop = 1;
	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (i = 0; i < nb + nu; i++)
		pthread_join(t[i], NULL);
	free(t);
	return 0;
}
