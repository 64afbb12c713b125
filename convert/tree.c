/* tree: the converter of a profiled tree's descendants (see convert.h).
 *
 * Descendants do not wait for their conversion: each appends a "raw" line
 * to the tree's index (output/dump_queue.h) and, when no converter holds
 * the index's lock, starts this one with the lock. It converts the pending
 * dumps in order, keeping every module's symbolizer session from one dump
 * to the next (a build's hundred compilers share libc's debug info, whose
 * decompression is most of a conversion's cost), and waits for more with
 * inotify. It ends when the root has appended "end" and nothing is
 * pending, or after LINGER_MS with nothing new; before ending it lets go
 * of the lock and looks once more, so that a dump whose process found the
 * lock held just before is never left behind: either we see its line, or
 * that process found the lock free and started a converter itself.
 *
 * Each dump is announced ("taking") before it is converted and finished
 * ("done") before it is deleted. A dump a converter took but never
 * finished (it crashed on it, or ran past its time: SIGALRM ends it) is
 * not taken again: the next converter says so and goes on with the rest. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../output/dump_queue.h"
#include "../output/event.h"
#include "../symbolize/symbolize.h"
#include "convert.h"

#define LINGER_MS 3000     /* idle time before we end (no "end" seen) */
#define LOCKED_TRIES 1000  /* a dump still locked by its writer: 10 ms apart */
/* The symbolizer sessions kept from dump to dump: libc's inflated debug
 * info is about 10 MiB, a compiler's symbol table a few; each holds one or
 * two descriptors, so their number is bounded by RLIMIT_NOFILE too. */
#define POOL_SESSIONS 64
#define POOL_BYTES (256u << 20)
#define FDS_SPARE 32       /* descriptors kept free for a dump and its output */

struct tree {
	const char *index;
	const char *platform;
	const char *formats;
	unsigned timeout_s;
	struct wp_sym_pool *pool;
	long long linger_ms; /* idle time before we end */
};

/* Appends one of our bookkeeping lines ("taking", "done") for `e`. */
static void mark(const struct tree *t, const struct wp_dump_entry *e, const char *kind)
{
	wp_event_append(t->index, e->pid, kind, e->raw, 0, "", 0, 1);
}

/* A dump another "raw" line for the same path replaced: a damaged or forged
 * index (a dump is never written over another). */
static void superseded(void *arg, const struct wp_dump_entry *e)
{
	const struct tree *t = arg;

	wp_cv_report_to(t->index, e->pid);
	wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
		    "profile not written: the index names %s again for another process", e->raw);
	mark(t, e, "done");
}

/* The dump open and locked (its writer done with it): the descriptor, -1
 * with one line saying why not, or -2 while another process holds it. */
static int open_dump(const struct wp_dump_entry *e)
{
	struct stat st;
	int fd = open(e->raw, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: the raw dump %s is gone (%s)", e->raw,
			    strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: %s is not a raw dump (not a regular file)",
			    e->raw);
		close(fd);
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		if (errno == EWOULDBLOCK && e->tries < LOCKED_TRIES)
			return -2;
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: the raw dump %s stayed locked by another "
			    "process; it stays there",
			    e->raw);
		return -1;
	}
	return fd;
}

/* Whether the profile's name is one we may write: absolute, not the index
 * (any descendant can write the index; what it names is written over). */
static int fit_output(const struct tree *t, const char *path)
{
	return path[0] == '/' && strcmp(path, t->index) != 0;
}

/* Converts `e`; returns -2 when its dump is still locked (try it later). */
static int convert_one(const struct tree *t, const struct wp_dump_entry *e)
{
	char source[32];
	struct wp_cv_job j = { 0 };
	int fd, rc = 1;

	wp_cv_report_to(t->index, e->pid);
	if (!fit_output(t, e->json) || !fit_output(t, e->json_fb)) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: the index names no usable profile for %s; the "
			    "raw dump stays",
			    e->raw);
		mark(t, e, "done");
		return 0;
	}
	if ((fd = open_dump(e)) == -2)
		return -2;
	if (fd >= 0) {
		mark(t, e, "taking");
		snprintf(source, sizeof(source), "/dev/fd/%d", fd);
		j.raw = e->raw;
		j.source = source;
		j.fd = fd;
		j.out = e->json;
		j.fallback = strcmp(e->json_fb, e->json) ? e->json_fb : NULL;
		j.platform = t->platform;
		j.formats = t->formats;
		j.keep_dump = 1;
		alarm(t->timeout_s);
		rc = wp_cv_library(&j, t->pool);
		alarm(0);
	}
	/* "done" first: a dump deleted but not done would be waited for. */
	mark(t, e, "done");
	if (rc == 0 && wp_cv_same_file(e->raw, fd))
		unlink(e->raw);
	if (fd >= 0)
		close(fd);
	return 0;
}

/* A dump an earlier converter took and never finished. */
static void abandoned(const struct tree *t, const struct wp_dump_entry *e)
{
	wp_cv_report_to(t->index, e->pid);
	wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
		    "profile not written: the converter ended while converting it (a crash, or "
		    "longer than WALLPROF_CONVERT_TIMEOUT=%u s); the raw dump stays at %s "
		    "(convert it with wallprof convert)",
		    t->timeout_s, e->raw);
	mark(t, e, "done");
}

/* The index is ours: owned by our user, writable by no other (what it
 * names, we write; the library creates it 0644). */
static int index_trusted(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	       !(st.st_mode & S_IWOTH);
}

/* As many sessions as the descriptors allow, after raising the soft limit
 * to the hard one. */
static size_t pool_sessions(void)
{
	struct rlimit rl;
	size_t n = POOL_SESSIONS;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
			getrlimit(RLIMIT_NOFILE, &rl);
		}
		if (rl.rlim_cur != RLIM_INFINITY)
			n = rl.rlim_cur > 2 * FDS_SPARE ? (rl.rlim_cur - FDS_SPARE) / 2 : 0;
	}
	return n < POOL_SESSIONS ? n : POOL_SESSIONS;
}

static long long now_ms(void)
{
	return (long long)wp_cv_mono_ms();
}

int wp_cv_tree(const char *index, int lock_fd, const char *platform, const char *formats,
	       unsigned timeout_s, unsigned linger_s)
{
	struct tree t = { index,   platform,
			  formats, timeout_s ? timeout_s : 60,
			  NULL,    linger_s ? linger_s * 1000ll : LINGER_MS };
	struct wp_dump_queue q;
	long long idle_since = now_ms();
	size_t tried = 0; /* locked dumps put back since the last conversion */
	int ino, rc = 0;

	if (!index_trusted(lock_fd))
		return 1; /* nobody to tell but the index, which is not ours */
	if (wp_dump_queue_open(&q, index) < 0)
		return 1;
	t.pool = wp_sym_pool_new(pool_sessions(), POOL_BYTES);
	ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (ino >= 0 && inotify_add_watch(ino, index, IN_MODIFY) < 0) {
		close(ino);
		ino = -1;
	}
	/* Dumps taken by a converter before us and never done: it died on
	 * them; not again. */
	if (wp_dump_queue_read(&q, superseded, &t) < 0) {
		rc = 1;
		goto out;
	}
	for (size_t i = 0; i < q.nr;) {
		struct wp_dump_entry e;

		if (!q.v[i].taken) {
			i++;
			continue;
		}
		wp_dump_queue_take(&q, i, &e);
		abandoned(&t, &e);
		wp_dump_entry_free(&e);
	}
	for (;;) {
		struct pollfd pf = { ino, POLLIN, 0 };
		long long left;

		if (wp_dump_queue_read(&q, superseded, &t) < 0) {
			rc = 1;
			break;
		}
		/* While the root's exit waits for us, uploads end by its
		 * deadline; once it is gone (descendants that outlive it),
		 * each flush has its own timeout again. */
		wp_cv_send_cap(q.end_deadline_ms && q.end_pid &&
					       (kill((pid_t)q.end_pid, 0) == 0 || errno == EPERM)
				       ? (double)q.end_deadline_ms
				       : 0);
		if (q.nr && tried < q.nr) {
			struct wp_dump_entry e;

			wp_dump_queue_take(&q, 0, &e);
			if (convert_one(&t, &e) == -2) {
				/* still locked: after the others */
				e.tries++;
				wp_dump_queue_put_back(&q, &e);
				tried++;
				continue;
			}
			wp_dump_entry_free(&e);
			tried = 0;
			idle_since = now_ms();
			continue;
		}
		if (q.nr) {
			/* every one left is locked: a moment for their writers */
			struct timespec ts = { 0, 10000000 };

			nanosleep(&ts, NULL);
			tried = 0;
			continue;
		}
		left = t.linger_ms - (now_ms() - idle_since);
		if (q.end || left <= 0) {
			/* Let go, then look once more (see the top). */
			flock(lock_fd, LOCK_UN);
			if (wp_dump_queue_read(&q, superseded, &t) < 0 || !q.nr ||
			    flock(lock_fd, LOCK_EX | LOCK_NB) < 0)
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
out:
	wp_dump_queue_close(&q);
	if (t.pool)
		wp_sym_pool_free(t.pool);
	if (ino >= 0)
		close(ino);
	return rc;
}
