/* plugins: loads a plugin, works inside it, unloads it, then works a little
 * more in the main program: the profile must still resolve the plugin's
 * frames. */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static unsigned long wpt_after_unload(double seconds)
{
	volatile unsigned long x = 0;
	double end = now_s() + seconds;

	while (now_s() < end)
		x++;
	return x != 0;
}

int main(int argc, char **argv)
{
	unsigned long (*work)(double);
	void *h;

	if (argc < 2) {
		fprintf(stderr, "usage: plugins PATH_TO_PLUGIN.so\n");
		return 2;
	}
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "plugin: %s\n", dlerror());
		return 1;
	}
	*(void **)&work = dlsym(h, "wpt_plugin_work");
	if (!work)
		return 1;
	printf("plugin: work %lu\n", work(0.5));
	dlclose(h);
	printf("plugin: %s\n",
	       dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) ? "still loaded" : "unloaded");
	printf("plugin: after %lu\n", wpt_after_unload(0.3));
	return 0;
}
