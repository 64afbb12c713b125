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
 * it. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sampler.h"

#define WP_EXPORT __attribute__((visibility("default")))
#define POOL 256

typedef int (*wp_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

struct start {
	_Atomic int busy;
	void *(*fn)(void *);
	void *arg;
};

static struct start pool[POOL];
static _Atomic unsigned hint;
static wp_create_fn real_create;

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

static void *start_routine(void *p)
{
	struct start *st = p;
	void *(*fn)(void *) = st->fn;
	void *arg = st->arg;

	atomic_store_explicit(&st->busy, 0, memory_order_release);
	wp_sampler_thread_begins();
	return fn(arg); /* a tail call: the thread's stack starts at fn */
}

int wp_thread_create_real(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			  void *arg)
{
	if (!real_create)
		real_create = (wp_create_fn)dlsym(RTLD_NEXT, "pthread_create");
	return real_create ? real_create(t, attr, fn, arg) : ENOSYS;
}

WP_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			     void *arg)
{
	struct start *st;
	int rc;

	if (!wp_sampler_thread_created())
		return wp_thread_create_real(t, attr, fn, arg);
	st = start_get();
	if (!st) {
		wp_sampler_thread_create_failed();
		return wp_thread_create_real(t, attr, fn, arg);
	}
	st->fn = fn;
	st->arg = arg;
	rc = wp_thread_create_real(t, attr, start_routine, st);
	if (rc != 0) {
		wp_sampler_thread_create_failed();
		atomic_store_explicit(&st->busy, 0, memory_order_release);
	}
	return rc;
}
