/* test_upload: unit tests of the transport's pure parts and the spool:
 * DSNs (output/dsn.h), the item file read back and its categories
 * (upload/item.c), put, listing order, pruning across runs, the root's
 * checks, modes and the environment (upload/spool.c), flushes against a
 * closed loopback port (kept, busy runs skipped, live runs counted apart),
 * and redaction. Rate limits and the state file: test_upload_state.c. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../output/dsn.h"
#include "../../output/output.h"
#include "../../upload/upload_int.h"
#include "check.h"

static char root[512];

#define RUN_A "4242-0123456789abcdef0123456789abcdef"
#define RUN_B "77-fedcba9876543210fedcba9876543210"

static void test_dsn_good(void)
{
	struct wp_dsn d;
	char err[200];

	REQ(!wp_dsn_parse("https://abc@o1.ingest.sentry.io/42", &d, err, sizeof(err)));
	REQ(!strcmp(d.endpoint, "https://o1.ingest.sentry.io/api/42/envelope/"));
	REQ(!strcmp(d.auth, "X-Sentry-Auth: Sentry sentry_key=abc, sentry_version=7, "
			    "sentry_client=libwallprof/" WP_VERSION));
	REQ(!strcmp(d.project, "42"));

	REQ(!wp_dsn_parse("HTTP://pub:sec@localhost:9000/sentry/prefix/7/", &d, err, sizeof(err)));
	REQ(!strcmp(d.endpoint, "http://localhost:9000/sentry/prefix/api/7/envelope/"));
	REQ(strstr(d.auth, "sentry_key=pub, ") && strstr(d.auth, ", sentry_secret=sec") &&
	    !strstr(d.auth, "sec,"));
	REQ(!strcmp(d.project, "7"));

	REQ(!wp_dsn_parse("http://k@[::1]:9000/3", &d, err, sizeof(err)));
	REQ(!strcmp(d.endpoint, "http://[::1]:9000/api/3/envelope/"));
	REQ(!wp_dsn_parse("http://k@[fe80::1]/3", &d, err, sizeof(err)));
	REQ(!strcmp(d.endpoint, "http://[fe80::1]/api/3/envelope/"));
	REQ(!wp_dsn_parse("http://k@127.0.0.1:1/3", &d, err, sizeof(err)));
	/* an empty secret is no secret */
	REQ(!wp_dsn_parse("http://k:@h/3", &d, err, sizeof(err)) && !strstr(d.auth, "secret"));
	report("dsn_good");
}

static void test_dsn_bad(void)
{
	static const struct {
		const char *dsn, *why;
	} bad[] = {
		{ "", "empty" },
		{ "ftp://k@h/1", "scheme" },
		{ "https//k@h/1", "scheme" },
		{ "https://h/1", "no public key" },
		{ "https://@h/1", "no public key" },
		{ "https://:s@h/1", "no public key" },
		{ "https://k@/1", "no host" },
		{ "https://k@:80/1", "no host" },
		{ "https://k@h", "no project id" },
		{ "https://k@h/", "no project id" },
		{ "https://k@h:0/1", "port" },
		{ "https://k@h:65536/1", "port" },
		{ "https://k@h:/1", "port" },
		{ "https://k@h:8x/1", "port" },
		{ "https://k@h/1 ", "whitespace" },
		{ "https://k@h/\t1", "whitespace" },
		{ "https://k@h/1\n", "whitespace" },
		{ "https://k@h/1?x=1", "query" },
		{ "https://k,x@h/1", "key" },
		{ "https://k@h@g/1", "more than one" },
		{ "https://k@[::1/1", "]" },
		{ "https://k@[]/1", "no host" },
		{ "https://k@[::1]x/1", "junk" },
		{ "https://k@h//1", "empty segment" },
		{ "https://k@h/a\"b/1", "path" },
	};
	struct wp_dsn d;
	char err[200], long_dsn[1200];

	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		err[0] = '\0';
		REQ(wp_dsn_parse(bad[i].dsn, &d, err, sizeof(err)) == -1);
		REQ(strstr(err, bad[i].why) && !strchr(err, '\n'));
		if (why[0]) {
			printf("    %s -> %s\n", bad[i].dsn, err);
			break;
		}
	}
	memset(long_dsn, 'a', sizeof(long_dsn) - 1);
	long_dsn[sizeof(long_dsn) - 1] = '\0';
	memcpy(long_dsn, "https://k@h/", 12);
	REQ(wp_dsn_parse(long_dsn, &d, err, sizeof(err)) == -1 && strstr(err, "longer"));
	memset(long_dsn, 'k', 300);
	memcpy(long_dsn, "https://", 8);
	strcpy(long_dsn + 300, "@h/1");
	REQ(wp_dsn_parse(long_dsn, &d, err, sizeof(err)) == -1 && strstr(err, "128"));
	report("dsn_bad");
}

static int rootfd(void)
{
	int fd = wp_up_root_open(root, 1, NULL, 0);

	if (fd < 0)
		abort();
	return fd;
}

static void mkitem(struct wp_upload_item *it, const char *what, const char *body)
{
	memset(it, 0, sizeof(*it));
	it->url = "https://o1.example/api/42/envelope/";
	it->category = "profile";
	it->content_type = "application/x-sentry-envelope";
	it->headers[0] = "X-Sentry-Auth: Sentry sentry_key=k, sentry_version=7";
	it->body = body;
	it->len = strlen(body);
	it->what = what;
}

static void test_item_roundtrip(void)
{
	struct wp_upload_item it;
	struct wp_up_parsed p;
	char err[200], *file = NULL;
	size_t len = 0;

	mkitem(&it, "chunk 3 of\nprocess 1", "{\"a\":1}\n");
	REQ(!wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)));
	REQ(!wp_up_item_parse(file, len, &p, err, sizeof(err)));
	REQ(!strcmp(p.url, it.url) && !strcmp(p.category, "profile") &&
	    !strcmp(p.content_type, it.content_type) && !strcmp(p.headers[0], it.headers[0]) &&
	    !p.headers[1] && !p.gzip && !strcmp(p.what, "chunk 3 of?process 1") &&
	    p.len == it.len && !memcmp(p.body, it.body, it.len));
	free(file);

	/* what the encoder refuses: header injection, other schemes */
	it.headers[0] = "X-A: b\r\nX-Evil: 1";
	REQ(wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)) == -1);
	it.headers[0] = "NoColon";
	REQ(wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)) == -1);
	it.headers[0] = NULL;
	it.url = "file:///etc/passwd";
	REQ(wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)) == -1);
	it.url = "http://h/x";
	it.category = "Profile!";
	REQ(wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)) == -1);
	report("item_roundtrip");
}

/* An item counts against several categories (a v1 envelope: its profile
 * and its transaction): written and read back as a ';' list, held back
 * while any of them, or all, is limited. */
static void test_item_categories(void)
{
	static const char *const bad[] = { "profile;",
					   ";profile",
					   "profile;;transaction",
					   "profile; transaction",
					   "a;b;c;d;e;f;g;h;i",
					   "Profile;transaction" };
	struct wp_upload_item it;
	struct wp_up_parsed p;
	struct wp_up_state st;
	char err[200], *file = NULL;
	double now = 1e12;
	size_t len = 0;

	mkitem(&it, "v1", "{}");
	it.category = "profile;transaction";
	REQ(!wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)));
	REQ(strstr(file, "\ncategory: profile;transaction\n"));
	REQ(!wp_up_item_parse(file, len, &p, err, sizeof(err)) &&
	    !strcmp(p.category, "profile;transaction"));
	free(file);
	it.category = "a;b;c;d;e;f;g;h";
	REQ(!wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)));
	free(file);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		it.category = bad[i];
		REQ(wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)) ==
		    -1);
	}
	{
		char text[] = "WALLPROF-SPOOL 1\nurl: http://h/\ncategory: profile;\n"
			      "content-type: a\ngzip: 0\nlength: 0\n\n";

		REQ(wp_up_item_parse(text, strlen(text), &p, err, sizeof(err)) == -1);
	}

	memset(&st, 0, sizeof(st));
	REQ(wp_up_parse_rate_limits("30:transaction:organization", now, &st) == 1);
	REQ(wp_up_limited(&st, "profile;transaction", now) == 30000);
	REQ(wp_up_limited(&st, "transaction;profile", now) == 30000);
	REQ(wp_up_limited(&st, "profile", now) == 0);
	REQ(wp_up_limited(&st, "profile_chunk", now) == 0);
	REQ(wp_up_limited(&st, "error;profile", now) == 0);
	REQ(wp_up_parse_rate_limits("50:profile", now, &st) == 1);
	REQ(wp_up_limited(&st, "profile;transaction", now) == 50000);
	REQ(wp_up_parse_rate_limits("70:", now, &st) == 1);
	REQ(wp_up_limited(&st, "profile;transaction", now) == 70000);
	REQ(wp_up_limited(&st, NULL, now) == 70000);
	report("item_categories");
}

/* Every cut of a good file, and some edits, parse as errors, never crash. */
static void test_item_corrupt(void)
{
	struct wp_upload_item it;
	struct wp_up_parsed p;
	char err[200], *file = NULL, *copy;
	size_t len = 0, bad = 0;

	mkitem(&it, "w", "body-bytes");
	REQ(!wp_up_item_encode(&it, it.body, it.len, 0, &file, &len, err, sizeof(err)));
	copy = malloc(len + 64);
	for (size_t cut = 0; cut < len; cut++) {
		memcpy(copy, file, cut);
		bad += wp_up_item_parse(copy, cut, &p, err, sizeof(err)) == -1;
	}
	REQ(bad == len);
	memcpy(copy, file, len);
	REQ(!wp_up_item_parse(copy, len, &p, err, sizeof(err)));
	/* one byte more than its length */
	memcpy(copy, file, len);
	copy[len] = 'x';
	REQ(wp_up_item_parse(copy, len + 1, &p, err, sizeof(err)) == -1 && strstr(err, "longer"));
	/* a truncated one says so */
	memcpy(copy, file, len);
	REQ(wp_up_item_parse(copy, len - 1, &p, err, sizeof(err)) == -1 &&
	    strstr(err, "truncated"));
	/* every byte of the header block flipped to a control character */
	for (size_t i = 0; i < len - it.len - 1; i++) {
		memcpy(copy, file, len);
		if (copy[i] == '\n')
			continue;
		copy[i] = '\001';
		bad = wp_up_item_parse(copy, len, &p, err, sizeof(err));
		REQ(bad == (size_t)-1);
	}
	/* huge length, leading zero, repeated line */
	{
		static const char *const texts[] = {
			"WALLPROF-SPOOL 1\nurl: http://h/\ncontent-type: a\ngzip: 0\nlength: 99999999999999999999\n\n",
			"WALLPROF-SPOOL 1\nurl: http://h/\ncontent-type: a\ngzip: 0\nlength: 01\n\nx",
			"WALLPROF-SPOOL 1\nurl: http://h/\nurl: http://h/\ncontent-type: a\ngzip: 0\nlength: 0\n\n",
			"WALLPROF-SPOOL 1\nurl: http://h/\ncontent-type: a\ngzip: 2\nlength: 0\n\n",
			"WALLPROF-SPOOL 1\nurl: http://h/\ncontent-type: a\nlength: 0\n\n",
			"WALLPROF-SPOOL 2\nurl: http://h/\ncontent-type: a\ngzip: 0\nlength: 0\n\n",
		};
		for (size_t i = 0; i < sizeof(texts) / sizeof(*texts); i++) {
			size_t n = strlen(texts[i]);

			memcpy(copy, texts[i], n);
			REQ(wp_up_item_parse(copy, n, &p, err, sizeof(err)) == -1);
		}
	}
	/* a header line over 4096 bytes */
	{
		size_t n = 20000;
		char *big = malloc(n);

		memset(big, 'a', n);
		memcpy(big, "WALLPROF-SPOOL 1\nurl: http://h/", 31);
		REQ(wp_up_item_parse(big, n, &p, err, sizeof(err)) == -1);
		free(big);
	}
	free(copy);
	free(file);
	report("item_corrupt");
}

static void config(struct wp_spool_config *sc, unsigned files, uint64_t bytes)
{
	sc->dir = root;
	sc->max_files = files;
	sc->max_bytes = bytes;
}

static size_t count_items(void)
{
	struct wp_up_list l = { 0 };
	int fd = rootfd();
	size_t n;

	wp_up_list_all(fd, &l);
	n = l.n;
	wp_up_list_free(&l);
	close(fd);
	return n;
}

static void test_spool_put_prune(void)
{
	struct wp_spool_config sc;
	struct wp_upload_item it;
	struct wp_up_list l = { 0 };
	char err[300], what[32], body[64];
	struct stat st;
	int fd;

	config(&sc, 4, 1 << 20);
	for (int i = 0; i < 6; i++) {
		snprintf(what, sizeof(what), "item %d", i);
		snprintf(body, sizeof(body), "body %d", i);
		mkitem(&it, what, body);
		REQ(!wp_spool_put(&sc, i % 2 ? RUN_A : RUN_B, &it, err, sizeof(err)));
	}
	REQ(stat(root, &st) == 0 && (st.st_mode & 0777) == 0700);
	fd = rootfd();
	REQ(!wp_up_list_all(fd, &l));
	REQ(l.n == 4);
	/* oldest first; the two oldest (item 0, 1) pruned */
	for (size_t i = 0; i < l.n; i++) {
		int rfd = wp_up_run_open(fd, l.e[i].run, 0);
		char buf[4096];
		struct wp_up_parsed p;
		ssize_t n = pread(openat(rfd, l.e[i].name, O_RDONLY), buf, sizeof(buf), 0);

		REQ(n > 0 && !wp_up_item_parse(buf, (size_t)n, &p, err, sizeof(err)));
		snprintf(what, sizeof(what), "item %zu", i + 2);
		REQ(!strcmp(p.what, what));
		REQ(i == 0 || strcmp(l.e[i - 1].name, l.e[i].name) < 0);
		close(rfd);
	}
	wp_up_list_free(&l);
	REQ(wp_up_take_pruned(fd) == 2 && wp_up_take_pruned(fd) == 0);
	close(fd);

	/* bytes bound: room for two items, the new one and the newest before it */
	{
		char *file = NULL;
		size_t size = 0;

		mkitem(&it, "item 5", "body 5");
		REQ(!wp_up_item_encode(&it, it.body, it.len, 0, &file, &size, err, sizeof(err)));
		free(file);
		config(&sc, 100, 2 * size + 10);
	}
	mkitem(&it, "bytes", "b");
	REQ(!wp_spool_put(&sc, RUN_A, &it, err, sizeof(err)));
	REQ(count_items() == 2);
	/* an item over the bound alone: refused, nothing lost */
	{
		static char big[2000];

		memset(big, 'x', sizeof(big) - 1);
		mkitem(&it, "big one", big);
		REQ(wp_spool_put(&sc, RUN_A, &it, err, sizeof(err)) == -1 &&
		    strstr(err, "big one"));
		REQ(count_items() == 2);
	}
	/* a gzip item is stored compressed and says so */
	{
		static char text[20000];
		struct wp_up_list l2 = { 0 };

		memset(text, 'z', sizeof(text) - 1);
		config(&sc, 100, 1 << 20);
		mkitem(&it, "zipped", text);
		it.gzip = 1;
		REQ(!wp_spool_put(&sc, RUN_B, &it, err, sizeof(err)));
		fd = rootfd();
		wp_up_list_all(fd, &l2);
		REQ(l2.n == 3 && l2.e[2].size < 1000);
		wp_up_list_free(&l2);
		close(fd);
	}
	/* bad run names */
	REQ(wp_spool_put(&sc, "../x", &it, err, sizeof(err)) == -1 && strstr(err, "run"));
	REQ(wp_spool_put(&sc, "0-0123456789abcdef0123456789abcdef", &it, err, sizeof(err)) == -1);
	REQ(wp_spool_put(&sc, "12-0123456789ABCDEF0123456789abcdef", &it, err, sizeof(err)) == -1);
	report("spool_put_prune");
}

static void test_spool_root(void)
{
	char dir[600], err[300];
	int fd;

	snprintf(dir, sizeof(dir), "%s/open", root);
	mkdir(dir, 0700);
	chmod(dir, 0777);
	REQ(wp_up_root_open(dir, 1, err, sizeof(err)) == -1 && strstr(err, "writable"));
	/* sticky (/tmp-like) and shared: others could create its lock,
	 * pruned and state-* first; one spool per user */
	chmod(dir, 01777);
	REQ(wp_up_root_open(dir, 1, err, sizeof(err)) == -1 && strstr(err, "one per user") &&
	    !strchr(err, '\n'));
	chmod(dir, 0770);
	REQ(wp_up_root_open(dir, 0, err, sizeof(err)) == -1 && strstr(err, "writable"));
	chmod(dir, 0700);
	fd = wp_up_root_open(dir, 1, err, sizeof(err));
	REQ(fd >= 0);
	close(fd);
	/* another user's (root can make one): refused, whatever its mode */
	if (geteuid() == 0) {
		REQ(!chown(dir, 65534, 65534));
		REQ(wp_up_root_open(dir, 1, err, sizeof(err)) == -1 &&
		    strstr(err, "owned by another user") && strstr(err, "one per user"));
		REQ(!chown(dir, 0, 0));
	}
	snprintf(dir, sizeof(dir), "%s/a/b/c", root);
	fd = wp_up_root_open(dir, 0, err, sizeof(err));
	REQ(fd == -2);
	fd = wp_up_root_open(dir, 1, err, sizeof(err));
	REQ(fd >= 0);
	close(fd);
	/* a run directory that is a symlink is not ours */
	{
		char link[700];

		snprintf(link, sizeof(link), "%s/%s", dir, RUN_A);
		REQ(!symlink("/tmp", link));
		fd = wp_up_root_open(dir, 0, err, sizeof(err));
		REQ(wp_up_run_open(fd, RUN_A, 1) == -1);
		close(fd);
	}
	REQ(wp_up_run_name_ok(RUN_A) && wp_up_run_name_ok(RUN_B) && !wp_up_run_name_ok("1-abc") &&
	    !wp_up_run_name_ok("12345678901-0123456789abcdef0123456789abcdef") &&
	    !wp_up_run_name_ok("1-0123456789abcdef0123456789abcdef0"));
	REQ(wp_up_item_name_ok("0000001700000000-000001-0a0b0c0d.item") &&
	    !wp_up_item_name_ok(".tmp-0000001700000000-000001-0a0b0c0d.item") &&
	    !wp_up_item_name_ok("0000001700000000-000001-0a0b0c0d.item~"));
	report("spool_root");
}

/* A loopback port nobody listens on. */
static int closed_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &len))
		abort();
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static int nr_said[4];

static void on_say(void *ctx, int level, const char *msg)
{
	(void)ctx;
	if (level >= 1 && level <= 3)
		nr_said[level]++;
	if (level == 1)
		printf("    said: %s\n", msg);
}

/* What put writes, flush reads: a refused connection keeps the item and
 * backs the endpoint off (the next flush does not try); a corrupt item
 * beside it is deleted with one line. */
static void test_flush_refused(void)
{
	struct wp_spool_config sc;
	struct wp_upload_item it;
	struct wp_flush_result r;
	char url[128], run[64], err[300], path[900];
	double t0;
	FILE *f;

	snprintf(root + strlen(root), sizeof(root) - strlen(root), "2");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/1/envelope/", closed_port());
	snprintf(run, sizeof(run), "%d-00000000000000000000000000000001", (int)getpid());
	config(&sc, 10, 1 << 20);
	mkitem(&it, "refused one", "{}");
	it.url = url;
	REQ(!wp_spool_put(&sc, run, &it, err, sizeof(err)));
	snprintf(path, sizeof(path), "%s/%s/0000000000000001-000000-00000000.item", root, run);
	f = fopen(path, "w");
	fputs("WALLPROF-SPOOL 1\nurl: http://h/\n", f);
	fclose(f);
	t0 = wp_up_mono_ms();
	REQ(!wp_spool_flush(&sc, run, t0 + 5000, &r, on_say, NULL));
	REQ(r.sent == 0 && r.dropped == 1 && r.left == 1 && r.rate_limited == 0);
	REQ(strstr(r.last_error, "refused one") && strstr(r.last_error, "kept"));
	REQ(nr_said[1] == 1 && wp_up_mono_ms() - t0 < 4000);
	REQ(!wp_spool_flush(&sc, run, wp_up_mono_ms() + 5000, &r, on_say, NULL));
	REQ(r.sent == 0 && r.dropped == 0 && r.left == 1 && !r.last_error[0]);
	/* NULL run, a live run (ours): left alone */
	REQ(!wp_spool_flush(&sc, NULL, wp_up_mono_ms() + 5000, &r, on_say, NULL));
	REQ(r.left == 0 && r.running == 1 && !r.last_error[0]);
	root[strlen(root) - 1] = '\0';
	report("flush_refused");
}

/* The pid of a process that has ended (reaped). */
static unsigned dead_pid(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, NULL, 0) != pid)
		abort();
	return (unsigned)pid;
}

/* A flush waits for its own run's lock, but not for another's: a dead run
 * busy with another flush (`wallprof upload`) is skipped at once, its item
 * still counted as left (the flush answers for dead runs); a live
 * process's item is counted apart, as running, not as left. */
static void test_flush_busy(void)
{
	struct wp_spool_config sc;
	struct wp_upload_item it;
	struct wp_flush_result r;
	char url[128], own[64], dead[64], other[64], err[300], path[900];
	double t0;
	int lk;

	snprintf(root + strlen(root), sizeof(root) - strlen(root), "3");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/1/envelope/", closed_port());
	snprintf(own, sizeof(own), "%d-00000000000000000000000000000002", (int)getpid());
	snprintf(other, sizeof(other), "%d-00000000000000000000000000000003", (int)getpid());
	snprintf(dead, sizeof(dead), "%u-00000000000000000000000000000004", dead_pid());
	config(&sc, 10, 1 << 20);
	mkitem(&it, "dead one", "{}");
	it.url = url;
	REQ(!wp_spool_put(&sc, dead, &it, err, sizeof(err)));
	mkitem(&it, "live one", "{}");
	it.url = url;
	REQ(!wp_spool_put(&sc, other, &it, err, sizeof(err)));
	snprintf(path, sizeof(path), "%s/%s/lock", root, dead);
	lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	REQ(lk >= 0 && !flock(lk, LOCK_EX | LOCK_NB));

	t0 = wp_up_mono_ms();
	REQ(!wp_spool_flush(&sc, own, t0 + 3000, &r, on_say, NULL));
	REQ(wp_up_mono_ms() - t0 < 1500);
	REQ(r.sent == 0 && r.left == 1 && r.running == 1 && !r.last_error[0]);
	t0 = wp_up_mono_ms();
	REQ(!wp_spool_flush(&sc, NULL, t0 + 3000, &r, on_say, NULL));
	REQ(wp_up_mono_ms() - t0 < 1500);
	REQ(r.sent == 0 && r.left == 1 && r.running == 1);
	/* unlocked: the dead run is tried (refused: kept, still left) */
	close(lk);
	REQ(!wp_spool_flush(&sc, own, wp_up_mono_ms() + 3000, &r, on_say, NULL));
	REQ(r.left == 1 && r.running == 1 && strstr(r.last_error, "dead one"));
	root[strlen(root) - 1] = '\0';
	report("flush_busy");
}

/* Messages show no URL's userinfo. */
static void test_redact(void)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "to https://user:pass@host/api/1/envelope/: refused",
		  "to https://***@host/api/1/envelope/: refused" },
		{ "http://u@h:1", "http://***@h:1" },
		{ "a http://k:p@ss@h/x and https://x:y@z?q=a@b, done",
		  "a http://***@h/x and https://***@z?q=a@b, done" },
		{ "http://h/x@y http://h?x@y 'http://h'@",
		  "http://h/x@y http://h?x@y 'http://h'@" },
		{ "no url @ here ://", "no url @ here ://" },
		{ "Location http://a:b@c; kept", "Location http://***@c; kept" },
		{ "", "" },
	};
	char out[200], small[12];

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		wp_upload_redact(cases[i].in, out, sizeof(out));
		REQ(!strcmp(out, cases[i].out));
		if (why[0]) {
			printf("    %s -> %s\n", cases[i].in, out);
			break;
		}
	}
	wp_upload_redact("http://user:secret@h/", small, sizeof(small));
	REQ(!strcmp(small, "http://***@"));
	report("redact");
}

/* What the spool holds may carry credentials (X-Sentry-Auth, a URL's
 * userinfo): items and state files 0600, run directories 0700. */
static void test_spool_modes(void)
{
	const char *url = "http://user:secret@127.0.0.1:5/api/42/envelope/";
	struct wp_spool_config sc;
	struct wp_upload_item it;
	struct wp_up_state st;
	struct wp_up_list l = { 0 };
	char err[300], path[900];
	struct stat sb;
	mode_t old = umask(0);
	int fd;

	config(&sc, 10, 1 << 20);
	mkitem(&it, "modes", "{}");
	it.url = url;
	REQ(!wp_spool_put(&sc, RUN_A, &it, err, sizeof(err)));
	fd = rootfd();
	memset(&st, 0, sizeof(st));
	wp_up_on_response(&st, 503, "", "", wp_up_real_ms());
	REQ(!wp_up_state_save(fd, url, &st, 0));
	REQ(!wp_up_list_all(fd, &l) && l.n >= 1);
	for (size_t i = 0; i < l.n; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", root, l.e[i].run, l.e[i].name);
		REQ(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
		snprintf(path, sizeof(path), "%s/%s", root, l.e[i].run);
		REQ(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0700);
	}
	wp_up_list_free(&l);
	{
		struct dirent *de;
		DIR *d = opendir(root);
		int n = 0;

		while (d && (de = readdir(d)))
			if (!strncmp(de->d_name, "state-", 6)) {
				snprintf(path, sizeof(path), "%s/%s", root, de->d_name);
				REQ(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
				n++;
			}
		if (d)
			closedir(d);
		REQ(n == 1);
	}
	snprintf(path, sizeof(path), "%s/state.lock", root);
	REQ(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
	close(fd);
	umask(old);
	report("spool_modes");
}

static void test_env(void)
{
	struct wp_spool_config sc;
	char dir[256], err[200];

	setenv("WALLPROF_SPOOL_DIR", "/x/spool", 1);
	unsetenv("WALLPROF_SPOOL_MAX_FILES");
	unsetenv("WALLPROF_SPOOL_MAX_MB");
	REQ(!wp_spool_config_from_env(&sc, dir, sizeof(dir), err, sizeof(err)));
	REQ(!strcmp(sc.dir, "/x/spool") && sc.max_files == 100 && sc.max_bytes == 64ull << 20);
	unsetenv("WALLPROF_SPOOL_DIR");
	{
		/* the derived defaults, in directories of the test's own; each
		 * is created (0700) when it can be, and passed over when it is
		 * not ours alone */
		char base[200], c[240], h[240], want[300], *slash = strrchr(root, '/');
		const char *saved_tmp = getenv("TMPDIR");
		char tmpcopy[200];

		snprintf(tmpcopy, sizeof(tmpcopy), "%s", saved_tmp ? saved_tmp : "");
		snprintf(base, sizeof(base), "%.*s", (int)(slash - root), root);
		snprintf(c, sizeof(c), "%s/c", base);
		snprintf(h, sizeof(h), "%s/h", base);
		REQ(!mkdir(c, 0700) && !mkdir(h, 0700));
		setenv("XDG_CACHE_HOME", c, 1);
		snprintf(want, sizeof(want), "%s/wallprof/spool", c);
		REQ(!wp_spool_default_dir(dir, sizeof(dir)) && !strcmp(dir, want) &&
		    access(want, F_OK) == 0);
		setenv("XDG_CACHE_HOME", "relative", 1);
		setenv("HOME", h, 1);
		snprintf(want, sizeof(want), "%s/.cache/wallprof/spool", h);
		REQ(!wp_spool_default_dir(dir, sizeof(dir)) && !strcmp(dir, want));
		/* a cache others may write (a shared one): the next candidate */
		REQ(!chmod(want, 0777));
		setenv("XDG_CACHE_HOME", c, 1);
		snprintf(want, sizeof(want), "%s/wallprof/spool", c);
		REQ(!chmod(want, 0777));
		setenv("TMPDIR", "/t", 1);
		REQ(!wp_spool_default_dir(dir, sizeof(dir)) &&
		    !strncmp(dir, "/t/wallprof-spool-", 18));
		unsetenv("XDG_CACHE_HOME");
		unsetenv("HOME");
		REQ(!wp_spool_default_dir(dir, sizeof(dir)) &&
		    !strncmp(dir, "/t/wallprof-spool-", 18));
		REQ(wp_spool_default_dir(dir, 5) == -1);
		/* a base not made yet: made when its nearest existing
		 * directory is ours (or root's, as /tmp); passed over under
		 * another user's (a HOME kept by sudo) */
		snprintf(c, sizeof(c), "%s/not/yet", base);
		setenv("XDG_CACHE_HOME", c, 1);
		snprintf(want, sizeof(want), "%s/wallprof/spool", c);
		REQ(!wp_spool_default_dir(dir, sizeof(dir)) && !strcmp(dir, want) &&
		    access(want, F_OK) == 0);
		if (geteuid() == 0) {
			snprintf(h, sizeof(h), "%s/alien", base);
			REQ(!mkdir(h, 0755) && !chown(h, 65534, 65534));
			snprintf(c, sizeof(c), "%s/alien/cache", base);
			setenv("XDG_CACHE_HOME", c, 1);
			REQ(!wp_spool_default_dir(dir, sizeof(dir)) &&
			    !strncmp(dir, "/t/wallprof-spool-", 18) && access(c, F_OK) != 0);
			setenv("HOME", h, 1);
			unsetenv("XDG_CACHE_HOME");
			REQ(!wp_spool_default_dir(dir, sizeof(dir)) &&
			    !strncmp(dir, "/t/wallprof-spool-", 18));
			snprintf(want, sizeof(want), "%s/.cache", h);
			REQ(access(want, F_OK) != 0);
			unsetenv("HOME");
		}
		if (tmpcopy[0])
			setenv("TMPDIR", tmpcopy, 1);
		else
			unsetenv("TMPDIR");
	}
	setenv("WALLPROF_SPOOL_MAX_FILES", "7", 1);
	setenv("WALLPROF_SPOOL_MAX_MB", "2", 1);
	REQ(!wp_spool_config_from_env(&sc, dir, sizeof(dir), err, sizeof(err)));
	REQ(sc.max_files == 7 && sc.max_bytes == 2ull << 20);
	static const char *const bad[] = { "0", "-1", "1x", "", "99999999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		setenv("WALLPROF_SPOOL_MAX_MB", bad[i], 1);
		err[0] = '\0';
		REQ(wp_spool_config_from_env(&sc, dir, sizeof(dir), err, sizeof(err)) ==
			    (bad[i][0] ? -1 : 0) &&
		    (!bad[i][0] || strstr(err, "WALLPROF_SPOOL_MAX_MB")));
	}
	unsetenv("WALLPROF_SPOOL_MAX_MB");
	unsetenv("WALLPROF_SPOOL_MAX_FILES");
	report("env");
}

int main(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(root, sizeof(root), "%s/test_upload.%d/spool", t && *t ? t : "/tmp",
		 (int)getpid());
	test_dsn_good();
	test_dsn_bad();
	test_item_roundtrip();
	test_item_categories();
	test_item_corrupt();
	test_spool_put_prune();
	test_spool_root();
	test_flush_refused();
	test_flush_busy();
	test_redact();
	test_spool_modes();
	test_env();
	{
		char cmd[700];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s/test_upload.%d'", t && *t ? t : "/tmp",
			 (int)getpid());
		if (system(cmd))
			printf("note: could not remove %s\n", cmd);
	}
	printf("%d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
