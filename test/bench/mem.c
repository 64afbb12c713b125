/* mem: resident memory of a process with N idle threads.
 *
 *   mem NTHREADS SECONDS [NBUSY]
 *   mem --reap [--preload LIB] NTHREADS SECONDS [NBUSY]
 *
 * Starts NTHREADS threads that wait in pthread_cond_wait for the whole run
 * and NBUSY (default 1) busy threads that spin, lets them run for SECONDS, reads VmRSS and
 * VmHWM from /proc/self/status 100 ms before the end, then stops everything.
 * One line on stdout: rss_kb=... hwm_kb=... threads=N seconds=S.
 *
 * --reap: the same run in a child, then the child's peak RSS, its exit
 * included, from wait4 (a second line: maxrss_kb=... status=...); with
 * --preload, the child has LD_PRELOAD=LIB. The child is forked from this
 * small process: a process started by a larger one (a Python script, with
 * vfork) has that one's peak RSS in its own ru_maxrss, since exec records
 * the peak of the memory it replaces. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stop;
static volatile int spin_stop;

static void *waiter(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	while (!stop)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return NULL;
}

__attribute__((noinline)) static uint64_t spin(uint64_t x)
{
	while (!spin_stop)
		for (int i = 0; i < 100000; i++)
			x = (x * 6364136223846793005ULL + 1) ^ (x >> 29);
	return x;
}

static void *busy(void *arg)
{
	return (void *)(uintptr_t)spin((uintptr_t)arg);
}

static long status_kb(const char *buf, const char *key)
{
	const char *p = strstr(buf, key);

	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* mem --reap [--preload LIB] ARGS...: runs `mem ARGS...` in a child and
 * prints its peak RSS. */
static int reap(int argc, char **argv)
{
	const char *lib = NULL;
	struct rusage ru;
	int st, i = 2;
	pid_t pid;

	if (argc > 3 && strcmp(argv[2], "--preload") == 0) {
		lib = argv[3];
		i = 4;
	}
	argv[i - 1] = argv[0];
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (lib)
			setenv("LD_PRELOAD", lib, 1);
		else
			unsetenv("LD_PRELOAD");
		execv("/proc/self/exe", argv + i - 1);
		_exit(127);
	}
	while (wait4(pid, &st, 0, &ru) < 0)
		;
	printf("maxrss_kb=%ld status=%d\n", ru.ru_maxrss, st);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int main(int argc, char **argv)
{
	long n, i;
	double secs;
	long nbusy;
	pthread_t *t, *b;
	char buf[4096];
	size_t len;
	FILE *f;

	if (argc > 1 && strcmp(argv[1], "--reap") == 0)
		return reap(argc, argv);
	if (argc < 3) {
		fprintf(stderr, "usage: mem [--reap [--preload LIB]] NTHREADS SECONDS [NBUSY]\n");
		return 2;
	}
	n = strtol(argv[1], NULL, 10);
	secs = strtod(argv[2], NULL);
	nbusy = argc > 3 ? strtol(argv[3], NULL, 10) : 1;
	if (n < 0 || nbusy < 0 || secs < 0.2 || !(t = calloc((size_t)n + 1, sizeof(*t))) ||
	    !(b = calloc((size_t)nbusy + 1, sizeof(*b))))
		return 2;
	for (i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, waiter, NULL) != 0)
			return 2;
	for (i = 0; i < nbusy; i++)
		if (pthread_create(&b[i], NULL, busy, (void *)(uintptr_t)(i + 1)) != 0)
			return 2;
	sleep_s(secs - 0.1);
	f = fopen("/proc/self/status", "r");
	if (!f)
		return 2;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	buf[len] = 0;
	fclose(f);
	printf("rss_kb=%ld hwm_kb=%ld threads=%ld seconds=%.2f\n", status_kb(buf, "VmRSS:"),
	       status_kb(buf, "VmHWM:"), n, secs);
	fflush(stdout);
	sleep_s(0.1);
	spin_stop = 1;
	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < nbusy; i++)
		pthread_join(b[i], NULL);
	free(b);
	free(t);
	return 0;
}
