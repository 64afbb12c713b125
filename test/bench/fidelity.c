/* fidelity: threads that know where their wall time went, to check the
 * profile's shares against.
 *
 *   fidelity SECONDS
 *
 * Four worker threads live the whole run. Each one loops, for SECONDS of wall
 * time, over a fixed menu of noinline functions, each called for a random
 * 10-120 ms; some spin (on CPU), some block (off CPU). Every function times
 * itself with CLOCK_MONOTONIC from entry to exit. Two helper threads (a pipe
 * feeder and a condition-variable signaller) live the whole run too.
 *
 *   fid-sleep  spin_sleep_cpu (spin)    | sleep_in_nanosleep (nanosleep)
 *   fid-pipe   spin_pipe_cpu (spin)     | read_from_pipe (read on a pipe the feeder fills)
 *   fid-cond   spin_cond_cpu (spin)     | wait_on_cond (pthread_cond_wait, signalled by the signaller)
 *   fid-mix    spin_mix_cpu (spin) | sleep_mix_clock (clock_nanosleep) | poll_mix_idle (poll timeout)
 *              | spin_mix_nested (calls spin_mix_leaf)
 *
 * Output: for every worker one line
 *   thread tid=T name=N total_s=S fn=NAME:SHARE fn=NAME:SHARE ...
 * (SHARE: time inside NAME over the thread's loop time), then for every
 * helper "helper tid=T name=N". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_FN 5

static double run_s;
static uint64_t t_end;
static pthread_barrier_t start_barrier;
static atomic_int stopping;
static int pipefd[2];
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ccv = PTHREAD_COND_INITIALIZER;
static int cond_flag;
static volatile uint64_t sink;

struct worker {
	const char *name;
	int nr_fn;
	const char *fn_name[MAX_FN];
	uint64_t fn_ns[MAX_FN];
	uint64_t loop_ns;
	int tid;
	unsigned seed;
	pthread_t t;
};

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rand_ms(unsigned *seed, int lo, int hi)
{
	return (uint64_t)(lo + rand_r(seed) % (hi - lo + 1)) * 1000000ull;
}

static void spin_until(uint64_t until)
{
	uint64_t x = sink;

	while (now_ns() < until)
		for (int i = 0; i < 2000; i++)
			x = (x * 6364136223846793005ULL + 1) ^ (x >> 29);
	sink = x;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- the measured functions: each returns its own elapsed ns ---- */

#define TIMED_BEGIN uint64_t t0 = now_ns()
#define TIMED_END return now_ns() - t0

__attribute__((noinline, noipa)) uint64_t spin_sleep_cpu(uint64_t ns)
{
	TIMED_BEGIN;
	spin_until(t0 + ns);
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t sleep_in_nanosleep(uint64_t ns)
{
	TIMED_BEGIN;
	sleep_ns(ns);
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t spin_pipe_cpu(uint64_t ns)
{
	TIMED_BEGIN;
	spin_until(t0 + ns);
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t read_from_pipe(void)
{
	char c;

	TIMED_BEGIN;
	while (read(pipefd[0], &c, 1) < 0 && errno == EINTR)
		;
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t spin_cond_cpu(uint64_t ns)
{
	TIMED_BEGIN;
	spin_until(t0 + ns);
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t wait_on_cond(void)
{
	TIMED_BEGIN;
	pthread_mutex_lock(&cmu);
	while (!cond_flag && !atomic_load(&stopping))
		pthread_cond_wait(&ccv, &cmu);
	cond_flag = 0;
	pthread_mutex_unlock(&cmu);
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t spin_mix_cpu(uint64_t ns)
{
	TIMED_BEGIN;
	spin_until(t0 + ns);
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t sleep_mix_clock(uint64_t ns)
{
	struct timespec ts;

	TIMED_BEGIN;
	ts.tv_sec = (time_t)((t0 + ns) / 1000000000ull);
	ts.tv_nsec = (long)((t0 + ns) % 1000000000ull);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	TIMED_END;
}

__attribute__((noinline, noipa)) uint64_t poll_mix_idle(uint64_t ns)
{
	struct pollfd p = { .fd = -1, .events = 0 };
	uint64_t end;

	TIMED_BEGIN;
	end = t0 + ns;
	for (uint64_t t = t0; t < end; t = now_ns())
		poll(&p, 0, (int)((end - t + 999999) / 1000000));
	TIMED_END;
}

__attribute__((noinline, noipa)) void spin_mix_leaf(uint64_t until)
{
	spin_until(until);
}

__attribute__((noinline, noipa)) uint64_t spin_mix_nested(uint64_t ns)
{
	TIMED_BEGIN;
	spin_mix_leaf(t0 + ns);
	TIMED_END;
}

/* ---- threads ---- */

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t start;
	int k = 0;

	w->tid = (int)syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), w->name);
	pthread_barrier_wait(&start_barrier);
	start = now_ns();
	while (now_ns() < t_end) {
		int f = k++ % w->nr_fn;
		uint64_t d = rand_ms(&w->seed, 10, 120), left = t_end - now_ns();

		if (d > left)
			d = left > 1000000 ? left : 1000000;
		if (!strcmp(w->name, "fid-sleep"))
			w->fn_ns[f] += f == 0 ? spin_sleep_cpu(d) : sleep_in_nanosleep(d);
		else if (!strcmp(w->name, "fid-pipe"))
			w->fn_ns[f] += f == 0 ? spin_pipe_cpu(d / 2) : read_from_pipe();
		else if (!strcmp(w->name, "fid-cond"))
			w->fn_ns[f] += f == 0 ? spin_cond_cpu(d) : wait_on_cond();
		else
			w->fn_ns[f] += f == 0   ? spin_mix_cpu(d)
				       : f == 1 ? sleep_mix_clock(d)
				       : f == 2 ? poll_mix_idle(d)
						: spin_mix_nested(d);
	}
	w->loop_ns = now_ns() - start;
	return NULL;
}

static int helper_tid[2];

/* Writes one byte to the pipe every 20-150 ms. */
static void *feeder_main(void *arg)
{
	unsigned seed = 7;

	(void)arg;
	helper_tid[0] = (int)syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), "fid-feeder");
	pthread_barrier_wait(&start_barrier);
	while (!atomic_load(&stopping)) {
		sleep_ns(rand_ms(&seed, 20, 150));
		if (write(pipefd[1], "x", 1) < 0 && errno != EAGAIN)
			break;
	}
	return NULL;
}

/* Signals the condition variable every 20-150 ms. */
static void *signaller_main(void *arg)
{
	unsigned seed = 11;

	(void)arg;
	helper_tid[1] = (int)syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), "fid-signal");
	pthread_barrier_wait(&start_barrier);
	while (!atomic_load(&stopping)) {
		sleep_ns(rand_ms(&seed, 20, 150));
		pthread_mutex_lock(&cmu);
		cond_flag = 1;
		pthread_cond_signal(&ccv);
		pthread_mutex_unlock(&cmu);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct worker w[4] = {
		{ .name = "fid-sleep",
		  .nr_fn = 2,
		  .fn_name = { "spin_sleep_cpu", "sleep_in_nanosleep" },
		  .seed = 1 },
		{ .name = "fid-pipe",
		  .nr_fn = 2,
		  .fn_name = { "spin_pipe_cpu", "read_from_pipe" },
		  .seed = 2 },
		{ .name = "fid-cond",
		  .nr_fn = 2,
		  .fn_name = { "spin_cond_cpu", "wait_on_cond" },
		  .seed = 3 },
		{ .name = "fid-mix",
		  .nr_fn = 4,
		  .fn_name = { "spin_mix_cpu", "sleep_mix_clock", "poll_mix_idle",
			       "spin_mix_nested" },
		  .seed = 4 },
	};
	pthread_t feeder, signaller;
	int i, j;

	if (argc < 2 || (run_s = strtod(argv[1], NULL)) <= 0) {
		fprintf(stderr, "usage: fidelity SECONDS\n");
		return 2;
	}
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return 2;
	fcntl(pipefd[1], F_SETFL, O_NONBLOCK);
	pthread_barrier_init(&start_barrier, NULL, 4 + 2 + 1);
	for (i = 0; i < 4; i++)
		if (pthread_create(&w[i].t, NULL, worker_main, &w[i]) != 0)
			return 2;
	if (pthread_create(&feeder, NULL, feeder_main, NULL) != 0 ||
	    pthread_create(&signaller, NULL, signaller_main, NULL) != 0)
		return 2;
	t_end = now_ns() + (uint64_t)(run_s * 1e9);
	pthread_barrier_wait(&start_barrier);
	for (i = 0; i < 4; i++)
		pthread_join(w[i].t, NULL);
	atomic_store(&stopping, 1);
	pthread_mutex_lock(&cmu);
	pthread_cond_broadcast(&ccv);
	pthread_mutex_unlock(&cmu);
	pthread_join(feeder, NULL);
	pthread_join(signaller, NULL);
	for (i = 0; i < 4; i++) {
		printf("thread tid=%d name=%s total_s=%.6f", w[i].tid, w[i].name,
		       w[i].loop_ns / 1e9);
		for (j = 0; j < w[i].nr_fn; j++)
			printf(" fn=%s:%.6f", w[i].fn_name[j],
			       (double)w[i].fn_ns[j] / (double)w[i].loop_ns);
		printf("\n");
	}
	printf("helper tid=%d name=fid-feeder\nhelper tid=%d name=fid-signal\n", helper_tid[0],
	       helper_tid[1]);
	return 0;
}
