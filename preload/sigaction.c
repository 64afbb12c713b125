/* sigaction: the program's own signal handling, as the interposed
 * sigaction() and signal() see it. The program's handlers run behind a
 * trampoline that counts, per thread, the signals the program handled (a
 * wrapped call retries an EINTR only when none of them ran during it, see
 * block.c), records the frame they run from and undoes a restart our signal
 * left for them; sigaction() reports the program's own handler back. The
 * sampling and snapshot signals stay ours: the program sees its own view of
 * them. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "../output/strput.h"
#include "../unwind/unwind.h"
#include "dump.h"
#include "handler.h"
#include "runtime.h"
#include "sampler.h"
#include "sigmask.h"

/* The program's handlers, installed behind the trampoline. */
static struct sigaction prog_handlers[NSIG];

/* Runs the program's handler for `sig` as the kernel would have: its mask
 * (the sampling signal kept deliverable), SA_RESETHAND, then our
 * bookkeeping around it. async-signal-safe */
WP_AS_SAFE static void trampoline(int sig, siginfo_t *si, void *uc)
{
	struct sigaction a = prog_handlers[sig];
	uint32_t depth, over;
	struct wp_sigmask_view view;
	/* In the middle of our handler's walk (a SIGSYS, a fault) the
	 * program's handler is the program's: its mask calls, pipe2 and mmap
	 * the real ones, and left so if it jumps out. */
	int in_unw = wp_unwind_suspend();

	depth = wp_handler_frame_push((uintptr_t)__builtin_frame_address(0));
	over = wp_handler_program_enter();
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
	wp_handler_program_leave(over);
	wp_sigmask_handler_leave(view);
	wp_unwind_resume(in_unw);
	if (!(a.sa_flags & SA_RESTART))
		wp_handler_undo_restart(uc);
	wp_handler_frame_pop(depth);
}

/* async-signal-safe */
WP_AS_SAFE static int program_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction k, prev, saved = prog_handlers[sig];
	int rc;

	if (act && !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_DFL &&
	    g->sig.fatal_installed[sig]) {
		/* Back to the default: ours is the default plus a raw dump. */
		prog_handlers[sig] = *act;
		rc = wp_dump_install_fatal_one(sig);
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
		if (g->sig.signal)
			sigdelset(&k.sa_mask, g->sig.signal);
		rc = __sigaction(sig, &k, &prev);
		if (rc < 0)
			prog_handlers[sig] = saved;
	} else {
		rc = __sigaction(sig, act, &prev);
	}
	if (rc == 0 && old) {
		int ours = ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction == trampoline) ||
			   wp_dump_fatal_ours(&prev);

		*old = ours ? saved : prev;
	}
	if (rc == 0 && act)
		g->sig.fatal_installed[sig] = 0;
	return rc;
}

/* async-signal-safe (sigaction is, so its interposer must be) */
WP_AS_SAFE int wp_sampler_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	char a[24];

	if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
		return -2;
	if (g->sig.signal && sig == g->sig.signal) {
		/* Chained: the kernel keeps our handler, which forwards every
		 * signal that is not ours to what the program installed. */
		if (old)
			*old = g->sig.prog_act;
		if (act)
			g->sig.prog_act = *act;
		if (act && (act->sa_flags & SA_ONSTACK) && !g->sig.sample_onstack) {
			struct sigaction ours;

			/* The program runs code on stacks where only handlers on
			 * the alternate stack may run (Go): so must ours. */
			wp_handler_sampling_action(&ours, 1);
			if (__sigaction(sig, &ours, NULL) == 0)
				g->sig.sample_onstack = 1;
		}
		return 0;
	}
	if (g->sig.snapshot_signal && sig == g->sig.snapshot_signal) {
		int rc;

		if (act && (act->sa_handler != SIG_DFL || (act->sa_flags & SA_SIGINFO))) {
			char line[96];
			size_t n = 0;

			/* The program wins its signal; snapshots stop. Said in one
			 * line written as a handler may: sigaction() is
			 * async-signal-safe, so must this be. */
			g->sig.snapshot_signal = 0;
			n = wp_put_str(line, n, sizeof(line), "the program installed its own ");
			n = wp_put_str(line, n, sizeof(line), wp_signal_name(sig, a, sizeof(a)));
			n = wp_put_str(line, n, sizeof(line), " handler; snapshots are off");
			wp_log_raw(WP_LOG_INFO, "info", NULL, 0, line, n);
			rc = program_sigaction(sig, act, NULL);
			if (rc == 0 && old)
				*old = g->sig.prev_snap_act;
			return rc;
		}
		/* A query or a reset to the default: the program sees the
		 * disposition it would have without us; snapshots stay on. */
		if (old)
			*old = g->sig.prev_snap_act;
		if (act)
			g->sig.prev_snap_act = *act;
		return 0;
	}
	return program_sigaction(sig, act, old);
}
