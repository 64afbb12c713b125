/* sys: system calls issued by the library itself, straight to the kernel.
 * The library interposes syscall() for the program's blocking calls
 * (preload/block_ipc.c); its own futex waits, tgkill and gettid must not go
 * through that wrapper (a wait inside a wrapper's exit would publish again).
 * It lives here, below the runtime, because the writers the library shares
 * with the converter (raw.c, event.c) run inside the library too and write
 * the same way.
 * async-signal-safe */
#ifndef WP_SYS_H
#define WP_SYS_H

#include <errno.h>

static inline long wp_sys6(long nr, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

/* libc's convention: -1 and errno on failure. */
static inline long wp_sys_ret(long ret)
{
	if ((unsigned long)ret > -4096ul) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

#define WP_SYS_ARG(x) ((long)(x))
#define wp_sys0(n) wp_sys_ret(wp_sys6((n), 0, 0, 0, 0, 0, 0))
#define wp_sys1(n, a) wp_sys_ret(wp_sys6((n), WP_SYS_ARG(a), 0, 0, 0, 0, 0))
#define wp_sys2(n, a, b) wp_sys_ret(wp_sys6((n), WP_SYS_ARG(a), WP_SYS_ARG(b), 0, 0, 0, 0))
#define wp_sys3(n, a, b, c) \
	wp_sys_ret(wp_sys6((n), WP_SYS_ARG(a), WP_SYS_ARG(b), WP_SYS_ARG(c), 0, 0, 0))
#define wp_sys4(n, a, b, c, d) \
	wp_sys_ret(wp_sys6((n), WP_SYS_ARG(a), WP_SYS_ARG(b), WP_SYS_ARG(c), WP_SYS_ARG(d), 0, 0))
#define wp_sys5(n, a, b, c, d, e)                                                           \
	wp_sys_ret(wp_sys6((n), WP_SYS_ARG(a), WP_SYS_ARG(b), WP_SYS_ARG(c), WP_SYS_ARG(d), \
			   WP_SYS_ARG(e), 0))
#define wp_sys6e(n, a, b, c, d, e, f)                                                       \
	wp_sys_ret(wp_sys6((n), WP_SYS_ARG(a), WP_SYS_ARG(b), WP_SYS_ARG(c), WP_SYS_ARG(d), \
			   WP_SYS_ARG(e), WP_SYS_ARG(f)))

/* Variadic spelling of the above for the library's own calls: same
 * arguments as syscall(2). */
#define WP_SYS_NARG(...) WP_SYS_NARG_(__VA_ARGS__, 6e, 5, 4, 3, 2, 1, 0)
#define WP_SYS_NARG_(n, a, b, c, d, e, f, k, ...) k
#define WP_SYS_CAT(a, b) a##b
#define WP_SYS_PICK(k) WP_SYS_CAT(wp_sys, k)
#define wp_syscall(...) WP_SYS_PICK(WP_SYS_NARG(__VA_ARGS__))(__VA_ARGS__)

#endif
