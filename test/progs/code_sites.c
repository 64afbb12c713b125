/* code_sites: blocking calls made again and again from the same places and
 * from look-alike places, for the sampler's replay of walks from published
 * registers (WALLPROF_TEST_SITE_CHECK=1 checks every replay against a real
 * libunwind walk).
 *
 *   code_sites SECONDS [ctx|main|same]
 *
 * Four threads loop for SECONDS. Each iteration picks, at random, a
 * recursion depth (0-5) and one of two functions with identical frames
 * (wpt_site_a, wpt_site_b: same stack pointer at the call, different return
 * addresses), which sleep 1 ms in nanosleep or wait 1 ms in poll. With
 * "ctx" each thread runs its loop on a stack of its own making (mmap, a guard
 * page below, swapcontext), not the one pthread gave it; with "main" the
 * main thread runs the loop alone, no thread started; with "same" every
 * iteration blocks at the same place. Prints
 * "sites: done". */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#include "work.h"

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

static int on_ctx;

static int same_site;

static void worker_loop(unsigned seed)
{
	while (now_s() < end_s) {
		unsigned r = (unsigned)rand_r(&seed);

		if (same_site)
			wpt_site_rec(2, 1); /* always the same place: nanosleep, 2 deep */
		else
			wpt_site_rec((int)((r >> 4) % 6), r);
	}
}

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	size_t len = 256 * 1024, page = 4096;
	ucontext_t back, co;
	char *stk;

	if (!on_ctx) {
		worker_loop(seed);
		return NULL;
	}
	stk = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (stk == MAP_FAILED || mprotect(stk, page, PROT_NONE) != 0 || getcontext(&co) != 0) {
		perror("code_sites: stack");
		exit(1);
	}
	co.uc_stack.ss_sp = stk;
	co.uc_stack.ss_size = len;
	co.uc_link = &back;
	makecontext(&co, (void (*)(void))worker_loop, 1, seed);
	if (swapcontext(&back, &co) != 0) {
		perror("code_sites: swapcontext");
		exit(1);
	}
	munmap(stk, len);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[4];

	end_s = now_s() + (argc > 1 ? atof(argv[1]) : 2.0);
	on_ctx = argc > 2 && !strcmp(argv[2], "ctx");
	same_site = argc > 2 && !strcmp(argv[2], "same");
	if (argc > 2 && !strcmp(argv[2], "main")) {
		worker_loop(1);
		printf("sites: done\n");
		return 0;
	}
	wpt_sites_busy(0.01);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("sites: done\n");
	return 0;
}
