/* slots: the per-thread record shared by the sampler thread, the profiling
 * signal handler and the interposed blocking calls (preload/block.c), and
 * the table of them (slots.c): claim, the one reset, release, the calling
 * thread's own slot, and whether a published call is still live. The
 * functions tagged WP_AS_SAFE are async-signal-safe (the wrappers and our
 * handlers use them); the others are the constructor's or the sampler's.
 *
 * The record's fields are grouped by the context that writes them: the
 * ownership words (state, gen, tid) and the pin at the top; `thr`, the
 * thread itself (its wrapped call's publication, its program handlers, the
 * loader, its exit); `hdl`, our signal handlers on that thread (the capture,
 * and what a wrapper needs to undo our interruption); `smp`, the sampler
 * alone. The claimer resets all of it (wp_slot_reset) while it holds the
 * slot in S_CLAIMED.
 *
 * - the sampler claims/frees slots for threads it discovers, moves state
 *   IDLE->SENT and READY->IDLE, owns `smp`;
 * - the handler (on the thread itself) moves SENT->READY and fills hdl.nr
 *   and hdl.uflags, and retracts a publication the thread left by longjmp
 *   (wp_slot_live);
 * - the thread itself, in a wrapped blocking call, publishes its registers
 *   and bumps thr.blk_seq to odd on entry and even on exit (a seqlock,
 *   moved only by compare-and-swap), and waits on exit while the sampler has
 *   the slot pinned (its stack is being read), so the frames above the call
 *   stay valid during the unwind; the program's handlers, run through our
 *   trampoline, mark the publication they run over (thr.hdl_seq,
 *   thr.hdl_depth). */
#ifndef WP_SLOTS_H
#define WP_SLOTS_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>

#include "test_hooks.h"
#include "as_safe.h"
#include "ring.h"

struct wp_config;

/* Ticks remembered while a signal is undelivered: the capture it brings is
 * valid for all of them (the thread did not run meanwhile). */
#define WP_SLOT_PEND 16

/* smp.cpu_ns of a thread whose CPU time was not read at the last tick */
#define WP_CPU_UNKNOWN UINT64_MAX

/* Ticks an exiting thread (past our key's destructor) goes without a
 * signal: glibc blocks every signal in the thread's last steps (2.34 and
 * later), where ours would be lost; the program's own key destructors run
 * after ours, and may run long, so not for ever. */
#define WP_EXIT_TICKS 2

/* Slot states. S_TIMED: the handler captures for the thread's CPU-time
 * timer, unasked (it goes to S_READY with hdl.timer set). */
enum { S_FREE, S_CLAIMED, S_IDLE, S_SENT, S_READY, S_TIMED };

/* Registers of a wrapper frame, enough for DWARF unwinding from it. */
struct wp_regs {
	uint64_t rip, rsp, rbp, rbx, r12, r13, r14, r15;
};

struct wp_slot {
	/* Ownership: the claimer (FREE->CLAIMED->IDLE); the sampler (IDLE->SENT,
	 * READY->IDLE, SENT->IDLE when it gives up, ->FREE at release); the
	 * handler (SENT->READY, by compare-and-swap). */
	_Atomic uint32_t state;
	_Atomic uint32_t gen; /* bumped when the slot changes owner or a signal is given up */
	_Atomic uint32_t tid; /* owner thread; the claimer, cleared by the sampler */
	/* Bits (active.h): WP_PIN_HELD, the sampler while it reads the pinned
	 * thread's stack; WP_PIN_WAITING, the thread, to wait on the futex;
	 * WP_PIN_PARKED, set by the sampler, cleared by whoever wakes it. */
	_Atomic uint32_t blk_pin;
	/* The claimer, before it pushes the slot on the claim stack (active.c). */
	_Atomic uint32_t claim_next;
	/* The claimer: this slot's buffers in the table's arrays. */
	uint64_t *buf; /* max_depth + WP_UNW_SCRATCH entries: the handler's capture */
	uint64_t *stk; /* max_depth entries: the last stack of this thread (sampler) */

	/* The thread itself. */
	struct wp_slot_thread {
		/* its wrapped blocking call: odd while inside (also moved by the
		 * thread's interposed longjmp, our handler retracting a call the
		 * thread left, and the claimer) */
		_Atomic uint32_t blk_seq;
		/* written in wp_block_enter while blk_seq is still even */
		uint32_t blk_foreign; /* nr_foreign when the wrapped call began */
		uint32_t blk_sysno; /* system call the wrapper issues */
		uint64_t blk_fn; /* the real libc function: the leaf frame */
		struct wp_regs blk_regs; /* the wrapper's registers at entry */
		uint64_t blk_frame; /* the wrapper's struct wp_blk, in its frame */
		/* in our trampoline or forward_foreign, around each program
		 * handler */
		_Atomic uint32_t nr_foreign; /* signals the program handled on this thread */
		/* handlers of the program's running over the published call with
		 * sequence hdl_seq (or that left it by longjmp): the sampler watches
		 * the thread then (wp_sample_thread) */
		_Atomic uint32_t hdl_seq, hdl_depth;
		_Atomic uint32_t in_loader; /* inside dl_iterate_phdr/dlclose: never unwound */
		uint64_t tp; /* its pthread_self(), stored when it takes the slot */
		_Atomic uint32_t exiting; /* it runs its exit destructors: its stack may go */
	} thr;

	/* Our handlers on the thread. */
	struct wp_slot_handler {
		uint32_t nr; /* frames in buf, between SENT (or TIMED) and READY */
		uint32_t uflags; /* WP_UNW_* of that capture */
		uint32_t timer; /* that capture was the timer's, unasked */
		uint64_t t_ns; /* ... and when it was taken (CLOCK_MONOTONIC) */
		/* blk_seq during which our signal landed (also the snapshot
		 * handler, and forward_foreign deferring a program signal):
		 * consumed by the wrapper (wp_block_ours) */
		_Atomic uint32_t ours_seq;
		/* for the program's handlers on the same thread: our signal left
		 * the wrapped call with sequence rst_seq to be restarted by the
		 * kernel at rst_pc (a `syscall` instruction), number rst_nr;
		 * rst_seq cleared by the trampoline when it undoes the restart */
		uint32_t rst_seq;
		uint64_t rst_pc, rst_nr, rst_sp;
		/* our signal came as the wrapped call with sequence cut_seq
		 * returned cut_ret > 0 from a system call: a transfer it cut short
		 * (consumed by the wrapper, wp_block_cut) */
		uint32_t cut_seq;
		uint64_t cut_ret;
	} hdl;

	/* The sampler only (and, once it has stopped, the exit path's
	 * collect). */
	struct wp_slot_sampler {
		uint64_t t_ns; /* tick of the signal in flight */
		uint32_t sig_sysno; /* syscall the probe saw before a last-resort signal */
		uint32_t sampled_seq; /* blk_seq of the cached stack, 0 if none */
		uint32_t cached_nr; /* frames in stk */
		uint32_t cached_flags; /* WP_SAMPLE_* of the cached stack */
		uint32_t cached_sysno;
		uint32_t nr_cached_ok; /* stk holds a valid stack */
		uint32_t site_next; /* next entry of the slot's walk cache to replace */
		uint32_t site_last; /* the entry hit or filled last */
		uint32_t sites_used; /* entries this slot index has ever filled: never
				      * reset, so lookups read no untouched page
				      * (walk_published) */
		uint32_t stk_gen; /* gen (+1) the stack bounds were found for, 0: none */
		uint64_t stk_tp; /* ... and the tp they were found for */
		uint64_t stk_lo, stk_hi; /* memory from the thread's stack pointer up that
					    * stays mapped while it lives: [start of the mapping
					    * holding its thread control block, the TCB) */
		uint64_t fp_sp, fp_pc, fp_nr; /* /proc fingerprint of the cached blocked stack */
		uint64_t cpu_ns; /* thread CPU time at the last look (WP_CPU_UNKNOWN: not
				  * read then: in a blocking call, or a new slot) */
		uint64_t cpu_at; /* CLOCK_MONOTONIC of that look (a tick's later batch
				  * looks later than the tick's time), 0: none */
		uint32_t sig_last; /* its last look sent it a signal (tick.c waits for
				    * the next batch before such a slot only) */
		uint64_t pend_ns[WP_SLOT_PEND]; /* ticks that came while our signal was pending */
		uint32_t nr_pend;
		uint64_t scan; /* last /proc scan that listed the thread, or under
					    * way when the slot was claimed */
		/* Serial number of its thread-table entry (threads.c), 0 until
		 * made; never renumbered. Not a tid. Written by the sampler and
		 * the claimer's reset, read by a dump on any thread: relaxed
		 * atomic loads and stores. */
		_Atomic uint64_t entry_serial;
		struct wp_ring_ref stk_ref; /* stk's place in the ring, zeroed when stk changes */
		struct wp_ring_run run; /* the thread's newest ring record (run-length) */
		uint32_t act_pos; /* place + 1 in the active list (active.c), 0 off it */
		uint32_t parked; /* parked in its wrapped call: its run is open in the ring */
		uint64_t park_tick; /* nr_ticks when parked or last rolled */
		uint32_t park_counted; /* ticks of its open record in the counters */
		uint64_t cap_tick; /* nr_ticks of the capture the cached stack comes from */
		int32_t timer_id; /* the thread's CPU-time timer (timers.c), when timer_on */
		uint32_t timer_on;
		uint32_t busy_ticks; /* consecutive ticks it ran a quarter of the period or more */
		uint64_t exit_tick; /* nr_ticks + 1 when first seen past our key's destructor */
	} smp;
};

/* ---- the table (slots.c) ---------------------------------------------- */

/* The calling thread's slot (its last claim, or the one a scan gave it and
 * our handler adopted) and tid, 0 until looked up. TLS the preload-safe way:
 * initial-exec, so that no access can allocate. */
extern __thread struct wp_slot *wp_tls_slot __attribute__((tls_model("initial-exec")));
extern __thread uint32_t wp_tls_tid __attribute__((tls_model("initial-exec")));
/* Depth of the calling thread's dl_iterate_phdr/dlclose wrappers. */
extern __thread int wp_tls_in_loader __attribute__((tls_model("initial-exec")));

/* The slot the calling thread holds now, or NULL: never claims one (see
 * wp_slot_self). async-signal-safe */
WP_AS_SAFE static inline struct wp_slot *wp_slot_mine(void);

/* Maps the table for `c->max_threads` slots and every possible tid: all
 * anonymous, untouched until used. Returns 0, or -1 (errno set). At start.
 * Not async-signal-safe. */
int wp_slots_alloc(const struct wp_config *c);

/* In a fork()ed child, as its only thread: with `follow` (the child is
 * profiled) every slot is reset and free; without, the slots the parent's
 * sampler had pinned are unpinned. */
void wp_slots_after_fork(int follow);

/* A restarted sampler (a failed exec) forgets what it knew about every
 * slot's thread (WP_SLOT_SAMPLER); the threads keep their slots. Sampler. */
void wp_slots_sampler_restart(void);

/* Claims a free slot for `tid` (or returns the one it has) and publishes
 * it in the tid table; NULL when none is free. Lock-free: the sampler
 * (threads found in /proc) and threads themselves (first wrapped call)
 * agree on one slot through the tid table's compare-and-swap.
 * async-signal-safe */
WP_AS_SAFE struct wp_slot *wp_slot_claim(uint32_t tid);

/* What wp_slot_reset puts back. */
enum wp_slot_scope {
	WP_SLOT_WHOLE, /* everything: the slot changes hands (a claim, a forked child) */
	WP_SLOT_SAMPLER, /* `smp` only (t_ns and pend_ns kept): the sampler starts over,
			  * the thread keeps its slot and its publication (a failed exec) */
};

/* The one reset of a slot. WP_SLOT_WHOLE gives it to `tid` (0: nobody)
 * with nothing of its earlier owners, at a new generation and a sequence
 * number no earlier owner holds; the caller holds the slot (S_CLAIMED) or is
 * the process's only thread. WP_SLOT_SAMPLER forgets what the sampler knew
 * about the slot's thread (`tid` unused); the sampler only.
 * async-signal-safe */
WP_AS_SAFE void wp_slot_reset(struct wp_slot *s, enum wp_slot_scope scope, uint32_t tid);

/* The slot's thread is gone: the slot is free again, and a late handler or
 * cookie of its sees a new generation. Sampler only. */
void wp_slot_release(struct wp_slot *s);

/* Our handler found the calling thread holding `s` without knowing it (a
 * thread a scan found): adopts it, so that the thread's exit is seen.
 * async-signal-safe */
WP_AS_SAFE void wp_slot_adopt(struct wp_slot *s);

/* The thread owning `s` runs its exit destructors: from now on the sampler
 * must not load from its stack directly. Waits while the sampler has it
 * pinned. async-signal-safe */
WP_AS_SAFE void wp_slot_exiting(struct wp_slot *s);

/* In a fork()ed child, first thing: the calling thread forgets its slot
 * (the table is the parent's). async-signal-safe */
WP_AS_SAFE void wp_slot_forked(void);

/* Whether the frame address `f` is one a thread at stack pointer `sp` has
 * left: below `sp` on the same stack, or on the alternate signal stack
 * (`alt`, NULL if none) when `sp` is not. async-signal-safe */
WP_AS_SAFE int wp_slot_frame_left(uintptr_t f, uintptr_t sp, const stack_t *alt);

/* The calling thread's alternate signal stack in `*ss`, or NULL if none is
 * set up. async-signal-safe */
WP_AS_SAFE const stack_t *wp_slot_alt_stack(stack_t *ss);

/* Whether the struct wp_blk at `addr`, read through thread `tid` (a live one:
 * once the leader has exited, the kernel reads no memory through the pid),
 * holds `s` and `seq`, read through the kernel (the address may no longer be
 * mapped): 1 yes, 0 no or unmapped, -1 the kernel would not say.
 * async-signal-safe */
WP_AS_SAFE int wp_slot_record_holds(pid_t tid, uint64_t addr, const struct wp_slot *s,
				    uint32_t seq);

/* The calling thread's slot, or NULL (not yet known: the lookup is retried).
 * async-signal-safe */
WP_AS_SAFE struct wp_slot *wp_slot_self(void);

/* Waits until the sampler unpins `s` (called only when blk_pin was seen set).
 * async-signal-safe */
WP_AS_SAFE void wp_slot_wait_unpinned(struct wp_slot *s);

/* WALLPROF_TEST_ENTER_SIGNAL (tests only): a wrapped read() sends this
 * signal to its own thread while it publishes (wp_test_enter_raise), so that
 * a handler of the program's runs in the middle of it. */
#if WP_TESTING
extern unsigned wp_test_enter_signal;
WP_AS_SAFE void wp_test_enter_raise(void);
#endif

/* Captures the caller's registers. Must be inlined into the frame that will
 * block, so that the published context describes a live frame.
 * async-signal-safe */
WP_AS_SAFE static inline __attribute__((always_inline)) void wp_regs_capture(struct wp_regs *r)
{
	__asm__ volatile("lea 0(%%rip), %%rax\n\t"
			 "mov %%rax, 0(%0)\n\t"
			 "mov %%rsp, 8(%0)\n\t"
			 "mov %%rbp, 16(%0)\n\t"
			 "mov %%rbx, 24(%0)\n\t"
			 "mov %%r12, 32(%0)\n\t"
			 "mov %%r13, 40(%0)\n\t"
			 "mov %%r14, 48(%0)\n\t"
			 "mov %%r15, 56(%0)\n\t"
			 :
			 : "r"(r)
			 : "rax", "memory");
}

/* A wrapped call's own record of its publication, in the wrapper's frame:
 * the slot and the odd sequence number, or NULL when it published nothing.
 * While published, the slot points to it (blk_frame): a publication whose
 * frame the thread has left without retracting it (by longjmp) is told from
 * a live one by where the thread's stack pointer is and by what that
 * address holds now (wp_slot_live). */
struct wp_blk {
	struct wp_slot *s;
	uint32_t seq;
};

/* Whether the publication with the odd sequence `seq` belongs to a call the
 * thread is still in, asked on the thread itself at stack pointer `sp`:
 * its frame is not below `sp` on the same stack, and still holds the call's
 * record. `alt`: the alternate signal stack as the kernel described it for
 * the interrupted context (ucontext's uc_stack), or NULL to ask the kernel.
 * async-signal-safe */
WP_AS_SAFE int wp_slot_live(struct wp_slot *s, uint32_t seq, uint64_t sp, const stack_t *alt);

/* Entry of a wrapped blocking call: publishes the context, and fills the
 * call's record `b` in the wrapper's frame. Nothing is published when the
 * thread has no slot or is inside a live wrapped call already (from a
 * signal handler): the outer call keeps its context. A publication left
 * behind by a call the thread left by longjmp is retracted first. The
 * fields are written while the sequence is even and published with one
 * compare-and-swap from that even number to the odd one: a handler's
 * wrapped call that comes and goes in between (its own publication moves
 * the sequence on) makes it write them again, never leaves them torn.
 * async-signal-safe */
WP_AS_SAFE static inline __attribute__((always_inline)) void
wp_block_enter(struct wp_blk *b, unsigned sysno, void *fn)
{
	struct wp_slot *s = wp_slot_self();
#if WP_TESTING
	int raised = 0;
#endif
	uint32_t q;

	b->s = NULL;
	b->seq = 0;
	if (!s)
		return;
	for (;;) {
		q = atomic_load_explicit(&s->thr.blk_seq, memory_order_relaxed);
		if (q & 1) {
			if (wp_slot_live(s, q, (uint64_t)(uintptr_t)b, NULL))
				return; /* nested: the outer call keeps the published context */
			if (!atomic_compare_exchange_strong(&s->thr.blk_seq, &q, q + 1))
				continue;
			q++;
			/* The sampler may be reading the fields about to change. */
			if (atomic_load_explicit(&s->blk_pin, memory_order_seq_cst))
				wp_slot_wait_unpinned(s);
		}
		s->thr.blk_sysno = sysno;
		s->thr.blk_fn = (uint64_t)(uintptr_t)fn;
		s->thr.blk_foreign = atomic_load_explicit(&s->thr.nr_foreign, memory_order_relaxed);
		s->thr.blk_frame = (uint64_t)(uintptr_t)b;
		wp_regs_capture(&s->thr.blk_regs);
		b->s = s;
		b->seq = q + 1;
#if WP_TESTING
		if (__builtin_expect(wp_test_enter_signal != 0, 0) && sysno == SYS_read &&
		    !raised++)
			wp_test_enter_raise();
#endif
		/* Release: the fields are visible before the odd sequence. */
		if (atomic_compare_exchange_strong_explicit(&s->thr.blk_seq, &q, q + 1,
							    memory_order_release,
							    memory_order_relaxed))
			return;
		b->s = NULL;
	}
}

/* Exit of a wrapped blocking call. Dekker with the sampler's pin: either the
 * sampler sees the new sequence and gives up, or we see its pin and wait.
 * Only the call's own publication is retracted: a slot reset since (given
 * to another thread, wp_slot_reset) has moved on to another sequence.
 * async-signal-safe */
WP_AS_SAFE static inline __attribute__((always_inline)) void wp_block_leave(struct wp_slot *s,
									    uint32_t seq)
{
	if (!s)
		return;
	atomic_compare_exchange_strong_explicit(&s->thr.blk_seq, &seq, seq + 1,
						memory_order_seq_cst, memory_order_seq_cst);
	if (atomic_load_explicit(&s->blk_pin, memory_order_seq_cst))
		wp_slot_wait_unpinned(s);
}

/* Whether the count `ret` that the call with sequence `seq` got back from
 * its system call is a transfer our signal alone cut short: our handler ran
 * right as that system call returned `ret`, and no handler of the program
 * ran meanwhile (whose signal would have cut it the same way without us).
 * Consumes the mark. async-signal-safe */
WP_AS_SAFE static inline int wp_block_cut(struct wp_slot *s, uint32_t seq, long ret)
{
	int cut;

	if (!s || s->hdl.cut_seq != seq)
		return 0;
	cut = s->hdl.cut_ret == (uint64_t)ret &&
	      atomic_load_explicit(&s->thr.nr_foreign, memory_order_relaxed) == s->thr.blk_foreign;
	s->hdl.cut_seq = 0;
	return cut;
}

/* Whether the EINTR the call with sequence `seq` got is ours alone: our
 * signal landed in it and no handler of the program ran meanwhile (then the
 * program must see the EINTR, as it would without us). Consumes the mark.
 * async-signal-safe */
WP_AS_SAFE static inline int wp_block_ours(struct wp_slot *s, uint32_t seq)
{
	return s && atomic_exchange(&s->hdl.ours_seq, 0) == seq &&
	       atomic_load_explicit(&s->thr.nr_foreign, memory_order_relaxed) == s->thr.blk_foreign;
}

WP_AS_SAFE static inline struct wp_slot *wp_slot_mine(void)
{
	struct wp_slot *s = wp_tls_slot;

	return s && atomic_load_explicit(&s->tid, memory_order_relaxed) == wp_tls_tid ? s : NULL;
}

#endif
