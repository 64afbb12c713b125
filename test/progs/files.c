/* files: the descriptor numbers a program gets from open() are the ones it
 * would get without the profiler.
 *
 *   files SECONDS
 *
 * Prints the number its first open() returns, then for SECONDS closes fd 0
 * and reopens /dev/null over and over, expecting 0 back every time (what a
 * daemon does with its stdio), while one thread spins and another creates
 * and joins short threads (new threads make a profiler look them up in
 * /proc). Prints how often another number came back (0 without a profiler)
 * and the number open() returns at the end.
 *
 *   files closeout
 *
 * Waits (up to 5 s) for a thread named "wallprof" when LD_PRELOAD is set, so
 * that a profiler has started, prints "closing", closes stdout and stderr,
 * then reads stdin to end-of-file with a busy thread running, and exits 0.
 * Whoever reads its stdout must see end-of-file before closing its stdin:
 * nothing else may hold the closed pipe open.
 *
 *   files list
 *
 * With a busy thread sampled for 0.5 s, lists the descriptors the process
 * holds from 3 up (the profiler may hold none the program can see; it used
 * to keep libunwind's pipe at 768/769): "fds: 3 5" or "fds: none". */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "work.h"

static atomic_int stop;

WPT_WORK(wpt_fds_busy)

static void *busy_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		wpt_fds_busy(0.01);
	return NULL;
}

static void *short_main(void *arg)
{
	(void)arg;
	sink += spin(0.0002);
	return NULL;
}

static void *churn_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		pthread_t t;

		if (pthread_create(&t, NULL, short_main, NULL) == 0)
			pthread_join(t, NULL);
	}
	return NULL;
}

/* Whether a thread of this process is named `name`. */
static int have_thread(const char *name)
{
	char path[64], comm[32];
	int found = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	while (d && (e = readdir(d)) && !found) {
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strcmp(comm, name))
			found = 1;
		fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

static int mode_closeout(void)
{
	pthread_t busy;
	double deadline = now_s() + 5;
	char buf[256];

	if (getenv("LD_PRELOAD"))
		while (!have_thread("wallprof\n") && now_s() < deadline)
			sched_yield();

	printf("closing\n");
	fflush(stdout);
	close(1);
	close(2);
	pthread_create(&busy, NULL, busy_main, NULL);
	/* 50 ms of work with the busy thread, so that a profile has ticks
	 * however soon stdin ends (its reader closes it at end-of-file). */
	deadline = now_s() + 0.05;
	while (now_s() < deadline)
		sched_yield();
	while (read(0, buf, sizeof(buf)) > 0 || errno == EINTR)
		;
	atomic_store(&stop, 1);
	pthread_join(busy, NULL);
	return 0;
}

static int mode_list(void)
{
	pthread_t busy;
	double deadline = now_s() + 5;
	DIR *d;
	struct dirent *e;
	int n = 0, self, fds[64];

	if (getenv("LD_PRELOAD"))
		while (!have_thread("wallprof\n") && now_s() < deadline)
			sched_yield();
	pthread_create(&busy, NULL, busy_main, NULL);
	deadline = now_s() + 0.5;
	while (now_s() < deadline)
		sched_yield();
	atomic_store(&stop, 1);
	pthread_join(busy, NULL);
	d = opendir("/proc/self/fd");
	self = d ? dirfd(d) : -1;
	while (d && (e = readdir(d)) && n < 64) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] != '.' && fd >= 3 && fd != self)
			fds[n++] = fd;
	}
	if (d)
		closedir(d);
	printf("fds:");
	for (int i = 0; i < n; i++) /* readdir lists them in order */
		printf(" %d", fds[i]);
	printf("%s\n", n ? "" : " none");
	return 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0, end;
	long other = 0;
	pthread_t busy, churn;
	int fd;

	if (argc == 2 && !strcmp(argv[1], "closeout"))
		return mode_closeout();
	if (argc == 2 && !strcmp(argv[1], "list"))
		return mode_list();
	fd = open("/dev/null", O_RDONLY);
	printf("first open: %d\n", fd);
	close(fd);
	pthread_create(&busy, NULL, busy_main, NULL);
	pthread_create(&churn, NULL, churn_main, NULL);
	end = now_s() + seconds;
	while (now_s() < end) {
		close(0);
		fd = open("/dev/null", O_RDONLY);
		if (fd != 0) {
			other++;
			if (fd >= 0) {
				dup2(fd, 0);
				close(fd);
			}
		}
	}
	atomic_store(&stop, 1);
	pthread_join(busy, NULL);
	pthread_join(churn, NULL);
	printf("reopened stdin got another number: %ld times\n", other);
	fd = open("/dev/null", O_RDONLY);
	printf("open at the end: %d\n", fd);
	return 0;
}
