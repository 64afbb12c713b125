/* bench.h: helpers shared by the benchmark programs (timing, the sampler
 * thread's CPU, a fixed arithmetic work loop). Header-only, static. */
#ifndef WP_BENCH_H
#define WP_BENCH_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static inline double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The tid of the thread named exactly "wallprof", or 0. */
static inline pid_t find_sampler(void)
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
static inline double thread_cpu_s(pid_t tid)
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

__attribute__((noinline, unused)) static uint64_t burn_inner(uint64_t n, uint64_t x)
{
	for (uint64_t i = 0; i < n; i++)
		x = step(x);
	return x;
}

#endif
