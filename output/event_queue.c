/* event_queue: the dumps a tree's index still waits on (see event.h). */
#include <stdlib.h>
#include <string.h>

#include "event.h"

void wp_event_dump_free(struct wp_event_dump *d)
{
	free(d->raw);
	free(d->json);
	memset(d, 0, sizeof(*d));
}

void wp_event_queue_take(struct wp_event_queue *q, size_t i, struct wp_event_dump *out)
{
	*out = q->v[i];
	memmove(q->v + i, q->v + i + 1, (q->nr - i - 1) * sizeof(*q->v));
	q->nr--;
}

/* The entry for `raw` (of process `pid`, unless 0), or -1. */
static long find(const struct wp_event_queue *q, const char *raw, unsigned pid)
{
	size_t i;

	for (i = 0; i < q->nr; i++)
		if (!strcmp(q->v[i].raw, raw) && (!pid || q->v[i].pid == pid))
			return (long)i;
	return -1;
}

int wp_event_queue_feed(struct wp_event_queue *q, char *const f[WP_EVENT_FIELDS],
			struct wp_event_dump *superseded)
{
	struct wp_event_dump d;
	unsigned pid = (unsigned)strtoul(f[0], NULL, 10);
	long at;
	int rc = 0;

	if (!f[2][0] || !pid)
		return 0;
	if (!strcmp(f[1], "done")) {
		/* of that process: a superseded dump's "done" is not the
		 * newer one's */
		if ((at = find(q, f[2], pid)) >= 0) {
			wp_event_queue_take(q, (size_t)at, &d);
			wp_event_dump_free(&d);
		}
		return 0;
	}
	if (strcmp(f[1], "raw"))
		return 0;
	at = find(q, f[2], 0);
	if (q->nr == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 16;
		struct wp_event_dump *v = realloc(q->v, cap * sizeof(*v));

		if (!v)
			return -1;
		q->v = v;
		q->cap = cap;
	}
	d.pid = pid;
	d.raw = strdup(f[2]);
	d.json = strdup(f[4]);
	if (!d.raw || !d.json) {
		wp_event_dump_free(&d);
		return -1;
	}
	if (at >= 0) {
		wp_event_queue_take(q, (size_t)at, superseded);
		rc = 1;
	}
	q->v[q->nr++] = d;
	return rc;
}

void wp_event_queue_free(struct wp_event_queue *q)
{
	size_t i;

	for (i = 0; i < q->nr; i++)
		wp_event_dump_free(&q->v[i]);
	free(q->v);
	memset(q, 0, sizeof(*q));
}
