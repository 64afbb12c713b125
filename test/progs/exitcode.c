/* exitcode: deterministic output and exit status, with and without the
 * preload. "exitcode" ends with exit(7); "exitcode return" returns 3 from
 * main. About 0.5 s: prime counting plus a few short absolute-deadline waits. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_NS 60000000L /* each short wait */

__attribute__((noinline)) static long wpt_count_primes(long limit)
{
	long count = 0;

	for (long n = 2; n < limit; n++) {
		int prime = 1;

		for (long d = 2; d * d <= n; d++) {
			if (n % d == 0) {
				prime = 0;
				break;
			}
		}
		count += prime;
	}
	return count;
}

__attribute__((noinline)) static void wpt_short_wait(long ns)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += ns;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
}

int main(int argc, char **argv)
{
	int use_return = argc > 1 && strcmp(argv[1], "return") == 0;
	long limits[] = { 200000, 600000, 1200000 };

	if (argc > 1 && !use_return) {
		fprintf(stderr, "usage: exitcode [return]\n");
		return 2;
	}
	printf("exitcode: start\n");
	for (unsigned i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		printf("primes below %ld: %ld\n", limits[i], wpt_count_primes(limits[i]));
		wpt_short_wait(WAIT_NS);
	}
	wpt_short_wait(WAIT_NS);
	if (use_return) {
		printf("exitcode: returning 3\n");
		return 3;
	}
	printf("exitcode: exit(7)\n");
	exit(7);
}
