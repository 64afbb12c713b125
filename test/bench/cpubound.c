/* cpubound: CPU-bound benchmark program (profiler overhead on pure compute).
 *
 *   cpubound ITERS [THREADS]
 *
 * Starts THREADS threads (default 2, one per core on the bench machine) that
 * each run ITERS iterations of a dependent arithmetic chain: a fixed amount
 * of work, no system calls, no memory traffic. The main thread waits in
 * pthread_join.
 *
 * One line on stdout, key=value:
 *   busy_wall_s  wall time of the fixed work (CLOCK_MONOTONIC, from the
 *                first thread's start to the last thread's end)
 *   busy_cpu_s   CPU time of the worker threads (CLOCK_THREAD_CPUTIME_ID, summed)
 *   max_thread_wall_s  the slowest worker's own wall time
 *   proc_cpu_s   process CPU time over the window (profiler threads included)
 *   sampler_cpu_s  CPU time of the thread named "wallprof" over the window
 *                (/proc/self/task/TID/schedstat), "na" without one */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

struct worker {
	pthread_t t;
	double w0, w1, cpu_s;
	uint64_t result;
};

static uint64_t iters;


/* Two levels so that stacks have a few frames. */
__attribute__((noinline)) static uint64_t burn(uint64_t n, uint64_t x)
{
	const uint64_t chunk = 1000000;

	while (n >= chunk) {
		x = burn_inner(chunk, x);
		n -= chunk;
	}
	return burn_inner(n, x);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);

	w->w0 = clock_s(CLOCK_MONOTONIC);
	w->result = burn(iters, (uintptr_t)w);
	w->w1 = clock_s(CLOCK_MONOTONIC);
	w->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

int main(int argc, char **argv)
{
	long n = 2, i;
	struct worker *w;
	double p0, p1, first = 1e300, last = 0, slowest = 0, cpu = 0, s0 = -1, s1 = -1;
	uint64_t sum = 0;
	pid_t sampler;

	if (argc < 2) {
		fprintf(stderr, "usage: cpubound ITERS [THREADS]\n");
		return 2;
	}
	iters = strtoull(argv[1], NULL, 10);
	if (argc > 2)
		n = strtol(argv[2], NULL, 10);
	if (n < 1 || !(w = calloc((size_t)n, sizeof(*w))))
		return 2;
	/* Under the preload the sampler thread names itself once it runs: give
	 * it up to 50 ms (outside the measured window). */
	sampler = find_sampler();
	for (i = 0; !sampler && i < 25 && getenv("LD_PRELOAD") &&
		    strstr(getenv("LD_PRELOAD"), "libwallprof");
	     i++) {
		struct timespec ts = { 0, 2000000 };

		nanosleep(&ts, NULL);
		sampler = find_sampler();
	}
	if (sampler)
		s0 = thread_cpu_s(sampler);
	p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	for (i = 0; i < n; i++)
		if (pthread_create(&w[i].t, NULL, worker_main, &w[i]) != 0) {
			fprintf(stderr, "cpubound: pthread_create failed\n");
			return 2;
		}
	for (i = 0; i < n; i++) {
		pthread_join(w[i].t, NULL);
		if (w[i].w0 < first)
			first = w[i].w0;
		if (w[i].w1 > last)
			last = w[i].w1;
		if (w[i].w1 - w[i].w0 > slowest)
			slowest = w[i].w1 - w[i].w0;
		cpu += w[i].cpu_s;
		sum ^= w[i].result;
	}
	p1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	if (sampler)
		s1 = thread_cpu_s(sampler);
	printf("busy_wall_s=%.6f busy_cpu_s=%.6f max_thread_wall_s=%.6f proc_cpu_s=%.6f ",
	       last - first, cpu, slowest, p1 - p0);
	if (s0 >= 0 && s1 >= 0)
		printf("sampler_cpu_s=%.6f ", s1 - s0);
	else
		printf("sampler_cpu_s=na ");
	printf("threads=%ld iters=%llu checksum=%016llx\n", n, (unsigned long long)iters,
	       (unsigned long long)sum);
	free(w);
	return 0;
}
