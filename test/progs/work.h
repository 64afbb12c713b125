/* work.h: what most test programs share: a clock, a fixed CPU spin,
 * and distinctly named work functions (noipa, so that GCC cannot fold two
 * identical bodies into one symbol and the profile names the right one). */
#ifndef WORK_H
#define WORK_H

#include <stdint.h>
#include <time.h>

static volatile uint64_t sink;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Spins for `seconds` of wall time; the result keeps the loop alive. */
__attribute__((unused)) static uint64_t spin(double seconds)
{
	double end = now_s() + seconds;
	uint64_t x = 88172645463325252ULL;

	do {
		for (int i = 0; i < 20000; i++) {
			x = (x * 6364136223846793005ULL + 1442695040888963407ULL) ^ (x >> 29);
			__asm__ volatile("" : "+r"(x));
		}
	} while (now_s() < end);
	return x;
}

/* Defines `static void name(double seconds)` that spins under that name. */
#define WPT_WORK(name)                                    \
	__attribute__((noipa)) static void name(double s) \
	{                                                 \
		sink += spin(s);                          \
		__asm__ volatile("" ::: "memory");        \
	}

#endif
