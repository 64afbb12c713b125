/* lifecycle: start, and everything that ends or restarts the runtime: the
 * exit, an exec (and its failure), fork, main() leaving by pthread_exit and
 * the last program thread after it, the program's threads counted from
 * their start to their end. The states and their moves are in lifecycle.h;
 * this file is the only one that moves them. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_hooks.h"
#include "../unwind/unwind.h"
#include "convert.h"
#include "dump.h"
#include "fork_guard.h"
#include "handler.h"
#include "lifecycle.h"
#include "loader_lock.h"
#include "runtime.h"
#include "park.h"
#include "sample.h"
#include "sampler.h"
#include "sigmask.h"
#include "slots.h"
#include "threads.h"
#include "tick.h"
#include "timers.h"
#include "tree.h"

struct wp_rt wp_rt;

static __thread int tls_counted __attribute__((tls_model("initial-exec"))); /* in live_threads */

/* Moves the state from `from` to `to`. Returns 1, or 0 when another thread
 * moved it first. async-signal-safe */
WP_AS_SAFE static int life_move(enum wp_life from, enum wp_life to)
{
	uint32_t v = from;

	return atomic_compare_exchange_strong(&g->sh.life, &v, to);
}

/* An exit or exec path takes over from RUNNING or JOINED: `to_running`
 * (from RUNNING) or `to_joined` (from JOINED). Returns the state it moved
 * from, or WP_LIFE_OFF when the runtime was not (or no longer) started.
 * async-signal-safe */
WP_AS_SAFE static enum wp_life life_take_over(enum wp_life to_running, enum wp_life to_joined)
{
	for (;;) {
		enum wp_life l = wp_life_get();

		if (l == WP_LIFE_RUNNING && life_move(l, to_running))
			return l;
		if (l == WP_LIFE_JOINED && life_move(l, to_joined))
			return l;
		if (l != WP_LIFE_RUNNING && l != WP_LIFE_JOINED)
			return WP_LIFE_OFF;
	}
}

int wp_sampler_thread_created(void)
{
	if (!wp_life_started() || getpid() != g->fix.pid || wp_tls_internal || !g->fix.exit_key_ok)
		return 0;
	atomic_fetch_add(&g->sh.live_threads, 1);
	return 1;
}

void wp_sampler_thread_create_failed(void)
{
	atomic_fetch_sub(&g->sh.live_threads, 1);
}

void wp_sampler_thread_begins(void)
{
	tls_counted = 1;
	/* Known to the sampler from its first instruction, not from the next
	 * /proc/self/task scan (every tenth tick): a thread that lives a few
	 * milliseconds is sampled like any other. Claiming the slot stores it
	 * as the exit key's value (its end is seen); without a slot (none
	 * free, not sampling), any value makes the key's destructor run at the
	 * thread's end. A key below 32 allocates nothing. */
	if (!wp_slot_self() && !pthread_getspecific(g->fix.exit_key))
		pthread_setspecific(g->fix.exit_key, &wp_rt);
}

static void stop_and_dump(int exec);

/* main() has left by pthread_exit and the last counted thread is ending
 * (or none was left when main left): glibc ends the process with exit(0)
 * on the last thread to end, so that atexit handlers and stdio's flush run
 * on a thread of the program, in its descriptor table. Our threads must
 * not be that last thread: stop them now (once), unless a thread the count
 * never saw lives on (the sampler then ends the process when it is gone,
 * see tick). */
static void stop_if_last(void)
{
	int main_exited = atomic_load(&g->sh.main_exited), raw = main_exited == WP_MAIN_SEEN;

	if (atomic_load(&g->sh.live_threads) == 0 && wp_life_started() && !wp_tls_internal &&
	    getpid() == g->fix.pid && (main_exited || (raw = wp_threads_leader_ended())) &&
	    wp_threads_others_gone((uint32_t)wp_syscall(SYS_gettid)) &&
	    life_move(WP_LIFE_RUNNING, WP_LIFE_JOINED)) {
		atomic_fetch_or(&g->sh.events, EV_STOP);
		wp_futex_wake(&g->sh.events);
		pthread_join(g->smp.sampler, NULL);
		/* main() left without a word to us (a raw exit system call):
		 * glibc still counts it, so no exit() follows this thread's
		 * end, and the process ends with it. The profile is written
		 * now. The word is read after main_exited: a main that left
		 * by pthread_exit meanwhile said so before its word changed. */
		if (raw && atomic_load(&g->sh.main_exited) != WP_MAIN_SAID)
			stop_and_dump(0);
	}
}

void wp_sampler_main_exiting(void)
{
	/* Every thread that ends comes here (thread_exit): the tid first, from
	 * TLS when the thread looked it up already (it holds a slot), so that
	 * only the leader pays for the getpid() that tells a forked child whose
	 * state was not set up (a raw fork system call) from us. */
	uint32_t tid = wp_tls_tid ? wp_tls_tid : (uint32_t)wp_syscall(SYS_gettid);

	if (!wp_life_started() || tid != (uint32_t)g->fix.pid || getpid() != g->fix.pid)
		return;
	atomic_store(&g->sh.main_exited, WP_MAIN_SAID);
	stop_if_last();
}

void wp_sampler_pthread_exit(void)
{
	if (!g->fix.exit_key_ok || !pthread_getspecific(g->fix.exit_key))
		wp_sampler_main_exiting();
}

/* The pthread key's destructor: a thread that holds a slot (the value is
 * its slot), or was counted at its start, or leads the process, is ending. */
static void thread_exit(void *p)
{
	/* From now on the sampler must not load from its stack directly. */
	wp_slot_exiting(p);
	if (tls_counted) {
		tls_counted = 0;
		/* Only the one that takes the count to 0 looks further. */
		if (atomic_fetch_sub(&g->sh.live_threads, 1) == 1)
			stop_if_last();
	}
	/* The thread group leader ending as a thread: main() through
	 * pthread_exit, or, in a child forked from another thread, that
	 * thread returning from its start routine (after_fork_child set the
	 * key for it). Without us the process would end with its last thread:
	 * our threads are stopped if it is the last. */
	wp_sampler_main_exiting();
}

/* In the child of fork(): only the forking thread exists. Forget the
 * parent's threads and start a sampler of our own; the heavy reset happens
 * on that thread, so a child that execs right away pays almost nothing. */
static void after_fork_child(void)
{
	int no_walks = wp_fork_guard_child();

	wp_slot_forked();
	wp_tick_forked();
	/* No timer is inherited, and the placed-id lock may have been held
	 * by a thread that is not here. */
	wp_timers_forget_all();
	if (!wp_life_started())
		return;
	atomic_store(&g->sh.resting, 0); /* the parent's sampler may have been resting */
	if (!g->fix.cfg.follow_children) {
		/* Children are not profiled: this one leaves its parent's ring
		 * alone and its snapshot signal gets its old meaning back. */
		atomic_store(&g->sh.sampling, 0);
		atomic_store(&g->sh.life, WP_LIFE_OFF);
		wp_slots_after_fork(0);
		if (g->sig.snapshot_signal)
			__sigaction(g->sig.snapshot_signal, &g->sig.prev_snap_act, NULL);
		g->sig.snapshot_signal = 0;
		return;
	}
	g->fix.pid = getpid();
	g->fix.uid = getuid();
	wp_threads_note_leader();
	wp_log_forked();
	if (no_walks)
		wp_log(WP_LOG_ERROR,
		       "forked child %d: the fork came while a stack walk held a lock, which "
		       "the child has copied held; its samples keep the PC alone",
		       g->fix.pid);
	/* This thread is the child's leader now, whatever it was in the
	 * parent: its exit must be seen (thread_exit). A key below 32 is
	 * stored without allocating. */
	if (g->fix.exit_key_ok)
		pthread_setspecific(g->fix.exit_key, &wp_rt);
	wp_slots_after_fork(1);
	/* Only this thread may be inside our loader wrappers now (a fork
	 * from a dl_iterate_phdr callback): the others' counts left with
	 * them, and would stop the module map's refresh for good. */
	atomic_store(&g->sh.loader_users, wp_tls_in_loader);
	atomic_store(&g->sh.events, 0);
	atomic_store(&g->sh.main_exited, 0);
	/* Whether the parent's sampler was running or joined, the child's is
	 * about to run (the only thread here: a plain store). */
	atomic_store(&g->sh.life, WP_LIFE_RUNNING);
	/* The forking thread is the child's leader: not among the others. */
	atomic_store(&g->sh.live_threads, 0);
	tls_counted = 0;
	wp_dump_forked();
	g->smp.sampler_tid = 0;
	if (wp_tick_spawn(1) != 0) {
		atomic_store(&g->sh.sampling, 0);
		atomic_store(&g->sh.life, WP_LIFE_OFF);
		wp_log(WP_LOG_ERROR, "forked child %d: cannot start the sampler; profiling is off",
		       g->fix.pid);
	}
}

/* WALLPROF_FOLLOW_CHILDREN=0: take this library out of LD_PRELOAD so that
 * exec'd programs, system() and posix_spawn children run unprofiled. Runs
 * in the constructor, before main() and before the program has threads. */
static void unfollow_children(void)
{
	const char *lp = getenv("LD_PRELOAD"), *self, *me;
	char out[WP_PATH_MAX], tok[WP_PATH_MAX];
	Dl_info di;
	size_t n = 0;

	if (!lp || !dladdr((void *)unfollow_children, &di) || !di.dli_fname)
		return;
	self = di.dli_fname;
	me = strrchr(self, '/') ? strrchr(self, '/') + 1 : self;
	out[0] = 0;
	while (*lp) {
		size_t len = strcspn(lp, " :");
		const char *b;

		if (len > 0 && len < sizeof(tok)) {
			memcpy(tok, lp, len);
			tok[len] = 0;
			b = strrchr(tok, '/') ? strrchr(tok, '/') + 1 : tok;
			if (strcmp(b, me) && n + len + 2 < sizeof(out))
				n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%s",
						      n ? " " : "", tok);
		}
		lp += len;
		lp += strspn(lp, " :");
	}
	if (n)
		setenv("LD_PRELOAD", out, 1);
	else
		unsetenv("LD_PRELOAD");
}

/* libunwind's warm-up (unwind.h); the test build can say how many page
 * faults it took on this thread (WALLPROF_TEST_WARMUP_REPORT=1). */
static void warm_up(void)
{
#if WP_TESTING
	struct rusage ru;
	long before = getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_minflt + ru.ru_majflt : 0;
	char line[96];
	int n;
#endif

	wp_unwind_init();
#if WP_TESTING
	if (!g->fix.cfg.test_warmup_report || getrusage(RUSAGE_THREAD, &ru) != 0)
		return;
	n = snprintf(line, sizeof(line), "wallprof test: the warm-up took %ld page faults\n",
		     ru.ru_minflt + ru.ru_majflt - before);
	if (n > 0)
		(void)!write(STDERR_FILENO, line, (size_t)n);
#endif
}

int wp_sampler_start(void)
{
	char a[24];

	wp_config_load(&g->fix.cfg);
	if (!g->fix.cfg.follow_children)
		unfollow_children();
	if (!g->fix.cfg.enabled)
		return -1;
	wp_tree_export(&g->fix.cfg);
	wp_convert_init(&g->fix.cfg);
	g->fix.pid = getpid();
	g->fix.uid = getuid();
	wp_threads_note_leader();
#if WP_TESTING
	wp_test_enter_signal = g->fix.cfg.test_enter_signal;
	wp_test_walk_mask_strict = g->fix.cfg.test_walk_mask_strict;
#endif
	g->fix.ticks_per_scan = g->fix.cfg.hz >= 10 ? g->fix.cfg.hz / 10 : 1;
	if (wp_slots_alloc(&g->fix.cfg) < 0 || wp_threads_alloc() < 0 || wp_tick_alloc_ring() < 0) {
		wp_log(WP_LOG_ERROR, "cannot allocate the sample buffers (%s); profiling is off",
		       strerror(errno));
		return -1;
	}
	/* Here, before main(), not at the sampler's first tick: libunwind's
	 * pthread key must get a number below 32 (glibc stores those in the
	 * thread descriptor; a higher one makes each thread's first capture
	 * allocate in the handler), and its pipe must be our fake one even if
	 * the program calls libunwind itself (unwind.c). */
	warm_up();
	/* where glibc's loader lock is, for the handler (loader_lock.h) */
	if (wp_loader_lock_find() < 0)
		wp_log(WP_LOG_DEBUG, "glibc's loader lock was not found: a sample that lands "
				     "while dlopen takes it could wait for its own thread");
	wp_tick_read_cmdline();
	wp_modmap_refresh(&g->smp.mods);
	/* glibc keeps keys below 32 in each thread's descriptor; a later one
	 * could allocate when a wrapper sets it, so it is not used. */
	g->fix.exit_key_ok =
		pthread_key_create(&g->fix.exit_key, thread_exit) == 0 && g->fix.exit_key < 32;
	/* The leader's end is seen (thread_exit) however it leaves as a
	 * thread but a raw exit, thrd_exit included, slot or not. */
	if (g->fix.exit_key_ok && (pid_t)wp_syscall(SYS_gettid) == g->fix.pid)
		pthread_setspecific(g->fix.exit_key, &wp_rt);
	if (wp_handler_pick_signal() < 0)
		return -1;
	wp_timers_init();
	wp_handler_install_snapshot();
	wp_dump_install_fatal();
	wp_tick_mark_start();
	atomic_store(&g->sh.sampling, 1);
	if (wp_tick_spawn(0) != 0) {
		atomic_store(&g->sh.sampling, 0);
		wp_log(WP_LOG_ERROR, "cannot start the sampler thread; profiling is off");
		return -1;
	}
	life_move(WP_LIFE_OFF, WP_LIFE_RUNNING);
	pthread_atfork(wp_fork_guard_prepare, wp_fork_guard_parent, after_fork_child);
	wp_log(WP_LOG_DEBUG, "sampling every thread at %u Hz with %s, window %u s, depth %u",
	       g->fix.cfg.hz, wp_signal_name(g->sig.signal, a, sizeof(a)), g->fix.cfg.ring_seconds,
	       g->fix.cfg.max_depth);
	return 0;
}

/* The exit dump (`exec` 0), or the image's before an exec, from a program
 * thread outside any handler of its own. From inside one (an exit, _exit
 * or exec from a signal handler), only the raw dump of wp_dump_handler. */
static void stop_and_dump(int exec)
{
	enum wp_life was;

	if (!wp_life_started() || getpid() != g->fix.pid)
		return;
	if (wp_handler_in_program()) {
		/* _exit, exit or exec from a signal handler: the raw dump, the
		 * sampler parked, then STOPPED, or PARKED (thawed if the exec
		 * fails) */
		wp_dump_handler(0, exec);
		if (exec)
			life_take_over(WP_LIFE_PARKED, WP_LIFE_PARKED_JOINED);
		else
			life_take_over(WP_LIFE_STOPPED, WP_LIFE_STOPPED);
		return;
	}
	was = life_take_over(WP_LIFE_STOPPED, WP_LIFE_STOPPED);
	if (was == WP_LIFE_OFF)
		return; /* another thread's exit or exec took over first */
	if (was == WP_LIFE_JOINED) {
		/* the last program thread stopped it (thread_exit) */
	} else if (!pthread_equal(pthread_self(), g->smp.sampler)) {
		atomic_fetch_or(&g->sh.events, EV_STOP);
		wp_futex_wake(&g->sh.events);
		pthread_join(g->smp.sampler, NULL);
	} /* else: the sampler itself ends the process (see tick) */
	wp_sample_collect();
	wp_park_count();
	atomic_store(&g->sh.sampling, 0);
	wp_dump_exit(exec);
}

void wp_sampler_stop_and_dump(void)
{
	stop_and_dump(0);
}

/* Before exec: the image's profile, as at exit. */
void wp_sampler_before_exec(void)
{
	if (!wp_life_started() || getpid() != g->fix.pid)
		return;
	stop_and_dump(1);
}

/* An exec from a signal handler failed: its raw dump parked the sampler,
 * which goes on where it was (from PARKED; from PARKED_JOINED there is no
 * sampler, and the state goes back to JOINED). async-signal-safe */
WP_AS_SAFE static void thaw(enum wp_life parked, enum wp_life back)
{
	wp_dump_rearm();
	atomic_fetch_and(&g->sh.events, ~(uint32_t)EV_FREEZE);
	wp_futex_wake(&g->sh.events);
	atomic_store(&g->sh.sampling, 1);
	life_move(parked, back);
}

/* exec failed: the program goes on, so does profiling (a fresh window).
 * From a handler, only the thaw runs (the exec from a handler parked the
 * sampler). */
void wp_sampler_exec_failed(void)
{
	enum wp_life l = wp_life_get();

	if ((l != WP_LIFE_STOPPED && l != WP_LIFE_PARKED && l != WP_LIFE_PARKED_JOINED) ||
	    !g->fix.pid || getpid() != g->fix.pid || !g->smp.ring)
		return;
	if (l == WP_LIFE_PARKED || l == WP_LIFE_PARKED_JOINED) {
		thaw(l, l == WP_LIFE_PARKED ? WP_LIFE_RUNNING : WP_LIFE_JOINED);
		return;
	}
	if (atomic_load(&g->sh.frozen) || wp_dump_busy())
		return; /* another thread's raw dump holds the sampler still */
	if (!life_move(WP_LIFE_STOPPED, WP_LIFE_RUNNING))
		return; /* another thread's failed exec restarts it */
	atomic_store(&g->sh.events, 0);
	atomic_store(&g->sh.resting, 0);
	atomic_store(&g->sh.sampling, 1);
	if (wp_tick_spawn(1) != 0) {
		atomic_store(&g->sh.sampling, 0);
		life_move(WP_LIFE_RUNNING, WP_LIFE_STOPPED); /* the next failed exec tries again */
	}
}
