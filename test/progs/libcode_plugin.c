/* A plugin the code program dlopens, runs, then deletes or replaces on disk
 * while it is still loaded: its frames must still resolve (or keep module +
 * offset). */
#include <stdint.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noipa)) static uint64_t wpt_hplugin_inner(double seconds)
{
	uint64_t x = 12345;
	double end = now_s() + seconds;

	do {
		for (int i = 0; i < 20000; i++) {
			x = (x * 6364136223846793005ULL + 1442695040888963407ULL) ^ (x >> 31);
			__asm__ volatile("" : "+r"(x));
		}
	} while (now_s() < end);
	return x;
}

__attribute__((noinline)) unsigned long wpt_hplugin_work(double seconds)
{
	volatile uint64_t r = wpt_hplugin_inner(seconds);

	return (unsigned long)(r != 0);
}
