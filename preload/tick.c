/* tick: the sampler thread. It sleeps on a futex until the next tick
 * (absolute CLOCK_MONOTONIC deadlines, 1/WALLPROF_HZ apart) or an event
 * (stop, snapshot, freeze for a raw dump), and every tick collects the
 * handlers' captures, lists /proc/self/task now and then, samples every
 * tracked thread (sample.c), refreshes the module map and the thread names,
 * and watches for the end of the program's threads. It runs with every
 * signal blocked, from its first tick in a descriptor table of its own
 * (settle), and does all the work that is not async-signal-safe. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "active.h"
#include "dump.h"
#include "fork_guard.h"
#include "runtime.h"
#include "park.h"
#include "sample.h"
#include "sampler.h"
#include "sigmask.h"
#include "slots.h"
#include "stack_bounds.h"
#include "test_hooks.h"
#include "threads.h"
#include "tick.h"
#include "timers.h"

/* Signals spread over the period (visit_active): in up to this many
 * batches, each of at least this many signals. */
#define SPREAD_PARTS 4
#define SPREAD_MIN 8

__thread int wp_tls_internal __attribute__((tls_model("initial-exec")));

int wp_tick_alloc_ring(void)
{
	const struct wp_config *c = &g->fix.cfg;
	uint64_t busy = (uint64_t)c->hz * c->ring_seconds * WP_RING_BUSY_THREADS;
	uint64_t idle = (uint64_t)c->max_threads * (c->ring_seconds + 2);
	uint64_t samples = busy + idle, ticks = (uint64_t)(c->ring_seconds + 4) * c->hz;
	struct wp_ring_config rc;

	/* A record holds a thread's samples at up to a second of consecutive
	 * ticks with one stack (max_run). The records are sized for the whole
	 * window of WP_RING_BUSY_THREADS threads whose stack changes at every
	 * tick (one record a tick each) plus every tracked thread blocked in
	 * one place (one record a second each); with more, the window
	 * shrinks and the loss is counted as overwritten. The tick table
	 * covers the window, a record's length and slack for late ticks. Then
	 * the whole is held under WALLPROF_RING_MB by halving whichever is
	 * bigger, the record array or the frame and stack tables. */
	wp_ring_default_config(&rc, samples, (uint64_t)c->ring_seconds * 1000000000ull);
	rc.max_run = c->hz;
	rc.nr_ticks = ticks > WP_RING_MAX_TICKS ? WP_RING_MAX_TICKS : (size_t)ticks;
	while (wp_ring_bytes(&rc) > (uint64_t)c->ring_mb << 20) {
		uint64_t sample_bytes = rc.nr_samples * WP_RING_RECORD_BYTES;
		uint64_t table_bytes = wp_ring_bytes(&rc) - sample_bytes;

		if (rc.nr_samples > 1024 && (sample_bytes >= table_bytes || rc.nr_words <= 8192))
			rc.nr_samples /= 2;
		else if (rc.nr_words > 8192)
			rc.nr_pcs /= 2, rc.nr_stacks /= 2, rc.nr_words /= 2;
		else
			break;
	}
	if (rc.nr_samples < samples)
		wp_log(WP_LOG_INFO,
		       "WALLPROF_RING_MB=%u holds %zu records, less than the %llu that %u s at %u Hz "
		       "of %u busy threads and %u blocked ones take",
		       c->ring_mb, rc.nr_samples, (unsigned long long)samples, c->ring_seconds,
		       c->hz, WP_RING_BUSY_THREADS, c->max_threads);
	if (ticks > WP_RING_MAX_TICKS)
		wp_log(WP_LOG_INFO,
		       "%u s at %u Hz is more ticks than the ring remembers (%u): a thread "
		       "blocked in one place keeps only its last %.0f s",
		       c->ring_seconds, c->hz, WP_RING_MAX_TICKS,
		       (double)WP_RING_MAX_TICKS / c->hz - 2);
	g->fix.ring_cfg = rc;
	g->smp.ring = wp_ring_create(&rc);
	return g->smp.ring ? 0 : -1;
}

void wp_tick_read_cmdline(void)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n, i;

	g->smp.cmdline[0] = 0;
	if (fd < 0)
		return;
	n = read(fd, g->smp.cmdline, sizeof(g->smp.cmdline) - 1);
	close(fd);
	if (n <= 0)
		return;
	while (n > 0 && g->smp.cmdline[n - 1] == 0)
		n--;
	for (i = 0; i < n; i++)
		if (g->smp.cmdline[i] == 0)
			g->smp.cmdline[i] = ' ';
	g->smp.cmdline[n] = 0;
}

void wp_tick_mark_start(void)
{
	struct timespec rt;

	g->smp.start_ns = wp_mono_ns();
	clock_gettime(CLOCK_REALTIME, &rt);
	g->smp.rt_offset = (int64_t)((uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec) -
			   (int64_t)g->smp.start_ns;
}

void wp_tick_forked(void)
{
	g->smp.ring = NULL;
	wp_threads_forked();
}

/* Sampler thread of a forked child, before its first tick: a fresh ring,
 * fresh names and counters; the module map is the parent's (same mappings). */
static void reset_after_fork(void)
{
	/* Threads that survive (a failed exec restarts us with the program's
	 * threads still there) keep their slots, and what they publish there,
	 * but the sampler starts over: new thread-table entries (the slots
	 * forget their entries' serials, and the table starts empty), no cached
	 * stacks (their references point into the old ring), nothing parked.
	 * Their timers are deleted with the sampler's memory of them (in a
	 * forked child there are none: a timer is not inherited, and the ids
	 * deleted are never the program's). Done before the new ring, which
	 * may fail. */
	wp_timers_disarm_all();
	wp_slots_sampler_restart();
	wp_threads_restart();
	{
		/* Forgotten before it is unmapped: a fatal signal's dump on
		 * another thread (a failed exec's restart has them) reads it. */
		struct wp_ring *old = g->smp.ring;

		__atomic_store_n(&g->smp.ring, NULL, __ATOMIC_SEQ_CST);
		wp_ring_destroy(old);
	}
	if (WP_TESTING)
		wp_test_hold_us(g->fix.cfg.test_fork_reset_hold_us);
	g->smp.ring = wp_ring_create(&g->fix.ring_cfg);
	if (!g->smp.ring) {
		/* The sampler goes on ticking (the end of the process is still
		 * watched), without the ring. */
		atomic_store(&g->sh.sampling, 0);
		wp_log(WP_LOG_ERROR, "forked child %d: cannot allocate the ring; profiling is off",
		       g->fix.pid);
		return;
	}
	memset(&g->smp.ctr, 0, sizeof(g->smp.ctr));
	g->smp.prev_signals = 0;
	g->smp.next_scan = 0;
	wp_tick_mark_start();
	/* the command line is read again by settle(): it opens a file */
}

/* Go's runtime (it asked for SA_ONSTACK on our signal, and its cgo glue is
 * there) ends the process with a raw exit_group system call, which no
 * library sees: there is no exit profile to write then. Said once, so the
 * missing file is not a mystery. */
static void go_notice(void)
{
	g->smp.go_checked = 1;
	if (!dlsym(RTLD_DEFAULT, "_cgo_topofstack") &&
	    !dlsym(RTLD_DEFAULT, "_cgo_sys_thread_start"))
		return;
	wp_log(WP_LOG_INFO,
	       "this is a Go program: Go's runtime ends the process with a raw "
	       "exit_group system call that no library sees, so no profile is written at its "
	       "exit unless it exits through C (exit())");
}

/* Whether main has ended as a thread without a word to us (a raw exit):
 * the leader's word at every tick (a load), and /proc's stat file (three
 * system calls) every tenth of a second, or only every second when the word
 * is known (it misses only a program that moved its leader's
 * clear-child-tid with set_tid_address). */
static int leader_gone(uint64_t tick)
{
	int w = wp_threads_leader_word_ended();
	uint64_t every = w < 0 ? g->fix.ticks_per_scan : g->fix.cfg.hz;

	return w == 1 || (tick % every == 0 && wp_threads_leader_ended_proc());
}

/* Waits, in the middle of a tick, until CLOCK_MONOTONIC `deadline`. Returns
 * 1 when it slept, 0 when the deadline had passed, -1 at once when an event
 * (stop, snapshot, freeze) is waiting: the tick then waits no more, and the
 * main loop sees to the event. */
static int wait_in_tick(uint64_t deadline)
{
	int slept = 0;

	while (!(atomic_load(&g->sh.events) & (EV_STOP | EV_SNAPSHOT | EV_FREEZE))) {
		if (atomic_load(&g->sh.events) & EV_WAKE) /* a waker late for a rest */
			(void)wp_active_rest_end();
		if (wp_mono_ns() >= deadline)
			return slept;
		wp_futex_wait_until(&g->sh.events, 0, deadline);
		slept = 1;
	}
	return -1;
}

/* Samples every slot on the active list (a call may take the slot off it,
 * parked or released, which moves the last one into its place), with the
 * signals it takes spread over the period instead of sent in a burst: once
 * a batch has sent `cap` signals, a slot whose last look sent it one waits
 * for the next quarter of the period (SPREAD_PARTS), counted from the
 * tick's scheduled time `due`; the others are looked at without waiting (a
 * wait with no signal after it would be a wake-up for nothing). `cap` is
 * the program's CPUs (batch_min), at least SPREAD_MIN (a batch that small
 * costs the sampler less than a wake-up: about 40 us in a virtual machine),
 * or a quarter of the signals of the tick before, so that the last quarter
 * does not take a burst. A tick waits for nothing unless more than `cap`
 * of its slots took a signal at their last look; no program whose running
 * threads all have CPU-time timers does. The samples are this tick's
 * whatever the quarter (`now`): the list does not change meanwhile (claims
 * and wakes are taken in at the next tick), and each look measures its
 * thread's CPU time from its own time (wp_sample_thread). An event ends the waits: the rest at
 * once; once sampling is off (a crash's dump) the slots left are not looked
 * at, and have no sample at this last tick. */
static void visit_active(uint64_t now, uint64_t due)
{
	uint64_t period = 1000000000ull / g->fix.cfg.hz, first = g->smp.ctr.nr_signals;
	uint64_t cap = (g->smp.prev_signals + SPREAD_PARTS - 1) / SPREAD_PARTS, in_batch = 0;
	unsigned part = 1;
	int uncounted = 0; /* a wait whose batch has sent nothing yet */
	uint32_t i;

	if (cap < g->smp.batch_min)
		cap = g->smp.batch_min;
	for (i = 0; i < wp_active_count();) {
		struct wp_slot *s = wp_active_at(i);

		if (part < SPREAD_PARTS && in_batch >= cap && s->smp.sig_last) {
			int w = wait_in_tick(due + period / SPREAD_PARTS * part);

			if (w < 0) {
				part = SPREAD_PARTS; /* an event: no more waits */
				if (!atomic_load(&g->sh.sampling))
					break;
			} else {
				part++;
				in_batch = 0;
				uncounted = w;
			}
		}
		if (atomic_load_explicit(&s->state, memory_order_acquire) >= S_IDLE &&
		    wp_sample_thread(s, now)) {
			in_batch++;
			if (uncounted) { /* a batch of signals after a wait */
				g->smp.ctr.nr_signal_batches++;
				uncounted = 0;
			}
		}
		if (i < wp_active_count() && wp_active_at(i) == s)
			i++;
	}
	g->smp.prev_signals = g->smp.ctr.nr_signals - first;
}

/* The end of the program's threads: main ended without a word to us, or
 * the process outlived its last thread (then it ends here). */
static void watch_end(void)
{
	if (!atomic_load(&g->sh.main_exited) && leader_gone(g->smp.ctr.nr_ticks)) {
		int none = 0; /* a raw exit: no word from it */

		atomic_compare_exchange_strong(&g->sh.main_exited, &none, WP_MAIN_SEEN);
	}
	/* The leader itself may still run the program's own key destructors
	 * (after ours, which set main_exited): not before it has ended. */
	if (atomic_load(&g->sh.main_exited) && !wp_threads_user_left() &&
	    wp_threads_leader_proc() != 0) {
		/* main() has ended as a thread and its last thread is gone, not
		 * seen ending (thread_exit runs for threads that got a slot of
		 * their own): without us the process would end now. After
		 * pthread_exit or thrd_exit, glibc's exit(0) on that last
		 * thread: exit(0) here (our descriptor table may lack the
		 * program's files, but the program's table is gone with its
		 * last thread: the best left to do). After a raw exit, no
		 * exit() and no atexit handler: the profile, then this thread
		 * leaves as a thread that returns does (status 0), and the
		 * kernel ends the process as one whose threads all left one by
		 * one; no status of ours is imposed on the group. */
		if (atomic_load(&g->sh.main_exited) == WP_MAIN_SEEN) {
			wp_sampler_stop_and_dump();
			for (;;)
				wp_syscall(SYS_exit, 0);
		}
		exit(0);
	}
}

/* Every tick's end, quiet or not: the tick counted, the end of the
 * program's threads watched (not when `stopping`: the ticks a rest slept
 * through, made for a stop or a raw dump), names kept current. */
static void tick_end(uint64_t now, int stopping)
{
	g->smp.ctr.nr_ticks++;
	g->smp.prev_tick_ns = now;
	if (!stopping)
		watch_end();
	/* Names change: read again right after a pthread_setname_np or a
	 * prctl(PR_SET_NAME), else each thread's once every 10 s, a share of
	 * them at each tick (a write to /proc/self/task/T/comm is not seen
	 * otherwise). */
	if (g->smp.ctr.nr_ticks % g->fix.cfg.hz == 0)
		wp_threads_prune(now);
	if (atomic_exchange(&g->sh.names_dirty, 0))
		wp_threads_refresh_names();
	else
		wp_threads_refresh_some((size_t)g->fix.cfg.hz * 10);
}

/* A tick slept through (a rest, below): with nothing on the list, nothing
 * claimed and nothing woken, a tick numbers itself, which the open records
 * of parked threads reach, rolls parked slots over and ends as every tick
 * does; `t` is its scheduled time. What the tick after the rest does anyway
 * (the module map, stack bounds, the snapshot's poll) is left to it. */
static void quiet_tick(uint64_t t, int stopping)
{
	if (g->smp.ring)
		wp_ring_tick(g->smp.ring, t);
	if (atomic_load(&g->sh.sampling) && g->smp.ring)
		wp_park_roll(t);
	tick_end(t, stopping);
}

/* A rest: after a tick that found nothing to visit (every thread of the
 * program parked in a wrapped call, none claimed or woken since), the
 * sampler sleeps through the ticks that would only number themselves,
 * until the next that has more to do: the next /proc/self/task listing
 * (it finds threads nothing announced) or chunk, and at most a tenth of a
 * second (ticks_per_scan). A claim, a wake or an event ends it at once
 * (active.h). Returns the scheduled time of the tick the rest ends at, or 0 when the
 * sampler does not rest; `due` is the scheduled time of the tick just
 * done, `chunk_at` the next chunk's time (0: none). Not after a tick that
 * overran its period: the ticks it overran are late, as without the rest.
 * The ticks slept through are made quietly when the rest ends (rest_over):
 * a program whose threads all wait costs a wake-up a tenth of a second,
 * not one a tick. */
static uint64_t rest_until(uint64_t due, uint64_t period, uint64_t chunk_at)
{
	uint64_t ticks = 1, end;

	if (wp_active_count() || !atomic_load(&g->sh.sampling) || !g->smp.ring ||
	    wp_dump_snapshot_converting() || wp_mono_ns() >= due + period)
		return 0;
	if (g->smp.next_scan > g->smp.ctr.nr_ticks)
		ticks = g->smp.next_scan - g->smp.ctr.nr_ticks + 1;
	if (ticks > g->fix.ticks_per_scan)
		ticks = g->fix.ticks_per_scan;
	end = due + ticks * period;
	if (chunk_at && end > chunk_at)
		end = due + (chunk_at - due + period - 1) / period * period;
	if (end < due + 2 * period || !wp_active_rest_begin())
		return 0;
	return end;
}

/* The rest that began after the tick at `due` and was to end at the tick
 * of `end` is over (its end, an event, a claim or a wake): the ticks from
 * `*next` it slept through are made quietly, in order, at their scheduled
 * times, up to now and before `end`, and before the claim or wake that
 * ended it: the tick after that one takes it in, as it would without the
 * rest (a thread woken closes its record at the tick before; the
 * sampler's own wake-up delay would otherwise make that tick quiet too).
 * `*next` is then the first tick still to come: the one at `end` when the
 * rest ran its course. A rest ended by a stop or a raw dump makes its
 * ticks without watching for the end of the program. */
static void rest_over(uint64_t *next, uint64_t due, uint64_t end, uint64_t period)
{
	uint64_t now, moved, limit;

	if (WP_TESTING && (atomic_load(&g->sh.events) & EV_WAKE))
		wp_test_hold_us(g->fix.cfg.test_rest_wake_delay_us);
	moved = wp_active_rest_end();
	now = wp_mono_ns();
	limit = moved > due && moved <= now ? moved : now + 1;
	for (; *next < end && *next < limit; *next += period) {
		/* a stop or a raw dump may come meanwhile */
		quiet_tick(*next, !!(atomic_load(&g->sh.events) & (EV_STOP | EV_FREEZE)));
		g->smp.ctr.nr_ticks_rested++;
	}
}

static void tick(uint64_t now, uint64_t due)
{
	if (g->sig.sample_onstack && !g->smp.go_checked &&
	    wp_fork_guard_enter() == 0) { /* dlsym takes the loader's lock */
		go_notice();
		wp_fork_guard_leave();
	}
	/* This tick numbered first: the open records of parked threads reach
	 * it, and those whose threads moved end at the one before. Without a
	 * ring (a restart that could not map one) nothing is sampled. */
	if (g->smp.ring) {
		wp_ring_tick(g->smp.ring, now);
		wp_active_gather_claims();
		wp_active_gather_wakes(wp_park_wake);
		wp_sample_collect();
	}
	if (g->smp.ctr.nr_ticks >= g->smp.next_scan) {
		/* A listing costs about 2 us a thread: with many threads it
		 * comes less often (at most 0.5 % of a core), down from ten
		 * times a second. Threads made by pthread_create are known from
		 * their start anyway; the listing finds the others and confirms
		 * exits. */
		uint64_t every = (uint64_t)g->fix.cfg.hz * atomic_load(&g->tab.hiwater) / 2500;

		wp_threads_scan();
		g->smp.next_scan = g->smp.ctr.nr_ticks +
				   (every > g->fix.ticks_per_scan ? every : g->fix.ticks_per_scan);
	}
	if (atomic_load(&g->sh.sampling) && g->smp.ring) {
		visit_active(now, due);
		wp_park_roll(now);
	}
	/* The refresh takes the loader's lock: not while a thread of the
	 * program holds it in a dl_iterate_phdr callback (which may block
	 * for long), or every tick would wait for it. The next tick will. */
	if (!atomic_load(&g->sh.loader_users) && wp_fork_guard_enter() == 0) {
		wp_modmap_refresh(&g->smp.mods);
		wp_fork_guard_leave();
	}
	if (g->smp.want_stacks && g->smp.ctr.nr_ticks - g->smp.stacks_tick >= g->fix.ticks_per_scan)
		wp_stack_bounds_find();
	tick_end(now, 0);
}


/* Whether seccomp is on for this thread ("Seccomp: 2", a filter) in its /proc
 * status (read with raw system calls: the read wrapper would take a slot
 * for the sampler). A status that cannot be read counts as filtered; one
 * without the line (a kernel without seccomp) as not. */
static int seccomp_filtered(void)
{
	char buf[4096];
	const char *p;

	if (wp_sys_read_file("/proc/thread-self/status", buf, sizeof(buf)) <= 0)
		return 1;
	p = strstr(buf, "\nSeccomp:");
	return p && strtol(p + 9, NULL, 10) != 0;
}

/* The sampler wakes at each tick on time, as far as an unprivileged thread
 * can: no timer slack (50 us by default: every wake-up that much late), and
 * on a kernel with custom slices for normal threads (Linux 6.12 and later)
 * the shortest slice, 0.1 ms, which lets a waking thread preempt a running
 * one at once instead of waiting for its slice to end (earlier kernels
 * ignore it). With every CPU busy the sampler woke 120 us late on average,
 * mostly when a running thread gave its CPU up, so that threads that live
 * 50 us were hardly ever seen (docs/PERFORMANCE.md, L-short-threads). It
 * takes no more CPU for it: the same work, sooner. Only a thread of the
 * normal policy, at its nice level, is changed, and not in its children
 * (reset on fork; the converters it starts get the slack back). Not under
 * a seccomp filter: one that kills on sched_setattr would kill the
 * program. Failures change nothing. */
static void be_punctual(void)
{
	/* the kernel's struct sched_attr (sched_setattr(2); glibc before 2.41
	 * has none) */
	struct {
		uint32_t size, sched_policy;
		uint64_t sched_flags;
		int32_t sched_nice;
		uint32_t sched_priority;
		uint64_t sched_runtime, sched_deadline, sched_period;
		uint32_t sched_util_min, sched_util_max;
	} a;
	long slack;

	g->smp.slack = 0;
	if (seccomp_filtered()) {
		wp_log(WP_LOG_DEBUG,
		       "a seccomp filter is on: the sampler keeps its timer slack and "
		       "time slice");
		return;
	}
	slack = prctl(PR_GET_TIMERSLACK);
	if (slack > 0 && prctl(PR_SET_TIMERSLACK, 1ul) == 0)
		g->smp.slack = (unsigned long)slack;
	memset(&a, 0, sizeof(a));
	if (wp_syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0) < 0 || a.sched_policy != SCHED_OTHER)
		return;
	a.size = sizeof(a);
	a.sched_flags = 0x01; /* SCHED_FLAG_RESET_ON_FORK */
	a.sched_runtime = 100000; /* ns: the kernel's shortest slice */
	wp_syscall(SYS_sched_setattr, 0, &a, 0);
}

/* The fewest signals a tick sends at once (visit_active): the CPUs the
 * program's main thread may run on (at settle; those online if the mask
 * cannot be read: a machine with more CPUs than a cpu_set_t holds), at
 * least SPREAD_MIN. */
static uint32_t spread_batch_min(void)
{
	cpu_set_t cpus;
	long n = 0;

	if (sched_getaffinity(g->fix.pid, sizeof(cpus), &cpus) == 0)
		n = CPU_COUNT(&cpus);
	else
		n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > SPREAD_MIN ? (uint32_t)n : SPREAD_MIN;
}

/* The sampler parks here while a raw dump is written: the ring, names and
 * module map hold still. Only an exec from a handler that failed thaws it;
 * after a fatal signal it stays until the process is gone. */
static void freeze(void)
{
	uint32_t ev;

	atomic_store(&g->sh.frozen, 1);
	wp_futex_wake(&g->sh.frozen);
	while ((ev = atomic_load(&g->sh.events)) & EV_FREEZE)
		wp_syscall(SYS_futex, &g->sh.events, FUTEX_WAIT_PRIVATE, ev, NULL, NULL, 0);
	atomic_store(&g->sh.frozen, 0);
}

/* The sampler's own set-up, done when its first tick or snapshot is due,
 * not at its start: most processes of a build (a shell, mkdir, the compiler
 * driver) end before that, and pay none of it (docs/PERFORMANCE.md, K).
 * Until then the sampler opens no file and writes no log line (the only
 * ones a restart can write are the ring's failure, to stderr itself). */
static void settle(int restarted)
{
	/* Before anything opens a file: our descriptors in a table of our own
	 * (before the name, which tests take as the sign that it is done). */
	g->smp.fds_private = wp_fds_go_private() == 0;
	prctl(PR_SET_NAME, "wallprof");
	be_punctual();
	g->smp.batch_min = spread_batch_min();
	if (wp_fork_guard_enter() == 0) { /* dl_iterate_phdr */
		wp_sample_find_own_code();
		wp_fork_guard_leave();
	}
	if (restarted) /* a forked child's command line is its parent's */
		wp_tick_read_cmdline();
}

static void settle_once(int *settled, int restarted)
{
	if (!*settled) {
		settle(restarted);
		*settled = 1;
	}
}

static void *sampler_main(void *arg)
{
	uint64_t period = 1000000000ull / g->fix.cfg.hz;
	uint64_t next = wp_mono_ns();
	uint64_t chunk_every = (uint64_t)g->fix.cfg.chunk_seconds * 1000000000ull;
	uint64_t next_chunk = next + chunk_every;
	uint64_t rest_end = 0, rest_due = 0; /* resting until the tick at rest_end,
					      * since the one at rest_due (rest_until) */
	int settled = 0;

	wp_tls_internal = 1; /* before any wrapped call (settle's log lines) */
	wp_sigmask_bypass = 1;
	/* every signal blocked (wp_tick_spawn), for good; glibc's sigfillset
	 * leaves out its own two, which setuid needs (sig_setxid_all_threads) */
	wp_sigmask_fix_mine();
	g->smp.sampler_tid = (pid_t)wp_syscall(SYS_gettid); /* never samples itself */
	/* A forked child's sampler has neither, whatever its parent's had,
	 * until it settles. */
	g->smp.fds_private = 0;
	g->smp.slack = 0;
	if (arg) /* restarted: a forked child, a failed exec */
		reset_after_fork();
	for (;;) {
		uint32_t ev;
		uint64_t now;

		next += period;
		for (;;) {
			ev = atomic_load(&g->sh.events);
			if (rest_end && (ev || wp_mono_ns() >= rest_end)) {
				rest_over(&next, rest_due, rest_end, period);
				rest_end = 0;
				continue;
			}
			if (ev & EV_WAKE) { /* a waker late for a rest */
				(void)wp_active_rest_end();
				continue;
			}
			if (ev & EV_STOP) {
				/* a snapshot being converted is finished, not lost */
				wp_dump_snapshot_finish();
				return NULL;
			}
			if (ev & EV_FREEZE) {
				freeze();
				continue;
			}
			if (ev & EV_SNAPSHOT) {
				atomic_fetch_and(&g->sh.events, ~(uint32_t)EV_SNAPSHOT);
				settle_once(&settled, arg != NULL);
				wp_dump_snapshot();
				continue;
			}
			if (!rest_end && wp_mono_ns() >= next)
				break;
			wp_futex_wait_until(&g->sh.events, 0, rest_end ? rest_end : next);
		}
		settle_once(&settled, arg != NULL);
		now = wp_mono_ns();
		if (now >= next + period) {
			/* Overran (host stopped, machine busy): skip, don't burst. */
			uint64_t missed = (now - next) / period;

			g->smp.ctr.nr_ticks_late += missed;
			next += missed * period;
		}
		wp_dump_snapshot_poll();
		tick(now, next);
		if (chunk_every && now >= next_chunk) {
			wp_dump_chunk();
			next_chunk += chunk_every;
			if (next_chunk <= now) /* stopped for longer: no burst */
				next_chunk = now + chunk_every;
		}
		rest_end = rest_until(next, period, chunk_every ? next_chunk : 0);
		rest_due = next;
	}
}

int wp_sampler_create_thread_real(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
				  void *arg)
{
	typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	static create_fn real_create;

	if (!real_create)
		real_create = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
	return real_create ? real_create(t, attr, fn, arg) : ENOSYS;
}

int wp_tick_spawn(int restart)
{
	sigset_t all, old;
	int rc;

	/* Helper threads never take the program's signals. */
	sigfillset(&all);
	wp_sigmask_raw(SIG_SETMASK, &all, &old);
	rc = wp_sampler_create_thread_real(&g->smp.sampler, NULL, sampler_main,
					   restart ? &wp_rt : NULL);
	wp_sigmask_raw(SIG_SETMASK, &old, NULL);
	return rc;
}
