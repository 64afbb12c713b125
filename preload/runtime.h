/* runtime: the state the runtime's modules share (internal to preload/).
 *
 * One instance, `wp_rt`, reached through `g`. It is split by who writes
 * it, so that ownership shows at every use (g->fix.pid, g->smp.ring,
 * g->sh.events):
 * - fix: set at start, before the sampler thread exists; read-only after;
 * - tab: the slot table (slots.c): mapped at start, entries claimed by any
 *   thread lock-free;
 * - smp: the sampler thread's own; after it has stopped and been joined,
 *   the exiting thread's;
 * - sh:  atomics any thread or signal handler may write;
 * - sig: the signal dispositions, written at start and then by the
 *   interposed sigaction() on any program thread.
 * State that only one module uses lives in that module (the thread table in
 * threads.c, the dump spaces in dump.c, the program's handlers in
 * sigaction.c). */
#ifndef WP_RUNTIME_H
#define WP_RUNTIME_H

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>

#include "as_safe.h"
#include "ring.h"
#include "../output/sys.h"
#include "wallprof.h"

struct wp_slot;
struct wp_unw_site;

#define WP_SITES 4 /* replayable walks kept per thread */

/* Events for the sampler, in a futex word (g->sh.events). */
#define EV_STOP 0x1
#define EV_SNAPSHOT 0x2
#define EV_FREEZE 0x4 /* a raw dump is being written: hold still */
#define EV_WAKE 0x8   /* a claim or a wake ended the sampler's rest (active.h) */
#define WP_REST_MARK (1ull << 63) /* sh.rest_moved_ns: no time yet, the rest's number */

/* g->sh.main_exited */
#define WP_MAIN_SAID \
	1 /* main is leaving by pthread_exit or thrd_exit (our wrapper or our
			* key's destructor said so): glibc's exit() follows its last thread */
#define WP_MAIN_SEEN \
	2 /* found ended without a word (a raw exit system call): glibc
			* still counts it, no exit() follows */

/* Cookie in si_value: magic | generation (24 bits) | slot index (24 bits). */
#define COOKIE_MAGIC 0x57b0ull
/* A CPU-time timer's (timers.h): magic | slot index (24 bits). The timer
 * fires only on its own thread, so no generation: the slot is that
 * thread's for as long as the timer lives. */
#define COOKIE_TIMER_MAGIC 0x57b1ull

/* Set at start (wp_sampler_start) before the sampler thread exists; a
 * forked child that is profiled sets pid and uid again, as its only
 * thread. Read-only otherwise. */
struct wp_rt_fixed {
	struct wp_config cfg;
	pid_t pid;
	uid_t uid;
	pthread_key_t exit_key;     /* destructor: thread_exit (lifecycle.c) */
	int exit_key_ok;            /* exit_key is below 32: setting it never allocates */
	unsigned ticks_per_scan;    /* /proc/self/task is listed every this many ticks */
	struct wp_ring_config ring_cfg;
};

/* The slot table (slots.c). The arrays are mapped at start; a slot's
 * fields are written as slots.h says; hiwater and the tid_slot entries by
 * any claimer with compare-and-swap (the sampler clears a released
 * thread's entry, a forked child resets hiwater); scan by the sampler. */
struct wp_rt_table {
	struct wp_slot *slots;
	uint32_t nr_slots;
	uint64_t *bufs, *stks;      /* per-slot handler and cached-stack buffers */
	size_t buf_depth;           /* entries per handler buffer */
	struct wp_unw_site *sites;  /* walks from published registers: slot i's k-th
				     * is sites[k * nr_slots + i] */
	_Atomic uint32_t *tid_slot; /* tid -> slot index + 1, 0 = none */
	uint32_t nr_tids;           /* pid_max */
	_Atomic uint32_t hiwater;   /* slots [0, hiwater) may be in use */
	_Atomic uint64_t scan;      /* scans of /proc/self/task begun */
	_Atomic uint64_t *free_map; /* bit i set: slot i is free (claims take the lowest) */
	_Atomic uint64_t *wake_map; /* bit i set: parked slot i's thread moved (active.h) */
	_Atomic uint32_t claim_head; /* slots claimed since the sampler last looked: index + 1
				      * of the top of a stack linked by claim_next */
};

/* The sampler thread's (tick.c, sample.c, threads.c, dump.c's
 * snapshots). After the sampler has stopped and been joined, the exiting
 * thread's (collect, the exit dump); a raw dump reads it while the sampler
 * is parked. start_ns, rt_offset and cmdline are set at start and again by
 * a restarted sampler; `sampler` by whoever starts the thread. */
struct wp_rt_sampler {
	pthread_t sampler;
	pid_t sampler_tid;
	struct wp_ring *ring;
	struct wp_modmap mods;
	struct wp_counters ctr;
	int fds_private;            /* the sampler works in a private descriptor table */
	unsigned long slack;        /* its timer slack as inherited, before be_punctual
				     * (given back to the converters it starts); 0: unchanged */
	uint64_t own_lo, own_hi;    /* this library's executable segment */
	uint64_t main_stk_lo, main_stk_hi; /* the main thread's [stack] mapping, once looked up */
	int want_stacks;            /* a pinned thread's stack bounds are not known yet */
	uint64_t stacks_tick;       /* tick of the last look at /proc/self/maps for them */
	int go_checked;             /* looked for Go's runtime (go_notice) */
	char cmdline[1024];
	uint64_t start_ns;
	int64_t rt_offset;
	uint64_t prev_tick_ns;      /* the tick before the one under way */
	uint64_t next_scan;         /* nr_ticks of the next /proc/self/task listing */
	uint32_t batch_min;         /* the fewest signals a tick sends at once (tick.c) */
	uint64_t prev_signals;      /* signals the tick before sent */
};

/* Shared with every thread and handler: atomics. */
struct wp_rt_shared {
	_Atomic uint32_t life;      /* enum wp_life: see lifecycle.h, moved by lifecycle.c */
	_Atomic int sampling;       /* handler does captures; sampler sends; wrappers claim */
	_Atomic uint32_t events;    /* EV_*: any thread sets, the sampler clears */
	_Atomic uint32_t frozen;    /* the sampler parked for a raw dump (it sets, then clears) */
	_Atomic uint32_t resting;   /* the sampler sleeps through ticks with nothing to visit:
				     * the rest's number (0: none); the sampler sets it, the
				     * first claimer or waker to see it ends the rest, and so
				     * does the sampler (active.h) */
	_Atomic uint64_t rest_moved_ns; /* when that claimer or waker ended the rest; while
					 * none has, WP_REST_MARK | the rest's number */
	_Atomic int main_exited;    /* main() has ended as a thread: WP_MAIN_SAID (our key's
				     * destructor ran on it: pthread_exit, thrd_exit) or
				     * WP_MAIN_SEEN (found ended: a raw exit system call) */
	_Atomic uint32_t live_threads; /* threads counted by pthread_create, not yet ended */
	_Atomic int names_dirty;    /* a thread was renamed */
	_Atomic int loader_users;   /* threads inside our dl_iterate_phdr/dlclose wrappers */
	_Atomic uint64_t nr_eintr_retried; /* written by wrappers on any thread */
};

/* Signal dispositions: the constructor, then the interposed sigaction() on
 * any program thread (sigaction.c); read by the handlers. */
struct wp_rt_signals {
	int signal;                 /* the sampling signal in use */
	int sample_onstack;         /* our handler has SA_ONSTACK (wp_handler_sampling_action) */
	struct sigaction prog_act;  /* the program's view of the sampling signal */
	int snapshot_signal;        /* 0 when snapshots are off */
	struct sigaction prev_snap_act;
	uint8_t fatal_installed[NSIG]; /* our fatal handler is the kernel's for it */
};

struct wp_rt {
	struct wp_rt_fixed fix;
	struct wp_rt_table tab;
	struct wp_rt_sampler smp;
	struct wp_rt_shared sh;
	struct wp_rt_signals sig;
};

extern struct wp_rt wp_rt __attribute__((visibility("hidden")));
static struct wp_rt *const g = &wp_rt;

/* 1 on the library's own threads (the sampler): never sampled, never
 * counted, never given a slot. TLS the preload-safe way: initial-exec, so
 * that no access can allocate. */
extern __thread int wp_tls_internal __attribute__((tls_model("initial-exec")));

/* CLOCK_MONOTONIC now, in ns. async-signal-safe */
WP_AS_SAFE static inline uint64_t wp_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wakes every waiter on `w`. async-signal-safe */
WP_AS_SAFE static inline void wp_futex_wake(_Atomic uint32_t *w)
{
	wp_syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits while `*w` is `val`, until CLOCK_MONOTONIC reaches `deadline` (ns)
 * or a wake. async-signal-safe */
WP_AS_SAFE static inline void wp_futex_wait_until(_Atomic uint32_t *w, uint32_t val,
						  uint64_t deadline)
{
	struct timespec ts = { (time_t)(deadline / 1000000000ull),
			       (long)(deadline % 1000000000ull) };

	/* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
	wp_syscall(SYS_futex, w, FUTEX_WAIT_BITSET_PRIVATE, val, &ts, NULL, FUTEX_BITSET_MATCH_ANY);
}

#endif
