/* code: code layouts under the profiler (the tests also rebuild this file
 * without frame pointers, without unwind tables, stripped). Usage:
 *   code chain SECONDS            main -> wpt_level1 -> wpt_level2 -> wpt_level3, which
 *                                 spins for SECONDS
 *   code recurse DEPTH SECONDS    wpt_recurse DEPTH levels deep, spinning at the bottom
 *   code plugin PATH unlink       dlopen PATH, wpt_hplugin_work 0.5 s, unlink PATH,
 *                                 wpt_hplugin_work 0.3 s more
 *   code plugin PATH replace OTHER   ... rename(OTHER, PATH) instead of unlink
 *   code dlblock N                N times dl_iterate_phdr with a callback that sleeps
 *                                 2 ms in usleep (a blocking call under the loader's lock)
 * Prints one deterministic result line, exits 0. */
/* noipa on the named functions: no inlining, cloning or identical-code folding
 * (two functions with the same body would otherwise share one name). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "work.h"

__attribute__((noipa)) static uint64_t wpt_level3(double seconds)
{
	double end = now_s() + seconds;
	uint64_t x = 88172645463325252ULL;

	do {
		for (int i = 0; i < 20000; i++) {
			const uint64_t a = 6364136223846793005ULL, c = 1442695040888963407ULL;
			uint64_t y = x >> 29;

			x = (x * a + c) ^ y; /* MARK:level3 */
			__asm__ volatile("" : "+r"(x));
		}
	} while (now_s() < end);
	return x;
}

__attribute__((noipa)) static uint64_t wpt_level2(double seconds)
{
	uint64_t r = wpt_level3(seconds);

	sink += r;
	return r ^ sink;
}

__attribute__((noipa)) static uint64_t wpt_level1(double seconds)
{
	uint64_t r = wpt_level2(seconds);

	sink += r;
	return r ^ sink;
}

__attribute__((noipa)) static uint64_t wpt_recurse(int depth, double seconds)
{
	uint64_t r;

	if (depth <= 1)
		return wpt_level3(seconds);
	r = wpt_recurse(depth - 1, seconds);
	sink += r; /* not a tail call */
	return r ^ (uint64_t)depth;
}

static int mode_plugin(char **argv, int argc)
{
	const char *path = argv[2];
	unsigned long (*work)(double);
	void *h;

	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "code: %s\n", dlerror());
		return 1;
	}
	*(void **)&work = dlsym(h, "wpt_hplugin_work");
	if (!work) {
		fprintf(stderr, "code: no wpt_hplugin_work\n");
		return 1;
	}
	printf("plugin: work %lu\n", work(0.5));
	if (strcmp(argv[3], "unlink") == 0) {
		if (unlink(path) < 0) {
			perror("unlink");
			return 1;
		}
		printf("plugin: unlinked\n");
	} else if (strcmp(argv[3], "replace") == 0 && argc == 5) {
		if (rename(argv[4], path) < 0) {
			perror("rename");
			return 1;
		}
		printf("plugin: replaced\n");
	} else {
		fprintf(stderr, "code: bad plugin action\n");
		return 2;
	}
	printf("plugin: work again %lu\n", work(0.3));
	return 0;
}

/* Called by dl_iterate_phdr for the first object, under the loader's lock. */
__attribute__((noipa)) static int wpt_dl_callback(struct dl_phdr_info *info, size_t size,
						  void *data)
{
	(void)info;
	(void)size;
	++*(int *)data;
	usleep(2000);
	return 1;
}

static int mode_dlblock(int n)
{
	int calls = 0;

	for (int i = 0; i < n; i++)
		dl_iterate_phdr(wpt_dl_callback, &calls);
	printf("dlblock: %d callbacks\n", calls);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "chain") == 0) {
		wpt_level1(atof(argv[2]));
		printf("chain: done\n");
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "recurse") == 0) {
		wpt_recurse(atoi(argv[2]), atof(argv[3]));
		printf("recurse: done\n");
		return 0;
	}
	if ((argc == 4 || argc == 5) && strcmp(argv[1], "plugin") == 0)
		return mode_plugin(argv, argc);
	if (argc == 3 && strcmp(argv[1], "dlblock") == 0)
		return mode_dlblock(atoi(argv[2]));
	fprintf(stderr, "usage: code chain SECONDS | recurse DEPTH SECONDS | "
			"plugin PATH unlink | plugin PATH replace OTHER | dlblock N\n");
	return 2;
}
