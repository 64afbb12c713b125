/* wallprof: the library's entry points. Constructor and destructor, and the
 * libc functions it interposes. These are the only symbols the .so exports;
 * they carry libc's names (not wp_) because interposition needs them. */
#include <dlfcn.h>
#include <signal.h>
#include <string.h>

#include "block.h"
#include "sampler.h"

#define WP_EXPORT __attribute__((visibility("default")))

typedef void (*wp_sighandler)(int);

static wp_sighandler (*real_signal)(int, wp_sighandler);

__attribute__((constructor)) static void wp_init(void)
{
	real_signal = (wp_sighandler(*)(int, wp_sighandler))dlsym(RTLD_NEXT, "signal");
	wp_block_init();
	wp_sampler_start();
}

/* Runs on return from main() and on exit(), after the program's atexit
 * handlers and its own destructors. */
__attribute__((destructor)) static void wp_fini(void)
{
	wp_sampler_stop_and_dump();
}

WP_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	int rc = wp_sampler_sigaction(sig, act, old);

	return rc == -2 ? __sigaction(sig, act, old) : rc;
}

WP_EXPORT wp_sighandler signal(int sig, wp_sighandler handler)
{
	struct sigaction act, old;
	int rc;

	/* glibc's signal() is BSD-style: restartable, the signal blocked
	 * while its handler runs. */
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	if (sig > 0 && sig < NSIG)
		sigaddset(&act.sa_mask, sig);
	act.sa_flags = SA_RESTART;
	rc = wp_sampler_sigaction(sig, &act, &old);
	if (rc == -2) {
		if (!real_signal)
			real_signal = (wp_sighandler(*)(int, wp_sighandler))dlsym(RTLD_NEXT, "signal");
		return real_signal ? real_signal(sig, handler) : SIG_ERR;
	}
	return rc < 0 ? SIG_ERR : old.sa_handler;
}
