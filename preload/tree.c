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

#include "../output/dump_queue.h"
#include "../output/event.h"
#include "../output/output.h"
#include "../output/profile.h"
#include "../output/strput.h"
#include "convert.h"
#include "../output/sys.h"
#include "runtime.h"
#include "tree.h"

#define INDEX_READ_MAX (64u << 20) /* the report reads at most this much */
#define REPORT_MESSAGES 5          /* child messages printed by the report */
#define ROOT_STARTS 3              /* tree converters the root starts at its exit */

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
	my_start = 0;
	if (s && *s >= '1' && *s <= '9') {
		errno = 0;
		pid = strtoul(s, &end, 10);
		if (*end == '.')
			start = strtoull(end + 1, &end, 10);
		if (!errno && pid <= 0x7fffffffu && *end == ':' && end[1] == '/' &&
		    strlen(end + 1) < sizeof(index_path)) {
			memcpy(index_path, end + 1, strlen(end + 1) + 1);
			/* Our start time only when the pid is ours: a descendant,
			 * nearly every process of a tree, reads no /proc file. */
			if (pid == (unsigned long)getpid() && start == (my_start = start_time())) {
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
	my_start = start_time();
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
	int fd = open(index_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	size_t cap = 1 << 16, n = 0;
	char *buf = NULL;
	struct stat st;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return NULL;
	}
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

/* Waits until the index waits on no dump (output/dump_queue.h), or the
 * deadline, making sure the tree's converter runs meanwhile: started again
 * (up to ROOT_STARTS times) when none holds the index and dumps are
 * pending (a descendant that died before starting one, a converter that
 * crashed or ran out of time: the next one skips the dump it died on).
 * Returns how many dumps are still pending; *busy says whether a converter
 * is still at work on them. */
static int end_written;

void wp_tree_exiting(uint64_t upload_deadline_ms)
{
	char msg[24];
	size_t n;

	if (!is_root || !index_path[0] || end_written)
		return;
	n = wp_put_uint(msg, 0, sizeof(msg), upload_deadline_ms);
	/* A converter that lingers for more ends once it is through. */
	end_written = wp_tree_record("end", NULL, 0, msg, n, 0) == 0;
}

static unsigned long wait_conversions(uint64_t deadline_ns, int *busy)
{
	static struct wp_conv cv = WP_CONV_NONE;
	struct wp_dump_queue q;
	unsigned long left = 0;
	int starts = 0, rc;

	*busy = 0;
	if (!end_written)
		wp_tree_record("end", NULL, 0, "", 0, 0);
	if (wp_dump_queue_open(&q, index_path) < 0)
		return 0;
	while (wp_dump_queue_read(&q, NULL, NULL) == 0 && (left = q.nr)) {
		struct timespec ms = { 0, 10000000 };

		if (wp_mono_ns() >= deadline_ns)
			break;
		rc = wp_convert_ensure_tree(&cv, index_path);
		*busy = rc == 0;
		if (rc < 0 || (rc == 1 && ++starts > ROOT_STARTS))
			break; /* none can run, or each one dies at once */
		wp_syscall(SYS_nanosleep, &ms, NULL);
	}
	wp_dump_queue_close(&q);
	return left;
}

void wp_tree_report(uint64_t deadline_ns)
{
	unsigned me = (unsigned)getpid(), *pids = NULL, nr_pids = 0, cap_pids = 0, i;
	unsigned long wrote = 0, shorts = 0, msgs = 0, shown = 0, left;
	unsigned long long lost = 0;
	size_t len = 0;
	char *buf, *line, *next, *upload = NULL;
	int busy;

	if (!is_root || !index_path[0])
		return;
	left = wait_conversions(deadline_ns, &busy);
	if (!(buf = read_index(&len)))
		return;
	for (line = buf; line < buf + len; line = next) {
		char *f[WP_EVENT_FIELDS];
		unsigned long pid;

		if (!(next = memchr(line, '\n', (size_t)(buf + len - line))))
			break; /* a line being written as we read */
		*next++ = 0;
		/* lines not ours: too few fields, or a NUL byte in them */
		if (memchr(line, 0, (size_t)(next - 1 - line)) ||
		    wp_event_split(line, (size_t)(next - 1 - line), f) < 0)
			continue;
		pid = strtoul(f[0], NULL, 10);
		if (pid == me) {
			/* our own chunks' converter: its errors, and where the
			 * uploads stand after the last one */
			if (!strcmp(f[1], "error") && shown < REPORT_MESSAGES) {
				shown++;
				wp_log(WP_LOG_INFO, "%s", f[4]);
			} else if (!strcmp(f[1], "info") && !strncmp(f[4], "upload: ", 8)) {
				upload = f[4];
			}
			continue;
		}
		if (pid == 0 || pid > 0x7fffffff)
			continue;
		if (nr_pids == cap_pids) {
			unsigned *np =
				realloc(pids, (cap_pids ? cap_pids * 2 : 64) * sizeof(*pids));

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
			m += (size_t)snprintf(more + m, sizeof(more) - m,
					      ", %lu too short for a profile", shorts);
		if (left && m < sizeof(more))
			m += (size_t)snprintf(
				more + m, sizeof(more) - m,
				busy ? ", %lu raw dump%s still converting in the background"
				     : ", %lu raw dump%s not converted",
				left, left == 1 ? "" : "s");
		if (lost && m < sizeof(more))
			m += (size_t)snprintf(more + m, sizeof(more) - m, ", %llu sample%s lost",
					      lost, lost == 1 ? "" : "s");
		if (msgs > shown && m < sizeof(more))
			snprintf(more + m, sizeof(more) - m, ", %lu %smessage%s", msgs - shown,
				 shown ? "more " : "", msgs - shown == 1 ? "" : "s");
		wp_log(WP_LOG_INFO, "%u child process%s: %lu file%s written%s; see %s", distinct,
		       distinct == 1 ? "" : "es", wrote, wrote == 1 ? "" : "s", more, index_path);
	} else if (left) {
		/* only our own chunks are left */
		wp_log(WP_LOG_INFO, "%lu chunk%s %s; see %s", left, left == 1 ? "" : "s",
		       busy ? "still converting in the background" : "not converted", index_path);
	}
	if (upload && !strstr(upload, ", 0 left") && !wp_convert_said_upload())
		wp_log(WP_LOG_INFO, "%s", upload);
	free(pids);
	free(buf);
}
