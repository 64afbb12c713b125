/* snapshot_ownusr2: a program that owns SIGUSR2, the profiler's default
 * snapshot signal. Its handler must run for every raise; the profiler must
 * step back (snapshots off) and still write the exit profile. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t nr_handled;
static volatile uint64_t sink;

static void on_usr2(int sig)
{
	(void)sig;
	nr_handled++;
}

__attribute__((noinline)) static uint64_t wpt_own_work(long ms)
{
	struct timespec t0, t;
	uint64_t x = 7;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 100000; i++) {
			x = x * 6364136223846793005ULL + 1;
			__asm__ volatile("" : "+r"(x));
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L < ms);
	return x;
}

int main(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr2;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGUSR2, &sa, NULL) != 0) {
		perror("snapshot_ownusr2: sigaction");
		return 2;
	}
	for (int i = 0; i < 3; i++)
		raise(SIGUSR2); /* delivered to this thread before raise() returns */
	sink = wpt_own_work(300);
	printf("handled %d\n", (int)nr_handled);
	return nr_handled == 3 ? 0 : 1;
}
