/* chunks: a target for periodic chunks and uploads. A "spinner" thread
 * burns CPU in spin_work() and a "napper" thread sleeps in nap_work(), for
 * SECONDS seconds (argv[1], default 3; 0: until stdin closes or a line
 * arrives), then main prints "done" and exits with status 0. Prints
 * "ready" once both threads run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop, running;
static volatile uint64_t sink;

__attribute__((noinline)) static void spin_work(void)
{
	for (int i = 0; i < 100000; i++)
		sink += (uint64_t)i * 2654435761u;
}

__attribute__((noinline)) static void nap_work(void)
{
	struct timespec ts = { 0, 10000000 };

	nanosleep(&ts, NULL);
}

static void *spinner(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "spinner");
	atomic_fetch_add(&running, 1);
	while (!atomic_load(&stop))
		spin_work();
	return NULL;
}

static void *napper(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "napper");
	atomic_fetch_add(&running, 1);
	while (!atomic_load(&stop))
		nap_work();
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	pthread_t a, b;
	char line[64];

	if (pthread_create(&a, NULL, spinner, NULL) || pthread_create(&b, NULL, napper, NULL))
		return 2;
	while (atomic_load(&running) < 2)
		sched_yield();
	printf("ready\n");
	fflush(stdout);
	if (seconds > 0) {
		struct timespec ts = { (time_t)seconds,
				       (long)((seconds - (double)(time_t)seconds) * 1e9) };

		while (nanosleep(&ts, &ts) != 0)
			;
	} else {
		(void)!fgets(line, sizeof(line), stdin);
	}
	atomic_store(&stop, 1);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("done\n");
	return 0;
}
