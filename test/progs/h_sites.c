/* h_sites: blocking calls made again and again from the same places and from
 * look-alike places, for the sampler's replay of walks from published
 * registers (WALLPROF_TEST_SITE_CHECK=1 checks every replay against a real
 * libunwind walk).
 *
 *   h_sites SECONDS
 *
 * Four threads loop for SECONDS. Each iteration picks, at random, a
 * recursion depth (0-5) and one of two functions with identical frames
 * (wpt_site_a, wpt_site_b: same stack pointer at the call, different return
 * addresses), which sleep 1 ms in nanosleep or wait 1 ms in poll. Prints
 * "sites: done". */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "h_work.h"

static double end_s;

WPT_WORK(wpt_sites_busy)

__attribute__((noipa)) static void block_once(unsigned r)
{
	struct timespec ts = { 0, 1000000 };

	if (r & 1)
		nanosleep(&ts, NULL);
	else
		poll(NULL, 0, 1);
}

__attribute__((noipa)) static void wpt_site_a(unsigned r)
{
	volatile char pad[40];

	pad[0] = (char)r;
	block_once(r);
	pad[1] = pad[0]; /* after the call: no tail call */
}

__attribute__((noipa)) static void wpt_site_b(unsigned r)
{
	volatile char pad[40];

	pad[0] = (char)r;
	block_once(r);
	pad[1] = pad[0]; /* after the call: no tail call */
}

__attribute__((noipa)) static void wpt_site_rec(int depth, unsigned r)
{
	if (depth > 0) {
		volatile int keep = depth;

		wpt_site_rec(depth - 1, r);
		(void)keep; /* a frame of its own, no tail call */
	} else if (r & 2) {
		wpt_site_a(r);
	} else {
		wpt_site_b(r);
	}
}

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	while (now_s() < end_s) {
		unsigned r = (unsigned)rand_r(&seed);

		wpt_site_rec((int)((r >> 4) % 6), r);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[4];

	end_s = now_s() + (argc > 1 ? atof(argv[1]) : 2.0);
	wpt_sites_busy(0.01);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("sites: done\n");
	return 0;
}
