/* event: the index line writer (see event.h). System calls only: it runs in
 * signal handlers of the profiled process, whose libc calls we interpose. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
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

/* The index open for appending: a regular file (whoever names it, a FIFO
 * there does not hang us), or -1. async-signal-safe */
static int open_index(const char *index_path, int create)
{
	struct stat st;
	/* the tree's converter trusts an index nobody else can write: 0644 */
	int fd = wp_sys_open_append(index_path, create, &st);

	if (fd >= 0 && !S_ISREG(st.st_mode)) {
		wp_syscall(SYS_close, fd);
		fd = -1;
	}
	return fd;
}

/* One line from its pieces, written whole or not at all (a short write,
 * ENOSPC or EFBIG, would glue half a line to the next). async-signal-safe */
static int append(const char *index_path, int create, struct iovec *v, int n)
{
	int fd = open_index(index_path, create), rc;

	if (fd < 0)
		return -1;
	rc = wp_sys_writev_whole(fd, v, n);
	wp_syscall(SYS_close, fd);
	return rc;
}

/* async-signal-safe */
int wp_event_append(const char *index_path, unsigned pid, const char *kind, const char *path,
		    unsigned long long lost, const char *msg, size_t len, int create)
{
	char npid[24], nlost[24];
	struct iovec v[10];
	int saved = errno, rc;
	size_t plen = path ? strlen(path) : 0;

	if (!printable(msg, len))
		msg = "(message with control characters)", len = strlen(msg);
	if (path && !printable(path, plen))
		path = "(path with control characters)", plen = strlen(path);
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
	rc = append(index_path, create, v, 10);
	errno = saved;
	return rc;
}

/* async-signal-safe */
static int usable_path(const char *p)
{
	return p && p[0] == '/' && printable(p, strlen(p));
}

/* async-signal-safe */
int wp_event_append_dump(const char *index_path, unsigned pid, const char *raw, const char *json,
			 const char *json_fb)
{
	char npid[24];
	struct iovec v[8];
	int saved = errno, rc;

	if (!usable_path(raw) || !usable_path(json) || !usable_path(json_fb))
		return -1;
	v[0] = (struct iovec){ npid, wp_put_uint(npid, 0, sizeof(npid), pid) };
	v[1] = (struct iovec){ "\traw\t", 5 };
	v[2] = (struct iovec){ (void *)raw, strlen(raw) };
	v[3] = (struct iovec){ "\t0\t", 3 };
	v[4] = (struct iovec){ (void *)json, strlen(json) };
	v[5] = (struct iovec){ "\t", 1 };
	v[6] = (struct iovec){ (void *)json_fb, strlen(json_fb) };
	v[7] = (struct iovec){ "\n", 1 };
	rc = append(index_path, 1, v, 8);
	errno = saved;
	return rc;
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
