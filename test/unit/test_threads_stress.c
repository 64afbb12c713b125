/* Stress of the thread table (preload/threads.c), linked with the
 * runtime's threads.c and slots.c (Makefile UNIT_RUNTIME_test_threads_stress),
 * from a review: the sampler's churn (a thread made, sampled, gone; a
 * prune every 50) while
 *
 * - a timer signal on the same thread reads the table in the middle of
 *   anything, as a fatal signal's dump on the sampler thread does: every
 *   published entry it reads is whole (a tid churn made, its counts that
 *   tid's), and its live flags can be computed;
 * - another thread asks the sampler to hold still (EV_FREEZE), loads the
 *   table and reads it for a while, as a raw dump that stopped waiting for
 *   the sampler to park: what it holds does not change under it, then it
 *   thaws (a failed exec) and the sampler rebuilds again.
 *
 * Bounded by time (WALLPROF_STRESS_MS per phase, 500 ms by default), not
 * by iterations, so that it takes about a second plain and under ASan. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../preload/runtime.h"
#include "../../preload/sigmask.h"
#include "../../preload/slots.h"
#include "../../preload/threads.h"

#include "check.h"

/* What the library's other files define (lifecycle.c, sigmask.c, tick.c). */
struct wp_rt wp_rt;
__thread int wp_sigmask_bypass __attribute__((tls_model("initial-exec")));
__thread int wp_tls_internal __attribute__((tls_model("initial-exec")));
/* The library's logger (config.c), which timers.c calls: quiet here. */
void wp_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}
/* park.c's end of a parked thread's record, which a release calls: no
 * slot is parked here (park.c needs the sampler's policy). */
void wp_park_release(struct wp_slot *s)
{
	(void)s;
}

#define FAKE 20000u   /* fake tids (test_threads.c): below pid_max, not ours */
#define SPAN 10000u
#define MAGIC 0x5a5a5a5aull
#define LIVE 64       /* threads alive at once */
#define HELD 4096     /* entries the reader compares */

static _Atomic int stop, bad, nr_reads;
static _Atomic unsigned long long max_nr, nr_live_seen;

/* An entry churn made: a tid of its range, its counts that tid's. */
static int whole(const struct wp_thread *e)
{
	return e->tid >= FAKE && e->tid < FAKE + SPAN &&
	       (e->nr_samples == 0 || e->nr_samples == (e->tid ^ MAGIC)) && !e->name[15];
}

/* A dump's read of the table: one load, then each entry and its flags. */
static void dump_read(void)
{
	struct wp_threads_view v;
	size_t k;
	unsigned long long live = 0;

	wp_threads_view(&v);
	for (k = 0; k < v.nr; k++) {
		if (!whole(&v.e[k]) || v.e[k].flags) {
			atomic_fetch_add(&bad, 1);
			break;
		}
		live += wp_threads_flags(&v, k) == WP_THREAD_LIVE;
	}
	if (live > LIVE)
		atomic_fetch_add(&bad, 1);
	atomic_fetch_add(&nr_live_seen, live);
	if (v.nr > atomic_load(&max_nr))
		atomic_store(&max_nr, v.nr);
	atomic_fetch_add(&nr_reads, 1);
}

static void on_signal(int sig)
{
	(void)sig;
	dump_read();
}

static void *reader(void *arg)
{
	static uint32_t tids[HELD];

	(void)arg;
	while (!atomic_load(&stop)) {
		struct wp_threads_view v;
		size_t k, r;

		atomic_fetch_or(&g->sh.events, EV_FREEZE);
		wp_threads_view(&v);
		for (k = 0; k < v.nr && k < HELD; k++)
			tids[k] = v.e[k].tid;
		/* hold it while the sampler runs on */
		for (r = 0; r < 5; r++)
			for (k = 0; k < v.nr && k < HELD; k++) {
				if (v.e[k].tid != tids[k] || !whole(&v.e[k]))
					atomic_fetch_add(&bad, 1000);
				(void)wp_threads_flags(&v, k);
			}
		atomic_fetch_add(&nr_reads, 1);
		/* the dump is over (a failed exec thaws the sampler) */
		atomic_fetch_and(&g->sh.events, ~(uint32_t)EV_FREEZE);
		for (volatile int i = 0; i < 20000; i++)
			;
	}
	return NULL;
}

static uint64_t ms_now(void)
{
	return wp_mono_ns() / 1000000;
}

/* The sampler's part: threads come and go, LIVE at a time, each sampled
 * once; a prune every `prune_every`. For `ms` milliseconds. */
static long churn(uint64_t ms, int prune_every)
{
	static struct wp_slot *live[LIVE];
	uint64_t now = 10ull * 1000000000ull, end = ms_now() + ms;
	unsigned next = 0;
	long i;
	int j;

	memset(live, 0, sizeof(live));
	for (i = 0; i % 1024 || ms_now() < end; i++) {
		struct wp_thread *t;

		j = (int)(i % LIVE);
		if (live[j])
			wp_slot_release(live[j]);
		live[j] = wp_slot_claim(FAKE + (next++ % SPAN));
		if (!live[j])
			continue;
		t = wp_threads_of(live[j]);
		if (t) {
			t->last_ns = now;
			t->nr_samples = atomic_load(&live[j]->tid) ^ MAGIC;
		}
		now += 1000000; /* 1 ms a thread: a window holds 1000 */
		if (i % prune_every == 0)
			wp_threads_prune(now);
	}
	for (j = 0; j < LIVE; j++)
		if (live[j])
			wp_slot_release(live[j]);
	return i;
}

int main(void)
{
	const char *env = getenv("WALLPROF_STRESS_MS");
	uint64_t ms = env ? strtoull(env, NULL, 10) : 500;
	struct itimerspec its = { { 0, 20000 }, { 0, 20000 } }, off = { { 0, 0 }, { 0, 0 } };
	struct sigevent sev;
	struct sigaction sa;
	pthread_t th;
	timer_t tm;
	long iters;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQ(wp_threads_alloc() == 0);
	memset(&wp_rt, 0, sizeof(wp_rt));
	g->fix.cfg.max_threads = 256;
	g->fix.cfg.max_depth = 16;
	g->fix.cfg.ring_seconds = 1;
	g->fix.pid = getpid();
	g->smp.sampler_tid = -1;
	REQ(wp_slots_alloc(&g->fix.cfg) == 0);
	wp_threads_restart();
	atomic_store(&g->sh.sampling, 1);

	/* A signal on the sampler thread every 20 us, mid-anything. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	REQ(sigaction(SIGRTMIN, &sa, NULL) == 0);
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = SIGRTMIN;
	sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
	REQ(timer_create(CLOCK_MONOTONIC, &sev, &tm) == 0);
	REQ(timer_settime(tm, 0, &its, NULL) == 0);
	iters = churn(ms, 50);
	timer_settime(tm, 0, &off, NULL);
	timer_delete(tm);
	printf("     (%ld threads, %d reads in the signal, table up to %llu, %llu live seen)\n",
	       iters, atomic_load(&nr_reads), (unsigned long long)atomic_load(&max_nr),
	       (unsigned long long)atomic_load(&nr_live_seen));
	REQ(atomic_load(&bad) == 0 && atomic_load(&nr_reads) > 0 && atomic_load(&nr_live_seen) > 0);
	report("a signal on the sampler thread: every published entry whole");

	atomic_store(&bad, 0);
	atomic_store(&nr_reads, 0);
	REQ(pthread_create(&th, NULL, reader, NULL) == 0);
	iters = churn(ms, 50);
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	printf("     (%ld threads, %d reads by the other thread)\n", iters, atomic_load(&nr_reads));
	REQ(atomic_load(&bad) == 0 && atomic_load(&nr_reads) > 0);
	report("a reader on another thread after EV_FREEZE: what it holds unchanged");
	printf("threads_stress: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
