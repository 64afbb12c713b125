/* threadcreate: the cost of creating threads that do nothing.
 *
 *   threadcreate [NTHREADS [PARALLEL]]
 *
 * Creates NTHREADS threads (default 20000), PARALLEL (default 2) at a time,
 * each returning at once, and joins them. One line on stdout:
 * threads=N parallel=P seconds=<wall time of the create+join loop>
 * (CLOCK_MONOTONIC, measured here, so start-up and exit are not in it). The
 * benchmark compares seconds bare and under the preload. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static void *thread_main(void *arg)
{
	return arg;
}

int main(int argc, char **argv)
{
	long n = 20000, par = 2, i, k;
	double t0, t1;
	pthread_t t[64];
	int err;

	if (argc > 1)
		n = strtol(argv[1], NULL, 10);
	if (argc > 2)
		par = strtol(argv[2], NULL, 10);
	if (n < 1 || par < 1 || par > 64) {
		fprintf(stderr, "usage: threadcreate [NTHREADS [PARALLEL (1-64)]]\n");
		return 2;
	}
	t0 = clock_s(CLOCK_MONOTONIC);
	for (i = 0; i < n; i += par) {
		long m = n - i < par ? n - i : par;

		for (k = 0; k < m; k++) {
			err = pthread_create(&t[k], NULL, thread_main, NULL);
			if (err != 0) {
				fprintf(stderr, "threadcreate: pthread_create: %s\n",
					strerror(err));
				return 1;
			}
		}
		for (k = 0; k < m; k++)
			pthread_join(t[k], NULL);
	}
	t1 = clock_s(CLOCK_MONOTONIC);
	printf("threads=%ld parallel=%ld seconds=%.6f\n", n, par, t1 - t0);
	return 0;
}
