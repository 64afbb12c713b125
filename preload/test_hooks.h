/* test_hooks: knobs that exist only in the test build of the library.
 *
 * `make` builds build/libwallprof.so without them and, for the test suite,
 * build/test/libwallprof.so (and the unit tests' archives) with
 * -DWP_TEST_HOOKS. In the production build WP_TESTING is 0: the
 * WALLPROF_TEST_* variables are not read and every branch that looks at
 * them is compiled out. */
#ifndef WP_TEST_HOOKS_H
#define WP_TEST_HOOKS_H

#ifdef WP_TEST_HOOKS
#define WP_TESTING 1
#else
#define WP_TESTING 0
#endif

#include <sys/syscall.h>
#include <time.h>

#include "../output/sys.h"

/* Holds the calling thread `us` microseconds in a nanosleep system call,
 * which a test can see in /proc/self/task/T/syscall (no-op for 0). */
static inline void wp_test_hold_us(unsigned us)
{
	struct timespec t = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	if (us)
		wp_syscall(SYS_nanosleep, &t, NULL);
}

#endif
