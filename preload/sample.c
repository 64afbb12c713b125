/* sample: the sampler's per-thread policy. Every tick each tracked thread
 * gets exactly one sample (or a counted loss): from the context a wrapped
 * blocking call published, its last stack again when it has not run or
 * blocks where it blocked before, a walk from what /proc shows for a thread
 * blocked elsewhere, or our signal when it runs. Also moving the handlers'
 * captures into the ring (collect), and the stack bounds that let replayed
 * walks read stack words with plain loads. Sampler thread only (collect
 * also on the exiting thread once the sampler is joined). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "test_hooks.h"
#include "../unwind/unwind.h"
#include "active.h"
#include "fork_guard.h"
#include "park.h"
#include "timers.h"
#include "proc_unwind.h"
#include "runtime.h"
#include "sample.h"
#include "slots.h"
#include "threads.h"

/* A sampling signal still undelivered after this long is given up. */
#define WP_SENT_TIMEOUT_NS 200000000ull

/* A signal that lands while a wrapped call runs (the race the wrappers
 * retry) finds our wrapper among the callers. The wrappers stand for the
 * libc function the program called, which is the frame below them, so they
 * are left out; a leaf inside them (the signal came while the wrapper's own
 * code ran) stays, the only place the sample can point to. */
static uint32_t drop_own_frames(uint64_t *pc, uint32_t n)
{
	uint32_t i, k = 1;

	for (i = 1; i < n; i++)
		if (pc[i] < g->smp.own_lo || pc[i] >= g->smp.own_hi)
			pc[k++] = pc[i];
	return n ? k : 0;
}

/* Moves the capture waiting in `s` (S_READY) into the ring at tick time
 * `t_ns`, with the ticks that waited for it, and into the slot's cache. */
static void take(struct wp_slot *s, uint64_t t_ns)
{
	struct wp_thread *t;
	/* our signal's: the system call the probe saw; the timer's: none */
	uint32_t flags = 0, n, sysno = s->hdl.timer ? UINT32_MAX : s->smp.sig_sysno;

	if (!(s->hdl.uflags & WP_UNW_BLOCKED))
		flags |= WP_SAMPLE_ON_CPU;
	else if (sysno != UINT32_MAX)
		flags |= WP_SAMPLE_SYSCALL;
	if (s->hdl.uflags & WP_UNW_TRUNCATED) {
		flags |= WP_SAMPLE_TRUNCATED;
		g->smp.ctr.nr_truncated++;
	}
	if (s->hdl.uflags & WP_UNW_FAILED) {
		flags |= WP_SAMPLE_PARTIAL;
		g->smp.ctr.nr_unwind_failed++;
	}
	if (s->hdl.uflags & WP_UNW_DL_GUARD)
		g->smp.ctr.nr_dl_guarded++;
	n = s->hdl.nr < g->fix.cfg.max_depth ? s->hdl.nr : g->fix.cfg.max_depth;
	n = drop_own_frames(s->buf, n);
	t = wp_threads_of(s);
	memset(&s->smp.stk_ref, 0, sizeof(s->smp.stk_ref)); /* stays so if not stored */
	if (n > 0) {
		uint32_t k;

		wp_ring_add_get_ref(g->smp.ring, t_ns, atomic_load(&s->tid), flags, sysno, s->buf,
				    n, 1, &s->smp.stk_ref, &s->smp.run);
		/* The thread had not run since the signal was sent, so this
		 * stack is also where it was at those ticks. */
		for (k = 0; k < s->smp.nr_pend; k++)
			if (wp_ring_add_ref(g->smp.ring, s->smp.pend_ns[k], atomic_load(&s->tid),
					    flags, sysno, &s->smp.stk_ref, &s->smp.run) < 0)
				wp_ring_add_get_ref(g->smp.ring, s->smp.pend_ns[k],
						    atomic_load(&s->tid), flags, sysno, s->buf, n,
						    1, &s->smp.stk_ref, &s->smp.run);
		g->smp.ctr.nr_samples += s->smp.nr_pend;
		if (t)
			t->nr_samples += s->smp.nr_pend;
	}
	s->smp.nr_pend = 0;
	/* Cache it: reused while the thread does not run (stk_ref is its
	 * place in the ring). */
	memcpy(s->stk, s->buf, n * sizeof(*s->stk));
	s->smp.cached_nr = n;
	s->smp.cached_flags = flags;
	s->smp.cached_sysno = sysno;
	s->smp.nr_cached_ok = n > 0;
	s->smp.sampled_seq = 0;
	s->smp.cap_tick = g->smp.ctr.nr_ticks;
	g->smp.ctr.nr_samples++;
	if (t) {
		t->nr_samples++;
		t->last_ns = t_ns;
	}
	atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
}

/* Moves every capture the sampler asked for into the ring and the slot's
 * cache. Only slots on the active list can have one: a parked slot has no
 * signal in flight (see park). A capture the thread's timer took unasked
 * waits for the thread's turn at this tick (wp_sample_thread). */
void wp_sample_collect(void)
{
	uint32_t i, n = wp_active_count();

	for (i = 0; i < n; i++) {
		struct wp_slot *s = wp_active_at(i);

		if (atomic_load_explicit(&s->state, memory_order_acquire) == S_READY &&
		    !s->hdl.timer)
			take(s, s->smp.t_ns);
	}
}

/* A capture the timer took unasked before the tick before this one, or
 * before the thread blocked: not where the thread is now. */
static void drop_timer_capture(struct wp_slot *s)
{
	uint32_t st = S_READY;

	if (s->hdl.timer)
		atomic_compare_exchange_strong(&s->state, &st, S_IDLE);
}

void wp_sample_cached(struct wp_slot *s, uint64_t now)
{
	struct wp_thread *t = wp_threads_of(s);

	uint32_t tid = atomic_load(&s->tid);

	/* The same stack as last time: no hashing of its frames again. */
	if (wp_ring_add_ref(g->smp.ring, now, tid, s->smp.cached_flags, s->smp.cached_sysno,
			    &s->smp.stk_ref, &s->smp.run) < 0)
		wp_ring_add_get_ref(g->smp.ring, now, tid, s->smp.cached_flags, s->smp.cached_sysno,
				    s->stk, s->smp.cached_nr, 1, &s->smp.stk_ref, &s->smp.run);
	g->smp.ctr.nr_samples++;
	if (t) {
		t->nr_samples++;
		t->last_ns = now;
	}
}

/* The walk from a blocked thread's published registers. A thread that
 * blocks again where it blocked before (same wrapper, same stack pointer and
 * frame pointer, every return address and saved frame pointer the walk read
 * unchanged on its stack) has the same callers: the walk is replayed from the
 * slot's small cache after a look at those words (plain loads on the thread's
 * own stack, else one process_vm_readv) instead of libunwind's unw_step,
 * which costs system calls per frame on libunwind 1.6. With
 * WALLPROF_TEST_SITE_CHECK=1 every replay is checked against a real walk. */
static uint32_t walk_regs(struct wp_slot *s, uint64_t *out, uint32_t cap, int *truncated,
			  struct wp_unw_site *site)
{
	ucontext_t uc;
	uint32_t n;

	memset(&uc, 0, sizeof(uc));
	uc.uc_mcontext.gregs[REG_RIP] = (greg_t)s->thr.blk_regs.rip;
	uc.uc_mcontext.gregs[REG_RSP] = (greg_t)s->thr.blk_regs.rsp;
	uc.uc_mcontext.gregs[REG_RBP] = (greg_t)s->thr.blk_regs.rbp;
	uc.uc_mcontext.gregs[REG_RBX] = (greg_t)s->thr.blk_regs.rbx;
	uc.uc_mcontext.gregs[REG_R12] = (greg_t)s->thr.blk_regs.r12;
	uc.uc_mcontext.gregs[REG_R13] = (greg_t)s->thr.blk_regs.r13;
	uc.uc_mcontext.gregs[REG_R14] = (greg_t)s->thr.blk_regs.r14;
	uc.uc_mcontext.gregs[REG_R15] = (greg_t)s->thr.blk_regs.r15;
	/* libunwind's locks and the loader's (fork_guard.h): without them,
	 * no caller (the blocking call alone), and nothing to replay */
	if (wp_fork_guard_enter() < 0) {
		if (site)
			site->nr = site->nr_chk = 0;
		*truncated = 0;
		return 0;
	}
	n = (uint32_t)wp_unwind_regs(&uc, out, (int)cap, truncated, site);
	wp_fork_guard_leave();
	return n;
}

static int site_matches(const struct wp_unw_site *e, const struct wp_slot *s, uint64_t epoch,
			uint32_t cap)
{
	return e->nr && e->nr <= cap && e->epoch == epoch && e->rip == s->thr.blk_regs.rip &&
	       e->rsp == s->thr.blk_regs.rsp && e->rbp == s->thr.blk_regs.rbp &&
	       e->fn == s->thr.blk_fn;
}

static uint32_t walk_published(struct wp_slot *s, uint64_t *out, uint32_t cap, int *truncated)
{
	/* The slot's k-th walk is sites[k * nr_slots + slot]: a thread that
	 * always blocks in one place touches only the first table's pages. */
	struct wp_unw_site *e = &g->tab.sites[s - g->tab.slots], *hit = NULL;
	size_t stride = g->tab.nr_slots;
	uint32_t gen = atomic_load(&s->gen);
	uint64_t epoch = ((uint64_t)gen << 32) ^ g->smp.mods.subs;
	uint64_t lo = 0, hi = 0;
	uint32_t i, n;
	int ok;

	/* Where plain loads are safe: see wp_stack_bounds_find(). */
	if (atomic_load(&s->tid) == (uint32_t)g->fix.pid) {
		lo = g->smp.main_stk_lo;
		hi = g->smp.main_stk_hi;
		g->smp.want_stacks |= !hi;
	} else if (!g->fix.exit_key_ok ||
		   atomic_load_explicit(&s->thr.exiting, memory_order_seq_cst)) {
		/* A thread that left a wrapped call by longjmp is not held by
		 * the pin, and may exit: only a thread that will tell us before
		 * it goes (thread_exit; every thread in a wrapper has set
		 * the key when it took its slot) has its stack read directly. */
	} else if (s->smp.stk_gen == gen + 1 && s->smp.stk_tp == s->thr.tp) {
		lo = s->smp.stk_lo;
		hi = s->smp.stk_hi;
	} else if (s->thr.tp) {
		g->smp.want_stacks = 1;
	}
	/* The entry used last first: one cache line touched when it matches.
	 * Only entries this slot has filled (in this or an earlier owner's
	 * time) are read: reading an untouched page maps the zero page, and
	 * the fill that follows must then flush it from the TLB of every CPU
	 * the program runs on, an interrupt for each (see ring.c, slot_load). */
	for (i = 0; i < WP_SITES; i++) {
		uint32_t k = (s->smp.site_last + i) % WP_SITES;

		if (k < s->smp.sites_used && site_matches(&e[k * stride], s, epoch, cap)) {
			hit = &e[k * stride];
			s->smp.site_last = k;
			break;
		}
	}
	if (hit && (ok = wp_unwind_site_check(hit, g->smp.sampler_tid, lo, hi)) != 0) {
		g->smp.ctr.nr_site_replayed++;
		g->smp.ctr.nr_site_direct += ok == 2;
		*truncated = 0;
		if (!WP_TESTING || !g->fix.cfg.test_site_check) {
			memcpy(out, hit->ip, hit->nr * sizeof(*out));
			return hit->nr;
		}
		n = walk_regs(s, out, cap, truncated, NULL);
		if (n != hit->nr || *truncated || memcmp(out, hit->ip, n * sizeof(*out)))
			g->smp.ctr.nr_site_mismatch++;
		return n;
	}
	/* Fill the entry that matched (it went stale) or the next victim. */
	if (!hit) {
		s->smp.site_last = s->smp.site_next++ % WP_SITES;
		if (s->smp.sites_used <= s->smp.site_last)
			s->smp.sites_used = s->smp.site_last + 1;
		hit = &e[s->smp.site_last * stride];
	}
	n = walk_regs(s, out, cap, truncated, hit);
	hit->rip = s->thr.blk_regs.rip;
	hit->rsp = s->thr.blk_regs.rsp;
	hit->rbp = s->thr.blk_regs.rbp;
	hit->fn = s->thr.blk_fn;
	hit->epoch = epoch;
	return n;
}

/* Lets a pinned thread go on, waking it if it waits for that. */
static void unpin(struct wp_slot *s)
{
	if (atomic_fetch_and(&s->blk_pin, ~(WP_PIN_HELD | WP_PIN_WAITING)) & WP_PIN_WAITING)
		wp_futex_wake(&s->blk_pin);
}

/* Unwinds a thread blocked in a wrapped call from the registers it
 * published, while it is pinned (it cannot return past the wrapper).
 * Returns 0 with the stack in the slot's cache, or -1 if the call ended. */
static int unwind_blocked(struct wp_slot *s, uint32_t seq)
{
	uint32_t n = 0, max = g->fix.cfg.max_depth;
	int truncated = 0;

	atomic_fetch_or_explicit(&s->blk_pin, WP_PIN_HELD, memory_order_seq_cst);
	if (atomic_load_explicit(&s->thr.blk_seq, memory_order_seq_cst) != seq)
		goto unpin;
	memset(&s->smp.stk_ref, 0, sizeof(s->smp.stk_ref));
	if (atomic_load_explicit(&s->thr.in_loader, memory_order_seq_cst) ||
	    atomic_load(&g->sh.loader_users)) {
		/* Blocked inside a dl_iterate_phdr callback: the thread holds the
		 * loader's lock, which libunwind would wait for while the thread
		 * waits for us. Or another thread is in such a callback, which
		 * may wait for this one, which waits for us (it is pinned). The
		 * blocking call alone, as in a handler. A callback entered just
		 * after this look is not seen: one that then waits for a thread
		 * we walk still holds both (docs/DESIGN.md). */
		s->stk[n++] = s->thr.blk_fn;
		g->smp.ctr.nr_dl_guarded++;
		goto done;
	}
	/* Leaf: the libc function the thread is blocked in; then the
	 * wrapper's callers (the wrapper's own frame is skipped). */
	s->stk[n++] = s->thr.blk_fn;
	n += walk_published(s, s->stk + n, max - n, &truncated);
done:
	unpin(s);
	s->smp.cached_nr = n;
	s->smp.cached_flags = WP_SAMPLE_SYSCALL | (truncated ? WP_SAMPLE_TRUNCATED : 0);
	s->smp.cached_sysno = s->thr.blk_sysno;
	s->smp.nr_cached_ok = 1;
	s->smp.sampled_seq = seq;
	if (truncated)
		g->smp.ctr.nr_truncated++;
	return 0;
unpin:
	unpin(s);
	return -1;
}

/* What /proc/self/task/T/syscall says, read without disturbing the thread;
 * PROBE_UNKNOWN when it cannot be read (no descriptor left in the
 * program's table, no memory). */
enum { PROBE_GONE, PROBE_RUNNING, PROBE_BLOCKED, PROBE_UNKNOWN };

static int probe_syscall(uint32_t tid, uint64_t *nr, uint64_t *sp, uint64_t *pc,
			 unsigned long long a[6])
{
	char path[64], buf[256];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%u/syscall", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) /* no such task: gone */
		return errno == ENOENT || errno == ESRCH ? PROBE_GONE : PROBE_UNKNOWN;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 && errno == ESRCH ? PROBE_GONE : PROBE_UNKNOWN;
	buf[n] = 0;
	if (!strncmp(buf, "running", 7))
		return PROBE_RUNNING;
	/* "nr a1 a2 a3 a4 a5 a6 sp pc", or "-1 sp pc" outside a system call */
	if (sscanf(buf, "%llu %llx %llx %llx %llx %llx %llx %llx %llx", (unsigned long long *)nr,
		   &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], (unsigned long long *)sp,
		   (unsigned long long *)pc) == 9)
		return PROBE_BLOCKED;
	return PROBE_RUNNING;
}

/* Whether the kernel restarts system call `nr` (arguments `a`), blocked,
 * after our SA_RESTART handler without the program seeing anything: it
 * returns -ERESTARTSYS and has no timeout to start over. Only those may get
 * a signal while blocked; signal(7) lists the many that end with EINTR
 * (poll, nanosleep, System V IPC, any futex wait with a timeout, ...), and
 * a write or send would return a short count. */
static int restarts_unseen(uint64_t nr, const unsigned long long *a)
{
	switch (nr) {
	case SYS_futex:
		return ((a[1] & FUTEX_CMD_MASK) == FUTEX_WAIT ||
			(a[1] & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET) &&
		       a[3] == 0;
	case SYS_wait4:
	case SYS_waitid:
	case SYS_flock:
		return 1;
	default:
		return 0;
	}
}

/* A thread blocked in a system call that no wrapper published and that a
 * signal would disturb: its stack is walked from the stack pointer and PC
 * the kernel reports, without a signal (proc_unwind.c), as far as it can be
 * trusted (marked partial when cut short, the PC alone at worst), with the
 * call's name; reused while the thread stays blocked there. */
static void record_blocked_proc(struct wp_slot *s, uint64_t now, uint64_t nr, uint64_t sp,
				uint64_t pc)
{
	int partial, truncated, n;

	memset(&s->smp.stk_ref, 0, sizeof(s->smp.stk_ref));
	/* libdwfl keeps the modules' files open: only in our own descriptor
	 * table, never the program's (kernels before 5.9). */
	if (g->smp.fds_private && wp_fork_guard_enter() == 0) { /* libunwind's locks */
		n = wp_proc_unwind((pid_t)atomic_load(&s->tid), sp, pc,
				   g->smp.mods.adds ^ (g->smp.mods.subs << 32), s->stk,
				   (int)g->fix.cfg.max_depth, &partial, &truncated);
		wp_fork_guard_leave();
	} else {
		s->stk[0] = pc;
		n = 1;
		partial = 1;
		truncated = 0;
	}
	s->smp.cached_nr = (uint32_t)n;
	s->smp.cached_flags = WP_SAMPLE_SYSCALL | (partial ? WP_SAMPLE_PARTIAL : 0) |
			      (truncated ? WP_SAMPLE_TRUNCATED : 0);
	s->smp.cached_sysno = (uint32_t)nr;
	s->smp.nr_cached_ok = 1;
	s->smp.sampled_seq = 0;
	g->smp.ctr.nr_unwind_failed += n == 1;
	g->smp.ctr.nr_truncated += truncated != 0;
	g->smp.ctr.nr_from_proc++;
	wp_sample_cached(s, now);
}

/* Whether the cached stack is an on-CPU capture of this tick or the two
 * before: what a running thread whose timer brought nothing new this
 * tick is given. */
static int recent_on_cpu(const struct wp_slot *s)
{
	return s->smp.nr_cached_ok && s->smp.sampled_seq == 0 &&
	       (s->smp.cached_flags & WP_SAMPLE_ON_CPU) &&
	       g->smp.ctr.nr_ticks - s->smp.cap_tick <= 2;
}

/* A running thread whose timer's capture is being taken at this very
 * moment (S_TIMED): its capture of the tick or two before stands for this
 * tick; with none that recent the tick is lost, and counted (the capture
 * under way is the next tick's). */
static void hold(struct wp_slot *s, uint64_t now)
{
	if (recent_on_cpu(s)) {
		g->smp.ctr.nr_held++;
		wp_sample_cached(s, now);
	} else {
		g->smp.ctr.nr_pending++;
	}
}

/* Thread CPU time without a file descriptor: the kernel derives a per-thread
 * CPU clock id from the tid. Returns -1 once the thread is gone. */
static int thread_cpu_ns(uint32_t tid, uint64_t *ns)
{
	struct timespec ts;
	clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 6); /* CPUCLOCK_SCHED | PERTHREAD */

	if (clock_gettime(id, &ts) < 0)
		return -1;
	*ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return 0;
}

/* Whether thread `tid` is on a CPU now: its CPU clock moves between two
 * reads a few microseconds apart at most (the kernel's reading of a running
 * thread's clock includes the run in progress, to the nanosecond). Reads
 * further apart (the sampler was preempted between them) say nothing. */
static int running_now(uint32_t tid)
{
	uint64_t t0 = wp_mono_ns(), a, b;

	return thread_cpu_ns(tid, &a) == 0 && thread_cpu_ns(tid, &b) == 0 && b != a &&
	       wp_mono_ns() - t0 <= 5000;
}

/* The slot's thread is gone: a capture it finished goes into the ring; a
 * signal it never took, and the ticks that waited for it, are counted lost
 * (it was there at those ticks); then the slot is released. */
static void release_gone(struct wp_slot *s)
{
	uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);

	if (st == S_READY && !s->hdl.timer) {
		take(s, s->smp.t_ns);
	} else if (st == S_SENT) {
		g->smp.ctr.nr_pending += s->smp.nr_pend + 1;
		s->smp.nr_pend = 0;
	}
	wp_slot_release(s);
}

/* Whether the thread is in its end, where a signal would be lost: past our
 * key's destructor (the first of the program's keys made after our start),
 * for WP_EXIT_TICKS ticks from the
 * first tick that sees it so; after that (the program's own destructors
 * run long) it is signalled again. With threads that live 50 us, half of
 * all signals went to threads in their end, lost. */
static int in_its_end(struct wp_slot *s)
{
	if (!atomic_load_explicit(&s->thr.exiting, memory_order_relaxed))
		return 0;
	if (!s->smp.exit_tick)
		s->smp.exit_tick = g->smp.ctr.nr_ticks + 1;
	return g->smp.ctr.nr_ticks + 1 - s->smp.exit_tick < WP_EXIT_TICKS;
}

/* Sends our signal to the slot's thread for this tick. Returns 1 if it
 * went; 0 if the tick was dealt with otherwise (a capture under way, the
 * thread in its end or gone: counted). */
static int send_signal(struct wp_slot *s, uint64_t now, uint32_t sysno)
{
	uint32_t idx = (uint32_t)(s - g->tab.slots);
	uint32_t gen = atomic_load_explicit(&s->gen, memory_order_relaxed) & 0xffffff;
	struct wp_thread *t = wp_threads_of(s);
	siginfo_t si;
	uint32_t idle = S_IDLE;

	if (in_its_end(s)) {
		g->smp.ctr.nr_exiting++;
		return 0;
	}
	s->smp.t_ns = now;
	s->smp.sig_sysno = sysno;
	if (!atomic_compare_exchange_strong_explicit(&s->state, &idle, S_SENT, memory_order_release,
						     memory_order_relaxed)) {
		/* The thread's timer fired just now: its capture is being
		 * taken. */
		hold(s, now);
		return 0;
	}
	memset(&si, 0, sizeof(si));
	si.si_signo = g->sig.signal;
	si.si_code = SI_QUEUE;
	si.si_pid = g->fix.pid;
	si.si_uid = g->fix.uid;
	si.si_value.sival_ptr =
		(void *)(uintptr_t)((COOKIE_MAGIC << 48) | ((uint64_t)gen << 24) | idx);
	if (wp_syscall(SYS_rt_tgsigqueueinfo, g->fix.pid, atomic_load(&s->tid), g->sig.signal,
		       &si) == 0) {
		g->smp.ctr.nr_signals++;
		if (t)
			t->nr_signals++;
		return 1;
	}
	if (errno == ESRCH) {
		release_gone(s); /* exited since we looked */
		return 0;
	}
	atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
	g->smp.ctr.nr_send_failed++;
	return 0;
}

/* A thread in the wrapped call with sequence `seq`: its stack from the
 * context the call published, cached per call. Returns -1 if the call
 * ended meanwhile. */
static int sample_published(struct wp_slot *s, uint32_t seq, uint64_t now)
{
	if (seq == s->smp.sampled_seq && s->smp.nr_cached_ok) {
		g->smp.ctr.nr_reused++;
		wp_sample_cached(s, now);
		return 0;
	}
	if (unwind_blocked(s, seq) == 0) {
		g->smp.ctr.nr_from_wrapper++;
		wp_sample_cached(s, now);
		return 0;
	}
	return -1;
}

/* Whether a thread that /proc shows blocked at stack pointer `sp` is
 * blocked in its published call `seq`, not in a system call of a handler
 * above it, nor somewhere else after a longjmp out of it (see
 * wp_slot_live: the same test from outside, without the alternate stack). */
static int blocked_in_call(struct wp_slot *s, uint32_t seq, uint64_t sp)
{
	return sp <= s->thr.blk_frame &&
	       wp_slot_record_holds(g->smp.sampler_tid, s->thr.blk_frame, s, seq) != 0;
}

/* A running thread's sample at this tick: the capture its timer took
 * since the last tick (`fresh`), else, if it has a timer, its capture of
 * the tick or two before (the timer fires on the thread's own CPU time,
 * at the kernel's tick: some periods have none, some two), else our
 * signal. A thread that ran a quarter of the period or more at three ticks
 * in a row gets a timer. */
static void sample_running(struct wp_slot *s, uint64_t now, int fresh)
{
	if (fresh) {
		g->smp.ctr.nr_from_timer++;
		take(s, now);
	} else if (s->smp.timer_on && recent_on_cpu(s)) {
		g->smp.ctr.nr_held++;
		wp_sample_cached(s, now);
	} else {
		send_signal(s, now, UINT32_MAX);
	}
	if (s->smp.busy_ticks >= 3 &&
	    !atomic_load_explicit(&s->thr.exiting, memory_order_relaxed) && wp_timers_wanted(s))
		wp_timers_arm(s);
}

/* One thread, one tick: exactly one sample, with a signal only when the
 * thread is running or nothing else is known about where it blocks. */
static void look(struct wp_slot *s, uint64_t now)
{
	uint32_t seq = atomic_load_explicit(&s->thr.blk_seq, memory_order_acquire);
	uint32_t tid = atomic_load(&s->tid), st;
	uint64_t cpu, delta, nr, sp, pc, since, at;
	unsigned long long args[6];
	int ran, fresh = 0, whole;

	if (tid == (uint32_t)g->fix.pid && atomic_load(&g->sh.main_exited)) {
		/* main() has ended as a thread: a zombie until the process
		 * ends, whose clock reads and whose /proc says "running"; a
		 * signal to it is never taken. */
		release_gone(s);
		return;
	}
	if (WP_TESTING && (seq & 1) && g->fix.cfg.test_signal_blocked &&
	    atomic_load_explicit(&s->state, memory_order_acquire) == S_IDLE) {
		send_signal(s, now, s->thr.blk_sysno); /* tests: force the race */
		return;
	}
	/* In a wrapped blocking call: no signal, ever. Unless a handler of the
	 * program's runs over the call, or ran and did not return (it left the
	 * call by longjmp, and the thread runs elsewhere): then the thread is
	 * looked at as one outside a call, below, and its context is used only
	 * if it is blocked in the call. */
	if ((seq & 1) && (atomic_load(&s->thr.hdl_seq) != seq || !atomic_load(&s->thr.hdl_depth))) {
		drop_timer_capture(s); /* taken before it blocked */
		if (sample_published(s, seq, now) == 0) {
			/* its CPU time is not read while it blocks: unknown */
			s->smp.cpu_ns = WP_CPU_UNKNOWN;
			s->smp.cpu_at = 0;
			s->smp.busy_ticks = 0;
			wp_park(s, seq);
			return;
		}
		seq = atomic_load(&s->thr.blk_seq); /* the call ended meanwhile */
	}
	if (thread_cpu_ns(tid, &cpu) < 0) {
		release_gone(s);
		return;
	}
	at = wp_mono_ns(); /* this look's time: later than `now` in a later batch */
	ran = cpu != s->smp.cpu_ns;
	/* CPU time since the last look (none known after a blocking call),
	 * against the time since that look: a tick's later batch looks later
	 * than the tick (visit_active), and a slot's batch changes from tick
	 * to tick. */
	delta = s->smp.cpu_ns == WP_CPU_UNKNOWN ? 0 : cpu - s->smp.cpu_ns;
	since = s->smp.cpu_at && at > s->smp.cpu_at ? at - s->smp.cpu_at
						    : 1000000000ull / g->fix.cfg.hz;
	/* Ran (nearly) the whole time since the last look: running still,
	 * whatever /proc would say a microsecond later. */
	whole = delta >= since / 10 * 9;
	/* looks in a row it ran a quarter of the time between or more */
	s->smp.busy_ticks = delta >= since / 4 ? s->smp.busy_ticks + 1 : 0;
	s->smp.cpu_ns = cpu;
	s->smp.cpu_at = at;
	st = atomic_load_explicit(&s->state, memory_order_acquire);
	if (st == S_SENT && now - s->smp.t_ns >= WP_SENT_TIMEOUT_NS) {
		/* Never delivered: the thread blocks it with a raw system call
		 * (our mask wrappers keep it unblocked otherwise), or a raw
		 * sigwait took it. Give up on it: the new generation makes the
		 * handler ignore it if it ever comes; its ticks are lost. */
		uint32_t expect = S_SENT;

		if (atomic_compare_exchange_strong(&s->state, &expect, S_IDLE)) {
			atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
			g->smp.ctr.nr_pending += s->smp.nr_pend + 1;
			s->smp.nr_pend = 0;
			s->smp.nr_cached_ok = 0;
			st = S_IDLE;
		}
	}
	if (st == S_READY && s->hdl.timer) {
		/* The timer's capture: of use if taken since the last tick. */
		if (ran && s->hdl.t_ns >= g->smp.prev_tick_ns) {
			fresh = 1;
		} else {
			drop_timer_capture(s);
			st = S_IDLE;
		}
	}
	if (st == S_TIMED) {
		/* The timer's capture is being taken right now: the thread
		 * runs. */
		hold(s, now);
		return;
	}
	if (st != S_IDLE && !fresh) {
		/* Our last signal is still undelivered (the thread waits for a
		 * CPU, or blocks the signal): its capture will stand for this
		 * tick too; beyond WP_SLOT_PEND ticks they are counted lost.
		 * Checked first: the cached stack is older than the signal, and
		 * the thread ran between the two, so "not run since the last
		 * tick" does not make the cached stack current. */
		if (s->smp.nr_pend < WP_SLOT_PEND)
			s->smp.pend_ns[s->smp.nr_pend++] = now;
		else
			g->smp.ctr.nr_pending++;
		return;
	}
	if (!ran && s->smp.nr_cached_ok && !(seq & 1) && s->smp.sampled_seq == 0) {
		/* Not a single instruction since the last sample: same stack. */
		g->smp.ctr.nr_reused++;
		wp_sample_cached(s, now);
		return;
	}
	if (whole && (fresh || (s->smp.timer_on && recent_on_cpu(s)))) {
		/* Running the whole period, and its timer speaks for it: no
		 * /proc probe, no signal. */
		sample_running(s, now, fresh);
		return;
	}
	/* A thread that ran only part of the period may have blocked since
	 * (3 ms of work, then a 7 ms raw nanosleep: every sleep ended early
	 * when such threads were signalled unseen). One not seen blocked at
	 * its last look whose CPU clock moves between two reads is on a CPU
	 * at that moment: it is taken for running without the /proc probe
	 * (three system calls, 20 us: threads that live 50 us had ended
	 * before their signal came). Neither check is proof against a thread
	 * that blocks in the microseconds before the signal lands; one last
	 * seen blocked gets the probe, which also sees a thread that has set
	 * itself to sleep but not yet left its CPU. */
	if (ran && s->smp.fp_nr == UINT64_MAX && running_now(tid)) {
		sample_running(s, now, fresh);
		return;
	}
	switch (probe_syscall(tid, &nr, &sp, &pc, args)) {
	case PROBE_GONE:
		release_gone(s);
		return;
	case PROBE_UNKNOWN:
		/* No signal on a guess: it may be blocked in a call that would
		 * see it. Its timer's fresh capture stands for the tick, or, if
		 * its clock moves now, it runs (as above, for a thread seen
		 * blocked before /proc became unreadable); else the tick is
		 * lost (counted with failed sends): it ran since its last
		 * stack. */
		if (!fresh && !(ran && running_now(tid))) {
			g->smp.ctr.nr_send_failed++;
			return;
		}
		break;
	case PROBE_BLOCKED:
		if (fresh)
			drop_timer_capture(s); /* it ran, then blocked */
		if ((seq & 1) && blocked_in_call(s, seq, sp) && sample_published(s, seq, now) == 0)
			return;
		if (s->smp.nr_cached_ok && s->smp.sampled_seq == 0 &&
		    !(s->smp.cached_flags & WP_SAMPLE_ON_CPU) && s->smp.fp_nr == nr &&
		    s->smp.fp_sp == sp && s->smp.fp_pc == pc) {
			/* Back at the same blocking point: same stack. */
			g->smp.ctr.nr_reused++;
			wp_sample_cached(s, now);
			return;
		}
		s->smp.fp_nr = nr;
		s->smp.fp_sp = sp;
		s->smp.fp_pc = pc;
		if (!restarts_unseen(nr, args)) {
			/* Our signal would show (EINTR, a short count, a timeout
			 * started over): the place it blocks, without a signal. */
			record_blocked_proc(s, now, nr, sp, pc);
			return;
		}
		if (send_signal(s, now, (uint32_t)nr))
			g->smp.ctr.nr_signals_blocked++;
		return;
	default:
		break;
	}
	/* running, or unknown but running by its clock or timer */
	s->smp.fp_nr = UINT64_MAX;
	sample_running(s, now, fresh);
}

int wp_sample_thread(struct wp_slot *s, uint64_t now)
{
	uint64_t sent = g->smp.ctr.nr_signals;

	look(s, now);
	s->smp.sig_last = g->smp.ctr.nr_signals != sent;
	return s->smp.sig_last;
}

/* This library's executable segment, so that the return addresses inside
 * our wrappers can be left out of stacks (see drop_own_frames). */
void wp_sample_find_own_code(void)
{
	wp_code_segment((const void *)&wp_sample_find_own_code, &g->smp.own_lo, &g->smp.own_hi);
}
