/* mixed: a program that computes and waits, the profiler's overhead on both.
 *
 *   mixed ITERS [THREADS]
 *
 * THREADS threads (default 64): 4 busy threads each doing ITERS iterations of
 * a dependent arithmetic chain (fixed work), 1 feeder thread writing 4 bytes
 * to a pipe every 500 us, and THREADS - 5 waiters. Each waiter loops over
 * three operations in turn:
 *   - nanosleep for 1-5 ms (random);
 *   - a 1-byte read from the pipe (blocks until the feeder writes);
 *   - a lock of one contended mutex, ~20 us of work inside, unlock.
 * The waiters start first; after 100 ms the busy threads start, and the
 * measurement window runs from their start to the end of the last of them.
 *
 * One line on stdout, key=value:
 *   busy_wall_s   wall time of the busy threads' fixed work (the window)
 *   ops           operations the waiters completed in the window
 *   ops_per_s     ops / busy_wall_s
 *   sleeps, reads, locks   the same split by kind
 *   proc_cpu_s    process CPU time over the window
 *   busy_cpu_s    CPU time of the busy threads (summed)
 *   sampler_cpu_s CPU time of the thread named "wallprof" over the window
 *                 (/proc/self/task/TID/schedstat), "na" without one */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define NR_BUSY 4

static uint64_t iters;
static atomic_int stop;
static int pipefd[2];
static pthread_mutex_t contended = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t sink;

struct waiter {
	pthread_t t;
	unsigned seed;
	_Atomic uint64_t ops[3];
	char pad[64];
};

struct busy {
	pthread_t t;
	double w0, w1, cpu_s;
	uint64_t result;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


__attribute__((noinline)) static uint64_t burn(uint64_t n, uint64_t x)
{
	for (uint64_t i = 0; i < n; i++)
		x = step(x);
	return x;
}

static void *busy_main(void *arg)
{
	struct busy *b = arg;
	double c0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);

	b->w0 = now_s();
	b->result = burn(iters, (uintptr_t)b);
	b->w1 = now_s();
	b->cpu_s = cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

__attribute__((noinline)) static void op_sleep(unsigned *seed)
{
	struct timespec ts = { 0, (1 + rand_r(seed) % 5) * 1000000L };

	nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void op_read(void)
{
	char c;

	while (read(pipefd[0], &c, 1) < 0 && errno == EINTR)
		;
}

__attribute__((noinline)) static void op_lock(void)
{
	double end;

	pthread_mutex_lock(&contended);
	end = now_s() + 20e-6;
	while (now_s() < end)
		sink = step(sink);
	pthread_mutex_unlock(&contended);
}

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	unsigned k = w->seed % 3;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		switch (k++ % 3) {
		case 0:
			op_sleep(&w->seed);
			atomic_fetch_add_explicit(&w->ops[0], 1, memory_order_relaxed);
			break;
		case 1:
			op_read();
			atomic_fetch_add_explicit(&w->ops[1], 1, memory_order_relaxed);
			break;
		default:
			op_lock();
			atomic_fetch_add_explicit(&w->ops[2], 1, memory_order_relaxed);
		}
	}
	return NULL;
}

static void *feeder_main(void *arg)
{
	struct timespec ts = { 0, 500000 };

	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		if (write(pipefd[1], "abcd", 4) < 0 && errno != EAGAIN)
			break;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void sum_ops(struct waiter *w, long n, uint64_t out[3])
{
	out[0] = out[1] = out[2] = 0;
	for (long i = 0; i < n; i++)
		for (int k = 0; k < 3; k++)
			out[k] += atomic_load(&w[i].ops[k]);
}

int main(int argc, char **argv)
{
	long threads = 64, nw, i;
	struct waiter *w;
	struct busy b[NR_BUSY];
	pthread_t feeder;
	struct timespec warm = { 0, 100000000 };
	uint64_t o0[3], o1[3], sum = 0;
	double first = 1e300, last = 0, wall, p0, p1, s0 = -1, s1 = -1, busy_cpu = 0;
	pid_t sampler;

	if (argc < 2) {
		fprintf(stderr, "usage: mixed ITERS [THREADS]\n");
		return 2;
	}
	iters = strtoull(argv[1], NULL, 10);
	if (argc > 2)
		threads = strtol(argv[2], NULL, 10);
	nw = threads - NR_BUSY - 1;
	if (nw < 1 || !(w = calloc((size_t)nw, sizeof(*w))))
		return 2;
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return 2;
	fcntl(pipefd[1], F_SETFL, O_NONBLOCK);
	if (pthread_create(&feeder, NULL, feeder_main, NULL) != 0)
		return 2;
	for (i = 0; i < nw; i++) {
		w[i].seed = (unsigned)i * 2654435761u + 1;
		if (pthread_create(&w[i].t, NULL, waiter_main, &w[i]) != 0)
			return 2;
	}
	nanosleep(&warm, NULL);
	sampler = find_sampler();
	if (sampler)
		s0 = thread_cpu_s(sampler);
	p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
	sum_ops(w, nw, o0);
	for (i = 0; i < NR_BUSY; i++)
		if (pthread_create(&b[i].t, NULL, busy_main, &b[i]) != 0)
			return 2;
	for (i = 0; i < NR_BUSY; i++) {
		pthread_join(b[i].t, NULL);
		if (b[i].w0 < first)
			first = b[i].w0;
		if (b[i].w1 > last)
			last = b[i].w1;
		sum ^= b[i].result;
		busy_cpu += b[i].cpu_s;
	}
	sum_ops(w, nw, o1);
	p1 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
	if (sampler)
		s1 = thread_cpu_s(sampler);
	wall = last - first;
	atomic_store(&stop, 1);
	/* Waiters blocked on the pipe: the feeder has stopped; one byte each. */
	for (i = 0; i < nw; i++)
		if (write(pipefd[1], "z", 1) < 0)
			break;
	for (i = 0; i < nw; i++)
		pthread_join(w[i].t, NULL);
	pthread_join(feeder, NULL);
	{
		uint64_t s = o1[0] - o0[0], r = o1[1] - o0[1], l = o1[2] - o0[2];

		printf("busy_wall_s=%.6f ops=%llu ops_per_s=%.1f sleeps=%llu reads=%llu locks=%llu "
		       "proc_cpu_s=%.6f busy_cpu_s=%.6f ",
		       wall, (unsigned long long)(s + r + l), (double)(s + r + l) / wall,
		       (unsigned long long)s, (unsigned long long)r, (unsigned long long)l, p1 - p0,
		       busy_cpu);
		if (s0 >= 0 && s1 >= 0)
			printf("sampler_cpu_s=%.6f ", s1 - s0);
		else
			printf("sampler_cpu_s=na ");
		printf("threads=%ld iters=%llu checksum=%016llx\n", threads,
		       (unsigned long long)iters, (unsigned long long)sum);
	}
	free(w);
	return 0;
}
