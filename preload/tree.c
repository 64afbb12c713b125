/* tree: the profiled process tree, its index file and the root's one report
 * (see tree.h for the index's format). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../output/event.h"
#include "../output/output.h"
#include "../output/profile.h"
#include "convert.h"
#include "../output/sys.h"
#include "runtime.h"
#include "tree.h"

#define INDEX_READ_MAX (64u << 20) /* the report reads at most this much */
#define REPORT_MESSAGES 5          /* child messages printed by the report */

static int is_root = 1;
static int exported;               /* WALLPROF_TREE already names us (exec'd root) */
static char index_path[WP_PATH_MAX];
static unsigned long long my_start;

/* This process's start time (clock ticks since boot, /proc/self/stat field
 * 22): with the pid, it names the process across exec, and not another
 * process that got the same pid later or in another pid namespace. 0 if
 * unknown. */
static unsigned long long start_time(void)
{
	char buf[1024], *p;
	ssize_t n;
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC), i;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
	for (i = 2; p && i < 22; i++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

void wp_tree_load(void)
{
	const char *s = getenv("WALLPROF_TREE");
	unsigned long pid;
	unsigned long long start = 0;
	char *end;

	is_root = 1;
	exported = 0;
	index_path[0] = 0;
	my_start = start_time();
	if (s && *s >= '1' && *s <= '9') {
		errno = 0;
		pid = strtoul(s, &end, 10);
		if (*end == '.')
			start = strtoull(end + 1, &end, 10);
		if (!errno && pid <= 0x7fffffffu && *end == ':' && end[1] == '/' &&
		    strlen(end + 1) < sizeof(index_path)) {
			memcpy(index_path, end + 1, strlen(end + 1) + 1);
			if (pid == (unsigned long)getpid() && start == my_start) {
				exported = 1; /* our own image before an exec set it */
			} else {
				is_root = 0;
			}
		}
	}
}

void wp_tree_export(const struct wp_config *c)
{
	char path[WP_PATH_MAX], val[WP_PATH_MAX + 48];

	if (!is_root || exported)
		return;
	if (wp_out_sibling_path(c->output, (unsigned)getpid(), ".index", path, sizeof(path)) < 0 ||
	    path[0] != '/')
		return;
	/* A previous run's index under the same name is not this run's. */
	unlink(path);
	memcpy(index_path, path, strlen(path) + 1);
	snprintf(val, sizeof(val), "%u.%llu:%s", (unsigned)getpid(), my_start, path);
	/* Children that are not profiled need no word from us. */
	if (c->follow_children && setenv("WALLPROF_TREE", val, 1) == 0)
		exported = 1;
}

/* async-signal-safe */
WP_AS_SAFE int wp_tree_is_root(void)
{
	return is_root;
}

/* async-signal-safe */
WP_AS_SAFE void wp_tree_forked(void)
{
	is_root = 0;
}

/* async-signal-safe */
WP_AS_SAFE int wp_tree_record(const char *kind, const char *path, unsigned long long lost,
                              const char *msg, size_t len, int create)
{
	return wp_event_append(index_path, (unsigned)wp_syscall(SYS_getpid), kind, path, lost, msg,
			      len, create || !is_root);
}

/* async-signal-safe */
WP_AS_SAFE const char *wp_tree_index(void)
{
	return index_path[0] ? index_path : NULL;
}

/* The index's bytes (at most INDEX_READ_MAX), NUL-terminated; NULL if absent. */
static char *read_index(size_t *len)
{
	int fd = open(index_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	size_t cap = 1 << 16, n = 0;
	char *buf = NULL;

	if (fd < 0)
		return NULL;
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap) {
			char *nb;

			if (cap >= INDEX_READ_MAX)
				break;
			cap *= 2;
			nb = realloc(buf, cap);
			if (!nb)
				break;
			buf = nb;
		} else if (!buf && !(buf = malloc(cap))) {
			break;
		}
		r = read(fd, buf + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (buf)
		buf[n] = 0;
	*len = n;
	return buf;
}

/* How many dumps the index still waits on (output/event.h). */
static unsigned long pending(void)
{
	struct wp_event_queue q = { 0 };
	struct wp_event_dump old;
	unsigned long nr;
	size_t len = 0;
	char *buf = read_index(&len), *line, *next;

	for (line = buf; buf && line < buf + len && *line; line = next) {
		char *f[WP_EVENT_FIELDS];

		if (!(next = strchr(line, '\n')))
			break; /* a line being written as we read */
		*next++ = 0;
		if (wp_event_split(line, (size_t)(next - 1 - line), f) == 0 &&
		    wp_event_queue_feed(&q, f, &old) == 1)
			wp_event_dump_free(&old);
	}
	nr = q.nr;
	wp_event_queue_free(&q);
	free(buf);
	return nr;
}

/* Waits until the index waits on no dump, or the deadline, making sure the
 * tree's converter runs meanwhile (a descendant that died before starting
 * it, a converter that crashed); returns how many are still pending. */
static unsigned long wait_conversions(uint64_t deadline_ns)
{
	static struct wp_conv cv;
	unsigned long left;

	/* A converter that lingers for more ends once it is through. */
	wp_tree_record("end", NULL, 0, "", 0, 0);
	while ((left = pending()) && wp_mono_ns() < deadline_ns) {
		struct timespec ms = { 0, 10000000 };

		if (wp_convert_tree(&cv, index_path) < 0)
			break;
		wp_syscall(SYS_nanosleep, &ms, NULL);
	}
	return left;
}

void wp_tree_report(uint64_t deadline_ns)
{
	unsigned me = (unsigned)getpid(), *pids = NULL, nr_pids = 0, cap_pids = 0, i;
	unsigned long wrote = 0, shorts = 0, msgs = 0, shown = 0, left;
	unsigned long long lost = 0;
	size_t len = 0;
	char *buf, *line, *next;

	if (!is_root || !index_path[0])
		return;
	left = wait_conversions(deadline_ns);
	if (!(buf = read_index(&len)))
		return;
	for (line = buf; line < buf + len && *line; line = next) {
		char *f[5], *p = line;
		unsigned long pid;
		int k;

		next = strchr(line, '\n');
		if (!next)
			break; /* a line being written as we read */
		*next++ = 0;
		for (k = 0; k < 5; k++) {
			f[k] = p;
			if (k < 4 && !(p = strchr(p, '\t')))
				break;
			if (k < 4)
				*p++ = 0;
		}
		if (k < 5)
			continue; /* not ours */
		pid = strtoul(f[0], NULL, 10);
		if (pid == me || pid == 0 || pid > 0x7fffffff)
			continue;
		if (nr_pids == cap_pids) {
			unsigned *np = realloc(pids, (cap_pids ? cap_pids * 2 : 64) * sizeof(*pids));

			if (np) {
				pids = np;
				cap_pids = cap_pids ? cap_pids * 2 : 64;
			}
		}
		if (nr_pids < cap_pids)
			pids[nr_pids++] = (unsigned)pid;
		lost += strtoull(f[3], NULL, 10);
		if (!strcmp(f[1], "wrote")) {
			wrote++;
		} else if (!strcmp(f[1], "short")) {
			shorts++;
		} else if (!strcmp(f[1], "error") || !strcmp(f[1], "info")) {
			msgs++;
			if (!strcmp(f[1], "error") && shown < REPORT_MESSAGES) {
				shown++;
				wp_log(WP_LOG_INFO, "child %lu: %s", pid, f[4]);
			}
		}
	}
	if (nr_pids) {
		unsigned distinct = 0;
		char more[160] = "";
		size_t m = 0;

		qsort(pids, nr_pids, sizeof(*pids), wp_cmp_u32);
		for (i = 0; i < nr_pids; i++)
			distinct += i == 0 || pids[i] != pids[i - 1];
		if (shorts)
			m += (size_t)snprintf(more + m, sizeof(more) - m, ", %lu too short for a profile",
					      shorts);
		if (left && m < sizeof(more))
			m += (size_t)snprintf(more + m, sizeof(more) - m,
					      ", %lu raw dump%s not converted", left,
					      left == 1 ? "" : "s");
		if (lost && m < sizeof(more))
			m += (size_t)snprintf(more + m, sizeof(more) - m, ", %llu sample%s lost", lost,
					      lost == 1 ? "" : "s");
		if (msgs > shown && m < sizeof(more))
			snprintf(more + m, sizeof(more) - m, ", %lu %smessage%s", msgs - shown,
				 shown ? "more " : "", msgs - shown == 1 ? "" : "s");
		wp_log(WP_LOG_INFO, "%u child process%s: %lu file%s written%s; see %s", distinct,
		       distinct == 1 ? "" : "es", wrote, wrote == 1 ? "" : "s", more, index_path);
	}
	free(pids);
	free(buf);
}
