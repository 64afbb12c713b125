/* slots: the table of per-thread records (slots.h). A slot changes hands
 * only through wp_slot_claim, which resets it whole; a thread finds its own
 * through TLS or the tid table; the sampler releases the slots of threads
 * that are gone. Also the wrapper-facing bookkeeping kept per slot: the
 * dynamic loader's users, and whether a published call is still live. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "test_hooks.h"
#include "../unwind/unwind.h"
#include "runtime.h"
#include "sampler.h"
#include "sigmask.h"
#include "active.h"
#include "park.h"
#include "slots.h"
#include "timers.h"

__thread struct wp_slot *wp_tls_slot __attribute__((tls_model("initial-exec")));
__thread uint32_t wp_tls_tid __attribute__((tls_model("initial-exec")));
__thread int wp_tls_in_loader __attribute__((tls_model("initial-exec")));

static void *map_zero(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static uint32_t read_pid_max(void)
{
	char buf[32];
	int fd = open("/proc/sys/kernel/pid_max", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	unsigned long v;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 4194304; /* PID_MAX_LIMIT on 64-bit */
	buf[n] = 0;
	v = strtoul(buf, NULL, 10);
	return v > 0 && v <= 4194304 ? (uint32_t)v + 1 : 4194304;
}

/* Every slot free in the free map. */
static void free_all(void)
{
	for (uint32_t w = 0; w < (g->tab.nr_slots + 63) / 64; w++) {
		uint32_t left = g->tab.nr_slots - w * 64;

		atomic_store(&g->tab.free_map[w], left >= 64 ? ~0ull : (1ull << left) - 1);
	}
}

int wp_slots_alloc(const struct wp_config *c)
{
	size_t depth = c->max_depth + WP_UNW_SCRATCH;
	uint64_t *bufs, *stks;

	g->tab.nr_slots = c->max_threads;
	g->tab.nr_tids = read_pid_max();
	g->tab.slots = map_zero(g->tab.nr_slots * sizeof(*g->tab.slots));
	/* tid -> slot: 4 bytes per possible tid, pages touched only where
	 * tids are, read lock-free by threads looking up their own slot. */
	g->tab.tid_slot = map_zero(g->tab.nr_tids * sizeof(*g->tab.tid_slot));
	bufs = map_zero(g->tab.nr_slots * depth * sizeof(uint64_t));
	stks = map_zero(g->tab.nr_slots * (size_t)c->max_depth * sizeof(uint64_t));
	/* Replayable walks, WP_SITES per slot: WP_SITES tables of one walk per
	 * slot (runtime.h), so that a thread that blocks in one place costs
	 * one walk's memory, not WP_SITES'. */
	g->tab.sites = map_zero(g->tab.nr_slots * WP_SITES * sizeof(*g->tab.sites));
	g->tab.free_map = map_zero((g->tab.nr_slots + 63) / 64 * sizeof(uint64_t));
	if (!g->tab.slots || !g->tab.tid_slot || !bufs || !stks || !g->tab.sites ||
	    !g->tab.free_map || wp_active_alloc(g->tab.nr_slots) < 0)
		return -1;
	free_all();
	/* A slot's buffers are assigned when it is first claimed: touching
	 * every slot here would fault in all of them at every start. */
	g->tab.bufs = bufs;
	g->tab.stks = stks;
	g->tab.buf_depth = depth;
	return 0;
}

/* The one reset of a slot. WP_SLOT_WHOLE gives the slot to `tid` (0:
 * nobody) with nothing of its earlier owners: every field a thread, the
 * handler or the sampler keeps in it (but smp.sites_used, which counts the
 * walk-cache entries the slot's index has ever filled, whoever owned it);
 * it is the reset for every change of hands (wp_slot_claim, a forked
 * child), and the caller holds the slot
 * (S_CLAIMED) or is the process's only thread. WP_SLOT_SAMPLER forgets only
 * what the sampler knows about the slot's thread (its last stack, the ticks
 * waiting for a signal, CPU time, stack bounds, blocking fingerprint, the
 * scan that last listed it, its thread-table entry): the sampler starts
 * over with the same threads (a failed exec), which keep their slots and
 * what they publish there. async-signal-safe */
WP_AS_SAFE void wp_slot_reset(struct wp_slot *s, enum wp_slot_scope scope, uint32_t tid)
{
	size_t i = (size_t)(s - g->tab.slots);
	uint32_t q = atomic_load_explicit(&s->thr.blk_seq, memory_order_relaxed);

	if (scope == WP_SLOT_WHOLE) {
		s->buf = g->tab.bufs + i * g->tab.buf_depth;
		s->stk = g->tab.stks + i * g->fix.cfg.max_depth;
		s->hdl.nr = 0;
		s->hdl.uflags = 0;
		s->hdl.timer = 0;
		s->hdl.t_ns = 0;
		/* the tick of a signal in flight: kept by a sampler restart,
		 * whose first ticks give such a signal up after its time */
		s->smp.t_ns = 0;
		/* Not in a call, at a sequence number no earlier owner holds: one
		 * that still has the slot (it left a call by longjmp, or was taken
		 * for gone) leaves it alone (wp_block_leave). */
		atomic_store_explicit(&s->thr.blk_seq, (q | 1) + 1, memory_order_relaxed);
		atomic_store_explicit(&s->blk_pin, 0, memory_order_relaxed);
		atomic_store_explicit(&s->claim_next, 0, memory_order_relaxed);
		atomic_store_explicit(&s->hdl.ours_seq, 0, memory_order_relaxed);
		atomic_store_explicit(&s->thr.nr_foreign, 0, memory_order_relaxed);
		atomic_store_explicit(&s->thr.hdl_seq, 0, memory_order_relaxed);
		atomic_store_explicit(&s->thr.hdl_depth, 0, memory_order_relaxed);
		s->thr.blk_foreign = 0;
		s->thr.blk_sysno = 0;
		s->thr.blk_fn = 0;
		atomic_store_explicit(&s->thr.in_loader, 0, memory_order_relaxed);
		memset(&s->thr.blk_regs, 0, sizeof(s->thr.blk_regs));
		s->thr.blk_frame = 0;
		s->thr.tp = 0;
		atomic_store_explicit(&s->thr.exiting, 0, memory_order_relaxed);
		s->hdl.rst_seq = 0;
		s->hdl.rst_pc = s->hdl.rst_nr = s->hdl.rst_sp = 0;
		s->hdl.cut_seq = 0;
		s->hdl.cut_ret = 0;
	}
	s->smp.sampled_seq = 0;
	s->smp.cached_nr = 0;
	s->smp.cached_flags = 0;
	s->smp.cached_sysno = 0;
	s->smp.sig_sysno = 0;
	s->smp.nr_cached_ok = 0;
	s->smp.site_next = 0;
	s->smp.site_last = 0;
	s->smp.stk_gen = 0;
	s->smp.stk_tp = 0;
	s->smp.stk_lo = 0;
	s->smp.stk_hi = 0;
	s->smp.fp_sp = 0;
	s->smp.fp_pc = 0;
	s->smp.fp_nr = UINT64_MAX;
	s->smp.cpu_ns = WP_CPU_UNKNOWN;
	s->smp.cpu_at = 0;
	s->smp.sig_last = 0;
	s->smp.nr_pend = 0;
	/* As if listed by the scan under way: one that began before can not
	 * have listed the thread, and must not take it for gone. */
	s->smp.scan = atomic_load(&g->tab.scan);
	atomic_store_explicit(&s->smp.entry_serial, 0, memory_order_relaxed);
	memset(&s->smp.stk_ref, 0, sizeof(s->smp.stk_ref));
	memset(&s->smp.run, 0, sizeof(s->smp.run));
	s->smp.act_pos = 0;
	s->smp.parked = 0;
	s->smp.park_tick = 0;
	s->smp.park_counted = 0;
	s->smp.cap_tick = 0;
	/* (the timer itself is deleted before: wp_timers_disarm) */
	s->smp.timer_id = 0;
	s->smp.timer_on = 0;
	s->smp.busy_ticks = 0;
	s->smp.exit_tick = 0;
	if (scope == WP_SLOT_WHOLE) {
		atomic_store_explicit(&s->tid, tid, memory_order_relaxed);
		/* A late handler or cookie of the earlier owner's sees a new
		 * generation. */
		atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
	}
}

/* Used by the sampler (threads found in /proc) and by threads themselves
 * (first wrapped call); lock-free, and the tid table's compare-and-swap
 * makes both agree on one slot. async-signal-safe */
WP_AS_SAFE struct wp_slot *wp_slot_claim(uint32_t tid)
{
	uint32_t cur, words = (g->tab.nr_slots + 63) / 64, w;

	if (!g->tab.tid_slot || tid >= g->tab.nr_tids)
		return NULL;
	cur = atomic_load_explicit(&g->tab.tid_slot[tid], memory_order_acquire);
	if (cur && atomic_load_explicit(&g->tab.slots[cur - 1].tid, memory_order_acquire) == tid)
		return &g->tab.slots[cur - 1];
	/* The lowest free slot: the slots in use stay packed at the start of
	 * the table, whose memory is touched only as far as threads need. */
	for (w = 0; w < words; w++) {
		uint64_t v = atomic_load_explicit(&g->tab.free_map[w], memory_order_relaxed);

		while (v) {
			uint64_t bit = v & -v;
			uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(v), expect = S_FREE, hw,
				 want;
			struct wp_slot *s = &g->tab.slots[i];

			if (!atomic_compare_exchange_weak_explicit(&g->tab.free_map[w], &v,
								   v & ~bit, memory_order_acquire,
								   memory_order_relaxed))
				continue; /* v reloaded */
			if (!atomic_compare_exchange_strong(&s->state, &expect, S_CLAIMED)) {
				/* cannot be: the bit said free; leave it out */
				v = atomic_load_explicit(&g->tab.free_map[w], memory_order_relaxed);
				continue;
			}
			wp_slot_reset(s, WP_SLOT_WHOLE, tid);
			/* One slot per tid: whoever publishes first wins. */
			want = i + 1;
			if (!atomic_compare_exchange_strong(&g->tab.tid_slot[tid], &cur, want)) {
				atomic_store_explicit(&s->tid, 0, memory_order_relaxed);
				atomic_store_explicit(&s->state, S_FREE, memory_order_release);
				atomic_fetch_or(&g->tab.free_map[w], bit);
				return cur ? &g->tab.slots[cur - 1] : NULL;
			}
			hw = atomic_load(&g->tab.hiwater);
			while (hw < i + 1 &&
			       !atomic_compare_exchange_weak(&g->tab.hiwater, &hw, i + 1))
				;
			atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
			wp_active_claimed(s);
			return s;
		}
	}
	return NULL;
}

/* In a fork()ed child, as its only thread: a profiled child (`follow`)
 * gives every slot back (the parent's threads are not here); one that is
 * not profiled only lets go of the slots the parent's sampler had pinned,
 * which nobody would unpin here. */
void wp_slots_after_fork(int follow)
{
	uint32_t i;

	if (!follow) {
		for (i = 0; i < g->tab.nr_slots; i++)
			atomic_store(&g->tab.slots[i].blk_pin, 0);
		return;
	}
	for (i = 0; i < atomic_load(&g->tab.hiwater); i++) {
		wp_slot_reset(&g->tab.slots[i], WP_SLOT_WHOLE, 0);
		atomic_store(&g->tab.slots[i].state, S_FREE);
	}
	free_all();
	wp_active_reset();
	atomic_store(&g->tab.hiwater, 0);
}

/* A restarted sampler (a failed exec): threads that survive keep their
 * slots, and what they publish there, but the sampler forgets what it knew
 * about them. */
void wp_slots_sampler_restart(void)
{
	for (uint32_t i = 0; i < atomic_load(&g->tab.hiwater); i++)
		wp_slot_reset(&g->tab.slots[i], WP_SLOT_SAMPLER, 0);
	wp_active_reset();
}

/* Sampler only: the thread is gone. */
void wp_slot_release(struct wp_slot *s)
{
	uint32_t idx = (uint32_t)(s - g->tab.slots) + 1;
	uint32_t tid = atomic_load(&s->tid);

	/* Off the active list; a parked thread's open record ends; its
	 * timer goes. */
	wp_active_remove(s);
	wp_timers_disarm(s);
	wp_park_release(s);
	if (tid < g->tab.nr_tids)
		atomic_compare_exchange_strong(&g->tab.tid_slot[tid], &idx, 0);
	atomic_store(&s->tid, 0);
	/* A late handler sees the new generation and leaves the slot alone. */
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
	atomic_store(&s->blk_pin, 0);
	atomic_store_explicit(&s->state, S_FREE, memory_order_release);
	atomic_fetch_or(&g->tab.free_map[(idx - 1) / 64], 1ull << ((idx - 1) % 64));
}

/* async-signal-safe */
WP_AS_SAFE struct wp_slot *wp_slot_self(void)
{
	struct wp_slot *s = wp_tls_slot;

	/* Our handler, inside libunwind, can reach a wrapper (its locks take
	 * the interposed pthread_mutex_lock): publishing there would let the
	 * sampler pin this thread while it holds libunwind's lock, which the
	 * sampler's own walk then waits for (a Go program hung so). */
	if (wp_sigmask_bypass)
		return NULL;
	if (s && atomic_load_explicit(&s->tid, memory_order_relaxed) == wp_tls_tid)
		return s;
	if (wp_tls_internal || !atomic_load_explicit(&g->sh.sampling, memory_order_relaxed))
		return NULL;
	if (!wp_tls_tid)
		wp_tls_tid = (uint32_t)wp_syscall(SYS_gettid);
	s = wp_slot_claim(wp_tls_tid);
	wp_tls_slot = s;
	if (s) {
		s->thr.tp = (uint64_t)pthread_self(); /* a read of %fs: no call into libc state */
		/* A key below 32 lives in the thread's descriptor: storing it
		 * allocates nothing (and cannot fail). */
		if (g->fix.exit_key_ok)
			pthread_setspecific(g->fix.exit_key, s);
	}
	return s;
}

/* async-signal-safe */
WP_AS_SAFE void wp_slot_adopt(struct wp_slot *s)
{
	/* Found by a scan, not by a wrapper: adopt the slot, so that its
	 * exit is seen (thread_exit; a key below 32 is stored without
	 * allocating). */
	wp_tls_tid = (uint32_t)wp_syscall(SYS_gettid);
	if (atomic_load_explicit(&s->tid, memory_order_relaxed) == wp_tls_tid) {
		wp_tls_slot = s;
		if (g->fix.exit_key_ok)
			pthread_setspecific(g->fix.exit_key, s);
	}
}

/* The thread is exiting (pthread key destructor): from now on the sampler
 * must not load from its stack directly, which may be unmapped once the
 * thread is gone. If the sampler has it pinned, wait: the sampler either saw
 * `exiting` before reading, or holds the pin while it reads.
 * async-signal-safe */
WP_AS_SAFE void wp_slot_exiting(struct wp_slot *s)
{
	if (s && s == wp_tls_slot &&
	    atomic_load_explicit(&s->tid, memory_order_relaxed) == wp_tls_tid) {
		atomic_store_explicit(&s->thr.exiting, 1, memory_order_seq_cst);
		if (atomic_load_explicit(&s->blk_pin, memory_order_seq_cst))
			wp_slot_wait_unpinned(s);
	}
}

/* async-signal-safe */
WP_AS_SAFE void wp_slot_forked(void)
{
	wp_tls_slot = NULL;
	wp_tls_tid = 0;
}

/* async-signal-safe */
WP_AS_SAFE int wp_slot_frame_left(uintptr_t f, uintptr_t sp, const stack_t *alt)
{
	int f_alt = alt && f - (uintptr_t)alt->ss_sp < alt->ss_size;
	int sp_alt = alt && sp - (uintptr_t)alt->ss_sp < alt->ss_size;

	return f_alt != sp_alt ? f_alt : f < sp;
}

/* async-signal-safe */
WP_AS_SAFE const stack_t *wp_slot_alt_stack(stack_t *ss)
{
	if (wp_syscall(SYS_sigaltstack, NULL, ss) < 0 || (ss->ss_flags & SS_DISABLE))
		return NULL;
	return ss;
}

/* async-signal-safe */
WP_AS_SAFE int wp_slot_record_holds(pid_t tid, uint64_t addr, const struct wp_slot *s, uint32_t seq)
{
	struct wp_blk rec;
	struct iovec l = { &rec, sizeof(rec) }, r = { (void *)(uintptr_t)addr, sizeof(rec) };
	long n = wp_syscall(SYS_process_vm_readv, tid, &l, 1, &r, 1, 0);

	if (n == (long)sizeof(rec))
		return rec.s == s && rec.seq == seq;
	return n < 0 && errno != EFAULT ? -1 : 0;
}

/* A wrapper's frame lies at or above the stack pointer of every point of
 * its call (a handler nested in it included), on the same stack: a thread
 * running above it has left the call. On the alternate signal stack, over
 * a call on the thread's own stack, the stack pointers say nothing; a frame
 * on the alternate stack is gone once the thread runs elsewhere. Then the
 * record the frame held must still be there: a thread that left the call
 * and runs deeper again has written its own frames over it. A record that
 * cannot be read, for want of process_vm_readv, is taken for live.
 * async-signal-safe */
WP_AS_SAFE int wp_slot_live(struct wp_slot *s, uint32_t seq, uint64_t sp, const stack_t *alt)
{
	int saved = errno, live;
	stack_t ss;

	if (!alt)
		alt = wp_slot_alt_stack(&ss);
	else if (alt->ss_flags & SS_DISABLE)
		alt = NULL;
	live = !wp_slot_frame_left((uintptr_t)s->thr.blk_frame, (uintptr_t)sp, alt) &&
	       wp_slot_record_holds((pid_t)wp_syscall(SYS_gettid), s->thr.blk_frame, s, seq) != 0;
	errno = saved;
	return live;
}

/* async-signal-safe */
WP_AS_SAFE void wp_slot_wait_unpinned(struct wp_slot *s)
{
	int saved = errno;
	uint32_t v = atomic_load(&s->blk_pin);

	/* Parked: the sampler is told that the thread moved. */
	if (v & WP_PIN_PARKED)
		v = wp_active_wake(s);
	while ((v = atomic_load(&s->blk_pin)) & (WP_PIN_HELD | WP_PIN_WAITING)) {
		if (!(v & WP_PIN_WAITING) &&
		    !atomic_compare_exchange_strong(&s->blk_pin, &v, v | WP_PIN_WAITING))
			continue;
		/* (a parked bit set meanwhile changes the word: wait again) */
		wp_syscall(SYS_futex, &s->blk_pin, FUTEX_WAIT_PRIVATE, v | WP_PIN_WAITING, NULL,
			   NULL, 0);
	}
	errno = saved;
}

#if WP_TESTING
unsigned wp_test_enter_signal;

/* async-signal-safe */
WP_AS_SAFE void wp_test_enter_raise(void)
{
	int saved = errno;

	wp_syscall(SYS_tgkill, wp_syscall(SYS_getpid), wp_syscall(SYS_gettid),
		   wp_test_enter_signal);
	errno = saved;
}
#endif

/* async-signal-safe */
WP_AS_SAFE void wp_sampler_loader_enter(void)
{
	struct wp_slot *s = wp_slot_self();

	wp_tls_in_loader++;
	atomic_fetch_add(&g->sh.loader_users, 1);
	if (s)
		atomic_fetch_add(&s->thr.in_loader, 1);
}

unsigned wp_sampler_loader_hold_us(void)
{
	return WP_TESTING && wp_tls_internal ? g->fix.cfg.test_loader_hold_us : 0;
}

/* async-signal-safe */
WP_AS_SAFE void wp_sampler_loader_leave(void)
{
	struct wp_slot *s = wp_tls_slot;

	wp_tls_in_loader--;
	atomic_fetch_sub(&g->sh.loader_users, 1);
	/* The slot the enter counted in, unless it changed hands since. */
	if (s && atomic_load_explicit(&s->tid, memory_order_relaxed) == wp_tls_tid &&
	    atomic_load(&s->thr.in_loader) > 0)
		atomic_fetch_sub(&s->thr.in_loader, 1);
}

/* async-signal-safe */
WP_AS_SAFE void wp_sampler_count_eintr_retry(void)
{
	atomic_fetch_add_explicit(&g->sh.nr_eintr_retried, 1, memory_order_relaxed);
}
