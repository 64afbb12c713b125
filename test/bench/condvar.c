/* condvar: benchmark program for the profiler's per-tick cost.
 *
 *   condvar [-r RUNNING] [-d SECONDS] ITERS [BLOCKED]
 *
 * Starts BLOCKED threads (default 1000, 64 KiB stacks) that wait on one
 * condition variable for the whole run, waits until they are all waiting,
 * then starts RUNNING busy threads (default 1). Each busy thread does ITERS
 * iterations of a dependent arithmetic chain (a fixed amount of CPU work), or,
 * with -d, spins for SECONDS of wall time (ITERS is then ignored). The main
 * thread blocks in pthread_join meanwhile.
 *
 * One line on stdout, key=value, seconds as decimals:
 *   busy_wall_s    wall time of the fixed work (CLOCK_MONOTONIC, slowest busy thread)
 *   busy_cpu_s     CPU time of the busy threads during it (CLOCK_THREAD_CPUTIME_ID, summed)
 *   proc_cpu_s     process CPU time over the measurement window
 *   wall_s         wall time of the measurement window
 *   sampler_cpu_s  CPU time of the thread named "wallprof" over the window
 *                  (/proc/self/task/TID/schedstat, else stat utime+stime); "na"
 *                  when there is no such thread (no preload)
 *   total_proc_cpu_s, total_wall_s   the same from the start of main to the end
 * The window opens when the blocked threads are all waiting and closes when
 * the last busy thread is done, so thread creation and the profiler's start
 * and exit dump are outside it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define BLOCKED_STACK (64 * 1024)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;      /* the blocked threads wait here */
static pthread_cond_t ready_cv = PTHREAD_COND_INITIALIZER; /* main waits for them here */
static int nr_waiting;
static int stop;

static uint64_t iters;
static double spin_seconds; /* > 0: -d mode */

struct busy {
	pthread_t t;
	double wall_s, cpu_s;
	uint64_t result;
};


static void die(const char *what, int err)
{
	fprintf(stderr, "condvar: %s: %s\n", what, strerror(err));
	exit(2);
}

static void *blocked_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	nr_waiting++;
	pthread_cond_signal(&ready_cv); /* main re-checks the count */
	while (!stop) /* spurious wake-ups (signals) go back to sleep */
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return NULL;
}

__attribute__((noinline)) static uint64_t burn_iters(uint64_t n, uint64_t x)
{
	for (uint64_t i = 0; i < n; i++)
		x = step(x);
	return x;
}

__attribute__((noinline)) static uint64_t burn_seconds(double s, uint64_t x)
{
	double end = clock_s(CLOCK_MONOTONIC) + s;

	do
		x = burn_iters(100000, x);
	while (clock_s(CLOCK_MONOTONIC) < end);
	return x;
}

static void *busy_main(void *arg)
{
	struct busy *b = arg;
	double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);

	b->result = spin_seconds > 0 ? burn_seconds(spin_seconds, (uintptr_t)b)
				     : burn_iters(iters, (uintptr_t)b);
	b->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	b->wall_s = clock_s(CLOCK_MONOTONIC) - w0;
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: condvar [-r RUNNING] [-d SECONDS] ITERS [BLOCKED]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	double t_start = clock_s(CLOCK_MONOTONIC);
	long running = 1, blocked = 1000, i;
	pthread_t *waiters;
	struct busy *busy;
	pthread_attr_t small;
	double w0, p0, s0 = -1, w1, p1, s1 = -1, busy_wall = 0, busy_cpu = 0;
	uint64_t sum = 0;
	pid_t sampler;
	int opt, rc;

	while ((opt = getopt(argc, argv, "r:d:")) != -1) {
		switch (opt) {
		case 'r':
			running = strtol(optarg, NULL, 10);
			break;
		case 'd':
			spin_seconds = strtod(optarg, NULL);
			break;
		default:
			usage();
		}
	}
	if (optind >= argc || running < 1 || spin_seconds < 0)
		usage();
	iters = strtoull(argv[optind], NULL, 10);
	if (optind + 1 < argc)
		blocked = strtol(argv[optind + 1], NULL, 10);
	if (blocked < 0)
		usage();

	waiters = calloc((size_t)blocked + 1, sizeof(*waiters));
	busy = calloc((size_t)running, sizeof(*busy));
	if (!waiters || !busy)
		die("calloc", ENOMEM);
	pthread_attr_init(&small);
	if ((rc = pthread_attr_setstacksize(&small, BLOCKED_STACK)) != 0)
		die("pthread_attr_setstacksize", rc);
	for (i = 0; i < blocked; i++)
		if ((rc = pthread_create(&waiters[i], &small, blocked_main, NULL)) != 0)
			die("pthread_create (blocked)", rc);
	pthread_mutex_lock(&mu);
	while (nr_waiting < blocked)
		pthread_cond_wait(&ready_cv, &mu);
	pthread_mutex_unlock(&mu);
	/* The last one has released the mutex inside pthread_cond_wait by now
	 * (we held it); give the kernel a moment to put it to sleep. */
	usleep(20000);

	sampler = find_sampler();
	w0 = clock_s(CLOCK_MONOTONIC);
	p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	if (sampler)
		s0 = thread_cpu_s(sampler);
	for (i = 0; i < running; i++)
		if ((rc = pthread_create(&busy[i].t, NULL, busy_main, &busy[i])) != 0)
			die("pthread_create (busy)", rc);
	for (i = 0; i < running; i++) {
		pthread_join(busy[i].t, NULL);
		if (busy[i].wall_s > busy_wall)
			busy_wall = busy[i].wall_s;
		busy_cpu += busy[i].cpu_s;
		sum ^= busy[i].result;
	}
	p1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	w1 = clock_s(CLOCK_MONOTONIC);
	if (sampler)
		s1 = thread_cpu_s(sampler);

	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (i = 0; i < blocked; i++)
		pthread_join(waiters[i], NULL);

	printf("busy_wall_s=%.6f busy_cpu_s=%.6f proc_cpu_s=%.6f wall_s=%.6f ", busy_wall, busy_cpu,
	       p1 - p0, w1 - w0);
	if (sampler && s0 >= 0 && s1 >= 0)
		printf("sampler_cpu_s=%.6f ", s1 - s0);
	else
		printf("sampler_cpu_s=na ");
	printf("total_proc_cpu_s=%.6f total_wall_s=%.6f running=%ld blocked=%ld iters=%llu "
	       "spin_s=%.3f sampler_tid=%d checksum=%016llx\n",
	       clock_s(CLOCK_PROCESS_CPUTIME_ID), clock_s(CLOCK_MONOTONIC) - t_start, running,
	       blocked, (unsigned long long)iters, spin_seconds, (int)sampler,
	       (unsigned long long)sum);
	fflush(stdout);
	free(waiters);
	free(busy);
	return 0;
}
