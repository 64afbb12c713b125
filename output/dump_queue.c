/* dump_queue: the dumps an index still waits on (see dump_queue.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dump_queue.h"
#include "event.h"

#define LINE_MAX_BYTES (64u << 10)

void wp_dump_entry_free(struct wp_dump_entry *e)
{
	free(e->raw);
	free(e->json);
	free(e->json_fb);
	memset(e, 0, sizeof(*e));
}

void wp_dump_queue_take(struct wp_dump_queue *q, size_t i, struct wp_dump_entry *out)
{
	*out = q->v[i];
	memmove(q->v + i, q->v + i + 1, (q->nr - i - 1) * sizeof(*q->v));
	q->nr--;
}

void wp_dump_queue_put_back(struct wp_dump_queue *q, struct wp_dump_entry *e)
{
	q->v[q->nr++] = *e;
	memset(e, 0, sizeof(*e));
}

static void clear(struct wp_dump_queue *q)
{
	size_t i;

	for (i = 0; i < q->nr; i++)
		wp_dump_entry_free(&q->v[i]);
	q->nr = 0;
	q->end = 0;
	q->end_deadline_ms = 0;
	q->end_pid = 0;
}

int wp_dump_queue_open(struct wp_dump_queue *q, const char *index_path)
{
	struct stat st;

	memset(q, 0, sizeof(*q));
	q->fd = open(index_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (q->fd < 0)
		return -1;
	if (fstat(q->fd, &st) < 0 || !S_ISREG(st.st_mode) || !(q->buf = malloc(LINE_MAX_BYTES))) {
		close(q->fd);
		q->fd = -1;
		errno = errno ? errno : EINVAL;
		return -1;
	}
	return 0;
}

void wp_dump_queue_close(struct wp_dump_queue *q)
{
	clear(q);
	free(q->v);
	free(q->buf);
	if (q->fd >= 0)
		close(q->fd);
	memset(q, 0, sizeof(*q));
	q->fd = -1;
}

/* The entry for `raw` (of process `pid`, unless 0), or -1. */
static long find(const struct wp_dump_queue *q, const char *raw, unsigned pid)
{
	size_t i;

	for (i = q->nr; i-- > 0;)
		if ((!pid || q->v[i].pid == pid) && !strcmp(q->v[i].raw, raw))
			return (long)i;
	return -1;
}

/* One split line. Returns 0, or -1 on out of memory. */
static int feed(struct wp_dump_queue *q, char *const f[WP_EVENT_FIELDS],
		void (*superseded)(void *, const struct wp_dump_entry *), void *arg)
{
	struct wp_dump_entry e = { 0 };
	unsigned pid = (unsigned)strtoul(f[0], NULL, 10);
	char *fb;
	long at;

	if (!strcmp(f[1], "end")) {
		char *e;
		unsigned long long ms = strtoull(f[4], &e, 10);

		q->end = 1;
		/* its message: when the root's uploads must be done */
		if (e != f[4] && !*e)
			q->end_deadline_ms = ms;
		q->end_pid = pid;
		return 0;
	}
	if (!f[2][0] || !pid)
		return 0;
	if (!strcmp(f[1], "done") || !strcmp(f[1], "taking")) {
		if ((at = find(q, f[2], pid)) >= 0) {
			if (f[1][0] == 't') {
				q->v[at].taken = 1;
			} else {
				wp_dump_queue_take(q, (size_t)at, &e);
				wp_dump_entry_free(&e);
			}
		}
		return 0;
	}
	if (strcmp(f[1], "raw") || !(fb = strchr(f[4], '\t')))
		return 0; /* not a dump's line (an older format's too) */
	*fb++ = 0;
	if (q->nr == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 16;
		struct wp_dump_entry *v = realloc(q->v, cap * sizeof(*v));

		if (!v)
			return -1;
		q->v = v;
		q->cap = cap;
	}
	e.pid = pid;
	e.raw = strdup(f[2]);
	e.json = strdup(f[4]);
	e.json_fb = strdup(fb);
	if (!e.raw || !e.json || !e.json_fb) {
		wp_dump_entry_free(&e);
		return -1;
	}
	if ((at = find(q, f[2], 0)) >= 0) {
		struct wp_dump_entry old;

		wp_dump_queue_take(q, (size_t)at, &old);
		if (superseded)
			superseded(arg, &old);
		wp_dump_entry_free(&old);
	}
	q->v[q->nr++] = e;
	return 0;
}

int wp_dump_queue_read(struct wp_dump_queue *q,
		       void (*superseded)(void *arg, const struct wp_dump_entry *e), void *arg)
{
	struct stat st;

	if (q->fd < 0 || fstat(q->fd, &st) < 0)
		return -1;
	if (st.st_size < q->off) {
		/* truncated under us: what we had is not what is there */
		clear(q);
		q->off = 0;
		q->len = 0;
		q->skipping = 0;
	}
	for (;;) {
		ssize_t n = pread(q->fd, q->buf + q->len, LINE_MAX_BYTES - q->len, q->off);
		char *line = q->buf, *end, *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		q->off += n;
		q->len += (size_t)n;
		end = q->buf + q->len;
		while ((nl = memchr(line, '\n', (size_t)(end - line)))) {
			char *f[WP_EVENT_FIELDS];
			size_t len = (size_t)(nl - line);

			if (q->skipping)
				q->skipping = 0;
			else if (!memchr(line, 0, len) && wp_event_split(line, len, f) == 0 &&
				 feed(q, f, superseded, arg) < 0)
				return -1;
			line = nl + 1;
		}
		q->len = (size_t)(end - line);
		memmove(q->buf, line, q->len);
		if (q->len == LINE_MAX_BYTES) {
			q->skipping = 1;
			q->len = 0;
		}
	}
}
