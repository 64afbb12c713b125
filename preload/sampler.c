/* sampler: the injected runtime. The constructor preallocates everything and
 * starts the sampler thread. Every tick, every thread gets one sample:
 * - inside a wrapped blocking call (block.c): unwound by the sampler from the
 *   context the call published, no signal;
 * - has not run since its last sample (its CPU clock did not move): the last
 *   stack again, no signal;
 * - running (per /proc/self/task/T/syscall): a profiling signal whose handler
 *   unwinds into the thread's slot;
 * - blocked elsewhere: the last stack while its blocking fingerprint holds,
 *   else one signal as a last resort.
 * Dumps (exit, snapshot signal) symbolize and write off the signal path. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "sys.h"
#include "../output/output.h"
#include "../output/raw.h"
#include <ucontext.h>

#include "../unwind/unwind.h"

#define WP_SITES 4 /* replayable walks kept per thread */
#include "convert.h"
#include "ring.h"
#include "proc_unwind.h"
#include "sampler.h"
#include "sigmask.h"
#include "slot.h"
#include "tree.h"
#include "wallprof.h"

/* Events for the sampler, in a futex word. */
#define EV_STOP 0x1
#define EV_SNAPSHOT 0x2
#define EV_FREEZE 0x4 /* a raw dump is being written: hold still */

/* A sampling signal still undelivered after this long is given up. */
#define WP_SENT_TIMEOUT_NS 200000000ull

/* Cookie in si_value: magic | generation (24 bits) | slot index (24 bits). */
#define COOKIE_MAGIC 0x57b0ull

/* Shared state. The constructor writes it before the sampler starts; then
 * the sampler thread owns everything except the slots' handler fields, the
 * event word and the flags marked atomic. */
static struct {
	struct wp_config cfg;
	pid_t pid;
	uid_t uid;
	int started;
	_Atomic int sampling;       /* handler does captures; sampler sends */
	_Atomic uint32_t events;
	pthread_t sampler;
	pid_t sampler_tid;

	struct wp_slot *slots;
	uint32_t nr_slots;
	uint64_t *bufs, *stks;      /* per-slot handler and cached-stack buffers */
	size_t buf_depth;           /* entries per handler buffer */
	_Atomic uint32_t hiwater;   /* slots [0, hiwater) may be in use */
	_Atomic uint32_t *tid_slot; /* tid -> slot index + 1, 0 = none */
	uint32_t nr_tids;           /* pid_max */
	_Atomic uint64_t scan;      /* scans of /proc/self/task begun */
	unsigned ticks_per_scan;    /* /proc/self/task is listed every this many ticks */
	uint64_t last_cpu_total;
	char *dents;
	size_t dents_len;

	struct wp_ring *ring;
	struct wp_modmap mods;
	struct wp_counters ctr;
	struct wp_thread *names;    /* every thread seen: latest name and counters */
	size_t nr_names, cap_names;
	_Atomic uint64_t nr_eintr_retried; /* written by wrappers on any thread */

	int signal;                 /* the sampling signal in use */
	int sample_onstack;         /* our handler has SA_ONSTACK (see sampling_action) */
	int go_checked;             /* looked for Go's runtime after that (go_notice) */
	struct sigaction prog_act;  /* the program's view of the sampling signal */
	int snapshot_signal;        /* 0 when snapshots are off */
	struct sigaction prev_snap_act;
	int snapshot_seq;

	int fds_private; /* the sampler works in a private descriptor table */
	struct wp_unw_site *sites; /* WP_SITES per slot: walks from published registers */
	uint64_t main_stk_lo, main_stk_hi; /* the main thread's [stack] mapping, once looked up */
	int want_stacks;            /* a pinned thread's stack bounds are not known yet */
	pthread_key_t exit_key;     /* destructor: slot_thread_exit */
	int exit_key_ok;
	uint64_t own_lo, own_hi;    /* this library's executable segment */
	uint64_t stacks_tick;       /* tick of the last look at /proc/self/maps for them */
	int snapshots_waiting;       /* snapshots asked for while one converts */

	char cmdline[1024];
	uint64_t start_ns;
	int64_t rt_offset;

	struct wp_ring_config ring_cfg;
	int need_reset;             /* forked child: the sampler starts from scratch */
	_Atomic int main_exited;    /* main() left through pthread_exit */
	_Atomic int sampler_stopped;/* stopped and joined by the last program thread */
	_Atomic uint32_t live_threads; /* threads counted by pthread_create, not yet ended */
	_Atomic int names_dirty;    /* a thread was renamed */
	_Atomic int loader_users;   /* threads inside our dl_iterate_phdr/dlclose wrappers */
	_Atomic uint32_t frozen;    /* the sampler parked for a raw dump */
	_Atomic int raw_taken;      /* the raw dump has a writer (once per process) */
	_Atomic uint32_t raw_done;  /* ... and it is written */
	_Atomic int exec_thaw;      /* an exec from a handler parked the sampler: thaw if it fails */
	char out_base[WP_PATH_MAX]; /* the profile's name without ".json": exec dumps add to it */
	uint8_t fatal_installed[NSIG]; /* our fatal handler is the kernel's for it */
} g;

static void read_cmdline(void);
static void install_fatal(void);
static void set_dump_paths(void);
static int install_fatal_one(int sig);
static void on_fatal_signal(int sig, siginfo_t *si, void *uc);
static void on_sample_signal(int sig, siginfo_t *si, void *uc);
static void sampling_mask(sigset_t *m);
static void reset_after_fork(void);
static void freeze(void);
static void handler_dump(int sig, int exec);
static int start_thread(pthread_t *t, void *(*fn)(void *));
static void scan_threads(void);
static void find_stacks(void);
static int leader_ended(void);

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* async-signal-safe */
static void futex_wake(_Atomic uint32_t *w)
{
	wp_syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait_until(_Atomic uint32_t *w, uint32_t val, uint64_t deadline)
{
	struct timespec ts = { (time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull) };

	/* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
	wp_syscall(SYS_futex, w, FUTEX_WAIT_BITSET_PRIVATE, val, &ts, NULL, FUTEX_BITSET_MATCH_ANY);
}

/* ---- signal handlers ------------------------------------------------ */

/* TLS the preload-safe way: initial-exec, so no access can allocate. */
static __thread struct wp_slot *tls_slot __attribute__((tls_model("initial-exec")));
static __thread uint32_t tls_tid __attribute__((tls_model("initial-exec")));
static __thread int tls_internal __attribute__((tls_model("initial-exec")));
static __thread int tls_in_loader __attribute__((tls_model("initial-exec")));
static __thread int tls_counted __attribute__((tls_model("initial-exec"))); /* in live_threads */

/* A signal that is not the program's own business landed on this thread
 * inside a wrapped call: the call must be retried, not return EINTR (see
 * wp_block_ours). async-signal-safe */
static void mark_wrapped_call_ours(void)
{
	struct wp_slot *s = tls_slot;

	if (s && atomic_load_explicit(&s->tid, memory_order_relaxed) == tls_tid) {
		uint32_t seq = atomic_load_explicit(&s->blk_seq, memory_order_relaxed);

		if (seq & 1)
			atomic_store_explicit(&s->ours_seq, seq, memory_order_release);
	}
}

static uint32_t program_handler_enter(void);
static void program_handler_leave(uint32_t seq);

/* The program's handlers running on this thread (through the trampoline or
 * forward_foreign): the frame address of our function that called each,
 * innermost last. A handler left by longjmp is dropped by the interposed
 * longjmp (wp_sampler_longjmp). */
#define HANDLER_NEST 8
static __thread uint32_t tls_hdepth __attribute__((tls_model("initial-exec")));
static __thread uintptr_t tls_hframe[HANDLER_NEST] __attribute__((tls_model("initial-exec")));

/* Whether the frame address `f` is one a thread at stack pointer `sp` has
 * left: below `sp` on the same stack, or on the alternate signal stack
 * (`alt`, NULL if none) when `sp` is not. async-signal-safe */
static int frame_left(uintptr_t f, uintptr_t sp, const stack_t *alt)
{
	int f_alt = alt && f - (uintptr_t)alt->ss_sp < alt->ss_size;
	int sp_alt = alt && sp - (uintptr_t)alt->ss_sp < alt->ss_size;

	return f_alt != sp_alt ? f_alt : f < sp;
}

/* Drops the handler frames a thread at `sp` has left. async-signal-safe */
static void drop_left_handlers(uintptr_t sp, const stack_t *alt)
{
	uint32_t d = tls_hdepth;

	if (d > HANDLER_NEST)
		d = HANDLER_NEST; /* the deeper ones were not recorded */
	while (d > 0 && frame_left(tls_hframe[d - 1], sp, alt))
		d--;
	tls_hdepth = d;
}

/* The alternate signal stack, if one is set up. async-signal-safe */
static const stack_t *alt_stack(stack_t *ss)
{
	if (wp_syscall(SYS_sigaltstack, NULL, ss) < 0 || (ss->ss_flags & SS_DISABLE))
		return NULL;
	return ss;
}

/* Whether the caller runs inside a handler of the program's (through our
 * trampoline or forward_foreign), where only async-signal-safe work may be
 * done: the thread may have been interrupted inside malloc or stdio with
 * their locks held. Handlers left by longjmp were dropped by
 * wp_sampler_longjmp(); those left otherwise (setcontext, an exception) are
 * dropped here once the caller's frame is above theirs. */
static int in_program_handler(void)
{
	stack_t ss;
	const stack_t *alt = alt_stack(&ss);

	if (alt && (alt->ss_flags & SS_ONSTACK))
		return 1;
	if (tls_hdepth)
		drop_left_handlers((uintptr_t)__builtin_frame_address(0), alt);
	return tls_hdepth > 0;
}

/* async-signal-safe */
void wp_sampler_longjmp(const void *env)
{
	const unsigned long *jb = env; /* glibc x86-64: rsp is word 6, mangled */
	struct wp_slot *s = tls_slot;
	unsigned long guard, sp;
	uint32_t q;
	stack_t ss;
	const stack_t *alt;

	q = s && atomic_load_explicit(&s->tid, memory_order_relaxed) == tls_tid ?
		    atomic_load_explicit(&s->blk_seq, memory_order_relaxed) : 0;
	if (!tls_hdepth && !(q & 1))
		return;
	/* PTR_MANGLE: xor with the thread's pointer guard, rotate left 17. */
	__asm__("mov %%fs:0x30, %0" : "=r"(guard));
	sp = ((jb[6] >> 17) | (jb[6] << (64 - 17))) ^ guard;
	alt = alt_stack(&ss);
	drop_left_handlers(sp, alt);
	/* A wrapped call the jump leaves (an alarm's siglongjmp out of read):
	 * its publication goes with it. */
	if ((q & 1) && frame_left(s->blk_frame, sp, alt) &&
	    atomic_compare_exchange_strong(&s->blk_seq, &q, q + 1) &&
	    atomic_load_explicit(&s->blk_pin, memory_order_seq_cst))
		wp_slot_wait_unpinned(s);
}

/* A handler of the program's is about to run from the frame `frame`.
 * Returns what to give handler_frame_pop(). async-signal-safe */
static uint32_t handler_frame_push(uintptr_t frame)
{
	uint32_t depth = tls_hdepth;

	if (depth < HANDLER_NEST)
		tls_hframe[depth] = frame;
	tls_hdepth = depth + 1;
	return depth;
}

/* async-signal-safe */
static void handler_frame_pop(uint32_t depth)
{
	tls_hdepth = depth;
}

/* A sampling signal that is not ours: do what the program asked for.
 * async-signal-safe */
static void forward_foreign(int sig, siginfo_t *si, void *uc)
{
	struct sigaction act = g.prog_act;
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
	depth = handler_frame_push((uintptr_t)__builtin_frame_address(0));
	over = program_handler_enter();
	/* Our handler runs with most signals blocked; the program's runs with
	 * the mask the kernel would have given it. */
	sigorset(&m, &m, &act.sa_mask);
	if (!(act.sa_flags & SA_NODEFER))
		sigaddset(&m, sig);
	wp_sigmask_raw(SIG_SETMASK, &m, NULL);
	if (act.sa_flags & SA_SIGINFO) {
		if (act.sa_sigaction)
			act.sa_sigaction(sig, si, uc);
		program_handler_leave(over);
		handler_frame_pop(depth);
		return;
	}
	if (act.sa_handler != SIG_DFL && act.sa_handler != SIG_IGN)
		act.sa_handler(sig);
	program_handler_leave(over);
	handler_frame_pop(depth);
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


/* async-signal-safe */
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
static int kernel_restarts(const void *ucp)
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

/* WALLPROF_TEST_HANDLER_DELAY_US: stays in the handler up to `us`, or until
 * a signal of the program's is pending (held back by sampling_mask()), so
 * that tests can make it land while our handler runs. async-signal-safe */
static void test_delay(unsigned us)
{
	struct timespec t0, t;
	sigset_t pend;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sigpending(&pend);
		for (int k = 1; k < NSIG; k++)
			if (k != g.signal && sigismember(&pend, k) == 1)
				return;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t.tv_nsec -
			 (uint64_t)t0.tv_nsec < (uint64_t)us * 1000u);
}

/* Stack the unwinder may use in our handler: measured at about 8 KiB
 * (libunwind's cursor, context and register-state records), with margin. */
#define WP_HANDLER_STACK (10 * 1024)

/* Whether the handler has WP_HANDLER_STACK below it. On the interrupted
 * stack (the handler frame sits just below the interrupted stack pointer)
 * the thread's own stack is taken to have it; on an alternate stack, what is
 * left of it is measured. async-signal-safe */
static int room_for_unwind(const void *ucp)
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

static void on_sample_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	uint64_t v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	uint32_t idx = (uint32_t)(v & 0xffffff), gen = (uint32_t)((v >> 24) & 0xffffff);
	struct wp_slot *s;
	uint32_t seq;
	unsigned fl;

	if (si->si_code != SI_QUEUE || si->si_pid != g.pid || (v >> 48) != COOKIE_MAGIC) {
		forward_foreign(sig, si, uc);
		errno = saved;
		return;
	}
	if (idx >= g.nr_slots || !atomic_load_explicit(&g.sampling, memory_order_relaxed))
		goto out;
	s = &g.slots[idx];
	if ((atomic_load_explicit(&s->gen, memory_order_acquire) & 0xffffff) != gen ||
	    atomic_load_explicit(&s->state, memory_order_acquire) != S_SENT)
		goto out; /* stale: the slot was recycled */
	seq = atomic_load_explicit(&s->blk_seq, memory_order_relaxed);
	/* A call the thread has left by longjmp (sample_thread sends to such
	 * a thread when it runs): its context goes, and this is an ordinary
	 * sample. */
	if ((seq & 1) &&
	    !wp_slot_live(s, seq, (uint64_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RSP],
			  &((ucontext_t *)uc)->uc_stack) &&
	    atomic_compare_exchange_strong(&s->blk_seq, &seq, seq + 1))
		seq++;
	/* Raced into a wrapped blocking call: tell the wrapper that an EINTR
	 * it gets now is ours, so that it retries. */
	if (seq & 1) {
		const greg_t *g_ = ((const ucontext_t *)uc)->uc_mcontext.gregs;
		const uint8_t *ip = (const uint8_t *)(uintptr_t)g_[REG_RIP];

		atomic_store_explicit(&s->ours_seq, seq, memory_order_release);
		/* Right after a `syscall` that returned a count: if that is a
		 * transfer cut short, our signal cut it (wp_block_cut). */
		if (((uintptr_t)ip & 0xfff) >= 2 && ip[-2] == 0x0f && ip[-1] == 0x05 &&
		    (int64_t)g_[REG_RAX] > 0) {
			s->cut_ret = (uint64_t)g_[REG_RAX];
			s->cut_seq = seq;
		}
		/* With SA_RESTART the kernel re-enters the call after us, but a
		 * signal of the program's without SA_RESTART, coming before it
		 * does (it waits for us: see sampling_mask()), must still end it
		 * with EINTR: undo_restart() needs to know where. */
		if (kernel_restarts(uc)) {
			const greg_t *r = ((ucontext_t *)uc)->uc_mcontext.gregs;

			s->rst_pc = (uint64_t)r[REG_RIP];
			s->rst_nr = (uint64_t)r[REG_RAX];
			s->rst_sp = (uint64_t)r[REG_RSP];
			s->rst_seq = seq;
		}
		if (g.cfg.test_handler_delay_us)
			test_delay(g.cfg.test_handler_delay_us);
	}
	if (tls_slot != s) {
		/* Found by a scan, not by a wrapper: adopt the slot, so that its
		 * exit is seen (slot_thread_exit; a key below 32 is stored
		 * without allocating). */
		tls_tid = (uint32_t)wp_syscall(SYS_gettid);
		if (atomic_load_explicit(&s->tid, memory_order_relaxed) == tls_tid) {
			tls_slot = s;
			if (g.exit_key_ok)
				pthread_setspecific(g.exit_key, s);
		}
	}
	wp_sigmask_bypass++;
	if (g.sample_onstack && !room_for_unwind(uc)) {
		/* On an alternate signal stack too small for the unwinder. */
		s->buf[0] = (uint64_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
		s->nr = 1;
		s->uflags = WP_UNW_FAILED | (wp_unwind_in_syscall(uc) ? WP_UNW_BLOCKED : 0);
	} else if (tls_in_loader) {
		/* Inside the dynamic loader: unwinding could re-enter its lock.
		 * Keep the PC only. */
		s->buf[0] = (uint64_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
		s->nr = 1;
		s->uflags = WP_UNW_FAILED | WP_UNW_DL_GUARD |
			    (wp_unwind_in_syscall(uc) ? WP_UNW_BLOCKED : 0);
	} else {
		s->nr = (uint32_t)wp_unwind_capture(uc, s->buf, (int)g.cfg.max_depth, &fl);
		s->uflags = fl;
	}
	wp_sigmask_bypass--;
	/* Unless the sampler gave up on this signal meanwhile (sample_thread). */
	atomic_compare_exchange_strong_explicit(&s->state, &(uint32_t){ S_SENT }, S_READY,
						memory_order_release, memory_order_relaxed);
out:
	errno = saved;
}

/* async-signal-safe */
static void on_snapshot_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;

	(void)sig;
	(void)si;
	(void)uc;
	/* The kernel picks any thread for it, maybe one blocked in a wrapped
	 * call: that call must retry, not return EINTR to the program. */
	mark_wrapped_call_ours();
	atomic_fetch_or(&g.events, EV_SNAPSHOT);
	futex_wake(&g.events);
	errno = saved;
}

/* ---- slots ------------------------------------------------------------- */

/* Forgets what the sampler knows about the slot's thread: its last stack,
 * the ticks waiting for a signal, CPU time, stack bounds, blocking
 * fingerprint, the scan that last listed it, its names entry. Part of
 * slot_reset(); alone when the sampler starts over with the same threads
 * (a failed exec). async-signal-safe */
static void slot_forget(struct wp_slot *s)
{
	s->sampled_seq = 0;
	s->cached_nr = 0;
	s->cached_flags = 0;
	s->cached_sysno = 0;
	s->sig_sysno = 0;
	s->nr_cached_ok = 0;
	s->site_next = 0;
	s->site_last = 0;
	s->stk_gen = 0;
	s->stk_tp = 0;
	s->stk_lo = 0;
	s->stk_hi = 0;
	s->fp_sp = 0;
	s->fp_pc = 0;
	s->fp_nr = UINT64_MAX;
	s->cpu_ns = 0;
	s->nr_pend = 0;
	/* As if listed by the scan under way: one that began before can not
	 * have listed the thread, and must not take it for gone. */
	s->scan = atomic_load(&g.scan);
	s->name_idx = UINT32_MAX;
	memset(&s->stk_ref, 0, sizeof(s->stk_ref));
}

/* Gives the slot to `tid` (0: nobody) with nothing of its earlier owners:
 * every field a thread, the handler or the sampler keeps in it. The one
 * reset for every change of hands (slot_claim, a forked child). The caller
 * holds the slot (S_CLAIMED) or is the process's only thread.
 * async-signal-safe */
static void slot_reset(struct wp_slot *s, uint32_t tid)
{
	size_t i = (size_t)(s - g.slots);
	uint32_t q = atomic_load_explicit(&s->blk_seq, memory_order_relaxed);

	s->buf = g.bufs + i * g.buf_depth;
	s->stk = g.stks + i * g.cfg.max_depth;
	s->nr = 0;
	s->uflags = 0;
	s->t_ns = 0;
	/* Not in a call, at a sequence number no earlier owner holds: one that
	 * still has the slot (it left a call by longjmp, or was taken for gone)
	 * leaves it alone (wp_block_leave). */
	atomic_store_explicit(&s->blk_seq, (q | 1) + 1, memory_order_relaxed);
	atomic_store_explicit(&s->blk_pin, 0, memory_order_relaxed);
	atomic_store_explicit(&s->ours_seq, 0, memory_order_relaxed);
	atomic_store_explicit(&s->nr_foreign, 0, memory_order_relaxed);
	atomic_store_explicit(&s->hdl_seq, 0, memory_order_relaxed);
	atomic_store_explicit(&s->hdl_depth, 0, memory_order_relaxed);
	s->blk_foreign = 0;
	s->blk_sysno = 0;
	s->blk_fn = 0;
	atomic_store_explicit(&s->in_loader, 0, memory_order_relaxed);
	memset(&s->blk_regs, 0, sizeof(s->blk_regs));
	s->blk_frame = 0;
	s->tp = 0;
	atomic_store_explicit(&s->exiting, 0, memory_order_relaxed);
	s->rst_seq = 0;
	s->rst_pc = s->rst_nr = s->rst_sp = 0;
	s->cut_seq = 0;
	s->cut_ret = 0;
	slot_forget(s);
	atomic_store_explicit(&s->tid, tid, memory_order_relaxed);
	/* A late handler or cookie of the earlier owner's sees a new generation. */
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
}

/* Claims a free slot for `tid` and publishes it in the tid table. Used by
 * the sampler (threads found in /proc) and by threads themselves (first
 * wrapped call); lock-free, and the tid
 * table's compare-and-swap makes both agree on one slot.
 * async-signal-safe */
static struct wp_slot *slot_claim(uint32_t tid)
{
	static _Atomic uint32_t hint;
	uint32_t start = atomic_fetch_add_explicit(&hint, 1, memory_order_relaxed), n, cur;

	if (!g.tid_slot || tid >= g.nr_tids)
		return NULL;
	cur = atomic_load_explicit(&g.tid_slot[tid], memory_order_acquire);
	if (cur && atomic_load_explicit(&g.slots[cur - 1].tid, memory_order_acquire) == tid)
		return &g.slots[cur - 1];
	for (n = 0; n < g.nr_slots; n++) {
		uint32_t i = (start + n) % g.nr_slots, expect = S_FREE, hw, want;
		struct wp_slot *s = &g.slots[i];

		if (!atomic_compare_exchange_strong(&s->state, &expect, S_CLAIMED))
			continue;
		slot_reset(s, tid);
		/* One slot per tid: whoever publishes first wins. */
		want = i + 1;
		if (!atomic_compare_exchange_strong(&g.tid_slot[tid], &cur, want)) {
			atomic_store_explicit(&s->tid, 0, memory_order_relaxed);
			atomic_store_explicit(&s->state, S_FREE, memory_order_release);
			return cur ? &g.slots[cur - 1] : NULL;
		}
		hw = atomic_load(&g.hiwater);
		while (hw < i + 1 && !atomic_compare_exchange_weak(&g.hiwater, &hw, i + 1))
			;
		atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
		return s;
	}
	return NULL;
}

/* Sampler only: the thread is gone. */
static void slot_release(struct wp_slot *s)
{
	uint32_t idx = (uint32_t)(s - g.slots) + 1;
	uint32_t tid = atomic_load(&s->tid);

	if (tid < g.nr_tids)
		atomic_compare_exchange_strong(&g.tid_slot[tid], &idx, 0);
	atomic_store(&s->tid, 0);
	/* A late handler sees the new generation and leaves the slot alone. */
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
	atomic_store(&s->blk_pin, 0);
	atomic_store_explicit(&s->state, S_FREE, memory_order_release);
}

/* async-signal-safe */
struct wp_slot *wp_slot_self(void)
{
	struct wp_slot *s = tls_slot;

	/* Our handler, inside libunwind, can reach a wrapper (its locks take
	 * the interposed pthread_mutex_lock): publishing there would let the
	 * sampler pin this thread while it holds libunwind's lock, which the
	 * sampler's own walk then waits for (a Go program hung so). */
	if (wp_sigmask_bypass)
		return NULL;
	if (s && atomic_load_explicit(&s->tid, memory_order_relaxed) == tls_tid)
		return s;
	if (tls_internal || !atomic_load_explicit(&g.sampling, memory_order_relaxed))
		return NULL;
	if (!tls_tid)
		tls_tid = (uint32_t)wp_syscall(SYS_gettid);
	s = slot_claim(tls_tid);
	tls_slot = s;
	if (s) {
		s->tp = (uint64_t)pthread_self(); /* a read of %fs: no call into libc state */
		/* A key below 32 lives in the thread's descriptor: storing it
		 * allocates nothing (and cannot fail). */
		if (g.exit_key_ok)
			pthread_setspecific(g.exit_key, s);
	}
	return s;
}

int wp_sampler_thread_created(void)
{
	if (!g.started || getpid() != g.pid || tls_internal || !g.exit_key_ok)
		return 0;
	atomic_fetch_add(&g.live_threads, 1);
	return 1;
}

void wp_sampler_thread_create_failed(void)
{
	atomic_fetch_sub(&g.live_threads, 1);
}

void wp_sampler_thread_begins(void)
{
	tls_counted = 1;
	/* Any value makes the key's destructor run at the thread's end; a
	 * slot claimed later replaces it. A key below 32 allocates nothing. */
	if (!pthread_getspecific(g.exit_key))
		pthread_setspecific(g.exit_key, &g);
}

/* Whether every thread of the program but the caller and the exited leader
 * is gone from /proc/self/task, waiting up to 50 ms for those still listed
 * (a thread that just ended is listed a little longer). A thread the count
 * never saw (C11 thrd_create, created before our constructor) stays: no. */
static int others_gone(uint32_t self)
{
	int tries;

	for (tries = 0; tries < 50; tries++) {
		char buf[1024];
		int fd = (int)wp_syscall(SYS_openat, AT_FDCWD, "/proc/self/task",
					 O_RDONLY | O_DIRECTORY | O_CLOEXEC), other = 0;
		long n;
		struct timespec ms = { 0, 1000000 };

		if (fd < 0)
			return 0;
		while (!other && (n = wp_syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
			long off;

			for (off = 0; off < n && !other; off += ((struct dirent64 *)(buf + off))->d_reclen) {
				uint32_t tid = (uint32_t)strtoul(((struct dirent64 *)(buf + off))->d_name,
								 NULL, 10);

				other = tid && tid != self && tid != (uint32_t)g.pid &&
					(pid_t)tid != g.sampler_tid;
			}
		}
		wp_syscall(SYS_close, fd);
		if (!other)
			return 1;
		wp_syscall(SYS_nanosleep, &ms, NULL);
	}
	return 0;
}

/* main() has left by pthread_exit and the last counted thread is ending
 * (or none was left when main left): glibc ends the process with exit(0)
 * on the last thread to end, so that atexit handlers and stdio's flush run
 * on a thread of the program, in its descriptor table. Our threads must
 * not be that last thread: stop them now (once), unless a thread the count
 * never saw lives on (the sampler then ends the process when it is gone,
 * see tick). */
static void stop_if_last(void)
{
	if (atomic_load(&g.live_threads) == 0 && g.started && !tls_internal && getpid() == g.pid &&
	    (atomic_load(&g.main_exited) || leader_ended()) &&
	    others_gone((uint32_t)wp_syscall(SYS_gettid)) &&
	    !atomic_exchange(&g.sampler_stopped, 1)) {
		atomic_fetch_or(&g.events, EV_STOP);
		futex_wake(&g.events);
		pthread_join(g.sampler, NULL);
	}
}

/* The thread is exiting (pthread key destructor): from now on the sampler
 * must not load from its stack directly, which may be unmapped once the
 * thread is gone. If the sampler has it pinned, wait: the sampler either saw
 * `exiting` before reading, or holds the pin while it reads. */
static void slot_thread_exit(void *p)
{
	struct wp_slot *s = p;

	/* The thread group leader ending as a thread: main() through
	 * pthread_exit, or, in a child forked from another thread, that
	 * thread returning from its start routine (after_fork_child set the
	 * key for it). Without us the process would end with its last thread. */
	if (s && s == tls_slot && atomic_load_explicit(&s->tid, memory_order_relaxed) == tls_tid) {
		atomic_store_explicit(&s->exiting, 1, memory_order_seq_cst);
		if (atomic_load_explicit(&s->blk_pin, memory_order_seq_cst))
			wp_slot_wait_unpinned(s);
	}
	if (tls_counted) {
		tls_counted = 0;
		/* Only the one that takes the count to 0 looks further. */
		if (atomic_fetch_sub(&g.live_threads, 1) == 1)
			stop_if_last();
	}
	wp_sampler_main_exiting(); /* the leader: stops our threads if it is the last */
}

/* Whether the struct wp_blk at `addr`, read through thread `tid` (a live one:
 * once the leader has exited, the kernel reads no memory through the pid),
 * holds `s` and `seq`,
 * read through the kernel (the address may no longer be mapped): 1 yes, 0
 * no or unmapped, -1 the kernel would not say. async-signal-safe */
static int record_holds(pid_t tid, uint64_t addr, const struct wp_slot *s, uint32_t seq)
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
int wp_slot_live(struct wp_slot *s, uint32_t seq, uint64_t sp, const stack_t *alt)
{
	int saved = errno, live;
	stack_t ss;

	if (!alt)
		alt = alt_stack(&ss);
	else if (alt->ss_flags & SS_DISABLE)
		alt = NULL;
	live = !frame_left((uintptr_t)s->blk_frame, (uintptr_t)sp, alt) &&
	       record_holds((pid_t)wp_syscall(SYS_gettid), s->blk_frame, s, seq) != 0;
	errno = saved;
	return live;
}

/* async-signal-safe */
void wp_slot_wait_unpinned(struct wp_slot *s)
{
	int saved = errno;
	uint32_t v;

	while ((v = atomic_load(&s->blk_pin)) != 0) {
		if (v == 1 && !atomic_compare_exchange_strong(&s->blk_pin, &v, 2))
			continue;
		wp_syscall(SYS_futex, &s->blk_pin, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
	}
	errno = saved;
}

unsigned wp_test_enter_signal;

/* async-signal-safe */
void wp_test_enter_raise(void)
{
	int saved = errno;

	wp_syscall(SYS_tgkill, wp_syscall(SYS_getpid), wp_syscall(SYS_gettid), wp_test_enter_signal);
	errno = saved;
}

/* async-signal-safe */
void wp_sampler_loader_enter(void)
{
	struct wp_slot *s = wp_slot_self();

	tls_in_loader++;
	atomic_fetch_add(&g.loader_users, 1);
	if (s)
		atomic_fetch_add(&s->in_loader, 1);
}

/* async-signal-safe */
void wp_sampler_loader_leave(void)
{
	struct wp_slot *s = tls_slot;

	tls_in_loader--;
	atomic_fetch_sub(&g.loader_users, 1);
	/* The slot the enter counted in, unless it changed hands since. */
	if (s && atomic_load_explicit(&s->tid, memory_order_relaxed) == tls_tid &&
	    atomic_load(&s->in_loader) > 0)
		atomic_fetch_sub(&s->in_loader, 1);
}

/* async-signal-safe */
void wp_sampler_count_eintr_retry(void)
{
	atomic_fetch_add_explicit(&g.nr_eintr_retried, 1, memory_order_relaxed);
}

/* ---- threads --------------------------------------------------------- */

static void read_comm(uint32_t tid, char name[16])
{
	char path[64];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%u/comm", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, name, 15);
	close(fd);
	if (n <= 0)
		return;
	if (name[n - 1] == '\n')
		n--;
	name[n] = 0;
}

/* A names-table entry for a slot's thread (one per thread lifetime). */
static struct wp_thread *slot_name(struct wp_slot *s)
{
	struct wp_thread *t;

	if (s->name_idx != UINT32_MAX)
		return &g.names[s->name_idx];
	if (g.nr_names == g.cap_names) {
		size_t cap = g.cap_names ? g.cap_names * 2 : 64;
		struct wp_thread *n = realloc(g.names, cap * sizeof(*n));

		if (!n)
			return NULL;
		g.names = n;
		g.cap_names = cap;
	}
	t = &g.names[g.nr_names];
	memset(t, 0, sizeof(*t));
	t->tid = atomic_load(&s->tid);
	t->last_ns = mono_ns();
	read_comm(t->tid, t->name);
	s->name_idx = (uint32_t)g.nr_names++;
	return t;
}

/* Lists /proc/self/task: finds threads no wrapper or pthread_create hook
 * registered (raw clone, threads started before us), and confirms exits. */
static void scan_threads(void)
{
	int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint32_t i, hw;

	if (fd < 0)
		return;
	/* Before the listing: a thread that takes a slot from now on, maybe
	 * too late to be listed, takes this number with it (slot_forget). */
	atomic_fetch_add(&g.scan, 1);
	for (;;) {
		long n = wp_syscall(SYS_getdents64, fd, g.dents, g.dents_len);
		long off = 0;

		if (n <= 0)
			break;
		while (off < n) {
			struct {
				uint64_t ino;
				int64_t off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *d = (void *)(g.dents + off);
			char *end;
			unsigned long tid = strtoul(d->name, &end, 10);
			struct wp_slot *s;

			off += d->reclen;
			if (*end || tid == 0 || (pid_t)tid == g.sampler_tid)
				continue;
			/* main() left through pthread_exit: a zombie until the end */
			if ((pid_t)tid == g.pid && atomic_load(&g.main_exited))
				continue;
			s = slot_claim((uint32_t)tid);
			if (!s) {
				g.ctr.nr_threads_untracked++;
				continue;
			}
			s->scan = atomic_load_explicit(&g.scan, memory_order_relaxed);
		}
	}
	close(fd);
	if (g.cfg.test_scan_hold_us) {
		struct timespec hold = { (time_t)(g.cfg.test_scan_hold_us / 1000000),
					 (long)(g.cfg.test_scan_hold_us % 1000000) * 1000 };

		wp_syscall(SYS_nanosleep, &hold, NULL);
	}
	hw = atomic_load(&g.hiwater);
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g.slots[i];
		uint32_t st = atomic_load(&s->state);

		/* Neither listed nor claimed since the listing began: gone. */
		if (st >= S_IDLE && s->scan != atomic_load_explicit(&g.scan, memory_order_relaxed))
			slot_release(s);
	}
}

/* Moves every finished capture into the ring and the slot's cache. */
/* This library's executable segment, so that the return addresses inside
 * our wrappers can be left out of stacks (see drop_own_frames). */
static int own_segment(struct dl_phdr_info *info, size_t size, void *arg)
{
	uint64_t self = (uint64_t)(uintptr_t)&own_segment;

	(void)size;
	(void)arg;
	for (int j = 0; j < info->dlpi_phnum; j++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[j];
		uint64_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && lo <= self &&
		    self < lo + ph->p_memsz) {
			g.own_lo = lo;
			g.own_hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

/* A signal that lands while a wrapped call runs (the race the wrappers
 * retry) finds our wrapper among the callers. The wrappers stand for the
 * libc function the program called, which is the frame below them, so they
 * are left out; a leaf inside them (the signal came while the wrapper's own
 * code ran) stays, the only place the sample can point to. */
static uint32_t drop_own_frames(uint64_t *pc, uint32_t n)
{
	uint32_t i, k = 1;

	for (i = 1; i < n; i++)
		if (pc[i] < g.own_lo || pc[i] >= g.own_hi)
			pc[k++] = pc[i];
	return n ? k : 0;
}

static void collect(void)
{
	uint32_t i, hw = atomic_load(&g.hiwater);

	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g.slots[i];
		struct wp_thread *t;
		uint32_t flags = 0, n;

		if (atomic_load_explicit(&s->state, memory_order_acquire) != S_READY)
			continue;
		if (!(s->uflags & WP_UNW_BLOCKED))
			flags |= WP_SAMPLE_ON_CPU;
		else if (s->sig_sysno != UINT32_MAX)
			flags |= WP_SAMPLE_SYSCALL;
		if (s->uflags & WP_UNW_TRUNCATED) {
			flags |= WP_SAMPLE_TRUNCATED;
			g.ctr.nr_truncated++;
		}
		if (s->uflags & WP_UNW_FAILED) {
			flags |= WP_SAMPLE_PARTIAL;
			g.ctr.nr_unwind_failed++;
		}
		if (s->uflags & WP_UNW_DL_GUARD)
			g.ctr.nr_dl_guarded++;
		n = s->nr < g.cfg.max_depth ? s->nr : g.cfg.max_depth;
		n = drop_own_frames(s->buf, n);
		t = slot_name(s);
		if (n > 0) {
			uint32_t k;

			wp_ring_add(g.ring, s->t_ns, atomic_load(&s->tid), flags, s->sig_sysno,
				    s->buf, n, 1);
			/* The thread had not run since the signal was sent, so
			 * this stack is also where it was at those ticks. */
			for (k = 0; k < s->nr_pend; k++)
				wp_ring_add(g.ring, s->pend_ns[k], atomic_load(&s->tid), flags,
					    s->sig_sysno, s->buf, n, 1);
			g.ctr.nr_samples += s->nr_pend;
			if (t)
				t->nr_samples += s->nr_pend;
		}
		s->nr_pend = 0;
		/* Cache it: reused while the thread does not run. */
		memcpy(s->stk, s->buf, n * sizeof(*s->stk));
		memset(&s->stk_ref, 0, sizeof(s->stk_ref));
		s->cached_nr = n;
		s->cached_flags = flags;
		s->cached_sysno = s->sig_sysno;
		s->nr_cached_ok = n > 0;
		s->sampled_seq = 0;
		g.ctr.nr_samples++;
		if (t) {
			t->nr_samples++;
			t->last_ns = s->t_ns;
		}
		atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
	}
}

/* Records the slot's cached stack for this tick. */
static void record_cached(struct wp_slot *s, uint64_t now)
{
	struct wp_thread *t = slot_name(s);

	uint32_t tid = atomic_load(&s->tid);

	/* The same stack as last time: no hashing of its frames again. */
	if (wp_ring_add_ref(g.ring, now, tid, s->cached_flags, s->cached_sysno, &s->stk_ref) < 0)
		wp_ring_add_get_ref(g.ring, now, tid, s->cached_flags, s->cached_sysno, s->stk,
				    s->cached_nr, 1, &s->stk_ref);
	g.ctr.nr_samples++;
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

	memset(&uc, 0, sizeof(uc));
	uc.uc_mcontext.gregs[REG_RIP] = (greg_t)s->blk_regs.rip;
	uc.uc_mcontext.gregs[REG_RSP] = (greg_t)s->blk_regs.rsp;
	uc.uc_mcontext.gregs[REG_RBP] = (greg_t)s->blk_regs.rbp;
	uc.uc_mcontext.gregs[REG_RBX] = (greg_t)s->blk_regs.rbx;
	uc.uc_mcontext.gregs[REG_R12] = (greg_t)s->blk_regs.r12;
	uc.uc_mcontext.gregs[REG_R13] = (greg_t)s->blk_regs.r13;
	uc.uc_mcontext.gregs[REG_R14] = (greg_t)s->blk_regs.r14;
	uc.uc_mcontext.gregs[REG_R15] = (greg_t)s->blk_regs.r15;
	return (uint32_t)wp_unwind_regs(&uc, out, (int)cap, truncated, site);
}

static int site_matches(const struct wp_unw_site *e, const struct wp_slot *s, uint64_t epoch,
			uint32_t cap)
{
	return e->nr && e->nr <= cap && e->epoch == epoch && e->rip == s->blk_regs.rip &&
	       e->rsp == s->blk_regs.rsp && e->rbp == s->blk_regs.rbp && e->fn == s->blk_fn;
}

static uint32_t walk_published(struct wp_slot *s, uint64_t *out, uint32_t cap, int *truncated)
{
	struct wp_unw_site *e = &g.sites[(size_t)(s - g.slots) * WP_SITES], *hit = NULL;
	uint32_t gen = atomic_load(&s->gen);
	uint64_t epoch = ((uint64_t)gen << 32) ^ g.mods.subs;
	uint64_t lo = 0, hi = 0;
	uint32_t i, n;
	int ok;

	/* Where plain loads are safe: see find_stacks(). */
	if (atomic_load(&s->tid) == (uint32_t)g.pid) {
		lo = g.main_stk_lo;
		hi = g.main_stk_hi;
		g.want_stacks |= !hi;
	} else if (!g.exit_key_ok || atomic_load_explicit(&s->exiting, memory_order_seq_cst)) {
		/* A thread that left a wrapped call by longjmp is not held by
		 * the pin, and may exit: only a thread that will tell us before
		 * it goes (slot_thread_exit; every thread in a wrapper has set
		 * the key when it took its slot) has its stack read directly. */
	} else if (s->stk_gen == gen + 1 && s->stk_tp == s->tp) {
		lo = s->stk_lo;
		hi = s->stk_hi;
	} else if (s->tp) {
		g.want_stacks = 1;
	}
	/* The entry used last first: one cache line touched when it matches. */
	for (i = 0; i < WP_SITES; i++) {
		uint32_t k = (s->site_last + i) % WP_SITES;

		if (site_matches(&e[k], s, epoch, cap)) {
			hit = &e[k];
			s->site_last = k;
			break;
		}
	}
	if (hit && (ok = wp_unwind_site_check(hit, g.sampler_tid, lo, hi)) != 0) {
		g.ctr.nr_site_replayed++;
		g.ctr.nr_site_direct += ok == 2;
		*truncated = 0;
		if (!g.cfg.test_site_check) {
			memcpy(out, hit->ip, hit->nr * sizeof(*out));
			return hit->nr;
		}
		n = walk_regs(s, out, cap, truncated, NULL);
		if (n != hit->nr || *truncated || memcmp(out, hit->ip, n * sizeof(*out)))
			g.ctr.nr_site_mismatch++;
		return n;
	}
	/* Fill the entry that matched (it went stale) or the next victim. */
	if (!hit) {
		s->site_last = s->site_next++ % WP_SITES;
		hit = &e[s->site_last];
	}
	n = walk_regs(s, out, cap, truncated, hit);
	hit->rip = s->blk_regs.rip;
	hit->rsp = s->blk_regs.rsp;
	hit->rbp = s->blk_regs.rbp;
	hit->fn = s->blk_fn;
	hit->epoch = epoch;
	return n;
}

/* Unwinds a thread blocked in a wrapped call from the registers it
 * published, while it is pinned (it cannot return past the wrapper).
 * Returns 0 with the stack in the slot's cache, or -1 if the call ended. */
static int unwind_blocked(struct wp_slot *s, uint32_t seq)
{
	uint32_t n = 0, max = g.cfg.max_depth;
	int truncated = 0;

	atomic_store_explicit(&s->blk_pin, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&s->blk_seq, memory_order_seq_cst) != seq)
		goto unpin;
	memset(&s->stk_ref, 0, sizeof(s->stk_ref));
	if (atomic_load_explicit(&s->in_loader, memory_order_seq_cst)) {
		/* Blocked inside a dl_iterate_phdr callback: the thread holds the
		 * loader's lock, which libunwind would wait for while the thread
		 * waits for us. The blocking call alone, as in a handler. */
		s->stk[n++] = s->blk_fn;
		g.ctr.nr_dl_guarded++;
		goto done;
	}
	/* Leaf: the libc function the thread is blocked in; then the
	 * wrapper's callers (the wrapper's own frame is skipped). */
	s->stk[n++] = s->blk_fn;
	n += walk_published(s, s->stk + n, max - n, &truncated);
done:
	if (atomic_exchange(&s->blk_pin, 0) == 2)
		futex_wake(&s->blk_pin);
	s->cached_nr = n;
	s->cached_flags = WP_SAMPLE_SYSCALL | (truncated ? WP_SAMPLE_TRUNCATED : 0);
	s->cached_sysno = s->blk_sysno;
	s->nr_cached_ok = 1;
	s->sampled_seq = seq;
	if (truncated)
		g.ctr.nr_truncated++;
	return 0;
unpin:
	if (atomic_exchange(&s->blk_pin, 0) == 2)
		futex_wake(&s->blk_pin);
	return -1;
}

/* What /proc/self/task/T/syscall says, read without disturbing the thread. */
enum { PROBE_GONE, PROBE_RUNNING, PROBE_BLOCKED };

static int probe_syscall(uint32_t tid, uint64_t *nr, uint64_t *sp, uint64_t *pc,
			 unsigned long long a[6])
{
	char path[64], buf[256];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%u/syscall", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return PROBE_GONE;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return PROBE_RUNNING;
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
			(a[1] & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET) && a[3] == 0;
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

	memset(&s->stk_ref, 0, sizeof(s->stk_ref));
	/* libdwfl keeps the modules' files open: only in our own descriptor
	 * table, never the program's (kernels before 5.9). */
	if (g.fds_private) {
		n = wp_proc_unwind((pid_t)atomic_load(&s->tid), sp, pc,
				   g.mods.adds ^ (g.mods.subs << 32), s->stk, (int)g.cfg.max_depth,
				   &partial, &truncated);
	} else {
		s->stk[0] = pc;
		n = 1;
		partial = 1;
		truncated = 0;
	}
	s->cached_nr = (uint32_t)n;
	s->cached_flags = WP_SAMPLE_SYSCALL | (partial ? WP_SAMPLE_PARTIAL : 0) |
			  (truncated ? WP_SAMPLE_TRUNCATED : 0);
	s->cached_sysno = (uint32_t)nr;
	s->nr_cached_ok = 1;
	s->sampled_seq = 0;
	g.ctr.nr_unwind_failed += n == 1;
	g.ctr.nr_truncated += truncated != 0;
	g.ctr.nr_from_proc++;
	record_cached(s, now);
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

static void send_signal(struct wp_slot *s, uint64_t now, uint32_t sysno)
{
	uint32_t idx = (uint32_t)(s - g.slots);
	uint32_t gen = atomic_load_explicit(&s->gen, memory_order_relaxed) & 0xffffff;
	struct wp_thread *t = slot_name(s);
	siginfo_t si;

	s->t_ns = now;
	s->sig_sysno = sysno;
	atomic_store_explicit(&s->state, S_SENT, memory_order_release);
	memset(&si, 0, sizeof(si));
	si.si_signo = g.signal;
	si.si_code = SI_QUEUE;
	si.si_pid = g.pid;
	si.si_uid = g.uid;
	si.si_value.sival_ptr = (void *)(uintptr_t)((COOKIE_MAGIC << 48) | ((uint64_t)gen << 24) | idx);
	if (wp_syscall(SYS_rt_tgsigqueueinfo, g.pid, atomic_load(&s->tid), g.signal, &si) == 0) {
		g.ctr.nr_signals++;
		if (t)
			t->nr_signals++;
		return;
	}
	if (errno == ESRCH) {
		slot_release(s); /* exited since we looked */
		return;
	}
	atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
	g.ctr.nr_send_failed++;
}

/* A thread in the wrapped call with sequence `seq`: its stack from the
 * context the call published, cached per call. Returns -1 if the call
 * ended meanwhile. */
static int sample_published(struct wp_slot *s, uint32_t seq, uint64_t now)
{
	if (seq == s->sampled_seq && s->nr_cached_ok) {
		g.ctr.nr_reused++;
		record_cached(s, now);
		return 0;
	}
	if (unwind_blocked(s, seq) == 0) {
		g.ctr.nr_from_wrapper++;
		record_cached(s, now);
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
	return sp <= s->blk_frame && record_holds(g.sampler_tid, s->blk_frame, s, seq) != 0;
}

/* One thread, one tick: exactly one sample, with a signal only when the
 * thread is running or nothing else is known about where it blocks. */
static void sample_thread(struct wp_slot *s, uint64_t now)
{
	uint32_t seq = atomic_load_explicit(&s->blk_seq, memory_order_acquire);
	uint32_t tid = atomic_load(&s->tid), st;
	uint64_t cpu, nr, sp, pc;
	unsigned long long args[6];
	int ran;

	if ((seq & 1) && g.cfg.test_signal_blocked &&
	    atomic_load_explicit(&s->state, memory_order_acquire) == S_IDLE) {
		send_signal(s, now, s->blk_sysno); /* tests: force the race */
		return;
	}
	/* In a wrapped blocking call: no signal, ever. Unless a handler of the
	 * program's runs over the call, or ran and did not return (it left the
	 * call by longjmp, and the thread runs elsewhere): then the thread is
	 * looked at as one outside a call, below, and its context is used only
	 * if it is blocked in the call. */
	if ((seq & 1) && (atomic_load(&s->hdl_seq) != seq || !atomic_load(&s->hdl_depth))) {
		if (sample_published(s, seq, now) == 0)
			return;
		seq = atomic_load(&s->blk_seq); /* the call ended meanwhile */
	}
	if (thread_cpu_ns(tid, &cpu) < 0) {
		slot_release(s);
		return;
	}
	ran = cpu != s->cpu_ns;
	s->cpu_ns = cpu;
	st = atomic_load_explicit(&s->state, memory_order_acquire);
	if (st == S_SENT && now - s->t_ns >= WP_SENT_TIMEOUT_NS) {
		/* Never delivered: the thread blocks it with a raw system call
		 * (our mask wrappers keep it unblocked otherwise), or a raw
		 * sigwait took it. Give up on it: the new generation makes the
		 * handler ignore it if it ever comes; its ticks are lost. */
		uint32_t expect = S_SENT;

		if (atomic_compare_exchange_strong(&s->state, &expect, S_IDLE)) {
			atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
			g.ctr.nr_pending += s->nr_pend + 1;
			s->nr_pend = 0;
			s->nr_cached_ok = 0;
			st = S_IDLE;
		}
	}
	if (st != S_IDLE) {
		/* Our last signal is still undelivered (the thread waits for a
		 * CPU, or blocks the signal): its capture will stand for this
		 * tick too; beyond WP_SLOT_PEND ticks they are counted lost.
		 * Checked first: the cached stack is older than the signal, and
		 * the thread ran between the two, so "not run since the last
		 * tick" does not make the cached stack current. */
		if (s->nr_pend < WP_SLOT_PEND)
			s->pend_ns[s->nr_pend++] = now;
		else
			g.ctr.nr_pending++;
		return;
	}
	if (!ran && s->nr_cached_ok && !(seq & 1) && s->sampled_seq == 0) {
		/* Not a single instruction since the last sample: same stack. */
		g.ctr.nr_reused++;
		record_cached(s, now);
		return;
	}
	/* Even a thread that used most of the period may have blocked since
	 * (3 ms of work, then a 7 ms raw nanosleep: every sleep ended early
	 * when such threads were signalled unseen): the /proc probe (three
	 * system calls) decides for every thread that ran. */
	switch (probe_syscall(tid, &nr, &sp, &pc, args)) {
	case PROBE_GONE:
		slot_release(s);
		return;
	case PROBE_BLOCKED:
		if ((seq & 1) && blocked_in_call(s, seq, sp) && sample_published(s, seq, now) == 0)
			return;
		if (s->nr_cached_ok && s->sampled_seq == 0 && !(s->cached_flags & WP_SAMPLE_ON_CPU) &&
		    s->fp_nr == nr && s->fp_sp == sp && s->fp_pc == pc) {
			/* Back at the same blocking point: same stack. */
			g.ctr.nr_reused++;
			record_cached(s, now);
			return;
		}
		s->fp_nr = nr;
		s->fp_sp = sp;
		s->fp_pc = pc;
		if (!restarts_unseen(nr, args)) {
			/* Our signal would show (EINTR, a short count, a timeout
			 * started over): the place it blocks, without a signal. */
			record_blocked_proc(s, now, nr, sp, pc);
			return;
		}
		g.ctr.nr_signals_blocked++;
		send_signal(s, now, (uint32_t)nr);
		return;
	default:
		s->fp_nr = UINT64_MAX;
		send_signal(s, now, UINT32_MAX);
	}
}

/* Whether a thread of the program (not ours, not the exited main thread)
 * is still alive; confirmed by a fresh listing before answering no. */
static int user_threads_left(void)
{
	uint32_t i, hw = atomic_load(&g.hiwater);
	int pass;

	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < hw; i++) {
			struct wp_slot *s = &g.slots[i];

			if (atomic_load(&s->state) >= S_IDLE && atomic_load(&s->tid) != (uint32_t)g.pid)
				return 1;
		}
		scan_threads();
		hw = atomic_load(&g.hiwater);
	}
	return 0;
}

/* Whether the thread group's leader has ended as a thread (a zombie while
 * the other threads live on): main() left by a way we do not interpose
 * (thrd_exit, glibc's internal pthread_exit, a raw exit system call). */
static int leader_ended(void)
{
	char path[64], buf[512], *p;
	int fd;
	long n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)g.pid);
	fd = (int)wp_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = wp_syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	wp_syscall(SYS_close, fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && (p[2] == 'Z' || p[2] == 'X');
}

/* Forgets threads that are gone and whose samples all left the window, so
 * that thread churn costs no memory over time. */
static void prune_names(uint64_t now)
{
	uint32_t *map, i, hw = atomic_load(&g.hiwater);
	char *live;
	size_t k, n = 0;
	uint64_t window = (uint64_t)g.cfg.ring_seconds * 1000000000ull;

	live = calloc(g.nr_names + 1, 1);
	map = malloc((g.nr_names + 1) * sizeof(*map));
	if (!live || !map)
		goto out;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g.slots[i];

		if (atomic_load(&s->state) >= S_IDLE && s->name_idx != UINT32_MAX)
			live[s->name_idx] = 1;
	}
	for (k = 0; k < g.nr_names; k++) {
		map[k] = UINT32_MAX;
		if (live[k] || g.names[k].last_ns + window >= now) {
			g.names[n] = g.names[k];
			map[k] = (uint32_t)n++;
		}
	}
	g.nr_names = n;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g.slots[i];

		/* A free slot's index is stale, and a thread claiming it now
		 * resets it (slot_reset): not written here. */
		if (atomic_load(&s->state) >= S_IDLE && s->name_idx != UINT32_MAX)
			s->name_idx = map[s->name_idx];
	}
out:
	free(live);
	free(map);
}

/* Go's runtime (it asked for SA_ONSTACK on our signal, and its cgo glue is
 * there) ends the process with a raw exit_group system call, which no
 * library sees: there is no exit profile to write then. Said once, so the
 * missing file is not a mystery. */
static void go_notice(void)
{
	g.go_checked = 1;
	if (!dlsym(RTLD_DEFAULT, "_cgo_topofstack") && !dlsym(RTLD_DEFAULT, "_cgo_sys_thread_start"))
		return;
	wp_log(WP_LOG_INFO, "this is a Go program: Go's runtime ends the process with a raw "
	       "exit_group system call that no library sees, so no profile is written at its "
	       "exit unless it exits through C (exit())");
}

static void tick(uint64_t now)
{
	uint32_t i, hw;

	if (g.sample_onstack && !g.go_checked)
		go_notice();
	collect();
	if (g.ctr.nr_ticks % g.ticks_per_scan == 0)
		scan_threads();
	hw = atomic_load(&g.hiwater);
	if (atomic_load(&g.sampling)) {
		for (i = 0; i < hw; i++)
			if (atomic_load_explicit(&g.slots[i].state, memory_order_acquire) >= S_IDLE)
				sample_thread(&g.slots[i], now);
	}
	/* The refresh takes the loader's lock: not while a thread of the
	 * program holds it in a dl_iterate_phdr callback (which may block
	 * for long), or every tick would wait for it. The next tick will. */
	if (!atomic_load(&g.loader_users))
		wp_modmap_refresh(&g.mods);
	if (g.want_stacks && g.ctr.nr_ticks - g.stacks_tick >= g.ticks_per_scan)
		find_stacks();
	g.ctr.nr_ticks++;
	if (!atomic_load(&g.main_exited) && g.ctr.nr_ticks % g.ticks_per_scan == 0 &&
	    leader_ended())
		atomic_store(&g.main_exited, 1); /* thrd_exit, a raw exit: no word from it */
	if (atomic_load(&g.main_exited) && !user_threads_left()) {
		/* main() called pthread_exit and its last thread is gone, and
		 * was not seen ending (slot_thread_exit runs for threads that got
		 * a slot of their own): without us the process would end now,
		 * with status 0 (glibc's rule). Our descriptor table may lack the
		 * program's files, but the program's table is gone with its
		 * last thread: this is the best left to do. */
		exit(0);
	}
	/* Names change: right after a pthread_setname_np, else once a second
	 * (prctl and /proc writes are not seen otherwise). */
	if (g.ctr.nr_ticks % g.cfg.hz == 0)
		prune_names(now);
	if (atomic_exchange(&g.names_dirty, 0) || g.ctr.nr_ticks % g.cfg.hz == 0) {
		for (i = 0; i < hw; i++) {
			struct wp_slot *s = &g.slots[i];

			if (atomic_load(&s->state) >= S_IDLE && s->name_idx != UINT32_MAX)
				read_comm(g.names[s->name_idx].tid, g.names[s->name_idx].name);
		}
	}
}

/* ---- dumps ------------------------------------------------------------ */

/* Everything the library writes is a raw dump of the window (output/raw.h),
 * written with system calls only; the converter program turns it into the
 * profile in a process of its own (convert.h). One dump space per path that
 * may run at the same time: `exit_space` for the exit, an exec, a fatal
 * signal and an exit or exec from a signal handler (one at a time: the
 * raw_taken guard), `snap_space` for the sampler's snapshots. Off the stack:
 * a fatal signal may run on an 8 KiB alternate signal stack, of which the
 * kernel's signal frame already takes 3.3 KiB with AVX-512. */
struct dump_names {
	char json[WP_PATH_MAX], json_fb[WP_PATH_MAX]; /* the profile, and its fallback */
	char raw[WP_PATH_MAX], raw_fb[WP_PATH_MAX];   /* the dump, and its fallback */
};
struct dump_space {
	struct wp_raw_meta meta;
	struct wp_counters ctr;
	struct wp_raw_out out;
	struct wp_conv conv;
	struct dump_names n;
	char line[WP_PATH_MAX + 200];
};
static struct dump_space exit_space, snap_space;
static struct dump_names exit_names; /* computed at start and in a forked child */

/* async-signal-safe */
static size_t put(char *buf, size_t n, size_t cap, const char *s)
{
	while (*s && n + 1 < cap)
		buf[n++] = *s++;
	buf[n] = 0;
	return n;
}

/* async-signal-safe */
static size_t put_uint(char *buf, size_t n, size_t cap, unsigned long long v)
{
	char tmp[24];
	size_t k = 0;

	do {
		tmp[k++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (k && n + 1 < cap)
		buf[n++] = tmp[--k];
	buf[n] = 0;
	return n;
}

/* The four paths of a dump: `base` is the profile's name without ".json",
 * `tag` "", ".<n>" (snapshot) or ".exec<k>"; the fallbacks are the same
 * names in $TMPDIR (or /tmp), unique per process whatever the configured
 * name. async-signal-safe */
static void dump_paths(struct dump_names *d, const char *json, const char *tag)
{
	size_t n;

	if (json != d->json)
		put(d->json, 0, sizeof(d->json), json);
	n = strlen(d->json);
	n = n > 5 && !strcmp(d->json + n - 5, ".json") ? n - 5 : n;
	if (n + 5 < sizeof(d->raw)) {
		memcpy(d->raw, d->json, n);
		memcpy(d->raw + n, ".raw", 5);
	} else {
		d->raw[0] = 0;
	}
	n = put(d->json_fb, 0, sizeof(d->json_fb), g.cfg.tmpdir);
	n = put(d->json_fb, n, sizeof(d->json_fb), "/wallprof.");
	n = put_uint(d->json_fb, n, sizeof(d->json_fb), (unsigned)g.pid);
	n = put(d->json_fb, n, sizeof(d->json_fb), tag);
	memcpy(d->raw_fb, d->json_fb, n);
	put(d->raw_fb, n, sizeof(d->raw_fb), ".raw");
	put(d->json_fb, n, sizeof(d->json_fb), ".json");
}

/* Live threads are listed even without samples (one that blocks our
 * signal, say), so that their signals and losses are accounted.
 * async-signal-safe */
static void mark_live(void)
{
	uint32_t i, hw = atomic_load(&g.hiwater);

	for (i = 0; i < g.nr_names; i++)
		g.names[i].flags &= ~WP_THREAD_LIVE;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g.slots[i];
		uint32_t k = s->name_idx;

		if (atomic_load(&s->state) >= S_IDLE && k < g.nr_names)
			g.names[k].flags |= WP_THREAD_LIVE;
	}
}

/* The latest names of live threads (not in a signal handler). */
static void refresh_names(void)
{
	uint32_t i, hw = atomic_load(&g.hiwater);

	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g.slots[i];

		if (atomic_load(&s->state) >= S_IDLE && s->name_idx < g.nr_names)
			read_comm(g.names[s->name_idx].tid, g.names[s->name_idx].name);
	}
}

/* Whether some thread has two samples: else Sentry would reject the
 * profile (NotEnoughSamples), and a child that exec'd or _exit'ed at once
 * is not worth a dump. The converter decides on the window; this is the
 * cheap check before it (counts since start: the window of a process that
 * lived less than it, which is when this says no). Not in a handler: says
 * so in one line. */
static int long_enough(int level, int snapshot)
{
	const struct wp_ring_stats *rs = wp_ring_stats(g.ring);
	unsigned long long dropped = g.ctr.nr_pending + g.ctr.nr_send_failed +
				     rs->nr_dropped_full + rs->nr_overwritten;
	size_t i;

	for (i = 0; i < g.nr_names; i++)
		if (g.names[i].nr_samples >= 2)
			return 1;
	wp_log_event(level, "short", NULL, dropped,
		     "%s%llu sample%s in %.0f ms, fewer than 2 on every thread: too short for a "
		     "profile, none written (WALLPROF_HZ=%u)",
		     snapshot ? "snapshot: " : "", (unsigned long long)g.ctr.nr_samples,
		     g.ctr.nr_samples == 1 ? "" : "s", (double)(mono_ns() - g.start_ns) / 1e6,
		     g.cfg.hz);
	return 0;
}

/* Writes the raw dump of the window to sp->raw (else sp->raw_fb), locked
 * for the converter, and starts the converter on it (`detach`: nobody will
 * wait for it). The ring, names and module map hold still meanwhile (the
 * sampler is stopped, parked, or the caller). `sig`: the fatal signal, or 0.
 * Returns 0 when the converter runs; else one line says where the dump
 * stays, or that none could be written. async-signal-safe */
static int dump(struct dump_space *sp, int sig, int snapshot, int detach)
{
	struct wp_raw_meta *meta = &sp->meta;
	struct wp_conv_req rq;
	const char *path = sp->n.raw, *abbrev = sig ? sigabbrev_np(sig) : NULL;
	size_t n = 0, cap = sizeof(sp->line);
	int fd = -1, rc = -1, i, xfsz_was_pending;
	/* the kernel's 8-byte masks: a sigset_t is 128 bytes of stack each */
	unsigned long xfsz = 1ul << (SIGXFSZ - 1), old_mask, pending;

	memset(meta, 0, sizeof(*meta));
	meta->pid = (uint32_t)g.pid;
	meta->main_tid = (uint32_t)g.pid;
	meta->hz = g.cfg.hz;
	meta->ring_seconds = g.cfg.ring_seconds;
	meta->max_depth = g.cfg.max_depth;
	meta->realtime_offset_ns = g.rt_offset;
	meta->start_ns = g.start_ns;
	meta->snapshot = (uint32_t)snapshot;
	meta->ring_bytes = wp_ring_bytes(&g.ring_cfg);
	memcpy(meta->cmdline, g.cmdline, sizeof(meta->cmdline));
	meta->cmdline[sizeof(meta->cmdline) - 1] = 0;
	meta->signal = sig;
	sp->ctr = g.ctr;
	sp->ctr.nr_eintr_retried = atomic_load(&g.nr_eintr_retried);
	mark_live();
	/* SIGXFSZ held back: past RLIMIT_FSIZE the write must fail with EFBIG,
	 * not kill the program. One our write raised is taken off again; one
	 * that was already pending stays. */
	wp_syscall(SYS_rt_sigprocmask, SIG_BLOCK, &xfsz, &old_mask, 8);
	pending = 0;
	wp_syscall(SYS_rt_sigpending, &pending, 8);
	xfsz_was_pending = !!(pending & xfsz);
	/* System calls, not libc's names: those would reach our own wrappers. */
	for (i = 0; i < 2 && rc < 0; i++) {
		path = i ? sp->n.raw_fb : sp->n.raw;
		if (!path[0])
			continue;
		fd = (int)wp_syscall(SYS_openat, AT_FDCWD, path,
				     O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
		if (fd < 0)
			continue;
		/* Held by the converter while it runs: a dump being converted is
		 * told from one left behind (tree.c waits on it). */
		wp_syscall(SYS_flock, fd, LOCK_EX);
		rc = wp_raw_write_out(&sp->out, fd, meta, g.ring, g.mods.mods, g.mods.nr, g.names,
				      g.nr_names, &sp->ctr);
		if (rc < 0) {
			wp_syscall(SYS_close, fd);
			wp_syscall(SYS_unlink, path);
			fd = -1;
		}
	}
	pending = 0;
	wp_syscall(SYS_rt_sigpending, &pending, 8);
	if (!xfsz_was_pending && (pending & xfsz)) {
		struct timespec zero = { 0, 0 };

		while (wp_syscall(SYS_rt_sigtimedwait, &xfsz, NULL, &zero, 8) < 0 && errno == EINTR)
			;
	}
	wp_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old_mask, NULL, 8);
	if (sig) {
		n = put(sp->line, n, cap, "SIG");
		n = put(sp->line, n, cap, abbrev ? abbrev : "?");
		n = put(sp->line, n, cap, ": ");
	}
	if (rc < 0) {
		n = put(sp->line, n, cap, "could not write the raw profile; no profile");
		wp_log_raw(WP_LOG_ERROR, "error", NULL, 0, sp->line, n);
		return -1;
	}
	rq.raw_fd = fd;
	rq.raw = path;
	rq.json = sp->n.json;
	rq.fallback = sp->n.json_fb;
	rq.detach = detach;
	if (wp_convert_start(&sp->conv, &rq) < 0) {
		wp_syscall(SYS_close, fd);
		n = put(sp->line, n, cap, "wrote raw profile ");
		n = put(sp->line, n, cap, path);
		n = put(sp->line, n, cap, wp_convert_program() ? "; could not start " :
				    "; no converter found (WALLPROF_CONVERTER, or wallprof-convert "
				    "beside libwallprof.so): convert it with wallprof-convert");
		if (wp_convert_program())
			n = put(sp->line, n, cap, wp_convert_program());
		wp_log_raw(WP_LOG_ERROR, "wrote", path, 0, sp->line, n);
		return -1;
	}
	wp_syscall(SYS_close, fd);
	if (detach)
		/* for the root's report: a dump converting in the background */
		wp_tree_record("raw", path, 0, "converting", 10, 0);
	return 0;
}

/* CLOCK_MONOTONIC deadline for a conversion the caller waits for. */
static uint64_t convert_deadline(void)
{
	return mono_ns() + (uint64_t)g.cfg.convert_timeout * 1000000000ull;
}

/* The root waits for its conversions, so that the profile exists when the
 * program's parent sees it end; a descendant's goes on in the background
 * (its exit is not delayed by more than its raw dump), unless WALLPROF_LOG
 * asks every process to speak: then its lines come on its own stderr, as
 * the root's. async-signal-safe */
static int detached(void)
{
	return !wp_tree_is_root() && !g.cfg.log_explicit;
}

/* Sampler thread: a snapshot of the window, converted in the background;
 * the sampler relays its report on later ticks (snapshot_poll). */
static void start_snapshot(void)
{
	char json[WP_PATH_MAX], tag[24];
	int n;

	if (snap_space.conv.pid && !wp_convert_poll(&snap_space.conv)) {
		g.snapshots_waiting++;
		return;
	}
	collect();
	n = ++g.snapshot_seq;
	if (wp_out_expand_path(g.cfg.output, (unsigned)g.pid, n, json, sizeof(json)) < 0) {
		wp_log(WP_LOG_ERROR, "WALLPROF_OUTPUT expands to a path that is too long; "
		       "snapshot %d not written", n);
		return;
	}
	refresh_names();
	if (!long_enough(WP_LOG_INFO, n))
		return;
	snprintf(tag, sizeof(tag), ".%d", n);
	dump_paths(&snap_space.n, json, tag);
	dump(&snap_space, 0, n, 0);
}

/* Sampler thread, every tick: a finished snapshot conversion is reported,
 * and the next requested snapshot starts. */
static void snapshot_poll(void)
{
	if (!snap_space.conv.pid || !wp_convert_poll(&snap_space.conv))
		return;
	if (g.snapshots_waiting) {
		g.snapshots_waiting--;
		start_snapshot();
	}
}

static int start_thread(pthread_t *t, void *(*fn)(void *))
{
	sigset_t all, old;
	int rc;

	/* Helper threads never take the program's signals. */
	sigfillset(&all);
	wp_sigmask_raw(SIG_SETMASK, &all, &old);
	rc = wp_thread_create_real(t, NULL, fn, NULL);
	wp_sigmask_raw(SIG_SETMASK, &old, NULL);
	return rc;
}

static int cmp_slot_tp(const void *a, const void *b)
{
	uint64_t x = (*(struct wp_slot *const *)a)->stk_tp, y = (*(struct wp_slot *const *)b)->stk_tp;

	return x < y ? -1 : x > y;
}

/* For threads seen blocked in wrapped calls, the memory their stack words
 * can be read from with plain loads: the mapping that holds the thread's
 * control block (pthread_self()), from its start up to the control block.
 * glibc puts the control block at the top of the thread's stack mapping (the
 * guard page below it is a mapping of its own), so this is the thread's
 * stack, and it stays mapped while the thread lives. Whatever else it may be
 * (a program-provided stack, a heap), the stack pointer must lie in it for
 * the bounds to be used, and the thread, pinned, is running on it. One read
 * of /proc/self/maps for all of them, at most every ticks_per_scan ticks;
 * until then their words are read through the kernel. The same read finds
 * the main thread's [stack] mapping, which only ever grows downwards. */
static void find_stacks(void)
{
	uint32_t i, k = 0, hw = atomic_load(&g.hiwater);
	struct wp_slot **want;
	unsigned long lo, hi;
	char line[512];
	FILE *f;

	g.want_stacks = 0;
	g.stacks_tick = g.ctr.nr_ticks;
	want = malloc(hw * sizeof(*want) + 1);
	if (!want)
		return;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g.slots[i];
		uint32_t gen = atomic_load(&s->gen);

		if (atomic_load(&s->state) < S_IDLE || !s->tp ||
		    atomic_load(&s->tid) == (uint32_t)g.pid ||
		    (s->stk_gen == gen + 1 && s->stk_tp == s->tp))
			continue;
		s->stk_gen = gen + 1; /* not found unless a mapping holds it */
		s->stk_tp = s->tp;
		s->stk_lo = s->stk_hi = 0;
		want[k++] = s;
	}
	qsort(want, k, sizeof(*want), cmp_slot_tp);
	/* thread-self: once the leader has exited, /proc/self/maps is empty. */
	f = k || !g.main_stk_hi ? fopen("/proc/thread-self/maps", "re") : NULL;
	i = 0;
	while (f && (i < k || !g.main_stk_hi) && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);

		if (n && line[n - 1] != '\n') { /* a long path: skip the rest of the line */
			int c;

			while ((c = fgetc(f)) != EOF && c != '\n')
				;
		}
		if (sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		if (n > 8 && !strcmp(line + n - 8, "[stack]\n")) {
			g.main_stk_lo = lo;
			g.main_stk_hi = hi;
		}
		while (i < k && want[i]->stk_tp < lo)
			i++;
		for (; i < k && want[i]->stk_tp < hi; i++) {
			want[i]->stk_lo = lo;
			want[i]->stk_hi = want[i]->stk_tp;
		}
	}
	if (f) {
		/* The loop read to the end if it did not find [stack]: none.
		 * [0, 1) holds no stack word and is never looked up again. */
		if (!g.main_stk_hi)
			g.main_stk_hi = 1;
		fclose(f);
	}
	free(want);
}

static void *sampler_main(void *arg)
{
	uint64_t period = 1000000000ull / g.cfg.hz;
	uint64_t next = mono_ns();

	(void)arg;
	/* Before anything opens a file: our descriptors in a table of our own
	 * (before the name, which tests take as the sign that it is done). */
	g.fds_private = wp_fds_go_private() == 0;
	prctl(PR_SET_NAME, "wallprof");
	tls_internal = 1;
	wp_sigmask_bypass = 1;
	g.sampler_tid = (pid_t)wp_syscall(SYS_gettid); /* never samples itself */
	dl_iterate_phdr(own_segment, NULL);
	if (g.need_reset)
		reset_after_fork();
	for (;;) {
		uint32_t ev;
		uint64_t now;

		next += period;
		for (;;) {
			ev = atomic_load(&g.events);
			if (ev & EV_STOP) {
				/* a snapshot being converted is finished, not lost */
				if (snap_space.conv.pid)
					wp_convert_wait(&snap_space.conv, convert_deadline(), 0);
				return NULL;
			}
			if (ev & EV_FREEZE) {
				freeze();
				continue;
			}
			if (ev & EV_SNAPSHOT) {
				atomic_fetch_and(&g.events, ~(uint32_t)EV_SNAPSHOT);
				start_snapshot();
				continue;
			}
			if (mono_ns() >= next)
				break;
			futex_wait_until(&g.events, 0, next);
		}
		now = mono_ns();
		if (now >= next + period) {
			/* Overran (host stopped, machine busy): skip, don't burst. */
			uint64_t missed = (now - next) / period;

			g.ctr.nr_ticks_late += missed;
			next += missed * period;
		}
		snapshot_poll();
		tick(now);
	}
}

/* ---- lifecycle ---------------------------------------------------------- */

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

static int alloc_state(void)
{
	size_t depth = g.cfg.max_depth + WP_UNW_SCRATCH;
	uint64_t samples = (uint64_t)g.cfg.hz * g.cfg.ring_seconds * 64;
	struct wp_ring_config rc;
	uint64_t *bufs, *stks;

	g.nr_slots = g.cfg.max_threads;
	g.nr_tids = read_pid_max();
	g.slots = map_zero(g.nr_slots * sizeof(*g.slots));
	/* tid -> slot: 4 bytes per possible tid, pages touched only where
	 * tids are, read lock-free by threads looking up their own slot. */
	g.tid_slot = map_zero(g.nr_tids * sizeof(*g.tid_slot));
	bufs = map_zero(g.nr_slots * depth * sizeof(uint64_t));
	stks = map_zero(g.nr_slots * (size_t)g.cfg.max_depth * sizeof(uint64_t));
	g.dents_len = 64 * 1024;
	g.dents = map_zero(g.dents_len);
	/* Replayable walks, WP_SITES per slot (pages touched per slot used). */
	g.sites = map_zero(g.nr_slots * WP_SITES * sizeof(*g.sites));
	if (!g.slots || !g.tid_slot || !bufs || !stks || !g.dents || !g.sites)
		return -1;
	/* A slot's buffers are assigned when it is first claimed: touching
	 * every slot here would fault in all of them at every start. */
	g.bufs = bufs;
	g.stks = stks;
	g.buf_depth = depth;
	g.ticks_per_scan = g.cfg.hz >= 10 ? g.cfg.hz / 10 : 1;

	/* Sized for 64 threads over the whole window (with more threads the
	 * window shrinks and the loss is counted as overwritten), then held
	 * under WALLPROF_RING_MB by halving whichever is bigger, the sample
	 * array or the frame and stack tables. */
	wp_ring_default_config(&rc, samples, (uint64_t)g.cfg.ring_seconds * 1000000000ull);
	while (wp_ring_bytes(&rc) > (uint64_t)g.cfg.ring_mb << 20) {
		uint64_t sample_bytes = rc.nr_samples * 24;
		uint64_t table_bytes = wp_ring_bytes(&rc) - sample_bytes;

		if (rc.nr_samples > 1024 && (sample_bytes >= table_bytes || rc.nr_words <= 8192))
			rc.nr_samples /= 2;
		else if (rc.nr_words > 8192)
			rc.nr_pcs /= 2, rc.nr_stacks /= 2, rc.nr_words /= 2;
		else
			break;
	}
	if (rc.nr_samples < samples)
		wp_log(WP_LOG_INFO, "WALLPROF_RING_MB=%u holds %zu samples, less than %u s x %u Hz x 64 threads",
		       g.cfg.ring_mb, rc.nr_samples, g.cfg.ring_seconds, g.cfg.hz);
	g.ring_cfg = rc;
	g.ring = wp_ring_create(&rc);
	return g.ring ? 0 : -1;
}

/* The signals blocked while our handler runs: all but the synchronous ones
 * (a fault there must reach whoever handles it now). A signal of the
 * program's that comes meanwhile is delivered as the handler returns, at
 * the point the kernel left the interrupted call, where undo_restart() can
 * see it. */
static void sampling_mask(sigset_t *m)
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
 * small stacks no foreign handler may use), room_for_unwind() checks. */
static void sampling_action(struct sigaction *act, int onstack)
{
	memset(act, 0, sizeof(*act));
	act->sa_sigaction = on_sample_signal;
	act->sa_flags = SA_SIGINFO | SA_RESTART | (onstack ? SA_ONSTACK : 0);
	sampling_mask(&act->sa_mask);
}

static int pick_signal(void)
{
	static const int fallbacks[] = { SIGPROF, SIGVTALRM, SIGPWR, SIGSTKFLT };
	const char *explicit_sig = getenv("WALLPROF_SIGNAL");
	struct sigaction old, act;
	size_t i, n = (explicit_sig && *explicit_sig) ? 1 : sizeof(fallbacks) / sizeof(*fallbacks);
	char a[24];

	for (i = 0; i < n; i++) {
		int sig = n == 1 ? g.cfg.signal : fallbacks[i];

		if (__sigaction(sig, NULL, &old) < 0)
			continue;
		if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
			wp_log(WP_LOG_DEBUG, "%s already has a handler; not using it",
			       wp_signal_name(sig, a, sizeof(a)));
			continue;
		}
		memset(&act, 0, sizeof(act));
		sampling_action(&act, 0);
		if (__sigaction(sig, &act, NULL) < 0)
			continue;
		g.prog_act = old;
		g.signal = sig;
		wp_sigmask_set_signal(sig);
		return 0;
	}
	wp_log(WP_LOG_ERROR, "no free signal for sampling (%s is taken; set WALLPROF_SIGNAL); profiling is off",
	       wp_signal_name(n == 1 ? g.cfg.signal : SIGPROF, a, sizeof(a)));
	return -1;
}

static void install_snapshot(void)
{
	struct sigaction old, act;
	char a[24];
	int sig = g.cfg.snapshot_signal;

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
		g.prev_snap_act = old;
		g.snapshot_signal = sig;
	}
}

static void read_cmdline(void)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n, i;

	g.cmdline[0] = 0;
	if (fd < 0)
		return;
	n = read(fd, g.cmdline, sizeof(g.cmdline) - 1);
	close(fd);
	if (n <= 0)
		return;
	while (n > 0 && g.cmdline[n - 1] == 0)
		n--;
	for (i = 0; i < n; i++)
		if (g.cmdline[i] == 0)
			g.cmdline[i] = ' ';
	g.cmdline[n] = 0;
}

/* Sampler thread of a forked child, before its first tick: a fresh ring,
 * fresh names and counters; the module map is the parent's (same mappings). */
static void reset_after_fork(void)
{
	struct timespec rt;

	g.need_reset = 0;
	wp_ring_destroy(g.ring);
	g.ring = wp_ring_create(&g.ring_cfg);
	if (!g.ring) {
		atomic_store(&g.sampling, 0);
		wp_log(WP_LOG_ERROR, "forked child %d: cannot allocate the ring; profiling is off", g.pid);
		return;
	}
	/* Threads that survive (a failed exec restarts us with the program's
	 * threads still there) keep their slots, and what they publish there,
	 * but the sampler starts over: new names entries (their old indices
	 * point into the table just emptied), no cached stacks (their
	 * references point into the old ring). */
	for (uint32_t i = 0; i < atomic_load(&g.hiwater); i++)
		slot_forget(&g.slots[i]);
	g.nr_names = 0;
	memset(&g.ctr, 0, sizeof(g.ctr));
	g.start_ns = mono_ns();
	clock_gettime(CLOCK_REALTIME, &rt);
	g.rt_offset = (int64_t)((uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec) -
		      (int64_t)g.start_ns;
	read_cmdline();
}

/* In the child of fork(): only the forking thread exists. Forget the
 * parent's threads and start a sampler of our own; the heavy reset happens
 * on that thread, so a child that execs right away pays almost nothing. */
static void after_fork_child(void)
{
	uint32_t i;

	tls_slot = NULL;
	tls_tid = 0;
	if (!g.started)
		return;
	if (!g.cfg.follow_children) {
		/* Children are not profiled: this one leaves its parent's ring
		 * alone and its snapshot signal gets its old meaning back. */
		atomic_store(&g.sampling, 0);
		g.started = 0;
		for (i = 0; i < g.nr_slots; i++)
			atomic_store(&g.slots[i].blk_pin, 0);
		if (g.snapshot_signal)
			__sigaction(g.snapshot_signal, &g.prev_snap_act, NULL);
		g.snapshot_signal = 0;
		return;
	}
	g.pid = getpid();
	g.uid = getuid();
	wp_log_forked();
	/* This thread is the child's leader now, whatever it was in the
	 * parent: its exit must be seen (slot_thread_exit). A key below 32
	 * is stored without allocating. */
	if (g.exit_key_ok)
		pthread_setspecific(g.exit_key, &g);
	for (i = 0; i < atomic_load(&g.hiwater); i++) {
		slot_reset(&g.slots[i], 0);
		atomic_store(&g.slots[i].state, S_FREE);
	}
	atomic_store(&g.hiwater, 0);
	atomic_store(&g.events, 0);
	atomic_store(&g.main_exited, 0);
	atomic_store(&g.sampler_stopped, 0);
	/* The forking thread is the child's leader: not among the others. */
	atomic_store(&g.live_threads, 0);
	tls_counted = 0;
	wp_thread_start_forked();
	snap_space.conv.pid = 0; /* the parent's */
	exit_space.conv.pid = 0;
	g.snapshots_waiting = 0;
	g.snapshot_seq = 0;
	g.sampler_tid = 0;
	g.need_reset = 1;
	set_dump_paths();
	if (start_thread(&g.sampler, sampler_main) != 0) {
		atomic_store(&g.sampling, 0);
		g.started = 0;
		wp_log(WP_LOG_ERROR, "forked child %d: cannot start the sampler; profiling is off",
		       g.pid);
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
				n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%s", n ? " " : "", tok);
		}
		lp += len;
		lp += strspn(lp, " :");
	}
	if (n)
		setenv("LD_PRELOAD", out, 1);
	else
		unsetenv("LD_PRELOAD");
}

void wp_sampler_start(void)
{
	struct timespec rt;
	char a[24];

	wp_config_load(&g.cfg);
	if (!g.cfg.follow_children)
		unfollow_children();
	if (!g.cfg.enabled)
		return;
	wp_tree_export(&g.cfg);
	wp_convert_init(&g.cfg);
	g.pid = getpid();
	g.uid = getuid();
	wp_test_enter_signal = g.cfg.test_enter_signal;
	if (alloc_state() < 0) {
		wp_log(WP_LOG_ERROR, "cannot allocate the sample buffers (%s); profiling is off",
		       strerror(errno));
		return;
	}
	wp_unwind_init();
	read_cmdline();
	wp_modmap_refresh(&g.mods);
	/* glibc keeps keys below 32 in each thread's descriptor; a later one
	 * could allocate when a wrapper sets it, so it is not used. */
	g.exit_key_ok = pthread_key_create(&g.exit_key, slot_thread_exit) == 0 && g.exit_key < 32;
	if (pick_signal() < 0)
		return;
	install_snapshot();
	install_fatal();
	g.start_ns = mono_ns();
	clock_gettime(CLOCK_REALTIME, &rt);
	g.rt_offset = (int64_t)((uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec) -
		      (int64_t)g.start_ns;
	atomic_store(&g.sampling, 1);
	if (start_thread(&g.sampler, sampler_main) != 0) {
		atomic_store(&g.sampling, 0);
		wp_log(WP_LOG_ERROR, "cannot start the sampler thread; profiling is off");
		return;
	}
	g.started = 1;
	pthread_atfork(NULL, NULL, after_fork_child);
	wp_log(WP_LOG_DEBUG, "sampling every thread at %u Hz with %s, window %u s, depth %u",
	       g.cfg.hz, wp_signal_name(g.signal, a, sizeof(a)), g.cfg.ring_seconds, g.cfg.max_depth);
}

static void stop_and_dump(int exec_k);

void wp_sampler_stop_and_dump(void)
{
	stop_and_dump(-1);
}

/* The paths of the image's profile before an exec: "<name>.exec<k>.json",
 * the first k with neither the profile nor its dump (which the converter
 * may still hold) there; the exec'd image has the same pid and writes the
 * plain name at its own exit. Returns k, or -1 when the name is too long.
 * async-signal-safe (access(2) and string copies) */
__attribute__((noinline)) static int exec_paths(struct dump_space *sp)
{
	char tag[32];
	char *json = sp->n.json, *raw = sp->n.raw; /* built in place, off the stack */
	size_t n;
	int k;

	if (!g.out_base[0])
		return -1;
	for (k = 0; k < 1000; k++) {
		put_uint(tag, put(tag, 0, sizeof(tag), ".exec"), sizeof(tag), (unsigned)k);
		n = put(json, put(json, 0, sizeof(sp->n.json), g.out_base), sizeof(sp->n.json), tag);
		if (n + 6 >= sizeof(sp->n.raw))
			return -1;
		memcpy(raw, json, n + 1);
		put(json, n, sizeof(sp->n.json), ".json");
		put(raw, n, sizeof(sp->n.raw), ".raw");
		if (access(json, F_OK) != 0 && access(raw, F_OK) != 0)
			break;
	}
	dump_paths(&sp->n, json, tag);
	return k;
}

/* Before exec: the image's profile, as at exit. */
void wp_sampler_before_exec(void)
{
	if (!g.started || getpid() != g.pid)
		return;
	stop_and_dump(0);
}

/* exec failed: the program goes on, so does profiling (a fresh window). */
void wp_sampler_exec_failed(void)
{
	if (g.started || !g.pid || getpid() != g.pid || !g.ring)
		return;
	if (atomic_exchange(&g.exec_thaw, 0)) {
		/* An exec from a signal handler: its raw dump parked the sampler,
		 * which goes on where it was (all of this async-signal-safe). */
		atomic_store(&g.raw_taken, 0);
		atomic_store(&g.raw_done, 0);
		atomic_fetch_and(&g.events, ~(uint32_t)EV_FREEZE);
		futex_wake(&g.events);
		atomic_store(&g.sampling, 1);
		g.started = 1;
		return;
	}
	if (atomic_load(&g.frozen) || atomic_load(&g.raw_taken))
		return; /* another thread's raw dump holds the sampler still */
	atomic_store(&g.sampler_stopped, 0);
	atomic_store(&g.events, 0);
	atomic_store(&g.sampling, 1);
	g.need_reset = 1;
	g.started = 1;
	if (start_thread(&g.sampler, sampler_main) != 0) {
		atomic_store(&g.sampling, 0);
		g.started = 0;
	}
}

/* The dump of a fatal signal (`sig`), or of an exit or exec (`exec`) from a
 * signal handler: the thread may hold any lock of the program's (malloc's
 * among them), so only system calls on memory prepared beforehand. Once
 * per process: a second caller waits for the first (a SIGSEGV while an
 * exit from a handler dumps), up to 2 s, then returns. The sampler is
 * parked meanwhile so that the ring, names and module map hold still; it
 * stays parked (the process is ending) unless an exec fails.
 * async-signal-safe */
static void handler_dump(int sig, int exec)
{
	int i;

	if (!g.started || getpid() != g.pid || !g.ring)
		return;
	if (atomic_exchange(&g.raw_taken, 1)) {
		for (i = 0; i < 200 && !atomic_load(&g.raw_done); i++) {
			struct timespec ts = { 0, 10000000 };

			wp_syscall(SYS_futex, &g.raw_done, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
		}
		return;
	}
	atomic_store(&g.sampling, 0);
	if (wp_syscall(SYS_gettid) != g.sampler_tid) {
		/* give up waiting after 200 ms (the reader copes) */
		atomic_fetch_or(&g.events, EV_FREEZE);
		futex_wake(&g.events);
		for (i = 0; i < 20 && !atomic_load(&g.frozen); i++) {
			struct timespec ts = { 0, 10000000 };

			wp_syscall(SYS_futex, &g.frozen, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
		}
	}
	if (!exec)
		exit_space.n = exit_names;
	if ((!exec || exec_paths(&exit_space) >= 0) && dump(&exit_space, sig, 0, detached()) == 0)
		wp_convert_wait(&exit_space.conv, convert_deadline(), 1);
	atomic_store(&g.raw_done, 1);
	futex_wake(&g.raw_done);
}

/* The exit dump (`exec_k` < 0), or the image's before an exec, from a
 * program thread outside any handler of its own. */
static void stop_and_dump(int exec_k)
{
	int i;

	if (!g.started || getpid() != g.pid)
		return;
	if (in_program_handler()) {
		/* _exit, exit or exec from a signal handler */
		handler_dump(0, exec_k >= 0);
		if (exec_k >= 0)
			atomic_store(&g.exec_thaw, 1); /* thawed if the exec fails */
		g.started = 0;
		return;
	}
	g.started = 0;
	if (atomic_load(&g.sampler_stopped)) {
		/* the last program thread stopped it (slot_thread_exit) */
	} else if (!pthread_equal(pthread_self(), g.sampler)) {
		atomic_fetch_or(&g.events, EV_STOP);
		futex_wake(&g.events);
		pthread_join(g.sampler, NULL);
	} /* else: the sampler itself ends the process (see tick) */
	collect();
	atomic_store(&g.sampling, 0);
	if (atomic_exchange(&g.raw_taken, 1)) {
		/* a fatal signal's dump on another thread: it is the profile */
		for (i = 0; i < 200 && !atomic_load(&g.raw_done); i++)
			futex_wait_until(&g.raw_done, 0, mono_ns() + 10000000ull);
		return;
	}
	refresh_names();
	exit_space.n = exit_names;
	if (exec_k >= 0 && exec_paths(&exit_space) < 0)
		wp_log(WP_LOG_ERROR, "WALLPROF_OUTPUT expands to a path that is too long; "
		       "no profile before exec");
	else if (long_enough(exec_k >= 0 ? WP_LOG_DEBUG : WP_LOG_INFO, 0) &&
		 dump(&exit_space, 0, 0, detached()) == 0)
		wp_convert_wait(&exit_space.conv, convert_deadline(), 1);
	if (exec_k >= 0) {
		atomic_store(&g.raw_taken, 0); /* the exec may fail: later dumps */
		return;
	}
	atomic_store(&g.raw_done, 1);
	futex_wake(&g.raw_done);
	wp_tree_report(convert_deadline()); /* the root's final exit: one word for the tree */
}

/* ---- the program's own signal handling (interposed sigaction) ---------- */

/* The program's handlers, installed behind a trampoline that counts, per
 * thread, the signals the program handled: a wrapped call retries an EINTR
 * only when none of them ran during it (see block.c). */
static struct sigaction prog_handlers[NSIG];

/* A handler of the program's starts on this thread: counted (see
 * wp_block_ours). Over a published call (the call it interrupted, or one a
 * longjmp left behind) it is marked, so that the sampler watches where the
 * thread is while the handler runs, and after it if the handler never
 * returns (a longjmp out of it, out of the call). Returns the sequence
 * marked, 0 for none. async-signal-safe */
static uint32_t program_handler_enter(void)
{
	struct wp_slot *s = tls_slot;
	uint32_t q;

	if (!s || atomic_load_explicit(&s->tid, memory_order_relaxed) != tls_tid)
		return 0;
	atomic_fetch_add_explicit(&s->nr_foreign, 1, memory_order_relaxed);
	q = atomic_load_explicit(&s->blk_seq, memory_order_relaxed);
	if (!(q & 1))
		return 0;
	if (atomic_load_explicit(&s->hdl_seq, memory_order_relaxed) != q) {
		atomic_store_explicit(&s->hdl_depth, 0, memory_order_relaxed);
		atomic_store_explicit(&s->hdl_seq, q, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&s->hdl_depth, 1, memory_order_release);
	return q;
}

/* The handler that program_handler_enter() marked over `seq` returned.
 * async-signal-safe */
static void program_handler_leave(uint32_t seq)
{
	struct wp_slot *s = tls_slot;

	if (!seq || !s || atomic_load_explicit(&s->tid, memory_order_relaxed) != tls_tid ||
	    atomic_load_explicit(&s->hdl_seq, memory_order_relaxed) != seq)
		return;
	if (atomic_load_explicit(&s->hdl_depth, memory_order_relaxed) > 0)
		atomic_fetch_sub_explicit(&s->hdl_depth, 1, memory_order_release);
}

/* async-signal-safe */
/* A handler of the program's without SA_RESTART ran at the point where our
 * signal had the kernel restart a wrapped blocking call (our handler noted
 * it, and held this signal back until it returned). Without the profiler
 * this signal would have ended the call with EINTR; do what the kernel would
 * have done: step over the `syscall` instruction with -EINTR as its result.
 * The wrapper sees the program's signal in nr_foreign and returns the EINTR.
 * async-signal-safe */
static void undo_restart(void *ucp)
{
	struct wp_slot *s = tls_slot;
	ucontext_t *uc = ucp;
	uint32_t seq;

	if (!uc || !s || atomic_load_explicit(&s->tid, memory_order_relaxed) != tls_tid)
		return;
	seq = atomic_load_explicit(&s->blk_seq, memory_order_relaxed);
	if (!(seq & 1) || s->rst_seq != seq ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RIP] != s->rst_pc ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RAX] != s->rst_nr ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RSP] != s->rst_sp ||
	    (uint64_t)uc->uc_mcontext.gregs[REG_RCX] != s->rst_pc + 2)
		return; /* not the context our handler classified (kernel_restarts) */
	uc->uc_mcontext.gregs[REG_RIP] += 2;
	uc->uc_mcontext.gregs[REG_RAX] = -EINTR;
	s->rst_seq = 0;
}

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	struct sigaction a = prog_handlers[sig];
	uint32_t depth, over;
	int view;

	depth = handler_frame_push((uintptr_t)__builtin_frame_address(0));
	over = program_handler_enter();
	view = wp_sigmask_handler_enter(&a.sa_mask);
	if (a.sa_flags & SA_RESETHAND) {
		/* The kernel has already reset its side. */
		prog_handlers[sig].sa_handler = SIG_DFL;
		prog_handlers[sig].sa_flags &= ~SA_SIGINFO;
	}
	if (a.sa_flags & SA_SIGINFO) {
		if (a.sa_sigaction)
			a.sa_sigaction(sig, si, uc);
	} else if (a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN) {
		a.sa_handler(sig);
	}
	program_handler_leave(over);
	wp_sigmask_handler_leave(view);
	if (!(a.sa_flags & SA_RESTART))
		undo_restart(uc);
	handler_frame_pop(depth);
}

/* async-signal-safe */
static int program_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction k, prev, saved = prog_handlers[sig];
	int rc;

	if (act && !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_DFL &&
	    g.fatal_installed[sig]) {
		/* Back to the default: ours is the default plus a raw dump. */
		prog_handlers[sig] = *act;
		rc = install_fatal_one(sig);
		if (rc == 0 && old)
			*old = saved;
		return rc;
	}
	if (act && ((act->sa_flags & SA_SIGINFO) ||
		    (act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN))) {
		prog_handlers[sig] = *act; /* before the kernel can call it */
		k = *act;
		k.sa_flags |= SA_SIGINFO;
		k.sa_sigaction = trampoline;
		/* The sampling signal stays deliverable while it runs (the
		 * trampoline keeps the program's view of it). */
		if (g.signal)
			sigdelset(&k.sa_mask, g.signal);
		rc = __sigaction(sig, &k, &prev);
		if (rc < 0)
			prog_handlers[sig] = saved;
	} else {
		rc = __sigaction(sig, act, &prev);
	}
	if (rc == 0 && old) {
		*old = (prev.sa_flags & SA_SIGINFO) &&
		       (prev.sa_sigaction == trampoline || prev.sa_sigaction == on_fatal_signal) ?
			       saved : prev;
	}
	if (rc == 0 && act)
		g.fatal_installed[sig] = 0;
	return rc;
}

int wp_sampler_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	char a[24];

	if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
		return -2;
	if (g.signal && sig == g.signal) {
		/* Chained: the kernel keeps our handler, which forwards every
		 * signal that is not ours to what the program installed. */
		if (old)
			*old = g.prog_act;
		if (act)
			g.prog_act = *act;
		if (act && (act->sa_flags & SA_ONSTACK) && !g.sample_onstack) {
			struct sigaction ours;

			/* The program runs code on stacks where only handlers on
			 * the alternate stack may run (Go): so must ours. */
			sampling_action(&ours, 1);
			if (__sigaction(sig, &ours, NULL) == 0)
				g.sample_onstack = 1;
		}
		return 0;
	}
	if (g.snapshot_signal && sig == g.snapshot_signal) {
		int rc;

		if (act && (act->sa_handler != SIG_DFL || (act->sa_flags & SA_SIGINFO))) {
			/* The program wins its signal; snapshots stop. */
			g.snapshot_signal = 0;
			wp_log(WP_LOG_INFO, "the program installed its own %s handler; snapshots are off",
			       wp_signal_name(sig, a, sizeof(a)));
			rc = program_sigaction(sig, act, NULL);
			if (rc == 0 && old)
				*old = g.prev_snap_act;
			return rc;
		}
		/* A query or a reset to the default: the program sees the
		 * disposition it would have without us; snapshots stay on. */
		if (old)
			*old = g.prev_snap_act;
		if (act)
			g.prev_snap_act = *act;
		return 0;
	}
	return program_sigaction(sig, act, old);
}

/* ---- fatal signals and special exits ------------------------------------ */

/* The sampler parks here while a raw dump is written: the ring, names and
 * module map hold still. Only an exec from a handler that failed thaws it;
 * after a fatal signal it stays until the process is gone. */
static void freeze(void)
{
	uint32_t ev;

	atomic_store(&g.frozen, 1);
	futex_wake(&g.frozen);
	while ((ev = atomic_load(&g.events)) & EV_FREEZE)
		wp_syscall(SYS_futex, &g.events, FUTEX_WAIT_PRIVATE, ev, NULL, NULL, 0);
	atomic_store(&g.frozen, 0);
}

void wp_sampler_main_exiting(void)
{
	if (!g.started || getpid() != g.pid || wp_syscall(SYS_gettid) != g.pid)
		return;
	atomic_store(&g.main_exited, 1);
	stop_if_last();
}

/* async-signal-safe */
void wp_sampler_names_changed(void)
{
	atomic_store(&g.names_dirty, 1);
}

/* Terminating signals whose default action we wrap: on death, a raw dump of
 * the ring first (async-signal-safe), then the same death. */
static const int fatal_signals[] = {
	SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS, SIGQUIT, SIGXCPU,
	SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGALRM, SIGUSR1,
};

/* Stack the fatal path uses below the kernel's signal frame (3.3 KiB with
 * AVX-512; an 8 KiB alternate stack leaves 4.7 KiB), measured on a painted
 * alternate stack (test exit_altstack_depth; gcc 12 -O2): 8.3 KiB before
 * (raw_dump's line, meta and counters and wp_raw_write's 2 KiB writer on
 * the stack), 11.1 KiB when a libc function on the way was still unbound
 * (the loader's lazy binding saves the vector registers on the stack); now
 * 496 bytes: the big items are in `fatal`, and files are opened and written
 * with system calls. The library is linked with -z now, so that no libc
 * function is ever bound on this path. */
/* async-signal-safe */
static void on_fatal_signal(int sig, siginfo_t *si, void *uc)
{
	static const struct sigaction dfl = { .sa_handler = SIG_DFL };
	int saved = errno;

	(void)si;
	(void)uc;
	handler_dump(sig, 0);
	/* Die exactly as without us: default action, same signal, core dump
	 * if enabled. The signal is blocked in here, so it hits on return
	 * (a faulting instruction would also fault again). */
	__sigaction(sig, &dfl, NULL);
	wp_syscall(SYS_tgkill, getpid(), wp_syscall(SYS_gettid), sig);
	errno = saved;
}

static int install_fatal_one(int sig)
{
	struct sigaction act;

	memset(&act, 0, sizeof(act));
	act.sa_sigaction = on_fatal_signal;
	act.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
	/* Every signal waits while it runs (then the process is gone): no
	 * handler lands on top of it on a small alternate stack, ours for
	 * sampling least of all (the unwinder needs 8 KiB). A fault in it
	 * still kills, by that signal: the kernel unblocks it. */
	sigfillset(&act.sa_mask);
	return __sigaction(sig, &act, NULL);
}

/* The exit dump's paths, and the base of the exec dumps' names: computed
 * here, not in a signal handler. At start and in a forked child. */
static void set_dump_paths(void)
{
	char json[WP_PATH_MAX];

	if (wp_out_sibling_path(g.cfg.output, (unsigned)g.pid, "", g.out_base,
				sizeof(g.out_base)) < 0)
		g.out_base[0] = 0;
	if (wp_out_expand_path(g.cfg.output, (unsigned)g.pid, 0, json, sizeof(json)) < 0)
		json[0] = 0;
	dump_paths(&exit_names, json, "");
}

static void install_fatal(void)
{
	size_t i;

	set_dump_paths();
	for (i = 0; i < sizeof(fatal_signals) / sizeof(*fatal_signals); i++) {
		int sig = fatal_signals[i];
		struct sigaction old;

		if (sig == g.signal || sig == g.snapshot_signal)
			continue;
		if (__sigaction(sig, NULL, &old) < 0 || (old.sa_flags & SA_SIGINFO) ||
		    old.sa_handler != SIG_DFL)
			continue; /* the program (or the parent's SIG_IGN) has it */
		if (install_fatal_one(sig) == 0)
			g.fatal_installed[sig] = 1;
	}
}
