/* sigmask: keeps the sampling signal deliverable whatever masks the program
 * sets. A worker thread that blocks every signal (xz -T2 does, so do many
 * thread pools) would otherwise never take our signal: it would be invisible
 * while it burns CPU, and a sigwait over a full set would receive our
 * queued signal as if it were the program's.
 *
 * pthread_sigmask and sigprocmask pass every other signal through, drop the
 * sampling signal from what they block, and remember per thread whether the
 * program asked for it blocked; the old mask they report includes it then,
 * so the program sees the mask it set. A signal of the program's with the
 * same number that arrives meanwhile is held (wp_sigmask_defer) and raised
 * again when the program unblocks it. Masks set with a raw rt_sigprocmask
 * system call (Go's runtime, glibc inside pthread_create) are out of reach:
 * a sampling signal that stays pending there times out in the sampler. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sigmask.h"
#include "../unwind/unwind.h"
#include "../output/sys.h"

#define WP_EXPORT __attribute__((visibility("default")))

static int the_signal;

#if WP_TESTING
int wp_test_walk_mask_strict;
#endif

WP_AS_SAFE static void raise_deferred(void);

__thread int wp_sigmask_bypass __attribute__((tls_model("initial-exec")));

/* The program asked for the sampling signal to be blocked on this thread. */
static __thread int tls_blocked __attribute__((tls_model("initial-exec")));
/* A signal of the program's held while it was "blocked". */
static __thread int tls_deferred __attribute__((tls_model("initial-exec")));
static __thread siginfo_t tls_deferred_info __attribute__((tls_model("initial-exec")));

/* Our handler's walk on this thread (wp_sigmask_capture_begin): none, begun,
 * or begun and every signal but SIGSYS blocked, the mask before in
 * tls_capture_saved and the mask as libunwind is told it in
 * tls_capture_mask. */
enum { CAPTURE_NONE, CAPTURE_WALKING, CAPTURE_BLOCKED };
static __thread int tls_capture __attribute__((tls_model("initial-exec")));
static __thread sigset_t tls_capture_saved __attribute__((tls_model("initial-exec")));
static __thread sigset_t tls_capture_mask __attribute__((tls_model("initial-exec")));

/* This thread's mask is fixed (wp_sigmask_fix_mine), and is this. */
static __thread int tls_fixed __attribute__((tls_model("initial-exec")));
static __thread sigset_t tls_fixed_mask __attribute__((tls_model("initial-exec")));

static int (*real_pthread_sigmask)(int, const sigset_t *, sigset_t *);
static int (*real_sigprocmask)(int, const sigset_t *, sigset_t *);
static int (*real_signalfd)(int, const sigset_t *, int);

/* async-signal-safe */
WP_AS_SAFE int wp_sigmask_raw(int how, const sigset_t *set, sigset_t *old)
{
	return (int)wp_syscall(SYS_rt_sigprocmask, how, set, old, _NSIG / 8);
}

void wp_sigmask_init(void)
{
	*(void **)&real_pthread_sigmask = dlsym(RTLD_NEXT, "pthread_sigmask");
	*(void **)&real_sigprocmask = dlsym(RTLD_NEXT, "sigprocmask");
	*(void **)&real_signalfd = dlsym(RTLD_NEXT, "signalfd");
}

void wp_sigmask_fix_mine(void)
{
	sigemptyset(&tls_fixed_mask);
	if (wp_sigmask_raw(SIG_BLOCK, NULL, &tls_fixed_mask) == 0)
		tls_fixed = 1;
}

/* async-signal-safe */
WP_AS_SAFE void wp_sigmask_capture_begin(void)
{
	tls_capture = CAPTURE_WALKING;
}

/* async-signal-safe */
WP_AS_SAFE void wp_sigmask_capture_end(void)
{
	if (tls_capture == CAPTURE_BLOCKED)
		wp_sigmask_raw(SIG_SETMASK, &tls_capture_saved, NULL);
	tls_capture = CAPTURE_NONE;
}

/* A mask call of libunwind's in our walk (wp_sigmask_capture_begin): the
 * first blocks for real every signal but SIGSYS (a seccomp filter's trap,
 * which a sandboxing program handles, for a system call the walk makes);
 * each reports that mask and changes nothing. Returns 0, or -1 when the
 * mask could not be changed (the call goes on as a real one).
 * async-signal-safe */
WP_AS_SAFE static int walk_mask_call(sigset_t *old)
{
	if (tls_capture == CAPTURE_WALKING) {
		sigset_t block;

		sigfillset(&block);
		sigdelset(&block, SIGSYS);
		if (wp_sigmask_raw(SIG_BLOCK, &block, &tls_capture_saved) != 0)
			return -1;
		sigorset(&tls_capture_mask, &tls_capture_saved, &block);
		tls_capture = CAPTURE_BLOCKED;
	}
	if (old)
		*old = tls_capture_mask;
	return 0;
}

void wp_sigmask_set_signal(int sig)
{
	sigset_t cur, one;

	the_signal = sig;
	/* Started with it blocked (inherited across exec): unblocked, and the
	 * program's view of this thread's mask keeps it blocked. */
	sigemptyset(&one);
	sigaddset(&one, sig);
	if (wp_sigmask_raw(SIG_BLOCK, NULL, &cur) == 0 && sigismember(&cur, sig) == 1) {
		tls_blocked = 1;
		wp_sigmask_raw(SIG_UNBLOCK, &one, NULL);
	}
}

/* async-signal-safe */
WP_AS_SAFE struct wp_sigmask_view wp_sigmask_handler_enter(const sigset_t *mask)
{
	struct wp_sigmask_view prev = { tls_blocked, tls_capture, wp_sigmask_bypass };

	tls_capture = CAPTURE_NONE;
	wp_sigmask_bypass = 0;
	if (the_signal && mask && sigismember(mask, the_signal) == 1)
		tls_blocked = 1;
	return prev;
}

/* async-signal-safe */
WP_AS_SAFE void wp_sigmask_handler_leave(struct wp_sigmask_view prev)
{
	int was = tls_blocked;

	tls_blocked = prev.blocked;
	tls_capture = prev.capture;
	wp_sigmask_bypass = prev.bypass;
	if (was && !tls_blocked)
		raise_deferred();
}

/* async-signal-safe */
WP_AS_SAFE const sigset_t *wp_sigmask_wait_set(const sigset_t *set, sigset_t *tmp)
{
	if (!set || !the_signal || sigismember(set, the_signal) != 1)
		return set;
	*tmp = *set;
	sigdelset(tmp, the_signal);
	return tmp;
}

/* async-signal-safe */
WP_AS_SAFE int wp_sigmask_defer(const siginfo_t *si)
{
	if (!tls_blocked)
		return 0;
	/* A standard signal is pending at most once: a second one merges. */
	if (!tls_deferred) {
		tls_deferred_info = *si;
		tls_deferred = 1;
	}
	return 1;
}

/* async-signal-safe */
WP_AS_SAFE int wp_sigmask_take_deferred(const sigset_t *set, siginfo_t *info)
{
	if (!tls_deferred || !set || sigismember(set, the_signal) != 1)
		return 0;
	tls_deferred = 0;
	if (info)
		*info = tls_deferred_info;
	return the_signal;
}

/* The program unblocked it: a held signal is delivered now, as the kernel
 * would on the unblocking call. async-signal-safe */
WP_AS_SAFE static void raise_deferred(void)
{
	siginfo_t si;

	if (!tls_deferred)
		return;
	tls_deferred = 0;
	si = tls_deferred_info;
	/* To itself any si_code may be queued. */
	wp_syscall(SYS_rt_tgsigqueueinfo, getpid(), wp_syscall(SYS_gettid), the_signal, &si);
}

/* Shared by both calls: `call` is the real one; returns its result (the
 * error convention is the caller's). async-signal-safe */
WP_AS_SAFE static int mask_call(int (*call)(int, const sigset_t *, sigset_t *), int how,
				const sigset_t *set, sigset_t *old, const void *caller)
{
	int sig = wp_sigmask_bypass ? 0 : the_signal, was = tls_blocked, now = was, rc;
	int known = how == SIG_BLOCK || how == SIG_UNBLOCK || how == SIG_SETMASK;
	sigset_t k;

	if (tls_fixed && known) {
		if (old)
			*old = tls_fixed_mask;
		return 0;
	}
	/* libunwind's own calls (a program's walks) are the real ones: it
	 * blocks every signal around its cache lock, and a handler of ours
	 * must not walk a thread that holds it (unwind.h); in our own walk,
	 * one real call blocks them all. */
	if (wp_unwind_owns(caller)) {
		if (tls_capture && known && set && walk_mask_call(old) == 0)
			return 0;
#if WP_TESTING
		if (wp_test_walk_mask_strict && wp_sigmask_bypass && wp_unwind_active()) {
			static const char msg[] = "wallprof test: a mask system call in a walk\n";

			wp_syscall(SYS_write, 2, msg, sizeof(msg) - 1);
			abort();
		}
#endif
		return call(how, set, old);
	}
	if (sig && set) {
		int member = sigismember(set, sig) == 1;

		switch (how) {
		case SIG_BLOCK:
			now = was || member;
			break;
		case SIG_UNBLOCK:
			now = was && !member; /* unblocking ours is harmless: kept */
			member = 0;
			break;
		case SIG_SETMASK:
			now = member;
			break;
		default:
			member = 0; /* EINVAL from the call itself */
		}
		if (member) {
			k = *set;
			sigdelset(&k, sig);
			set = &k;
		}
	}
	rc = call(how, set, old);
	if ((call == real_sigprocmask ? rc < 0 : rc != 0) || !sig)
		return rc;
	if (old && was)
		sigaddset(old, sig);
	if (set) {
		tls_blocked = now;
		if (was && !now)
			raise_deferred();
	}
	return rc;
}

WP_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	if (!real_pthread_sigmask &&
	    !(*(void **)&real_pthread_sigmask = dlsym(RTLD_NEXT, "pthread_sigmask")))
		return ENOSYS;
	return mask_call(real_pthread_sigmask, how, set, old, __builtin_return_address(0));
}

WP_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
	if (!real_sigprocmask && !(*(void **)&real_sigprocmask = dlsym(RTLD_NEXT, "sigprocmask"))) {
		errno = ENOSYS;
		return -1;
	}
	return mask_call(real_sigprocmask, how, set, old, __builtin_return_address(0));
}

/* A signalfd reads pending signals of its mask: never ours. */
WP_EXPORT int signalfd(int fd, const sigset_t *mask, int flags)
{
	sigset_t tmp;

	if (!real_signalfd && !(*(void **)&real_signalfd = dlsym(RTLD_NEXT, "signalfd"))) {
		errno = ENOSYS;
		return -1;
	}
	return real_signalfd(fd, wp_sigmask_wait_set(mask, &tmp), flags);
}
