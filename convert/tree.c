/* tree: the converter of a profiled tree's descendants (see convert.h).
 *
 * Descendants do not wait for their conversion: each appends a "raw" line
 * to the tree's index (output/event.h) and, when no converter holds the
 * index's lock, starts this one with the lock. It converts the pending
 * dumps in order, keeping every module's symbolizer session from one dump
 * to the next (a build's hundred compilers share libc's debug info, whose
 * decompression is most of a conversion's cost), and waits for more with
 * inotify. It ends when the root has appended "end" and nothing is
 * pending, or after LINGER_MS with nothing new; before ending it lets go
 * of the lock and looks once more, so that a dump whose process found the
 * lock held just before is never left behind: either we see its line, or
 * that process found the lock free and started a converter itself. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../output/event.h"
#include "../symbolize/symbolize.h"
#include "convert.h"

#define LINGER_MS 3000            /* idle time before we end (no "end" seen) */
/* The symbolizer sessions kept from dump to dump: libc's inflated debug
 * info is about 10 MiB, a compiler's symbol table a few. */
#define POOL_SESSIONS 64
#define POOL_BYTES (256u << 20)
#define LOCK_TRIES 200            /* a dump still being written: 10 ms apart */
#define LINE_MAX_BYTES (64 << 10) /* longer lines are not ours: skipped */

struct reader {
	int fd;
	off_t off;    /* bytes of the index taken so far */
	size_t len;   /* bytes of a partial line in buf */
	int skipping; /* inside a line longer than buf */
	int end;      /* the root has said "end" */
	char buf[LINE_MAX_BYTES];
};

/* A dump another dump under the same name replaced before we came to it. */
static void superseded(const char *index, struct wp_event_dump *d)
{
	wp_cv_report_to(index, d->pid);
	wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
		    "profile not written: another process wrote its raw dump over %s before it "
		    "was converted (WALLPROF_OUTPUT without %%p?)",
		    d->raw);
	wp_event_append(index, d->pid, "done", d->raw, 0, "overwritten", 11, 1);
	wp_event_dump_free(d);
}

/* Takes the complete lines appended since the last call into `q`.
 * Returns -1 when the index cannot be read, else 0. */
static int read_new(struct reader *r, const char *index, struct wp_event_queue *q)
{
	for (;;) {
		ssize_t n = pread(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, r->off);
		char *line = r->buf, *nl, *end;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		r->off += n;
		r->len += (size_t)n;
		end = r->buf + r->len;
		while ((nl = memchr(line, '\n', (size_t)(end - line)))) {
			char *f[WP_EVENT_FIELDS];
			struct wp_event_dump old;

			if (r->skipping) {
				r->skipping = 0;
			} else if (wp_event_split(line, (size_t)(nl - line), f) == 0) {
				if (!strcmp(f[1], "end"))
					r->end = 1;
				else if (wp_event_queue_feed(q, f, &old) == 1)
					superseded(index, &old);
			}
			line = nl + 1;
		}
		r->len = (size_t)(end - line);
		memmove(r->buf, line, r->len);
		if (r->len == sizeof(r->buf)) {
			r->skipping = 1;
			r->len = 0;
		}
	}
}

/* The dump open and locked (its writer done with it), or -1 with one line
 * saying why not. */
static int open_dump(const struct wp_event_dump *d)
{
	struct stat st;
	int fd = open(d->raw, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK), i;

	if (fd < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: the raw dump %s is gone (%s)", d->raw,
			    strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: %s is not a raw dump (not a regular file)", d->raw);
		close(fd);
		return -1;
	}
	for (i = 0; flock(fd, LOCK_EX | LOCK_NB) < 0; i++) {
		struct timespec ts = { 0, 10000000 };

		if (errno != EWOULDBLOCK || i == LOCK_TRIES) {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "profile not written: the raw dump %s stayed locked by another "
				    "process; it stays there",
				    d->raw);
			close(fd);
			return -1;
		}
		nanosleep(&ts, NULL);
	}
	return fd;
}

static void convert_one(const char *index, const struct wp_event_dump *d, const char *platform,
			struct wp_sym_pool *pool)
{
	char source[32];
	char *fallback = NULL;
	struct wp_cv_job j = { 0 };
	int fd;

	wp_cv_report_to(index, d->pid);
	if (d->json[0] != '/') {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: no absolute profile name for %s; the raw dump "
			    "stays",
			    d->raw);
	} else if ((fd = open_dump(d)) >= 0) {
		/* The library's second choice is beside the dump when the dump
		 * itself took its fallback ($TMPDIR). */
		fallback = wp_cv_json_name(d->raw);
		snprintf(source, sizeof(source), "/dev/fd/%d", fd);
		j.raw = d->raw;
		j.source = source;
		j.fd = fd;
		j.out = d->json;
		j.fallback = fallback && strcmp(fallback, d->json) ? fallback : NULL;
		j.platform = platform;
		wp_cv_library(&j, pool);
		close(fd);
		free(fallback);
	}
	wp_event_append(index, d->pid, "done", d->raw, 0, "", 0, 1);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int wp_cv_tree(const char *index, int lock_fd, const char *platform)
{
	struct reader *r = calloc(1, sizeof(*r));
	struct wp_event_queue q = { 0 };
	struct wp_sym_pool *pool = wp_sym_pool_new(POOL_SESSIONS, POOL_BYTES);
	long long idle_since = now_ms();
	int ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK), rc = 0;

	if (!r)
		return 1;
	r->fd = lock_fd;
	if (ino >= 0 && inotify_add_watch(ino, index, IN_MODIFY) < 0) {
		close(ino);
		ino = -1;
	}
	for (;;) {
		struct pollfd pf = { ino, POLLIN, 0 };
		long long left;

		if (read_new(r, index, &q) < 0) {
			rc = 1;
			break;
		}
		if (q.nr) {
			struct wp_event_dump d;

			wp_event_queue_take(&q, 0, &d);
			convert_one(index, &d, platform, pool);
			wp_event_dump_free(&d);
			idle_since = now_ms();
			continue;
		}
		left = LINGER_MS - (now_ms() - idle_since);
		if (r->end || left <= 0) {
			/* Let go, then look once more (see the top). */
			flock(lock_fd, LOCK_UN);
			if (read_new(r, index, &q) < 0 || !q.nr || flock(lock_fd, LOCK_EX | LOCK_NB) < 0)
				break;
			continue;
		}
		if (ino < 0) {
			struct timespec ts = { 0, 100000000 };

			nanosleep(&ts, NULL);
			continue;
		}
		if (poll(&pf, 1, (int)left) > 0) {
			char ev[4096];

			while (read(ino, ev, sizeof(ev)) > 0)
				;
		}
	}
	wp_event_queue_free(&q);
	if (pool)
		wp_sym_pool_free(pool);
	free(r);
	if (ino >= 0)
		close(ino);
	return rc;
}
