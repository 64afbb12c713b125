/* Test program for test/e2e/html.py: threads with names and functions the
 * flame graph must show.
 *
 *   html MODE MS    MODE "new" or "base"; runs about MS milliseconds
 *
 * "spinner" burns CPU in wpt_html_spin_a and wpt_html_spin_b (mode new:
 * mostly b; mode base: mostly a); "sleeper" blocks in wpt_html_wait
 * (nanosleep); "reader" blocks in wpt_html_read (read on a pipe nobody
 * writes to until the end); the main thread waits in pthread_join. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;
static int share_b; /* percent of the spinner's time in wpt_html_spin_b */
static int fds[2];

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static double burn(double ms)
{
	double end = now_ms() + ms, x = 1;

	while (now_ms() < end)
		for (int i = 0; i < 1000; i++)
			x = x * 1.0000001 + 1e-9;
	return x;
}

__attribute__((noinline)) double wpt_html_spin_a(double ms)
{
	return burn(ms) + 1;
}

__attribute__((noinline)) double wpt_html_spin_b(double ms)
{
	return burn(ms) + 2;
}

static void *spinner(void *arg)
{
	double sink = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "spinner");
	while (!stop) {
		sink += wpt_html_spin_a(10.0 * (100 - share_b) / 100);
		sink += wpt_html_spin_b(10.0 * share_b / 100);
	}
	return sink > 0 ? NULL : arg;
}

__attribute__((noinline)) void wpt_html_wait(void)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

static void *sleeper(void *arg)
{
	pthread_setname_np(pthread_self(), "sleeper");
	while (!stop)
		wpt_html_wait();
	return arg;
}

__attribute__((noinline)) int wpt_html_read(void)
{
	char c;

	return (int)read(fds[0], &c, 1);
}

static void *reader(void *arg)
{
	pthread_setname_np(pthread_self(), "reader");
	wpt_html_read();
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t t[3];
	int ms = argc > 2 ? atoi(argv[2]) : 1500;

	share_b = argc > 1 && !strcmp(argv[1], "base") ? 10 : 80;
	if (pipe(fds) < 0)
		return 1;
	pthread_create(&t[0], NULL, spinner, NULL);
	pthread_create(&t[1], NULL, sleeper, NULL);
	pthread_create(&t[2], NULL, reader, NULL);
	usleep((useconds_t)ms * 1000);
	stop = 1;
	if (write(fds[1], "x", 1) != 1)
		return 1;
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("done\n");
	return 0;
}
