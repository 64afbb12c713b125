/* block_int: what the files of interposed blocking calls share (block.c,
 * block_io.c, block_ipc.c): resolving the real functions, the
 * published-context scope, the "was it our signal" test, time left, and the
 * wrapper classes the tables of calls are written in.
 *
 * Retry classes (what a wrapper does when our signal alone interrupted the
 * call, i.e. OURS() holds; any other EINTR goes to the program as is):
 *   RESTART  nothing: the kernel restarts the call after our SA_RESTART
 *            handler (ERESTARTSYS), or the libc function retries EINTR
 *            itself (the pthread_* waits); publishing is the whole point;
 *   RETRY    the same call again (no timeout, or an absolute deadline);
 *   RETRY_MS again with what is left of an int milliseconds timeout;
 *   RETRY_TS again with what is left of a relative struct timespec;
 *   XFER     a transfer our signal cut short is finished (block_io.c).
 * Every wrapper is async-signal-safe when the real call is. */
#ifndef WP_BLOCK_INT_H
#define WP_BLOCK_INT_H

#include <limits.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "sampler.h"
#include "slots.h"

#define WP_EXPORT __attribute__((visibility("default")))

/* glibc's buffer-overflow abort, for the fortified variants. */
extern void __chk_fail(void) __attribute__((noreturn));

/* ---- the real functions ------------------------------------------------ */

/* Looks a real function up (dlvsym when a version is given); called from the
 * constructor for all of them, and lazily by a wrapper that runs before it
 * (another library's constructor). Not async-signal-safe, which is why the
 * constructor resolves everything first. */
void *wp_block_lookup(const char *name, const char *version);

#define RESOLVE(name) \
	(real_##name ? 1 : (*(void **)&real_##name = wp_block_lookup(#name, NULL)) != NULL)
#define RESOLVE_V(name, version) \
	(real_##name ? 1 : (*(void **)&real_##name = wp_block_lookup(#name, version)) != NULL)

#define NO_REAL(ret)            \
	do {                    \
		errno = ENOSYS; \
		return (ret);   \
	} while (0)

/* The other files' halves of wp_block_init(). Not async-signal-safe. */
void wp_block_io_init(void);
void wp_block_ipc_init(void);

/* ---- the published-context scope ---------------------------------------- */

/* Runs on every way out of the wrapper, thread cancellation included
 * (the library is built with -fexceptions), but a longjmp (see
 * wp_slot_live). async-signal-safe */
WP_AS_SAFE static inline void blk_leave(struct wp_blk *b)
{
	wp_block_leave(b->s, b->seq);
}

/* Publishes the context for the rest of the enclosing function. */
#define BLOCK(sysno, fn)                                                      \
	struct wp_blk wp_b __attribute__((cleanup(blk_leave))) = { NULL, 0 }; \
	wp_block_enter(&wp_b, (sysno), (void *)(fn))

/* The last EINTR was caused by our signal alone (only that is retried). */
#define OURS() (wp_block_ours(wp_b.s, wp_b.seq) && (wp_sampler_count_eintr_retry(), 1))

/* ---- time left ---------------------------------------------------------- */

struct deadline {
	int infinite;
	uint64_t end_ns;
};

static inline uint64_t wp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void deadline_ms(struct deadline *d, int ms)
{
	d->infinite = ms < 0;
	d->end_ns = ms > 0 ? wp_now_ns() + (uint64_t)ms * 1000000ull : 0;
}

/* The deadline of a relative timeout `ts` that started at `t0`. A timeout
 * too long to add to the clock (years) is treated as none: the retry then
 * waits without one, which is what it amounts to. The caller's timespec is
 * read only after the call it was given to came back with EINTR (the kernel
 * has read it then): a bad pointer gets EFAULT from the kernel as without
 * us, not a fault in the wrapper. */
static inline void deadline_from(struct deadline *d, uint64_t t0, const struct timespec *ts)
{
	d->infinite = ts == NULL;
	d->end_ns = 0;
	if (!ts)
		return;
	if (ts->tv_sec < 0 || (uint64_t)ts->tv_sec >= (UINT64_MAX - t0) / 1000000000ull - 1) {
		d->infinite = ts->tv_sec >= 0;
		d->end_ns = ts->tv_sec >= 0 ? UINT64_MAX : t0;
		return;
	}
	d->end_ns = t0 + (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

static inline void deadline_ts(struct deadline *d, const struct timespec *ts)
{
	deadline_from(d, wp_now_ns(), ts);
}

static inline uint64_t left_ns(const struct deadline *d)
{
	uint64_t now = wp_now_ns();

	return now >= d->end_ns ? 0 : d->end_ns - now;
}

/* Milliseconds left, rounded up so the retry never ends early; -1 forever. */
static inline int left_ms(const struct deadline *d)
{
	uint64_t ms;

	if (d->infinite)
		return -1;
	ms = (left_ns(d) + 999999) / 1000000;
	return ms > INT_MAX ? INT_MAX : (int)ms; /* 24.8 days; the caller waits again */
}

static inline struct timespec left_ts(const struct deadline *d)
{
	uint64_t ns = left_ns(d);
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	return ts;
}

/* ---- wrapper classes, one row of a table each ---------------------------
 * A table is an X-macro of rows
 *   X(CLASS, ret, name, sysno, (params), (args), extra)
 * `args` passes the parameters on to the real function; RETRY_MS and
 * RETRY_TS name their timeout parameter in `extra` and pass `left_` in its
 * place in `args`. WP_DECLARE_REAL and WP_RESOLVE_REAL make the pointers
 * and resolve them; WP_DEFINE_WRAPPER writes the wrapper. */

#define WP_DECLARE_REAL(cls, ret, name, sysno, params, args, extra) static ret(*real_##name) params;
#define WP_RESOLVE_REAL(cls, ret, name, sysno, params, args, extra) (void)RESOLVE(name);
#define WP_DEFINE_WRAPPER(cls, ret, name, sysno, params, args, extra) \
	WP_WRAP_##cls(ret, name, sysno, params, args, extra)

/* Error-number functions (pthread_*) fail with ENOSYS returned, the others
 * with -1 and errno. */
#define WP_WRAP_RESTART(ret, name, sysno, params, args, extra) \
	WP_EXPORT ret name params                              \
	{                                                      \
		if (!RESOLVE(name))                            \
			NO_REAL((ret) - 1);                    \
		BLOCK(sysno, real_##name);                     \
		return real_##name args;                       \
	}

#define WP_WRAP_RESTART_ERRNUM(ret, name, sysno, params, args, extra) \
	WP_EXPORT ret name params                                     \
	{                                                             \
		if (!RESOLVE(name))                                   \
			return ENOSYS;                                \
		BLOCK(sysno, real_##name);                            \
		return real_##name args;                              \
	}

#define WP_WRAP_RETRY(ret, name, sysno, params, args, extra)                    \
	WP_EXPORT ret name params                                               \
	{                                                                       \
		ret rc;                                                         \
		if (!RESOLVE(name))                                             \
			NO_REAL((ret) - 1);                                     \
		BLOCK(sysno, real_##name);                                      \
		while ((rc = real_##name args) < 0 && errno == EINTR && OURS()) \
			;                                                       \
		return rc;                                                      \
	}

#define WP_WRAP_RETRY_MS(ret, name, sysno, params, args, extra)                 \
	WP_EXPORT ret name params                                               \
	{                                                                       \
		struct deadline d_ = { 0, 0 };                                  \
		int left_ = (extra);                                            \
		ret rc;                                                         \
		if (!RESOLVE(name))                                             \
			NO_REAL((ret) - 1);                                     \
		BLOCK(sysno, real_##name);                                      \
		deadline_ms(&d_, left_);                                        \
		while ((rc = real_##name args) < 0 && errno == EINTR && OURS()) \
			left_ = left_ms(&d_);                                   \
		return rc;                                                      \
	}

#define WP_WRAP_RETRY_TS(ret, name, sysno, params, args, extra)                 \
	WP_EXPORT ret name params                                               \
	{                                                                       \
		struct deadline d_ = { 0, 0 };                                  \
		struct timespec t_;                                             \
		const struct timespec *left_ = (extra);                         \
		uint64_t t0_;                                                   \
		ret rc;                                                         \
		if (!RESOLVE(name))                                             \
			NO_REAL((ret) - 1);                                     \
		BLOCK(sysno, real_##name);                                      \
		t0_ = wp_now_ns();                                              \
		while ((rc = real_##name args) < 0 && errno == EINTR && OURS()) \
			if (left_) {                                            \
				if (left_ == (extra))                           \
					deadline_from(&d_, t0_, (extra));       \
				t_ = left_ts(&d_);                              \
				left_ = &t_;                                    \
			}                                                       \
		return rc;                                                      \
	}

#endif
