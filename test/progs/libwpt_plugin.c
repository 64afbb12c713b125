/* A plugin the `plugins` program dlopens, runs and dlcloses before it exits:
 * its frames must still be symbolized in the exit profile. Shared, hence its
 * general name: soak.c loads it too, e2e/code.py and e2e/launcher.py use it
 * as just another library. */
#include <time.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long wpt_plugin_work(double seconds)
{
	volatile unsigned long x = 0;
	double end = now_s() + seconds;

	while (now_s() < end)
		for (int i = 0; i < 10000; i++)
			x += (unsigned long)i * 7;
	return x != 0;
}
