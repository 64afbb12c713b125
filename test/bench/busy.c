/* busy: R threads spinning for a fixed wall time, and the sampler's CPU.
 *
 *   busy NTHREADS SECONDS
 *
 * Starts NTHREADS threads (0 or more) that spin (no system calls) until
 * the main thread, asleep in nanosleep meanwhile, stops them after
 * SECONDS, and joins them. Under the preload, the thread named "wallprof" (the sampler)
 * is looked for first (up to 50 ms, outside the measured window), and its
 * CPU time read before the threads start and after they are joined.
 *
 * One line on stdout, key=value:
 *   wall_s         from before the first pthread_create to after the last
 *                  join (CLOCK_MONOTONIC)
 *   sampler_cpu_s  CPU time of the sampler thread over that window
 *                  (/proc/self/task/TID/schedstat), "na" without one
 *   busy_cpu_s     CPU time of the spinning threads, summed
 *   threads=N */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

struct worker {
	pthread_t t;
	double cpu_s;
	uint64_t result;
};

static volatile int stop;

__attribute__((noinline)) static uint64_t spin(uint64_t x)
{
	while (!stop)
		x = burn_inner(100000, x);
	return x;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);

	w->result = spin((uintptr_t)w);
	w->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) != 0)
		;
}

int main(int argc, char **argv)
{
	long n, i;
	double secs, w0, w1, cpu = 0, s0 = -1, s1 = -1;
	struct worker *w;
	uint64_t sum = 0;
	pid_t sampler;
	const char *pre = getenv("LD_PRELOAD");

	if (argc < 3) {
		fprintf(stderr, "usage: busy NTHREADS SECONDS\n");
		return 2;
	}
	n = strtol(argv[1], NULL, 10);
	secs = strtod(argv[2], NULL);
	if (n < 0 || secs <= 0 || !(w = calloc((size_t)(n ? n : 1), sizeof(*w))))
		return 2;
	sampler = find_sampler();
	for (i = 0; !sampler && i < 25 && pre && strstr(pre, "libwallprof"); i++) {
		sleep_s(0.002);
		sampler = find_sampler();
	}
	if (sampler)
		s0 = thread_cpu_s(sampler);
	w0 = clock_s(CLOCK_MONOTONIC);
	for (i = 0; i < n; i++)
		if (pthread_create(&w[i].t, NULL, worker_main, &w[i]) != 0) {
			fprintf(stderr, "busy: pthread_create failed\n");
			return 2;
		}
	sleep_s(secs);
	stop = 1;
	for (i = 0; i < n; i++) {
		pthread_join(w[i].t, NULL);
		cpu += w[i].cpu_s;
		sum ^= w[i].result;
	}
	w1 = clock_s(CLOCK_MONOTONIC);
	if (sampler)
		s1 = thread_cpu_s(sampler);
	printf("wall_s=%.6f ", w1 - w0);
	if (s0 >= 0 && s1 >= 0)
		printf("sampler_cpu_s=%.6f ", s1 - s0);
	else
		printf("sampler_cpu_s=na ");
	printf("busy_cpu_s=%.6f threads=%ld checksum=%016llx\n", cpu, n, (unsigned long long)sum);
	free(w);
	return 0;
}
