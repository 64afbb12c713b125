/* fds: the library's own file descriptors stay out of the program's way.
 *
 * open() hands out the lowest free number, and programs rely on it: a daemon
 * closes 0, 1 and 2 and expects open("/dev/null") to return 0. The sampler
 * opens /proc files every tick and a snapshot opens its dump and the
 * converter's pipe; in the program's descriptor table either would, now
 * and then, take the number the program was about to get. So the sampler
 * thread works in a private copy of the table, made with unshare(CLONE_FILES) and emptied of the
 * program's descriptors at once: a pipe or socket the program closes is
 * closed, not kept alive by our copy. Messages from those threads reach the
 * program's stderr of the moment through pidfd_getfd(2).
 *
 * Without pidfd_open, pidfd_getfd or close_range (kernels before 5.9, or a
 * seccomp filter), the sampler stays in the shared table as before. */
#include <errno.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../output/sys.h"
#include "as_safe.h"
#include "wallprof.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static __thread int tls_private;  /* this thread's table is the private one */
static int private_pidfd = -1;    /* the process, in the private table */

/* Whether the three calls exist, asked without creating a descriptor:
 * each is given an argument it rejects with EINVAL or EBADF. */
static int kernel_has_them(void)
{
	if (wp_syscall(SYS_pidfd_open, 0, 0) >= 0 || errno != EINVAL)
		return 0;
	if (wp_syscall(SYS_pidfd_getfd, -1, 0, 0) >= 0 || errno != EBADF)
		return 0;
	if (wp_syscall(SYS_close_range, 1, 0, 0) >= 0 || errno != EINVAL)
		return 0;
	return 1;
}

int wp_fds_go_private(void)
{
	if (tls_private)
		return 0;
	if (!kernel_has_them() || unshare(CLONE_FILES) < 0)
		return -1;
	wp_syscall(SYS_close_range, 0, ~0U, 0); /* none of the program's */
	private_pidfd = (int)wp_syscall(SYS_pidfd_open, getpid(), 0);
	tls_private = 1;
	return 0;
}

WP_AS_SAFE int wp_fds_private_here(void)
{
	return tls_private;
}

int wp_fds_stderr(void)
{
	if (!tls_private)
		return STDERR_FILENO;
	if (private_pidfd < 0)
		return -1;
	return (int)wp_syscall(SYS_pidfd_getfd, private_pidfd, STDERR_FILENO, 0);
}

void wp_fds_stderr_done(int fd)
{
	if (tls_private && fd >= 0)
		close(fd);
}
