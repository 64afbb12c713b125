/* ratelimit: Sentry's rate limits (X-Sentry-Rate-Limits, Retry-After on a
 * 429) and our backoff after network errors and 5xx, as a per-endpoint
 * state (state.c keeps it in the spool). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "upload_int.h"

static const char *const categories[WP_UP_NCAT] = {
	[WP_UP_CAT_ALL] = "*",
	[WP_UP_CAT_PROFILE] = "profile",
	[WP_UP_CAT_PROFILE_CHUNK] = "profile_chunk",
	[WP_UP_CAT_TRANSACTION] = "transaction",
};

double wp_up_real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double wp_up_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const char *wp_up_category_name(int k)
{
	return k >= 0 && k < WP_UP_NCAT ? categories[k] : "";
}

int wp_up_category(const char *name)
{
	if (!name)
		return -1;
	for (int i = 1; i < WP_UP_NCAT; i++)
		if (!strcmp(name, categories[i]))
			return i;
	return -1;
}

static int category_n(const char *s, size_t n)
{
	for (int i = 1; i < WP_UP_NCAT; i++)
		if (strlen(categories[i]) == n && !memcmp(s, categories[i], n))
			return i;
	return -1;
}

static void limit(struct wp_up_state *st, int cat, double until)
{
	if (until > st->until[cat])
		st->until[cat] = until;
}

/* Seconds as a finite, non-negative number, cut to a day; -1 when not. */
static double seconds(const char *s, const char *end)
{
	char buf[64], *e;
	size_t n;
	double v;

	while (s < end && *s == ' ')
		s++;
	while (end > s && end[-1] == ' ')
		end--;
	n = (size_t)(end - s);
	if (!n || n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	/* strtod takes "inf", "nan" and hex: digits and one '.' only. */
	if (strspn(buf, "0123456789.") != n)
		return -1;
	errno = 0;
	v = strtod(buf, &e);
	if (*e || errno || !isfinite(v) || v < 0)
		return -1;
	return v > WP_UP_LIMIT_MAX_S ? WP_UP_LIMIT_MAX_S : v;
}

/* `n` decimal digits at `s`, or -1. */
static int digits(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* The index of the three letters at `s` in `names` (`n` of them), or -1. */
static int name3(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!memcmp(s, names[i], 3))
			return i;
	return -1;
}

/* An HTTP date in its IMF-fixdate form (RFC 9110: "Sun, 06 Nov 1994
 * 08:49:37 GMT", exactly 29 characters), as seconds since the epoch; -1
 * when not one. Parsed by hand: strptime's names follow the locale. */
static double imf_fixdate(const char *s, size_t n)
{
	static const char *const wdays[] = { "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun" };
	static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	struct tm tm = { 0 };
	time_t t;

	if (n != 29 || name3(s, wdays, 7) < 0 || memcmp(s + 3, ", ", 2) || s[7] != ' ' ||
	    s[11] != ' ' || s[16] != ' ' || s[19] != ':' || s[22] != ':' ||
	    memcmp(s + 25, " GMT", 4))
		return -1;
	tm.tm_mday = digits(s + 5, 2);
	tm.tm_mon = name3(s + 8, months, 12);
	tm.tm_year = digits(s + 12, 4) - 1900;
	tm.tm_hour = digits(s + 17, 2);
	tm.tm_min = digits(s + 20, 2);
	tm.tm_sec = digits(s + 23, 2);
	if (tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_mon < 0 || tm.tm_year < 70 ||
	    tm.tm_hour < 0 || tm.tm_hour > 23 || tm.tm_min < 0 || tm.tm_min > 59 || tm.tm_sec < 0 ||
	    tm.tm_sec > 60)
		return -1;
	{
		int mday = tm.tm_mday;

		t = timegm(&tm);
		if (t == (time_t)-1 || tm.tm_mday != mday) /* 31 Feb */
			return -1;
	}
	return (double)t;
}

int wp_up_parse_retry_after(const char *v, double now_ms, double *out)
{
	const char *end;
	double s, date;

	if (!v)
		return -1;
	end = v + strnlen(v, 64);
	s = seconds(v, end);
	if (s >= 0) {
		*out = s;
		return 0;
	}
	while (v < end && *v == ' ')
		v++;
	while (end > v && end[-1] == ' ')
		end--;
	date = imf_fixdate(v, (size_t)(end - v));
	if (date < 0)
		return -1;
	s = date - now_ms / 1e3;
	*out = s < 0 ? 0 : s > WP_UP_LIMIT_MAX_S ? WP_UP_LIMIT_MAX_S : s;
	return 0;
}

/* One limit "<seconds>:<categories>[:<scope>[:<reason>...]]". */
static int one_limit(const char *s, const char *end, double now_ms, struct wp_up_state *st)
{
	const char *c1 = memchr(s, ':', (size_t)(end - s)), *cats, *cats_end, *p;
	int known[WP_UP_NCAT] = { 0 }, any = 0, all = 1;
	double secs;

	if (!c1)
		return 0;
	secs = seconds(s, c1);
	if (secs < 0)
		return 0;
	cats = c1 + 1;
	cats_end = memchr(cats, ':', (size_t)(end - cats));
	if (!cats_end)
		cats_end = end;
	for (p = cats; p < cats_end;) {
		const char *q = memchr(p, ';', (size_t)(cats_end - p)), *a, *b;
		int k;

		if (!q)
			q = cats_end;
		for (a = p; a < q && *a == ' '; a++)
			;
		for (b = q; b > a && b[-1] == ' '; b--)
			;
		if (b > a) {
			all = 0;
			k = category_n(a, (size_t)(b - a));
			if (k > 0) {
				known[k] = 1;
				any = 1;
			}
		}
		p = q + 1;
	}
	if (all) {
		limit(st, WP_UP_CAT_ALL, now_ms + secs * 1e3);
		return 1;
	}
	if (!any)
		return 0; /* only categories we never send */
	for (int k = 1; k < WP_UP_NCAT; k++)
		if (known[k])
			limit(st, k, now_ms + secs * 1e3);
	return 1;
}

int wp_up_parse_rate_limits(const char *v, double now_ms, struct wp_up_state *st)
{
	const char *p = v, *end;
	int n = 0;

	if (!v)
		return 0;
	end = v + strnlen(v, 4096);
	while (p < end) {
		const char *q = memchr(p, ',', (size_t)(end - p));

		if (!q)
			q = end;
		n += one_limit(p, q, now_ms, st);
		p = q + 1;
	}
	return n;
}

void wp_up_on_response(struct wp_up_state *st, long status, const char *retry_after,
		       const char *rate_limits, double now_ms)
{
	int n = 0;

	if (rate_limits && *rate_limits)
		n = wp_up_parse_rate_limits(rate_limits, now_ms, st);
	if (status == 429 && !n) {
		double s;

		if (wp_up_parse_retry_after(retry_after, now_ms, &s))
			s = WP_UP_429_DEFAULT_S;
		limit(st, WP_UP_CAT_ALL, now_ms + s * 1e3);
	}
	if (status >= 200 && status < 300) {
		st->backoff_ms = 0;
		st->backoff_until = 0;
	} else if (status == 0 || status >= 500) {
		double b = st->backoff_ms * 2;

		if (b < WP_UP_BACKOFF_FIRST_MS)
			b = WP_UP_BACKOFF_FIRST_MS;
		if (b > WP_UP_BACKOFF_MAX_MS)
			b = WP_UP_BACKOFF_MAX_MS;
		st->backoff_ms = b;
		st->backoff_until = now_ms + b;
	}
}

double wp_up_limited(const struct wp_up_state *st, const char *categories, double now_ms)
{
	double until = st->until[WP_UP_CAT_ALL];

	for (const char *p = categories; p && *p;) {
		size_t n = strcspn(p, ";");
		int k = category_n(p, n);

		if (k > 0 && st->until[k] > until)
			until = st->until[k];
		p += n + (p[n] == ';');
	}
	return until > now_ms ? until - now_ms : 0;
}

size_t wp_up_endpoint_len(const char *url)
{
	return strcspn(url, "?#");
}
