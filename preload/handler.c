/* handler: our handlers for the sampling and snapshot signals, and what
 * the runtime keeps about the program's own handlers on each thread (see
 * handler.h). Everything here runs in signal handlers or on the way to the
 * program's, on the program's threads: async-signal-safe throughout, no
 * allocation, no lock, errno restored. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "test_hooks.h"
#include "../unwind/unwind.h"
#include "active.h"
#include "fork_guard.h"
#include "handler.h"
#include "loader_lock.h"
#include "runtime.h"
#include "sampler.h"
#include "sigmask.h"
#include "slots.h"

/* A signal that is not the program's own business landed on this thread
 * inside a wrapped call: the call must be retried, not return EINTR (see
 * wp_block_ours). async-signal-safe */
WP_AS_SAFE static void mark_wrapped_call_ours(void)
{
	struct wp_slot *s = wp_slot_mine();

	if (s) {
		uint32_t seq = atomic_load_explicit(&s->thr.blk_seq, memory_order_relaxed);

		if (seq & 1)
			atomic_store_explicit(&s->hdl.ours_seq, seq, memory_order_release);
	}
}

/* The program's handlers running on this thread (through the trampoline or
 * forward_foreign): the frame address of our function that called each,
 * innermost last. A handler left by longjmp is dropped by the interposed
 * longjmp (wp_sampler_longjmp). */
#define HANDLER_NEST 8
static __thread uint32_t tls_hdepth __attribute__((tls_model("initial-exec")));
static __thread uintptr_t tls_hframe[HANDLER_NEST] __attribute__((tls_model("initial-exec")));

/* Drops the handler frames a thread at `sp` has left. async-signal-safe */
WP_AS_SAFE static void drop_left_handlers(uintptr_t sp, const stack_t *alt)
{
	uint32_t d = tls_hdepth;

	if (d > HANDLER_NEST)
		d = HANDLER_NEST; /* the deeper ones were not recorded */
	while (d > 0 && wp_slot_frame_left(tls_hframe[d - 1], sp, alt))
		d--;
	tls_hdepth = d;
}

/* Whether the caller runs inside a handler of the program's (through our
 * trampoline or forward_foreign), where only async-signal-safe work may be
 * done: the thread may have been interrupted inside malloc or stdio with
 * their locks held. Handlers left by longjmp were dropped by
 * wp_sampler_longjmp(); those left otherwise (setcontext, an exception) are
 * dropped here once the caller's frame is above theirs. async-signal-safe */
WP_AS_SAFE int wp_handler_in_program(void)
{
	stack_t ss;
	const stack_t *alt = wp_slot_alt_stack(&ss);

	if (alt && (alt->ss_flags & SS_ONSTACK))
		return 1;
	if (tls_hdepth)
		drop_left_handlers((uintptr_t)__builtin_frame_address(0), alt);
	return tls_hdepth > 0;
}

/* async-signal-safe */
WP_AS_SAFE void wp_sampler_longjmp(const void *env)
{
	const unsigned long *jb = env; /* glibc x86-64: rsp is word 6, mangled */
	struct wp_slot *s = wp_slot_mine();
	unsigned long guard, sp;
	uint32_t q;
	stack_t ss;
	const stack_t *alt;

	q = s ? atomic_load_explicit(&s->thr.blk_seq, memory_order_relaxed) : 0;
	if (!tls_hdepth && !(q & 1))
		return;
	/* PTR_MANGLE: xor with the thread's pointer guard, rotate left 17. */
	__asm__("mov %%fs:0x30, %0" : "=r"(guard));
	sp = ((jb[6] >> 17) | (jb[6] << (64 - 17))) ^ guard;
	alt = wp_slot_alt_stack(&ss);
	drop_left_handlers(sp, alt);
	/* A wrapped call the jump leaves (an alarm's siglongjmp out of read):
	 * its publication goes with it. */
	if ((q & 1) && wp_slot_frame_left(s->thr.blk_frame, sp, alt) &&
	    atomic_compare_exchange_strong(&s->thr.blk_seq, &q, q + 1) &&
	    atomic_load_explicit(&s->blk_pin, memory_order_seq_cst))
		wp_slot_wait_unpinned(s);
}

/* A handler of the program's is about to run from the frame `frame`.
 * Returns what to give wp_handler_frame_pop(). async-signal-safe */
WP_AS_SAFE uint32_t wp_handler_frame_push(uintptr_t frame)
{
	uint32_t depth = tls_hdepth;

	if (depth < HANDLER_NEST)
		tls_hframe[depth] = frame;
	tls_hdepth = depth + 1;
	return depth;
}

/* async-signal-safe */
WP_AS_SAFE void wp_handler_frame_pop(uint32_t depth)
{
	tls_hdepth = depth;
}

/* A handler of the program's starts on this thread: counted (see
 * wp_block_ours). Over a published call (the call it interrupted, or one a
 * longjmp left behind) it is marked, so that the sampler watches where the
 * thread is while the handler runs, and after it if the handler never
 * returns (a longjmp out of it, out of the call). Returns the sequence
 * marked, 0 for none. async-signal-safe */
WP_AS_SAFE uint32_t wp_handler_program_enter(void)
{
	struct wp_slot *s = wp_slot_mine();
	uint32_t q;

	if (!s)
		return 0;
	atomic_fetch_add_explicit(&s->thr.nr_foreign, 1, memory_order_relaxed);
	q = atomic_load_explicit(&s->thr.blk_seq, memory_order_relaxed);
	if (!(q & 1))
		return 0;
	if (atomic_load_explicit(&s->thr.hdl_seq, memory_order_relaxed) != q) {
		atomic_store_explicit(&s->thr.hdl_depth, 0, memory_order_relaxed);
		atomic_store_explicit(&s->thr.hdl_seq, q, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&s->thr.hdl_depth, 1, memory_order_seq_cst);
	/* The sampler parked the thread in this call: it must look again
	 * (a Dekker pair with park() in sample.c). */
	if (atomic_load_explicit(&s->blk_pin, memory_order_seq_cst) & WP_PIN_PARKED)
		wp_active_wake(s);
	return q;
}

/* The handler that wp_handler_program_enter() marked over `seq` returned.
 * async-signal-safe */
WP_AS_SAFE void wp_handler_program_leave(uint32_t seq)
{
	struct wp_slot *s = wp_slot_mine();

	if (!seq || !s || atomic_load_explicit(&s->thr.hdl_seq, memory_order_relaxed) != seq)
		return;
	if (atomic_load_explicit(&s->thr.hdl_depth, memory_order_relaxed) > 0)
		atomic_fetch_sub_explicit(&s->thr.hdl_depth, 1, memory_order_release);
}

/* A sampling signal that is not ours: do what the program asked for.
 * async-signal-safe */
WP_AS_SAFE static void forward_foreign(int sig, siginfo_t *si, void *uc)
{
	struct sigaction act = g->sig.prog_act;
	sigset_t m = ((ucontext_t *)uc)->uc_sigmask;
	uint32_t over, depth;

	/* The program believes it blocks this signal on this thread: it stays
	 * "pending" until the program unblocks it (sigmask.c). Without us it
	 * would not have interrupted anything: a wrapped call it interrupted
	 * is retried as if our own signal had. */
	if (wp_sigmask_defer(si)) {
		mark_wrapped_call_ours();
		return;
	}
	depth = wp_handler_frame_push((uintptr_t)__builtin_frame_address(0));
	over = wp_handler_program_enter();
	/* Our handler runs with most signals blocked; the program's runs with
	 * the mask the kernel would have given it. */
	sigorset(&m, &m, &act.sa_mask);
	if (!(act.sa_flags & SA_NODEFER))
		sigaddset(&m, sig);
	wp_sigmask_raw(SIG_SETMASK, &m, NULL);
	if (act.sa_flags & SA_SIGINFO) {
		if (act.sa_sigaction)
			act.sa_sigaction(sig, si, uc);
		wp_handler_program_leave(over);
		wp_handler_frame_pop(depth);
		return;
	}
	if (act.sa_handler != SIG_DFL && act.sa_handler != SIG_IGN)
		act.sa_handler(sig);
	wp_handler_program_leave(over);
	wp_handler_frame_pop(depth);
	if (act.sa_handler != SIG_DFL)
		return;
	/* Default action. Every signal we accept for sampling terminates by
	 * default, except these two which are ignored. */
	if (sig == SIGWINCH || sig == SIGURG)
		return;
	act.sa_handler = SIG_DFL;
	act.sa_flags = 0;
	sigemptyset(&act.sa_mask);
	__sigaction(sig, &act, NULL);
	wp_syscall(SYS_tgkill, getpid(), wp_syscall(SYS_gettid), sig); /* delivered on return */
}

/* Whether the interrupted context is a blocking call the kernel will
 * restart after our handler (it returned -ERESTARTSYS and we have
 * SA_RESTART), one that a handler without SA_RESTART would have ended with
 * EINTR instead. Evidence: the PC is back on the `syscall` instruction, RCX
 * holds the address after it (the instruction itself put it there: a call
 * not yet issued has something else), and the call is one whose
 * interruption is -ERESTARTSYS (nothing transferred yet): read, readv,
 * recvfrom, recvmsg, recvmmsg, accept, accept4, connect, write, writev,
 * sendto, sendmsg, wait4, waitid, flock, fcntl (F_SETLKW), openat (a FIFO),
 * mq_timedsend, mq_timedreceive, or a plain futex wait (a
 * priority-inheritance lock is restarted whatever the handler says).
 * async-signal-safe */
WP_AS_SAFE static int kernel_restarts(const void *ucp)
{
	const greg_t *r = ((const ucontext_t *)ucp)->uc_mcontext.gregs;
	uint64_t nr = (uint64_t)r[REG_RAX], op = (uint64_t)r[REG_RSI] & 0x7f;

	if (!wp_unwind_at_syscall_insn(ucp) || (uint64_t)r[REG_RCX] != (uint64_t)r[REG_RIP] + 2)
		return 0;
	switch (nr) {
	case SYS_read:
	case SYS_readv:
	case SYS_recvfrom:
	case SYS_recvmsg:
	case SYS_recvmmsg:
	case SYS_accept:
	case SYS_accept4:
	case SYS_connect:
	case SYS_write:
	case SYS_writev:
	case SYS_sendto:
	case SYS_sendmsg:
	case SYS_wait4:
	case SYS_waitid:
	case SYS_flock:
	case SYS_fcntl:
	case SYS_openat:
	case SYS_mq_timedsend:
	case SYS_mq_timedreceive:
		return 1;
	case SYS_futex:
		return op == FUTEX_WAIT || op == FUTEX_WAIT_BITSET;
	default:
		return 0;
	}
}

/* A handler of the program's without SA_RESTART ran at the point where our
 * signal had the kernel restart a wrapped blocking call (our handler noted
 * it, and held this signal back until it returned). Without the profiler
 * this signal would have ended the call with EINTR; do what the kernel would
 * have done: step over the `syscall` instruction with -EINTR as its result.
 * The wrapper sees the program's signal in nr_foreign and returns the EINTR.
 * async-signal-safe */
WP_AS_SAFE void wp_handler_undo_restart(void *ucp)
{
	struct wp_slot *s = wp_slot_mine();
	ucontext_t *uc = ucp;
	uint32_t seq;

	if (!uc || !s)
		return;
	seq = atomic_load_explicit(&s->thr.blk_seq, memory_order_relaxed);
	if (!(seq & 1) || s->hdl.rst_seq != seq ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RIP] != s->hdl.rst_pc ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RAX] != s->hdl.rst_nr ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RSP] != s->hdl.rst_sp ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RCX] != s->hdl.rst_pc + 2)
		return; /* not the context our handler classified (kernel_restarts) */
	uc->uc_mcontext.gregs[REG_RIP] += 2;
	uc->uc_mcontext.gregs[REG_RAX] = -EINTR;
	s->hdl.rst_seq = 0;
}

#if WP_TESTING
/* WALLPROF_TEST_HANDLER_DELAY_US: stays in the handler up to `us`, or until
 * a signal of the program's is pending (held back by sampling_mask()), so
 * that tests can make it land while our handler runs. async-signal-safe */
WP_AS_SAFE static void test_delay(unsigned us)
{
	struct timespec t0, t;
	sigset_t pend;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sigpending(&pend);
		for (int k = 1; k < NSIG; k++)
			if (k != g->sig.signal && sigismember(&pend, k) == 1)
				return;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t.tv_nsec -
			 (uint64_t)t0.tv_nsec <
		 (uint64_t)us * 1000u);
}
#endif

/* Stack the unwinder may use in our handler: measured at about 8 KiB
 * (libunwind's cursor, context and register-state records), with margin. */
#define WP_HANDLER_STACK (10 * 1024)

/* Whether the handler has WP_HANDLER_STACK below it. On the interrupted
 * stack (the handler frame sits just below the interrupted stack pointer)
 * the thread's own stack is taken to have it; on an alternate stack, what is
 * left of it is measured. async-signal-safe */
WP_AS_SAFE static int room_for_unwind(const void *ucp)
{
	char here;
	uint64_t sp = (uint64_t)(uintptr_t)&here;
	uint64_t isp = (uint64_t)((const ucontext_t *)ucp)->uc_mcontext.gregs[REG_RSP];
	stack_t ss;

	if (sp < isp && isp - sp < 64 * 1024)
		return 1;
	if (wp_syscall(SYS_sigaltstack, NULL, &ss) < 0 || !(ss.ss_flags & SS_ONSTACK))
		return 1;
	return sp > (uint64_t)(uintptr_t)ss.ss_sp &&
	       sp - (uint64_t)(uintptr_t)ss.ss_sp >= WP_HANDLER_STACK;
}

/* The capture into the thread's own slot `s` (which it holds in S_SENT or
 * S_TIMED), for the context `uc` our signal interrupted; ends in S_READY.
 * async-signal-safe */
/* A capture of the interrupted PC alone, not unwound (`why`: a flag to
 * add). async-signal-safe */
WP_AS_SAFE static void pc_only(struct wp_slot *s, void *uc, unsigned why)
{
	s->buf[0] = (uint64_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
	s->hdl.nr = 1;
	s->hdl.uflags = WP_UNW_FAILED | why | (wp_unwind_in_syscall(uc) ? WP_UNW_BLOCKED : 0);
}

WP_AS_SAFE static void capture(struct wp_slot *s, void *uc, uint32_t from)
{
	uint32_t seq = atomic_load_explicit(&s->thr.blk_seq, memory_order_relaxed);
	unsigned fl;

	/* A call the thread has left by longjmp (wp_sample_thread sends to such
	 * a thread when it runs): its context goes, and this is an ordinary
	 * sample. */
	if ((seq & 1) &&
	    !wp_slot_live(s, seq, (uint64_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RSP],
			  &((ucontext_t *)uc)->uc_stack) &&
	    atomic_compare_exchange_strong(&s->thr.blk_seq, &seq, seq + 1)) {
		seq++;
		/* as every retraction: the sampler may have the thread pinned,
		 * or parked (then it is told) */
		if (atomic_load_explicit(&s->blk_pin, memory_order_seq_cst))
			wp_slot_wait_unpinned(s);
	}
	/* Raced into a wrapped blocking call: tell the wrapper that an EINTR
	 * it gets now is ours, so that it retries. */
	if (seq & 1) {
		const greg_t *g_ = ((const ucontext_t *)uc)->uc_mcontext.gregs;
		const uint8_t *ip = (const uint8_t *)(uintptr_t)g_[REG_RIP];

		atomic_store_explicit(&s->hdl.ours_seq, seq, memory_order_release);
		/* Right after a `syscall` that returned a count: if that is a
		 * transfer cut short, our signal cut it (wp_block_cut). */
		if (((uintptr_t)ip & 0xfff) >= 2 && ip[-2] == 0x0f && ip[-1] == 0x05 &&
		    (int64_t)g_[REG_RAX] > 0) {
			s->hdl.cut_ret = (uint64_t)g_[REG_RAX];
			s->hdl.cut_seq = seq;
		}
		/* With SA_RESTART the kernel re-enters the call after us, but a
		 * signal of the program's without SA_RESTART, coming before it
		 * does (it waits for us: see sampling_mask()), must still end it
		 * with EINTR: wp_handler_undo_restart() needs to know where. */
		if (kernel_restarts(uc)) {
			const greg_t *r = ((ucontext_t *)uc)->uc_mcontext.gregs;

			s->hdl.rst_pc = (uint64_t)r[REG_RIP];
			s->hdl.rst_nr = (uint64_t)r[REG_RAX];
			s->hdl.rst_sp = (uint64_t)r[REG_RSP];
			s->hdl.rst_seq = seq;
		}
#if WP_TESTING
		if (g->fix.cfg.test_handler_delay_us)
			test_delay(g->fix.cfg.test_handler_delay_us);
#endif
	}
	if (wp_tls_slot != s)
		wp_slot_adopt(s); /* found by a scan, not by a wrapper */
	wp_sigmask_bypass++;
	if (g->sig.sample_onstack && !room_for_unwind(uc)) {
		/* On an alternate signal stack too small for the unwinder. */
		pc_only(s, uc, 0);
	} else if (wp_tls_in_loader || wp_loader_lock_unsafe((pid_t)atomic_load(&s->tid))) {
		/* Inside the dynamic loader (our wrappers), or holding its lock,
		 * or in the middle of taking or releasing it (dlopen, which is
		 * not wrapped): unwinding would take that lock again and could
		 * wait for this very thread. Keep the PC only. */
		pc_only(s, uc, WP_UNW_DL_GUARD);
	} else if (wp_fork_guard_try_enter() < 0) {
		/* A fork is under way, or this child must not walk
		 * (fork_guard.h). */
		pc_only(s, uc, 0);
	} else {
		wp_sigmask_capture_begin();
		s->hdl.nr = (uint32_t)wp_unwind_capture(uc, s->buf, (int)g->fix.cfg.max_depth, &fl);
		wp_sigmask_capture_end();
		wp_fork_guard_leave();
		s->hdl.uflags = fl;
	}
	wp_sigmask_bypass--;
	s->hdl.timer = from == S_TIMED;
	s->hdl.t_ns = wp_mono_ns();
	/* Unless the sampler gave up on this signal meanwhile (wp_sample_thread). */
	atomic_compare_exchange_strong_explicit(&s->state, &from, S_READY, memory_order_release,
						memory_order_relaxed);
}

/* The thread's CPU-time timer fired (timers.h): a capture unasked, if the
 * slot has room for one (none waiting); if the sampler asked for one (our
 * signal is on its way), this is it. The timer fires only on its own
 * thread, whose slot it names for as long as it lives: the tid is checked
 * all the same. async-signal-safe */
WP_AS_SAFE static void on_timer(uint32_t idx, void *uc)
{
	struct wp_slot *s;
	uint32_t st = S_IDLE, tid = wp_tls_tid;

	if (idx >= g->tab.nr_slots || !atomic_load_explicit(&g->sh.sampling, memory_order_relaxed))
		return;
	s = &g->tab.slots[idx];
	if (!tid)
		tid = (uint32_t)wp_syscall(SYS_gettid);
	if (atomic_load_explicit(&s->tid, memory_order_relaxed) != tid)
		return;
	if (atomic_compare_exchange_strong_explicit(&s->state, &st, S_TIMED, memory_order_acquire,
						    memory_order_relaxed))
		capture(s, uc, S_TIMED);
	else if (st == S_SENT)
		capture(s, uc, S_SENT);
}

/* The sampling signal's handler: the capture our sampler asked for, or
 * the thread's CPU-time timer's, into the thread's own slot; anything
 * else goes to the program's handler. async-signal-safe */
WP_AS_SAFE static void on_sample_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	uint64_t v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	uint32_t idx = (uint32_t)(v & 0xffffff), gen = (uint32_t)((v >> 24) & 0xffffff);
	struct wp_slot *s;

	if (si->si_code == SI_TIMER && (v >> 48) == COOKIE_TIMER_MAGIC) {
		on_timer(idx, uc);
		errno = saved;
		return;
	}
	/* The user's signal queue was full (RLIMIT_SIGPENDING) when our
	 * signal was sent: the kernel delivers it all the same, without its
	 * siginfo (SI_USER from pid 0, which no kill() of a process gives).
	 * Ours when this thread waits for it. */
	if (si->si_code == SI_USER && si->si_pid == 0 && (s = wp_slot_mine()) &&
	    atomic_load_explicit(&s->state, memory_order_acquire) == S_SENT) {
		if (atomic_load_explicit(&g->sh.sampling, memory_order_relaxed))
			capture(s, uc, S_SENT);
		errno = saved;
		return;
	}
	if (si->si_code != SI_QUEUE || si->si_pid != g->fix.pid || (v >> 48) != COOKIE_MAGIC) {
		forward_foreign(sig, si, uc);
		errno = saved;
		return;
	}
	if (idx >= g->tab.nr_slots || !atomic_load_explicit(&g->sh.sampling, memory_order_relaxed))
		goto out;
	s = &g->tab.slots[idx];
	if ((atomic_load_explicit(&s->gen, memory_order_acquire) & 0xffffff) != gen ||
	    atomic_load_explicit(&s->state, memory_order_acquire) != S_SENT)
		goto out; /* stale: the slot was recycled */
	capture(s, uc, S_SENT);
out:
	errno = saved;
}

/* async-signal-safe */
WP_AS_SAFE static void on_snapshot_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;

	(void)sig;
	(void)si;
	(void)uc;
	/* The kernel picks any thread for it, maybe one blocked in a wrapped
	 * call: that call must retry, not return EINTR to the program. */
	mark_wrapped_call_ours();
	atomic_fetch_or(&g->sh.events, EV_SNAPSHOT);
	wp_futex_wake(&g->sh.events);
	errno = saved;
}

/* The signals blocked while our handler runs: all but the synchronous ones
 * (a fault there must reach whoever handles it now; from libunwind's first
 * lock in our walk to the walk's end they are blocked too, SIGSYS aside,
 * see wp_sigmask_capture_begin). A signal of the
 * program's that comes meanwhile is delivered as the handler returns, at
 * the point the kernel left the interrupted call, where
 * wp_handler_undo_restart() can see it. async-signal-safe */
WP_AS_SAFE static void sampling_mask(sigset_t *m)
{
	static const int sync[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS };

	sigfillset(m);
	for (size_t i = 0; i < sizeof(sync) / sizeof(*sync); i++)
		sigdelset(m, sync[i]);
}

/* Our handler for the sampling signal. Without SA_ONSTACK it runs on the
 * interrupted stack, which C, C++ and Rust threads size for their own work;
 * the unwinder needs about 8 KiB, more than an alternate signal stack may
 * have left. With it (see wp_sampler_sigaction: once the program itself
 * asks for it on this signal, as Go's runtime does, whose goroutines run on
 * small stacks no foreign handler may use), room_for_unwind() checks.
 * async-signal-safe */
WP_AS_SAFE void wp_handler_sampling_action(struct sigaction *act, int onstack)
{
	memset(act, 0, sizeof(*act));
	act->sa_sigaction = on_sample_signal;
	act->sa_flags = SA_SIGINFO | SA_RESTART | (onstack ? SA_ONSTACK : 0);
	sampling_mask(&act->sa_mask);
}

int wp_handler_pick_signal(void)
{
	static const int fallbacks[] = { SIGPROF, SIGVTALRM, SIGPWR, SIGSTKFLT };
	const char *explicit_sig = getenv("WALLPROF_SIGNAL");
	struct sigaction old, act;
	size_t i, n = (explicit_sig && *explicit_sig) ? 1 : sizeof(fallbacks) / sizeof(*fallbacks);
	char a[24];

	for (i = 0; i < n; i++) {
		int sig = n == 1 ? g->fix.cfg.signal : fallbacks[i];

		if (__sigaction(sig, NULL, &old) < 0)
			continue;
		if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
			wp_log(WP_LOG_DEBUG, "%s already has a handler; not using it",
			       wp_signal_name(sig, a, sizeof(a)));
			continue;
		}
		memset(&act, 0, sizeof(act));
		wp_handler_sampling_action(&act, 0);
		if (__sigaction(sig, &act, NULL) < 0)
			continue;
		g->sig.prog_act = old;
		g->sig.signal = sig;
		wp_sigmask_set_signal(sig);
		return 0;
	}
	wp_log(WP_LOG_ERROR,
	       "no free signal for sampling (%s is taken; set WALLPROF_SIGNAL); profiling is off",
	       wp_signal_name(n == 1 ? g->fix.cfg.signal : SIGPROF, a, sizeof(a)));
	return -1;
}

void wp_handler_install_snapshot(void)
{
	struct sigaction old, act;
	char a[24];
	int sig = g->fix.cfg.snapshot_signal;

	if (!sig)
		return;
	if (__sigaction(sig, NULL, &old) < 0 || old.sa_handler != SIG_DFL) {
		wp_log(WP_LOG_INFO, "%s is in use by the program; snapshots are off",
		       wp_signal_name(sig, a, sizeof(a)));
		return;
	}
	memset(&act, 0, sizeof(act));
	act.sa_sigaction = on_snapshot_signal;
	act.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
	sigemptyset(&act.sa_mask);
	if (__sigaction(sig, &act, NULL) == 0) {
		g->sig.prev_snap_act = old;
		g->sig.snapshot_signal = sig;
	}
}
