/* thread_start: the program's threads, seen from their first instruction.
 *
 * pthread_create is interposed so that each new thread runs a few
 * instructions of ours before its start routine: it tells the sampler it
 * exists (wp_sampler_thread_begins), which is how the sampler knows when the
 * program's last thread ends after main() left by pthread_exit. The start
 * routine and its argument travel in a fixed pool of records (no allocation
 * on thread creation); with the pool exhausted, or before the library has
 * started, a thread is created as without us and simply not counted. The
 * start routine is entered by a tail call, so no frame of ours stays under
 * it. thrd_create (C11), which glibc does not build on the exported
 * pthread_create, is interposed the same way. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <threads.h>

#include "sampler.h"
#include "thread_start.h"

#define WP_EXPORT __attribute__((visibility("default")))
#define POOL 256

struct start {
	_Atomic int busy;
	void *(*fn)(void *);
	int (*c11)(void *);   /* thrd_create's start function, or NULL */
	void *arg;
};

static struct start pool[POOL];
static _Atomic unsigned hint;

static struct start *start_get(void)
{
	unsigned i, h = atomic_fetch_add_explicit(&hint, 1, memory_order_relaxed);

	for (i = 0; i < POOL; i++) {
		struct start *st = &pool[(h + i) % POOL];
		int expect = 0;

		if (atomic_compare_exchange_strong(&st->busy, &expect, 1))
			return st;
	}
	return NULL;
}

/* Built with sibling calls on whatever the build's -O: the tail call is
 * what keeps our frame out of the thread's stack. */
__attribute__((optimize(
	"optimize-sibling-calls"))) /* A start record for a thread about to be counted, or NULL: then the
 * thread is created as without us (not sampling, or the pool is empty). */
static struct start *
start_take(void)
{
	struct start *st;

	if (!wp_sampler_thread_created())
		return NULL;
	st = start_get();
	if (!st)
		wp_sampler_thread_create_failed();
	return st;
}

/* The thread was not created after all. */
static void start_give_back(struct start *st)
{
	wp_sampler_thread_create_failed();
	atomic_store_explicit(&st->busy, 0, memory_order_release);
}

static void *start_routine(void *p)
{
	struct start *st = p;
	void *(*fn)(void *) = st->fn;
	void *arg = st->arg;

	atomic_store_explicit(&st->busy, 0, memory_order_release);
	wp_sampler_thread_begins();
	return fn(arg); /* a tail call: the thread's stack starts at fn */
}

/* In a fork()ed child: records other threads of the parent held while
 * creating a thread are nobody's now. */
static void start_forked(void)
{
	unsigned i;

	for (i = 0; i < POOL; i++)
		atomic_store_explicit(&pool[i].busy, 0, memory_order_relaxed);
}

/* A C11 thread: its int result is returned as glibc's own C11 start does
 * (thrd_join reads it back from the pointer). Not a tail call: this frame
 * stays under the thread's function, and our unwinder leaves it out. */
static void *c11_start(void *p)
{
	struct start *st = p;
	int (*fn)(void *) = st->c11;
	void *arg = st->arg;

	atomic_store_explicit(&st->busy, 0, memory_order_release);
	wp_sampler_thread_begins();
	return (void *)(intptr_t)fn(arg);
}

WP_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			     void *arg)
{
	struct start *st = start_take();
	int rc;

	if (!st)
		return wp_sampler_create_thread_real(t, attr, fn, arg);
	st->fn = fn;
	st->c11 = NULL;
	st->arg = arg;
	rc = wp_sampler_create_thread_real(t, attr, start_routine, st);
	if (rc != 0)
		start_give_back(st);
	return rc;
}

void wp_thread_start_init(void)
{
	pthread_atfork(NULL, NULL, start_forked);
}

/* thrd_create does not go through pthread_create inside glibc: the same,
 * for C11 threads. */
WP_EXPORT int thrd_create(thrd_t *thr, thrd_start_t func, void *arg)
{
	typedef int (*wp_thrd_create_fn)(thrd_t *, thrd_start_t, void *);
	static wp_thrd_create_fn real;
	struct start *st = start_take();
	int rc;

	if (!st) {
		if (!real)
			real = (wp_thrd_create_fn)dlsym(RTLD_NEXT, "thrd_create");
		return real ? real(thr, func, arg) : thrd_error;
	}
	st->fn = NULL;
	st->c11 = func;
	st->arg = arg;
	rc = wp_sampler_create_thread_real((pthread_t *)thr, NULL, c11_start, st);
	if (rc == 0)
		return thrd_success;
	start_give_back(st);
	return rc == ENOMEM ? thrd_nomem : rc == EBUSY ? thrd_busy : thrd_error;
}
