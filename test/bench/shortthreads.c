/* shortthreads: many threads that each live a few milliseconds on CPU.
 *
 *   shortthreads NTHREADS WORK_MS [PARALLEL]
 *
 * Creates NTHREADS threads, PARALLEL (default 2) at a time; each spins in
 * short_work() until its own CPU clock has advanced WORK_MS milliseconds,
 * then ends. One line on stdout: threads=N cpu_s=<CPU time all of them
 * spent in short_work> seconds=<wall time>. The benchmark compares the
 * profile's on-CPU samples in short_work with cpu_s. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"

static double work_s;
static _Atomic uint64_t cpu_ns; /* summed over the threads */
static volatile uint64_t sink;

__attribute__((noinline)) static void short_work(void)
{
	double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID), t;
	uint64_t x = (uint64_t)(uintptr_t)&t0;

	do {
		for (int i = 0; i < 2000; i++)
			x = (x * 6364136223846793005ULL + 1) ^ (x >> 29);
		t = clock_s(CLOCK_THREAD_CPUTIME_ID);
	} while (t - t0 < work_s);
	sink += x;
	atomic_fetch_add(&cpu_ns, (uint64_t)((t - t0) * 1e9));
}

static void *thread_main(void *arg)
{
	(void)arg;
	short_work();
	return NULL;
}

int main(int argc, char **argv)
{
	long n, par, i, k;
	double t0;
	pthread_t t[64];

	if (argc < 3) {
		fprintf(stderr, "usage: shortthreads NTHREADS WORK_MS [PARALLEL]\n");
		return 2;
	}
	n = strtol(argv[1], NULL, 10);
	work_s = strtod(argv[2], NULL) / 1e3;
	par = argc > 3 ? strtol(argv[3], NULL, 10) : 2;
	if (n < 1 || work_s <= 0 || par < 1 || par > 64)
		return 2;
	t0 = clock_s(CLOCK_MONOTONIC);
	for (i = 0; i < n; i += par) {
		long m = n - i < par ? n - i : par;

		for (k = 0; k < m; k++)
			if (pthread_create(&t[k], NULL, thread_main, NULL) != 0)
				return 2;
		for (k = 0; k < m; k++)
			pthread_join(t[k], NULL);
	}
	printf("threads=%ld cpu_s=%.4f seconds=%.3f\n", n, (double)atomic_load(&cpu_ns) / 1e9,
	       clock_s(CLOCK_MONOTONIC) - t0);
	return 0;
}
