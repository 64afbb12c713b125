/* rawblock: threads blocked in system calls that no wrapper sees, for the
 * walk from the stack pointer /proc reports (preload/proc_unwind.c). Usage:
 *   rawblock N SECONDS [WAIT_MS [PLUGIN]]
 * N threads "rawblk<k>" loop until SECONDS have passed; each turn goes
 * rb_thread_main -> rb_pad (0 to 7 levels deep, so that the stack pointer
 * changes from turn to turn and each block is walked afresh) ->
 * wpt_rb_outer -> wpt_rb_middle -> wpt_rb_ppoll (even k) or wpt_rb_futex
 * (odd k), which issue the call with the syscall instruction itself: a
 * ppoll, or a FUTEX_WAIT on a word nobody wakes, with a WAIT_MS timeout
 * (default 50), which a signal would end early (EINTR). These functions
 * keep no frame pointer, as distributions build code: the walk has the CFI
 * alone (.eh_frame, or .debug_frame when built without unwind tables).
 * A thread "rawfp" blocks the same way in wpt_rb_fp_leaf, which keeps a
 * frame pointer: from its syscall on, its CFA is computed from rbp, one of
 * the registers /proc does not report, so a walk must stop there.
 * With PLUGIN (a shared object), the main thread meanwhile dlopens and
 * dlcloses it in a loop: the module list the walks use keeps changing.
 * Prints "rawblock: N threads" and exits 0; on stderr, how many calls ended
 * early ("rawblock: X of Y calls interrupted": a profiler that signals
 * these threads makes that most of them) and, with WPT_SAMPLER_CPU=1, the
 * CPU seconds of the profiler's sampler thread ("sampler_cpu_s X"); with
 * PLUGIN, the dlopen count and VmRSS a third of the way and at the end
 * ("rawblock: D dlopens, rss_kb A then B"). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../bench/bench.h"
#include "work.h"

#define NO_FP __attribute__((noipa, optimize("omit-frame-pointer")))

static double deadline;
static long wait_ms = 50;
static int word; /* never changes: futex waits time out */
static long calls, interrupted;

/* The system calls are issued right in the leaves: the PC /proc reports is
 * theirs. */
NO_FP static long wpt_rb_ppoll(void)
{
	struct timespec ts = { 0, wait_ms * 1000000L };
	long ret;
	register long r10 __asm__("r10") = 0;    /* sigmask: none */
	register long r8 __asm__("r8") = 8;      /* sigsetsize */

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_ppoll), "D"(0L), "S"(0L), "d"(&ts), "r"(r10), "r"(r8)
			 : "rcx", "r11", "memory");
	return ret;
}

NO_FP static long wpt_rb_futex(void)
{
	struct timespec ts = { 0, wait_ms * 1000000L };
	long ret;
	register long r10 __asm__("r10") = (long)&ts;
	register long r8 __asm__("r8") = 0;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_futex), "D"(&word), "S"((long)FUTEX_WAIT_PRIVATE), "d"(0L),
			   "r"(r10), "r"(r8)
			 : "rcx", "r11", "memory");
	return ret == -ETIMEDOUT ? 0 : ret;
}

__attribute__((noipa, optimize("no-omit-frame-pointer"))) static long wpt_rb_fp_leaf(void)
{
	struct timespec ts = { 0, wait_ms * 1000000L };
	long ret;
	register long r10 __asm__("r10") = 0;
	register long r8 __asm__("r8") = 8;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_ppoll), "D"(0L), "S"(0L), "d"(&ts), "r"(r10), "r"(r8)
			 : "rcx", "r11", "memory");
	return ret;
}

NO_FP static long wpt_rb_middle(int futex)
{
	long r = futex ? wpt_rb_futex() : wpt_rb_ppoll();

	__asm__ volatile("" ::: "memory");
	return r;
}

NO_FP static long wpt_rb_outer(int futex)
{
	long r = wpt_rb_middle(futex);

	__asm__ volatile("" ::: "memory");
	return r;
}

/* Some levels of padding below the chain: a different stack pointer. */
NO_FP static long rb_pad(int levels, int futex)
{
	volatile char pad[48];
	long r;

	pad[0] = (char)levels;
	r = levels > 0 ? rb_pad(levels - 1, futex) : wpt_rb_outer(futex);
	return r + pad[0] - (char)levels;
}

static void count(long r)
{
	__atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
	if (r == -EINTR)
		__atomic_add_fetch(&interrupted, 1, __ATOMIC_RELAXED);
}

NO_FP static void *rb_thread_main(void *arg)
{
	int k = (int)(intptr_t)arg;
	char name[16];

	snprintf(name, sizeof(name), "rawblk%d", k);
	pthread_setname_np(pthread_self(), name);
	for (int turn = 0; now_s() < deadline; turn++)
		count(rb_pad(turn % 8, k & 1));
	return NULL;
}

static void *fp_thread_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "rawfp");
	while (now_s() < deadline)
		count(wpt_rb_fp_leaf());
	return NULL;
}

static long rss_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* dlopen + dlclose of `path` until the deadline; VmRSS after a third of
 * the time and at the end. */
static void churn(const char *path, double seconds)
{
	double third = now_s() + seconds / 3;
	long n = 0, rss_third = -1;

	while (now_s() < deadline) {
		void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

		if (!h) {
			fprintf(stderr, "rawblock: dlopen %s: %s\n", path, dlerror());
			exit(1);
		}
		dlclose(h);
		n++;
		if (rss_third < 0 && now_s() >= third)
			rss_third = rss_kb();
		usleep(200);
	}
	fprintf(stderr, "rawblock: %ld dlopens, rss_kb %ld then %ld\n", n, rss_third, rss_kb());
}

int main(int argc, char **argv)
{
	pthread_t *t, fp;
	int n, rc;

	if (argc < 3) {
		fprintf(stderr, "usage: rawblock N SECONDS [WAIT_MS]\n");
		return 2;
	}
	n = atoi(argv[1]);
	if (argc > 3)
		wait_ms = atol(argv[3]);
	if (n < 1 || wait_ms < 1 || wait_ms > 999)
		return 2;
	deadline = now_s() + atof(argv[2]);
	t = calloc((size_t)n, sizeof(*t));
	if (!t)
		return 1;
	for (int i = 0; i < n; i++) {
		if ((rc = pthread_create(&t[i], NULL, rb_thread_main, (void *)(intptr_t)i))) {
			fprintf(stderr, "rawblock: pthread_create: %s\n", strerror(rc));
			return 1;
		}
	}
	if ((rc = pthread_create(&fp, NULL, fp_thread_main, NULL))) {
		fprintf(stderr, "rawblock: pthread_create: %s\n", strerror(rc));
		return 1;
	}
	if (argc > 4)
		churn(argv[4], atof(argv[2]));
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_join(fp, NULL);
	if (getenv("WPT_SAMPLER_CPU")) {
		pid_t s = find_sampler();

		fprintf(stderr, "sampler_cpu_s %.6f\n", s ? thread_cpu_s(s) : -1.0);
	}
	fprintf(stderr, "rawblock: %ld of %ld calls interrupted\n", interrupted, calls);
	printf("rawblock: %d threads\n", n);
	free(t);
	return 0;
}
