/* timers: running threads sampled by their CPU-time timers (e2e/timers.py).
 *   timers spin SECONDS      two threads spin for SECONDS (wpt_timers_spin)
 *                            and are joined; then, after 300 ms, the
 *                            program's own first timer_create: prints its id,
 *                            and how many of the process's timers have an
 *                            id above 2^30 (/proc/self/timers; -1 if the
 *                            kernel has no such file)
 *   timers ids               creates timers of its own (and deletes some)
 *                            between runs of a spinning thread, 8 times:
 *                            prints every id it got
 *   timers raw               holds a timer made by a raw timer_create system
 *                            call (as Go's runtime makes them), runs the two
 *                            spinners 0.5 s, then prints its next timer's id
 *   timers queue N           RLIMIT_SIGPENDING 64, the user's signal queue filled
 *                            but for N entries, the spinners 0.5 s, the queue
 *                            drained, then prints its first timer's id
 *   timers crowd N SECONDS   N threads spin for SECONDS of wall time
 *                            (wpt_timers_spin, 0.2 ms at a time between
 *                            sched_yield calls, so that every one of them
 *                            runs in every period) and are joined: more
 *                            running threads than CPUs, whose signals the
 *                            sampler spreads over the period
 * One result line, exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sigqueue.h"
#include "work.h"

WPT_WORK(wpt_timers_spin)

static double secs;

static void *spinner(void *arg)
{
	(void)arg;
	wpt_timers_spin(secs);
	return NULL;
}

/* Timers of the process with an id above 2^30: none of the program's. */
static long high_timers(void)
{
	FILE *f = fopen("/proc/self/timers", "r");
	char line[256];
	long n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		long id;

		if (sscanf(line, "ID: %ld", &id) == 1 && id > (1l << 30))
			n++;
	}
	fclose(f);
	return n;
}

static int spin_both(double s)
{
	pthread_t t[2];

	secs = s;
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, spinner, NULL))
			return -1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return 0;
}

static int mode_raw(void)
{
	struct sigevent sev;
	int kid;
	timer_t id;

	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_NONE;
	if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &sev, &kid) < 0 || spin_both(0.5) < 0 ||
	    timer_create(CLOCK_MONOTONIC, &sev, &id) < 0)
		return 1;
	printf("timers: raw %d, next id %ld\n", kid, (long)(intptr_t)id);
	return 0;
}

static int mode_queue(int room)
{
	struct sigevent sev;
	sigset_t set;
	timer_t id;

	if (wpt_sigqueue_fill(SIGRTMIN + 3, room, &set) < 0 || spin_both(0.5) < 0)
		return 1;
	wpt_sigqueue_drain(&set);
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_NONE;
	if (timer_create(CLOCK_MONOTONIC, &sev, &id) < 0)
		return 1;
	printf("timers: first id %ld\n", (long)(intptr_t)id);
	return 0;
}

static int mode_ids(void)
{
	struct sigevent sev;
	timer_t kept[16];
	int nk = 0;

	secs = 0.08;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_NONE;
	printf("timers: ids");
	for (int i = 0; i < 8; i++) {
		pthread_t t;
		timer_t a, b;

		/* a spinner: it runs long enough to be given a CPU timer */
		if (pthread_create(&t, NULL, spinner, NULL))
			return 1;
		if (timer_create(CLOCK_MONOTONIC, &sev, &a) < 0 ||
		    timer_create(CLOCK_REALTIME, &sev, &b) < 0)
			return 1;
		pthread_join(t, NULL);
		timer_delete(i % 2 ? a : b);
		kept[nk++] = i % 2 ? b : a;
		printf(" %ld %ld", (long)(intptr_t)a, (long)(intptr_t)b);
	}
	printf("\n");
	for (int i = 0; i < nk; i++)
		timer_delete(kept[i]);
	return 0;
}

static void *yielder(void *arg)
{
	double end = now_s() + secs;

	(void)arg;
	while (now_s() < end) {
		wpt_timers_spin(0.0002);
		sched_yield();
	}
	return NULL;
}

static int mode_crowd(int n, double s)
{
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	int rc = 0, made = 0;

	secs = s;
	if (!t || n < 1)
		return 2;
	while (made < n && !(rc = pthread_create(&t[made], NULL, yielder, NULL)))
		made++;
	for (int i = 0; i < made; i++)
		pthread_join(t[i], NULL);
	free(t);
	if (rc) {
		fprintf(stderr, "timers: pthread_create: %s\n", strerror(rc));
		return 1;
	}
	printf("timers: crowd of %d done\n", n);
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	struct sigevent sev;
	struct timespec pause = { 0, 300000000 };
	timer_t id;
	int rc;

	if (argc == 2 && strcmp(argv[1], "ids") == 0)
		return mode_ids();
	if (argc == 2 && strcmp(argv[1], "raw") == 0)
		return mode_raw();
	if (argc == 3 && strcmp(argv[1], "queue") == 0)
		return mode_queue(atoi(argv[2]));
	if (argc == 4 && strcmp(argv[1], "crowd") == 0)
		return mode_crowd(atoi(argv[2]), atof(argv[3]));
	if (argc != 3 || strcmp(argv[1], "spin") != 0) {
		fprintf(stderr, "usage: timers spin SECONDS | timers ids\n");
		return 2;
	}
	secs = atof(argv[2]);
	for (int i = 0; i < 2; i++)
		if ((rc = pthread_create(&t[i], NULL, spinner, NULL))) {
			fprintf(stderr, "timers: pthread_create: %s\n", strerror(rc));
			return 1;
		}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
		;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_NONE;
	if (timer_create(CLOCK_MONOTONIC, &sev, &id) < 0) {
		fprintf(stderr, "timers: timer_create: %s\n", strerror(errno));
		return 1;
	}
	printf("timers: first id %ld, high %ld\n", (long)(intptr_t)id, high_timers());
	return 0;
}
