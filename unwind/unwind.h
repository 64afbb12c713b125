/* unwind: stack capture inside the profiling signal handler, with libunwind.
 * Everything reachable from wp_unwind_capture() is async-signal-safe: no
 * malloc, no locks, no stdio; it only reads the interrupted thread's stack. */
#ifndef WP_UNWIND_H
#define WP_UNWIND_H

#include <stddef.h>
#include <stdint.h>

/* Result flags of a capture. */
#define WP_UNW_TRUNCATED 0x1 /* the stack was deeper than the limit */
#define WP_UNW_FAILED 0x2    /* only the interrupted PC could be recovered */
#define WP_UNW_BLOCKED 0x4   /* the thread was inside (or restarting) a system call */
#define WP_UNW_SLOW 0x8      /* the fast path missed; unw_step was used */
#define WP_UNW_DL_GUARD 0x10 /* not unwound: the thread was inside the dynamic loader */

/* Extra slots the scratch buffer needs beyond the depth limit: the handler's
 * own frames and the signal trampoline are walked and then dropped. */
#define WP_UNW_SCRATCH 24

/* Looks up the mmap that comes after the library's (unwind.c) in the
 * program's scope. From the constructor's first line, whether or not the
 * profiler is enabled; mmap does it itself when called earlier. Not
 * async-signal-safe. */
void wp_unwind_resolve(void);

/* Warms libunwind up (its caches and lazily created state) so that the first
 * capture in a handler allocates nothing. Call once from the constructor,
 * before the program can create pthread keys (libunwind's must be below 32)
 * or call libunwind itself.
 * Not async-signal-safe. */
void wp_unwind_init(void);

/* A handler of the program's runs on this thread, maybe in the middle of
 * our walk: what it calls is its own (its pipe2 and mmap are the real
 * ones) until wp_unwind_resume puts back what wp_unwind_suspend returned.
 * async-signal-safe */
int wp_unwind_suspend(void);
void wp_unwind_resume(int was);

/* Whether this thread is inside libunwind on the library's behalf (a
 * capture, a walk from published registers, the warm-up).
 * async-signal-safe */
int wp_unwind_active(void);

/* Whether `addr` lies in the code of libunwind.so.8, the copy the library
 * links and a program that calls libunwind itself shares (found by
 * wp_unwind_init). The wrappers let libunwind's own calls through as the
 * real ones: its sigprocmask blocking every signal around its cache lock
 * (a sample of ours taken there would wait for that lock on the thread
 * that holds it), and its pthread_mutex_lock of that lock, never published
 * (a thread that got it would wait at the wrapper's end for the sampler,
 * which pinned it and waits for the lock to walk another stack). Relies on
 * libunwind calling them, not tail-calling them (the return address is
 * then in its code), as 1.6 does. async-signal-safe */
int wp_unwind_owns(const void *addr);

/* The executable segment [*lo, *hi) of the loaded object whose code holds
 * `addr`. Returns 0, or -1 when none does. Not async-signal-safe. */
int wp_code_segment(const void *addr, uint64_t *lo, uint64_t *hi);

/* What a walk from published registers read from the stack, so that the
 * same walk can be replayed without libunwind: if the registers are the same
 * and every stack word it read still holds the value it read, libunwind would
 * return the same frames (the code and its unwind tables being unchanged). */
#define WP_SITE_MAX 32
struct wp_unw_site {
	uint64_t rip, rsp, rbp, fn; /* key: published registers and the leaf */
	uint64_t epoch;             /* caller's module-map generation */
	uint32_t nr;                /* frames in ip[]; 0: empty or not replayable */
	uint32_t nr_chk;            /* words in at[]/val[] */
	uint64_t ip[WP_SITE_MAX];
	uint64_t at[2 * WP_SITE_MAX], val[2 * WP_SITE_MAX];
};

/* Unwinds from a register set (RIP, RSP, RBP and the callee-saved ones
 * filled in, the rest zero) that another thread published: stores up to `cap`
 * return addresses, callers of the context's PC, and sets *truncated when
 * there were more. Returns the count. With `site`, also records what the walk
 * read (site->nr stays 0 if it cannot be replayed: deeper than WP_SITE_MAX,
 * truncated, or a frame whose return address or frame pointer did not come
 * from the stack above the published stack pointer). async-signal-safe */
int wp_unwind_regs(const void *ucontext, uint64_t *buf, int cap, int *truncated,
		   struct wp_unw_site *site);

/* Whether every stack word `site` recorded still holds its value: 0 no,
 * 2 yes (read directly), 1 yes (read through the kernel). The
 * caller has the thread pinned in a wrapped call and passes its own stack
 * [stk_lo, stk_hi) (0, 0 if unknown): when the published stack pointer and
 * every word lie in it, the words are read directly; otherwise with one
 * process_vm_readv on `pid` (an unmapped address is a mismatch, not a fault;
 * words spread over more than 16 KiB are not checked and the answer is no). */
int wp_unwind_site_check(const struct wp_unw_site *site, int pid, uint64_t stk_lo, uint64_t stk_hi);

/* The two descriptor numbers our pipe2 gives libunwind for its
 * memory-validation pipe (see unwind.c): above any limit a descriptor table
 * can have, so they never name a file of the program. Whoever interposes
 * read() answers WP_UNW_FAKE_RFD with -1/EAGAIN (the pipe is empty), and
 * write() or syscall(SYS_write) on WP_UNW_FAKE_WFD with
 * wp_unwind_fake_write(). */
#define WP_UNW_FAKE_RFD 2147483646
#define WP_UNW_FAKE_WFD 2147483647

/* A write of `n` bytes at `addr` into libunwind's validation pipe: 1 when
 * the first byte is readable, else -1 with errno EFAULT. async-signal-safe */
long wp_unwind_fake_write(const void *addr, size_t n);

/* Captures the stack of the thread interrupted by a signal, from inside that
 * thread's handler. `ucontext` is the handler's third argument. `buf` holds
 * `max_depth + WP_UNW_SCRATCH` entries; on return buf[0] is the interrupted
 * PC and buf[1..n-1] the return addresses, leaf first. Returns n (>= 1) and
 * sets *flags to WP_UNW_* bits. async-signal-safe */
int wp_unwind_capture(void *ucontext, uint64_t *buf, int max_depth, unsigned *flags);

/* Whether the interrupted context sits at a system call: about to restart one
 * (PC at a `syscall` instruction) or just returned from one with -EINTR.
 * async-signal-safe */
int wp_unwind_in_syscall(const void *ucontext);

/* Whether the interrupted context is at a `syscall` instruction: where the
 * kernel leaves a call it restarts after the handler (SA_RESTART), and the
 * register that will carry the call's number then. async-signal-safe */
int wp_unwind_at_syscall_insn(const void *ucontext);

#endif
