/* Unit tests of the tree index's lines (output/event.h) and the queue of
 * dumps read from it as it grows (output/dump_queue.h): what the root
 * waits on and what the tree's converter works through. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../output/dump_queue.h"
#include "../../output/event.h"
#include "check.h"

static char index_path[256];

static void put(const char *text, size_t len)
{
	int fd = open(index_path, O_WRONLY | O_APPEND | O_CREAT, 0600);

	if (fd < 0 || write(fd, text, len) != (ssize_t)len)
		abort();
	close(fd);
}

#define PUT(s) put(s, sizeof(s) - 1)

static int nr_superseded;
static unsigned superseded_pid;

static void on_superseded(void *arg, const struct wp_dump_entry *e)
{
	(void)arg;
	nr_superseded++;
	superseded_pid = e->pid;
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

static void test_append_dump(void)
{
	struct wp_dump_queue q;

	unlink(index_path);
	REQ(wp_event_append_dump(index_path, 7, "/t/a.raw", "/t/a.json", "/tmp/wallprof.7.json") ==
	    0);
	REQ(wp_event_append_dump(index_path, 8, "t/rel.raw", "/t/b.json", "/tmp/b.json") < 0);
	REQ(wp_event_append_dump(index_path, 8, "/t/b.raw", "/t/b\tc.json", "/tmp/b.json") < 0);
	REQ(wp_event_append(index_path, 7, "wrote", "/t/a.json", 0, "ok", 2, 1) == 0);
	REQ(wp_dump_queue_open(&q, index_path) == 0 && wp_dump_queue_read(&q, NULL, NULL) == 0);
	REQ(q.nr == 1 && q.v[0].pid == 7 && !strcmp(q.v[0].raw, "/t/a.raw"));
	REQ(q.nr == 1 && !strcmp(q.v[0].json, "/t/a.json") &&
	    !strcmp(q.v[0].json_fb, "/tmp/wallprof.7.json"));
	wp_dump_queue_close(&q);
	report("append_dump: absolute printable paths only; read back whole");
}

static void test_queue(void)
{
	struct wp_dump_queue q;
	struct wp_dump_entry e;

	unlink(index_path);
	PUT("");
	REQ(wp_dump_queue_open(&q, index_path) == 0);
	PUT("10\traw\t/t/a.raw\t0\t/t/a.json\t/f/a.json\n"
	    "11\traw\t/t/b.raw\t0\t/t/b.json\t/f/b.json\n"
	    "11\twrote\t/t/b.json\t0\twrote it\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0);
	REQ(q.nr == 2 && q.v[0].pid == 10 && !q.end);
	/* a line still being written is not taken */
	PUT("12\tend\t\t0");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0 && !q.end);
	PUT("\t\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0 && q.end);
	/* a "done" of another process does not take a's */
	PUT("99\tdone\t/t/a.raw\t0\t\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0 && q.nr == 2);
	PUT("10\ttaking\t/t/a.raw\t0\t\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0 && q.v[0].taken && !q.v[1].taken);
	PUT("10\tdone\t/t/a.raw\t0\t\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0 && q.nr == 1 && q.v[0].pid == 11);
	report("queue: raw adds, taking marks, done of the same process removes, end seen, "
	       "partial lines wait");

	/* the same path again for another process: the older one is handed back */
	PUT("13\traw\t/t/b.raw\t0\t/t/b2.json\t/f/b2.json\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0);
	REQ(nr_superseded == 1 && superseded_pid == 11 && q.nr == 1 && q.v[0].pid == 13);
	/* the superseded one's "done" leaves the newer one pending */
	PUT("11\tdone\t/t/b.raw\t0\t\n14\traw\t/t/c.raw\t0\t/t/c.json\t/f/c.json\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0 && q.nr == 2);
	wp_dump_queue_take(&q, 0, &e);
	REQ(e.pid == 13 && q.nr == 1 && q.v[0].pid == 14);
	e.tries++;
	wp_dump_queue_put_back(&q, &e);
	REQ(q.nr == 2 && q.v[1].pid == 13 && q.v[1].tries == 1 && e.raw == NULL);
	report("queue: a later raw line for a pending path supersedes it; take and put_back "
	       "keep the order");

	/* not dumps: no path, no pid, no fallback field, a NUL byte, a line
	 * over 64 KiB */
	PUT("15\traw\t\t0\t/t/x.json\t/f/x.json\n0\traw\t/t/y.raw\t0\t/t/y.json\t/f/y.json\n"
	    "16\traw\t/t/z.raw\t0\t/t/z.json\ngarbage\n");
	put("17\traw\t/t/n\0ul.raw\t0\t/t/n.json\t/f/n.json\n", 38);
	{
		size_t n = 70000;
		char *big = malloc(n);

		memset(big, 'x', n);
		memcpy(big, "18\traw\t/t/", 10);
		big[n - 1] = '\n';
		put(big, n);
		free(big);
	}
	PUT("19\traw\t/t/w.raw\t0\t/t/w.json\t/f/w.json\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0);
	REQ(q.nr == 3 && q.v[2].pid == 19);
	report("queue: lines that are not a dump's are skipped, long ones too");

	/* truncated under the reader: read again from the start */
	REQ(truncate(index_path, 0) == 0);
	PUT("20\traw\t/t/v.raw\t0\t/t/v.json\t/f/v.json\n");
	REQ(wp_dump_queue_read(&q, on_superseded, NULL) == 0 && q.nr == 1 && q.v[0].pid == 20);
	report("queue: a truncated index is read again from its start");
	wp_dump_queue_close(&q);
	REQ(q.nr == 0 && q.v == NULL && q.fd == -1);

	/* not a regular file */
	REQ(wp_dump_queue_open(&q, "/dev/null") < 0);
	report("queue: frees and closes; a device is no index");
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(index_path, sizeof(index_path), "%s/wp-test-index.%d", tmp ? tmp : "/tmp",
		 (int)getpid());
	test_split();
	test_append_dump();
	test_queue();
	unlink(index_path);
	printf("dump_queue: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
