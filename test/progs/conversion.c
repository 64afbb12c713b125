/* conversion: the program side of test/e2e/conversion.py. The converter
 * runs as a child of ours; the program must never know: no SIGCHLD, no
 * child its wait() could reap.
 *
 *   conversion invisible DIR   work, a snapshot (SIGUSR2) whose profile
 *                              DIR/wallprof.<pid>.1.json is waited for, more
 *                              work; prints the SIGCHLDs seen and what
 *                              waitpid(-1) says
 *   conversion work MS         busy for MS milliseconds in wpt_conv_work
 *   conversion chdir MS DIR    the same, then chdir(DIR) before the exit
 *   conversion forks MS        the same while a thread forks children (which
 *                              close 0-2 and sleep 6 s) every 2 ms, through
 *                              the exit: some inherit whatever descriptors the
 *                              exit has open
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t nr_sigchld;
static volatile unsigned long sink;

static void on_chld(int sig)
{
	(void)sig;
	nr_sigchld++;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static void wpt_conv_work(double ms)
{
	double end = now_ms() + ms;

	while (now_ms() < end)
		for (int i = 0; i < 10000; i++)
			sink += (unsigned long)i * 7;
}

static void *forker(void *arg)
{
	(void)arg;
	for (;;) {
		pid_t p = fork();

		if (p == 0) {
			struct timespec six = { 6, 0 };

			close(0);
			close(1);
			close(2);
			nanosleep(&six, NULL);
			_exit(0);
		}
		struct timespec two = { 0, 2000000 };

		nanosleep(&two, NULL);
	}
	return NULL;
}

static int exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "work")) {
		wpt_conv_work(atof(argv[2]));
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "forks")) {
		pthread_t t;

		pthread_create(&t, NULL, forker, NULL);
		wpt_conv_work(atof(argv[2]));
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "chdir")) {
		wpt_conv_work(atof(argv[2]));
		return chdir(argv[3]) == 0 ? 0 : 1;
	}
	if (argc == 3 && !strcmp(argv[1], "invisible")) {
		char json[4096], raw[4096];
		struct sigaction sa;
		pid_t r;
		int i, saw;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_chld;
		sigaction(SIGCHLD, &sa, NULL);
		snprintf(json, sizeof(json), "%s/wallprof.%d.1.json", argv[2], (int)getpid());
		snprintf(raw, sizeof(raw), "%s/wallprof.%d.1.raw", argv[2], (int)getpid());
		wpt_conv_work(300);
		raise(SIGUSR2);
		/* The snapshot's converter runs meanwhile; it removes the dump as
		 * its last act. Up to 20 s. */
		for (i = 0, saw = 0; i < 2000 && !(saw = exists(json) && !exists(raw)); i++)
			wpt_conv_work(10);
		wpt_conv_work(200);
		errno = 0;
		r = waitpid(-1, NULL, WNOHANG);
		printf("snapshot %s, sigchld %d, waitpid %d %s\n", saw ? "seen" : "unseen",
		       (int)nr_sigchld, (int)r, r < 0 ? strerror(errno) : "");
		return 0;
	}
	fprintf(stderr, "usage: conversion invisible DIR | work MS | chdir MS DIR | forks MS\n");
	return 2;
}
