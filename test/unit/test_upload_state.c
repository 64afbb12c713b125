/* test_upload_state: unit tests of the rate limits and their state
 * (upload/ratelimit.c, upload/state.c): X-Sentry-Rate-Limits, Retry-After
 * in seconds and as an HTTP date, the backoff, the state file read back,
 * merged between converters, and removed once over. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../upload/upload_int.h"
#include "check.h"

static char root[512];

static void test_rate_limits(void)
{
	struct wp_up_state st;
	double now = 1e12;

	memset(&st, 0, sizeof(st));
	REQ(wp_up_parse_rate_limits("60:profile;transaction:organization, 2.5::key", now, &st) ==
	    2);
	REQ(st.until[WP_UP_CAT_PROFILE] == now + 60000);
	REQ(st.until[WP_UP_CAT_TRANSACTION] == now + 60000);
	REQ(st.until[WP_UP_CAT_PROFILE_CHUNK] == 0);
	REQ(st.until[WP_UP_CAT_ALL] == now + 2500);
	/* overlap: the later end stays */
	REQ(wp_up_parse_rate_limits("10:profile", now, &st) == 1);
	REQ(st.until[WP_UP_CAT_PROFILE] == now + 60000);
	REQ(wp_up_parse_rate_limits("120.25:profile_chunk;error:project:reason:ns", now, &st) == 1);
	REQ(st.until[WP_UP_CAT_PROFILE_CHUNK] == now + 120250);
	REQ(wp_up_limited(&st, "profile", now) == 60000);
	REQ(wp_up_limited(&st, "profile_chunk", now) == 120250);
	REQ(wp_up_limited(&st, NULL, now) == 2500);
	REQ(wp_up_limited(&st, "other", now + 3000) == 0);

	memset(&st, 0, sizeof(st));
	/* garbage, unknown categories only, negative, inf, nan, hex, no colon */
	REQ(wp_up_parse_rate_limits("x:profile, 60:error;security, -1:profile, inf:profile, "
				    "nan:profile, 0x10:profile, 60, :, ,,, 1e3:profile",
				    now, &st) == 0);
	for (int k = 0; k < WP_UP_NCAT; k++)
		REQ(st.until[k] == 0);
	/* a huge value is cut to a day */
	REQ(wp_up_parse_rate_limits("99999999999:profile", now, &st) == 1);
	REQ(st.until[WP_UP_CAT_PROFILE] == now + WP_UP_LIMIT_MAX_S * 1e3);
	REQ(wp_up_parse_rate_limits(" 5 : profile ; transaction ", now, &st) == 1);
	REQ(st.until[WP_UP_CAT_TRANSACTION] == now + 5000);
	report("rate_limits_parse");
}

static void test_retry_after(void)
{
	double now = 1e12, s;

	REQ(!wp_up_parse_retry_after("3", now, &s) && s == 3);
	REQ(!wp_up_parse_retry_after(" 1.5 ", now, &s) && s == 1.5);
	REQ(wp_up_parse_retry_after("", now, &s) == -1 &&
	    wp_up_parse_retry_after(NULL, now, &s) == -1);
	report("retry_after_seconds");
}

/* Retry-After as an HTTP date (IMF-fixdate): seconds from now, 0 when
 * past, cut to a day; other date forms and near misses are not dates. */
static void test_retry_after_date(void)
{
	struct tm tm = { .tm_year = 115, .tm_mon = 9, .tm_mday = 21, .tm_hour = 7, .tm_min = 27 };
	double now = (double)timegm(&tm) * 1e3, s = -1; /* Wed, 21 Oct 2015 07:27:00 GMT */
	struct wp_up_state st;
	static const char *const bad[] = {
		"Wednesday, 21-Oct-15 07:28:00 GMT", /* RFC 850 */
		"Wed Oct 21 07:28:00 2015",          /* asctime */
		"Wed, 21 Oct 2015 07:28:00 UTC",     "Wed, 21 Oct 2015 07:28:00",
		"Wed, 1 Oct 2015 07:28:00 GMT",      "Wed, 21 oct 2015 07:28:00 GMT",
		"Xyz, 21 Oct 2015 07:28:00 GMT",     "Wed, 31 Feb 2015 07:28:00 GMT",
		"Wed, 21 Oct 2015 24:28:00 GMT",     "Wed, 21 Oct 2015 07:28:0x GMT",
		"Wed, 21 Oct 1969 07:28:00 GMT",     "Wed, 21 Oct 2015 07:28:00 GMTx",
	};

	REQ(!wp_up_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now, &s) && s == 60);
	REQ(!wp_up_parse_retry_after(" Wed, 21 Oct 2015 07:27:30 GMT ", now + 500, &s) &&
	    s == 29.5);
	REQ(!wp_up_parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now, &s) && s == 0);
	REQ(!wp_up_parse_retry_after("Fri, 21 Oct 2016 07:28:00 GMT", now, &s) &&
	    s == WP_UP_LIMIT_MAX_S);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		REQ(wp_up_parse_retry_after(bad[i], now, &s) == -1);
	/* a 429 with a date: limited until then, not the default 60 s */
	memset(&st, 0, sizeof(st));
	wp_up_on_response(&st, 429, "Wed, 21 Oct 2015 07:27:05 GMT", "", now);
	REQ(st.until[WP_UP_CAT_ALL] == now + 5000);
	report("retry_after_date");
}

static void test_responses(void)
{
	struct wp_up_state st;
	double now = 1e12;


	memset(&st, 0, sizeof(st));
	wp_up_on_response(&st, 429, "3", "", now);
	REQ(st.until[WP_UP_CAT_ALL] == now + 3000 && st.backoff_ms == 0);
	memset(&st, 0, sizeof(st));
	wp_up_on_response(&st, 429, "", "", now);
	REQ(st.until[WP_UP_CAT_ALL] == now + 60000);
	/* the header wins over Retry-After on a 429 */
	memset(&st, 0, sizeof(st));
	wp_up_on_response(&st, 429, "3", "7:profile", now);
	REQ(st.until[WP_UP_CAT_ALL] == 0 && st.until[WP_UP_CAT_PROFILE] == now + 7000);
	/* on a 200 too */
	memset(&st, 0, sizeof(st));
	wp_up_on_response(&st, 200, "", "7:profile", now);
	REQ(st.until[WP_UP_CAT_PROFILE] == now + 7000);
	/* backoff: 1 s doubling to 5 min, reset by a success; a 4xx leaves it */
	memset(&st, 0, sizeof(st));
	wp_up_on_response(&st, 0, "", "", now);
	REQ(st.backoff_ms == 1000 && st.backoff_until == now + 1000);
	wp_up_on_response(&st, 503, "", "", now);
	REQ(st.backoff_ms == 2000);
	for (int i = 0; i < 20; i++)
		wp_up_on_response(&st, 502, "", "", now);
	REQ(st.backoff_ms == WP_UP_BACKOFF_MAX_MS);
	wp_up_on_response(&st, 413, "", "", now);
	REQ(st.backoff_ms == WP_UP_BACKOFF_MAX_MS);
	wp_up_on_response(&st, 204, "", "", now);
	REQ(st.backoff_ms == 0 && st.backoff_until == 0);
	report("responses");
}

static int rootfd(void)
{
	int fd = wp_up_root_open(root, 1, NULL, 0);

	if (fd < 0)
		abort();
	return fd;
}

static void test_state_file(void)
{
	struct wp_up_state st, back;
	const char *url = "http://127.0.0.1:1/api/42/envelope/";
	double now = wp_up_real_ms();
	int fd = rootfd();

	memset(&st, 0, sizeof(st));
	st.until[WP_UP_CAT_PROFILE] = ceil(now + 5000);
	st.until[WP_UP_CAT_ALL] = ceil(now + 1000);
	st.backoff_ms = 4000;
	st.backoff_until = ceil(now + 4000);
	REQ(!wp_up_state_save(fd, url, &st, 0));
	REQ(!wp_up_state_load(fd, "http://127.0.0.1:1/api/42/envelope/?q=1", &back));
	REQ(!memcmp(&st, &back, sizeof(st)));
	/* another endpoint: nothing */
	REQ(!wp_up_state_load(fd, "http://127.0.0.1:2/api/42/envelope/", &back));
	REQ(back.until[WP_UP_CAT_PROFILE] == 0);
	/* absurd times read back are cut; garbage reads as no state */
	{
		char path[800];
		struct dirent *de;
		DIR *d = opendir(root);
		FILE *f;

		path[0] = '\0';
		while (d && (de = readdir(d)))
			if (!strncmp(de->d_name, "state-", 6))
				snprintf(path, sizeof(path), "%s/%s", root, de->d_name);
		if (d)
			closedir(d);
		REQ(path[0]);
		f = fopen(path, "w");
		fprintf(f,
			"WALLPROF-SPOOL-STATE 1\nendpoint %s\nbackoff 1e300 nan\n"
			"limit profile 1e300\nlimit * -5\nlimit bogus 7\n",
			url);
		fclose(f);
		REQ(!wp_up_state_load(fd, url, &back));
		REQ(back.backoff_until <= wp_up_real_ms() + WP_UP_BACKOFF_MAX_MS + 1000 &&
		    back.backoff_ms == 0);
		REQ(back.until[WP_UP_CAT_PROFILE] <=
		    wp_up_real_ms() + WP_UP_LIMIT_MAX_S * 1e3 + 1000);
		REQ(back.until[WP_UP_CAT_ALL] == 0);
		f = fopen(path, "w");
		fprintf(f, "garbage\n");
		fclose(f);
		REQ(wp_up_state_load(fd, url, &back) == -1 && back.until[WP_UP_CAT_PROFILE] == 0);
	}
	close(fd);
	report("state_file");
}

/* The path of the state file of `url`'s endpoint under `dir`. */
static void state_path(const char *dir, const char *url, char *out, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < wp_up_endpoint_len(url); i++) {
		h ^= (unsigned char)url[i];
		h *= 0x100000001b3ull;
	}
	snprintf(out, len, "%s/state-%016llx", dir, (unsigned long long)h);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f))
		abort();
}

/* Two converters load the same endpoint's state and save in turn: the
 * second's save keeps the first's limit (and the later backoff), unless
 * it saw a success, which resets the backoff only. */
static void test_state_merge(void)
{
	const char *url = "http://127.0.0.1:3/api/42/envelope/";
	struct wp_up_state a, b, back;
	double now = wp_up_real_ms();
	int fd = rootfd();

	/* a backoff both load */
	memset(&a, 0, sizeof(a));
	wp_up_on_response(&a, 503, "", "", now);
	wp_up_on_response(&a, 503, "", "", now);
	REQ(a.backoff_ms == 2000 && !wp_up_state_save(fd, url, &a, 0));
	REQ(!wp_up_state_load(fd, url, &a) && !wp_up_state_load(fd, url, &b));
	REQ(a.backoff_ms == 2000 && b.backoff_ms == 2000);
	/* a: 429 for 30 s; b: a success, then its save */
	wp_up_on_response(&a, 429, "30", "", now);
	REQ(!wp_up_state_save(fd, url, &a, 0));
	wp_up_on_response(&b, 200, "", "", now);
	REQ(!wp_up_state_save(fd, url, &b, 1));
	REQ(b.until[WP_UP_CAT_ALL] >= now + 30000); /* b's state is the merged one */
	REQ(!wp_up_state_load(fd, url, &back));
	REQ(back.until[WP_UP_CAT_ALL] >= now + 30000 && back.until[WP_UP_CAT_ALL] <= now + 30001);
	REQ(back.backoff_ms == 0 && back.backoff_until == 0);

	/* two failures: the longer backoff stays */
	REQ(!wp_up_state_load(fd, url, &a) && !wp_up_state_load(fd, url, &b));
	for (int i = 0; i < 3; i++)
		wp_up_on_response(&a, 502, "", "", now);
	REQ(a.backoff_ms == 4000 && !wp_up_state_save(fd, url, &a, 0));
	wp_up_on_response(&b, 0, "", "7:profile", now);
	REQ(b.backoff_ms == 1000 && !wp_up_state_save(fd, url, &b, 0));
	REQ(!wp_up_state_load(fd, url, &back));
	REQ(back.backoff_ms == 4000 && fabs(back.backoff_until - (now + 4000)) < 1 &&
	    fabs(back.until[WP_UP_CAT_PROFILE] - (now + 7000)) < 1 &&
	    back.until[WP_UP_CAT_ALL] >= now + 30000);
	close(fd);
	report("state_merge");
}

/* State files whose limits and backoff are over are removed: when loaded,
 * by a sweep, and by a save with nothing left to keep; a recent backoff's
 * length is kept (the doubling goes on), another endpoint's file and
 * garbage are left alone. */
static void test_state_expiry(void)
{
	const char *url = "http://127.0.0.1:4/api/42/envelope/";
	char dir[600], path[800], text[600], other[800], junk[800];
	struct wp_up_state st;
	double now = wp_up_real_ms();
	struct stat sb;
	int fd;

	snprintf(dir, sizeof(dir), "%s/expiry", root);
	fd = wp_up_root_open(dir, 1, NULL, 0);
	REQ(fd >= 0);
	state_path(dir, url, path, sizeof(path));
	/* over: removed when loaded, the state zero */
	snprintf(text, sizeof(text),
		 "WALLPROF-SPOOL-STATE 1\nendpoint %s\nbackoff %.0f 300000\n"
		 "limit profile %.0f\nlimit * %.0f\n",
		 url, now - WP_UP_BACKOFF_MAX_MS - 1000, now - 1, now - 5000);
	write_text(path, text);
	REQ(!wp_up_state_load(fd, url, &st) && st.backoff_ms == 0 && st.until[1] == 0);
	REQ(stat(path, &sb) == -1);
	/* a backoff over a minute ago: kept, and its length */
	snprintf(text, sizeof(text), "WALLPROF-SPOOL-STATE 1\nendpoint %s\nbackoff %.0f 8000\n",
		 url, now - 60000);
	write_text(path, text);
	REQ(!wp_up_state_load(fd, url, &st) && st.backoff_ms == 8000);
	REQ(stat(path, &sb) == 0);
	/* a success with nothing else to keep: the file goes */
	wp_up_on_response(&st, 204, "", "", now);
	REQ(!wp_up_state_save(fd, url, &st, 1) && stat(path, &sb) == -1);

	/* a sweep: the expired file of an endpoint no longer used goes, a live
	 * one and garbage stay */
	snprintf(other, sizeof(other), "%s/state-00000000000000aa", dir);
	snprintf(text, sizeof(text),
		 "WALLPROF-SPOOL-STATE 1\nendpoint http://gone.example/api/1/envelope/\n"
		 "backoff 0 0\nlimit profile_chunk %.0f\n",
		 now - 1);
	write_text(other, text);
	snprintf(text, sizeof(text),
		 "WALLPROF-SPOOL-STATE 1\nendpoint %s\nbackoff 0 0\nlimit transaction %.0f\n", url,
		 now + 60000);
	write_text(path, text);
	snprintf(junk, sizeof(junk), "%s/state-00000000000000bb", dir);
	write_text(junk, "garbage\n");
	REQ(wp_up_state_sweep(fd) == 1);
	REQ(stat(other, &sb) == -1 && stat(path, &sb) == 0 && stat(junk, &sb) == 0);
	/* a flush sweeps too */
	write_text(other, "WALLPROF-SPOOL-STATE 1\nendpoint http://gone.example/\nbackoff 0 0\n");
	{
		struct wp_spool_config sc = { .dir = dir, .max_files = 10, .max_bytes = 1 << 20 };
		struct wp_flush_result r;

		REQ(!wp_spool_flush(&sc, NULL, wp_up_mono_ms() + 1000, &r, NULL, NULL));
		REQ(stat(other, &sb) == -1 && stat(path, &sb) == 0);
	}
	close(fd);
	report("state_expiry");
}

int main(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(root, sizeof(root), "%s/test_upload_state.%d/spool", t && *t ? t : "/tmp",
		 (int)getpid());
	test_rate_limits();
	test_retry_after();
	test_retry_after_date();
	test_responses();
	test_state_file();
	test_state_merge();
	test_state_expiry();
	{
		char cmd[700];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s/test_upload_state.%d'", t && *t ? t : "/tmp",
			 (int)getpid());
		if (system(cmd))
			printf("note: could not remove %s\n", cmd);
	}
	printf("%d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
