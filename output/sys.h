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
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

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

/* The first len - 1 bytes of the file at `path` (a /proc file, say) in
 * buf, NUL-terminated, through no wrapper of ours. Returns their count, or
 * -1 (errno set) when it cannot be opened or read. */
static inline long wp_sys_read_file(const char *path, char *buf, size_t len)
{
	long fd = wp_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC), n;

	if (fd < 0)
		return -1;
	n = wp_syscall(SYS_read, fd, buf, len - 1);
	wp_syscall(SYS_close, fd);
	if (n >= 0)
		buf[n] = 0;
	return n;
}

/* `path` opened for appending a line: write-only, O_APPEND, never through a
 * symbolic link as its last part, never waiting (a FIFO there does not hang
 * us), never our controlling terminal; `create` adds O_CREAT (mode 0644).
 * Its fstat in *st. Returns the descriptor, or -1. */
static inline int wp_sys_open_append(const char *path, int create, struct stat *st)
{
	int flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
	long fd;

	if (!path || !path[0])
		return -1;
	fd = wp_syscall(SYS_openat, AT_FDCWD, path, flags | (create ? O_CREAT : 0), 0644);
	if (fd >= 0 && wp_syscall(SYS_fstat, fd, st) < 0) {
		wp_syscall(SYS_close, fd);
		fd = -1;
	}
	return (int)fd;
}

/* v[0..n) with one writev: 0 when all of it went, else -1 (a short write,
 * ENOSPC, EAGAIN: the caller puts its line elsewhere; a regular file opened
 * O_APPEND takes all of it or none, a terminal may take part). A write a
 * signal interrupted before it wrote anything is tried again, a few times. */
static inline int wp_sys_writev_whole(int fd, const struct iovec *v, int n)
{
	size_t want = 0;
	long w;
	int i, tries = 0;

	for (i = 0; i < n; i++)
		want += v[i].iov_len;
	do
		w = wp_syscall(SYS_writev, fd, v, n);
	while (w < 0 && errno == EINTR && ++tries < 4);
	return w == (long)want ? 0 : -1;
}

#endif
