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

struct worker {
	pthread_t t;
	double w0, w1, cpu_s;
	uint64_t result;
};

static uint64_t iters;

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The tid of the thread named exactly "wallprof", or 0. */
static pid_t find_sampler(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	pid_t found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[300], name[32];
		ssize_t n;
		int fd;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, name, sizeof(name) - 1);
		close(fd);
		if (n > 0 && name[n - 1] == '\n')
			n--;
		if (n == 8 && memcmp(name, "wallprof", 8) == 0)
			found = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	return found;
}

/* CPU seconds of thread `tid` of this process (schedstat), or -1. */
static double thread_cpu_s(pid_t tid)
{
	char path[64], buf[256];
	unsigned long long ns;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return sscanf(buf, "%llu", &ns) == 1 ? (double)ns / 1e9 : -1;
}

static inline uint64_t step(uint64_t x)
{
	return (x * 6364136223846793005ULL + 1442695040888963407ULL) ^ (x >> 29);
}

__attribute__((noinline)) static uint64_t burn_inner(uint64_t n, uint64_t x)
{
	for (uint64_t i = 0; i < n; i++)
		x = step(x);
	return x;
}

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
		    strstr(getenv("LD_PRELOAD"), "libwallprof"); i++) {
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
