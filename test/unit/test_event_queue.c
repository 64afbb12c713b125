/* Unit tests of the tree index's line splitter and the queue of dumps it
 * names (output/event.h): what the root waits on and what the tree's
 * converter works through. */
#include <stdlib.h>
#include <string.h>

#include "../../output/event.h"
#include "check.h"

/* Feeds one line (copied: split writes into it); returns feed's result. */
static int feed(struct wp_event_queue *q, const char *text, struct wp_event_dump *old)
{
	char line[512], *f[WP_EVENT_FIELDS];

	snprintf(line, sizeof(line), "%s", text);
	if (wp_event_split(line, strlen(line), f) < 0)
		return -2;
	return wp_event_queue_feed(q, f, old);
}

static void test_split(void)
{
	char line[] = "42\twrote\t/tmp/a b.json\t3\tmessage\twith a tab";
	char short_line[] = "42\twrote\t/tmp/x";
	char *f[WP_EVENT_FIELDS];

	REQ(wp_event_split(line, strlen(line), f) == 0);
	REQ(!strcmp(f[0], "42") && !strcmp(f[1], "wrote") && !strcmp(f[2], "/tmp/a b.json"));
	REQ(!strcmp(f[3], "3") && !strcmp(f[4], "message\twith a tab"));
	REQ(wp_event_split(short_line, strlen(short_line), f) < 0);
	report("split: five fields, the message keeps its tabs; fewer fields refused");
}

static void test_queue(void)
{
	struct wp_event_queue q = { 0 };
	struct wp_event_dump old = { 0 }, d;

	REQ(feed(&q, "10\traw\t/t/a.raw\t0\t/t/a.json", &old) == 0);
	REQ(feed(&q, "11\traw\t/t/b.raw\t0\t/t/b.json", &old) == 0);
	REQ(feed(&q, "11\twrote\t/t/b.json\t0\twrote it", &old) == 0);
	REQ(feed(&q, "12\tend\t\t0\t", &old) == 0);
	REQ(q.nr == 2 && q.v[0].pid == 10 && !strcmp(q.v[0].json, "/t/a.json"));
	/* a "done" of another process does not take a's */
	REQ(feed(&q, "99\tdone\t/t/a.raw\t0\t", &old) == 0 && q.nr == 2);
	REQ(feed(&q, "10\tdone\t/t/a.raw\t0\t", &old) == 0);
	REQ(q.nr == 1 && q.v[0].pid == 11);
	report("queue: raw adds, done of the same process removes, other kinds ignored");

	/* b's name taken over by process 13 before b was converted */
	REQ(feed(&q, "13\traw\t/t/b.raw\t0\t/t/b2.json", &old) == 1);
	REQ(old.pid == 11 && !strcmp(old.raw, "/t/b.raw"));
	wp_event_dump_free(&old);
	REQ(q.nr == 1 && q.v[0].pid == 13);
	/* the superseded one's "done" leaves the newer one pending */
	REQ(feed(&q, "11\tdone\t/t/b.raw\t0\toverwritten", &old) == 0 && q.nr == 1);
	REQ(feed(&q, "14\traw\t/t/c.raw\t0\t/t/c.json", &old) == 0);
	wp_event_queue_take(&q, 0, &d);
	REQ(d.pid == 13 && q.nr == 1 && q.v[0].pid == 14);
	wp_event_dump_free(&d);
	report("queue: a later raw line for a pending path supersedes it; take keeps the order");

	/* lines without a path or pid are not dumps */
	REQ(feed(&q, "15\traw\t\t0\t/t/x.json", &old) == 0 && q.nr == 1);
	REQ(feed(&q, "0\traw\t/t/y.raw\t0\t/t/y.json", &old) == 0 && q.nr == 1);
	REQ(feed(&q, "garbage", &old) == -2);
	for (int i = 0; i < 100; i++) {
		char line[64];

		snprintf(line, sizeof(line), "%d\traw\t/t/%d.raw\t0\t/t/%d.json", 100 + i, i, i);
		REQ(feed(&q, line, &old) == 0);
	}
	REQ(q.nr == 101);
	wp_event_queue_free(&q);
	REQ(q.nr == 0 && q.v == NULL);
	report("queue: no path or pid, no dump; grows; frees");
}

int main(void)
{
	test_split();
	test_queue();
	printf("event_queue: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
