/* event: the index line writer (see event.h). System calls only: it runs in
 * signal handlers of the profiled process, whose libc calls we interpose. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "event.h"
#include "strput.h"
#include "sys.h"

/* async-signal-safe */
static int printable(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}

/* async-signal-safe */
int wp_event_append(const char *index_path, unsigned pid, const char *kind, const char *path,
		    unsigned long long lost, const char *msg, size_t len, int create)
{
	char npid[24], nlost[24];
	struct iovec v[10];
	int fd, flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW, saved = errno;
	size_t plen = path ? strlen(path) : 0;
	long w;

	if (!index_path || !index_path[0])
		return -1;
	if (!printable(msg, len))
		msg = "(message with control characters)", len = strlen(msg);
	if (path && !printable(path, plen))
		path = "(path with control characters)", plen = strlen(path);
	if (create)
		flags |= O_CREAT;
	fd = (int)wp_syscall(SYS_openat, AT_FDCWD, index_path, flags, 0666);
	if (fd < 0) {
		errno = saved;
		return -1;
	}
	v[0] = (struct iovec){ npid, wp_put_uint(npid, 0, sizeof(npid), pid) };
	v[1] = (struct iovec){ "\t", 1 };
	v[2] = (struct iovec){ (void *)kind, strlen(kind) };
	v[3] = (struct iovec){ "\t", 1 };
	v[4] = (struct iovec){ (void *)(path ? path : ""), plen };
	v[5] = (struct iovec){ "\t", 1 };
	v[6] = (struct iovec){ nlost, wp_put_uint(nlost, 0, sizeof(nlost), lost) };
	v[7] = (struct iovec){ "\t", 1 };
	v[8] = (struct iovec){ (void *)msg, len };
	v[9] = (struct iovec){ "\n", 1 };
	w = wp_syscall(SYS_writev, fd, v, 10);
	wp_syscall(SYS_close, fd);
	errno = saved;
	return w > 0 ? 0 : -1;
}

/* async-signal-safe */
int wp_event_split(char *line, size_t len, char *f[WP_EVENT_FIELDS])
{
	char *p = line, *end = line + len;
	int k;

	for (k = 0; k < WP_EVENT_FIELDS - 1; k++) {
		f[k] = p;
		while (p < end && *p != '\t')
			p++;
		if (p == end)
			return -1;
		*p++ = 0;
	}
	f[k] = p;
	*end = 0;
	return 0;
}
