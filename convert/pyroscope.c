/* pyroscope: a converted profile pushed to Grafana Pyroscope's /ingest
 * (WALLPROF_PYROSCOPE_URL): pprof, in a multipart form with a
 * sample_type_config that names its samples/count values "wall" (without
 * it, Pyroscope's default mapping would show them as "cpu"), under name=<app>{<labels>} with from, until, sampleRate and
 * spyName. Per-thread labels only when asked (WALLPROF_PYROSCOPE_THREADS):
 * Pyroscope makes every label a series. A multi-tenant server's
 * X-Scope-OrgID from WALLPROF_PYROSCOPE_TENANT, a bearer token from
 * WALLPROF_PYROSCOPE_TOKEN, basic auth as user:password@ in the URL. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "../output/dsn.h"
#include "../output/formats.h"
#include "../output/model.h"
#include "../upload/upload.h"
#include "convert.h"

static struct {
	char base[1024];  /* the URL without a trailing '/' */
	char app[128];    /* "": the program's name */
	char labels[512]; /* "k=v,k=v", checked */
	int threads;      /* thread labels in the pprof */
	char tenant[256], token[512];
	char tenant_hdr[300], token_hdr[560];
} cfg;

/* What Pyroscope is told about the pprof's sample types: only "samples"
 * is taken, shown as "wall", in units of samples that sampleRate turns into
 * time, as its CPU profiles are (its default mapping would call them
 * "cpu"; units are a fixed list, of which nanoseconds is not one). */
static const char sample_type_config[] =
	"{\"samples\":{\"units\":\"samples\",\"display-name\":\"wall\","
	"\"aggregation\":\"sum\",\"cumulative\":false,\"sampled\":true}}";

/* A multipart/form-data body: the gzipped pprof as the file "profile", the
 * sample type config as the file "sample_type_config". Returns it
 * (malloc'd, `*len` bytes) with its Content-Type in `ctype`, or NULL. */
static char *multipart(const char *pprof, size_t plen, char *ctype, size_t clen, size_t *len)
{
	unsigned char rnd[12] = { 0 };
	char boundary[48], *out;
	size_t n = 0, cap;
	int k;

	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) < 0)
		memset(rnd, 0x5a, sizeof(rnd));
	k = snprintf(boundary, sizeof(boundary), "wallprof-");
	for (size_t i = 0; i < sizeof(rnd); i++)
		k += snprintf(boundary + k, sizeof(boundary) - (size_t)k, "%02x", rnd[i]);
	snprintf(ctype, clen, "multipart/form-data; boundary=%s", boundary);
	cap = plen + sizeof(sample_type_config) + 512;
	if (!(out = malloc(cap)))
		return NULL;
	n += (size_t)snprintf(out + n, cap - n,
			      "--%s\r\nContent-Disposition: form-data; name=\"profile\"; "
			      "filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream"
			      "\r\n\r\n",
			      boundary);
	memcpy(out + n, pprof, plen);
	n += plen;
	n += (size_t)
		snprintf(out + n, cap - n,
			 "\r\n--%s\r\nContent-Disposition: form-data; "
			 "name=\"sample_type_config\"; filename=\"sample_type_config.json\"\r\n"
			 "Content-Type: application/json\r\n\r\n%s\r\n--%s--\r\n",
			 boundary, sample_type_config, boundary);
	*len = n;
	return out;
}

/* Pyroscope's labels "k=v,k=v": names [A-Za-z_][A-Za-z0-9_.]*, values
 * without the braces, commas, '=' and quotes its name syntax uses. */
static int labels_ok(const char *s)
{
	while (*s) {
		const char *k = s;

		if (!(isalpha((unsigned char)*s) || *s == '_'))
			return 0;
		while (isalnum((unsigned char)*s) || *s == '_' || *s == '.')
			s++;
		if (*s != '=' || s == k)
			return 0;
		s++;
		if (!*s || *s == ',')
			return 0;
		while (*s && *s != ',') {
			if (strchr("{}=\"' ", *s))
				return 0;
			s++;
		}
		if (*s == ',' && !*++s)
			return 0;
	}
	return 1;
}

int wp_cv_pyroscope_load(void)
{
	char url[1024];
	size_t n;

	memset(&cfg, 0, sizeof(cfg));
	wp_cv_env_str("WALLPROF_PYROSCOPE_URL", url, sizeof(url));
	if (!url[0])
		return 0;
	if (!wp_url_is_http(url)) {
		/* the library said so at start (debug here); not echoed when
		 * it may hold credentials (user:pass@) */
		wp_cv_event(WP_CV_DEBUG, "info", NULL, 0,
			    "WALLPROF_PYROSCOPE_URL='%.64s' is not an http:// or https:// URL; "
			    "nothing sent to Pyroscope",
			    strchr(url, '@') ? "(not shown: it holds an '@')" : url);
		return 0;
	}
	n = strlen(url);
	while (n > 0 && url[n - 1] == '/')
		url[--n] = 0;
	memcpy(cfg.base, url, n + 1);
	wp_cv_env_str("WALLPROF_PYROSCOPE_APP", cfg.app, sizeof(cfg.app));
	if (cfg.app[0] && strpbrk(cfg.app, "{}, =\"'")) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "WALLPROF_PYROSCOPE_APP='%.64s' holds one of {}, =\"' or a space; "
			    "using the program's name",
			    cfg.app);
		cfg.app[0] = 0;
	}
	wp_cv_env_str("WALLPROF_PYROSCOPE_LABELS", cfg.labels, sizeof(cfg.labels));
	if (cfg.labels[0] && !labels_ok(cfg.labels)) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "WALLPROF_PYROSCOPE_LABELS='%.64s' is not name=value,...; sent "
			    "without labels",
			    cfg.labels);
		cfg.labels[0] = 0;
	}
	cfg.threads = wp_cv_env_flag("WALLPROF_PYROSCOPE_THREADS", 0);
	wp_cv_env_str("WALLPROF_PYROSCOPE_TENANT", cfg.tenant, sizeof(cfg.tenant));
	wp_cv_env_str("WALLPROF_PYROSCOPE_TOKEN", cfg.token, sizeof(cfg.token));
	if (cfg.tenant[0])
		snprintf(cfg.tenant_hdr, sizeof(cfg.tenant_hdr), "X-Scope-OrgID: %s", cfg.tenant);
	if (cfg.token[0])
		snprintf(cfg.token_hdr, sizeof(cfg.token_hdr), "Authorization: Bearer %s",
			 cfg.token);
	return 1;
}

/* Appends `s` to `out` percent-encoded (RFC 3986 unreserved kept). */
static size_t put_escaped(char *out, size_t n, size_t len, const char *s)
{
	for (; *s && n + 4 < len; s++) {
		unsigned char c = (unsigned char)*s;

		if (isalnum(c) || strchr("-._~", c))
			out[n++] = (char)c;
		else
			n += (size_t)snprintf(out + n, len - n, "%%%02X", c);
	}
	out[n < len ? n : len - 1] = 0;
	return n;
}

/* The program's name for Pyroscope: the command line's first word's base
 * name, "[_a-zA-Z0-9.-]" only. */
static void program_name(const struct wp_profile *p, char *out, size_t len)
{
	const char *c = p->cmdline && *p->cmdline ? p->cmdline : "unknown";
	const char *end = strchr(c, ' '), *base = c;
	size_t n = 0;

	if (!end)
		end = c + strlen(c);
	for (const char *q = c; q < end; q++)
		if (*q == '/')
			base = q + 1;
	for (; base < end && n + 1 < len; base++)
		out[n++] = isalnum((unsigned char)*base) || strchr("_.-", *base) ? *base : '_';
	if (!n && len > 7)
		n = (size_t)snprintf(out, len, "unknown");
	out[n] = 0;
}

/* The Pyroscope push of `m`: pprof, its time range in whole seconds. */
int wp_cv_pyroscope_put(const struct wp_model *m, const char *run, const char *what)
{
	const struct wp_profile *p = &m->p;
	const struct wp_format *f = wp_format_find("pprof");
	struct wp_format_opts o = { .platform = m->platform,
				    .pprof_no_thread_labels = !cfg.threads };
	struct wp_out_stats st;
	char err[512], name[1024], url[2048], app[128];
	double from, until;
	char *body = NULL;
	size_t len = 0, n;
	int rc;

	if (wp_profile_count(p) < 2)
		return 0; /* a tail of a tick or two at exit: nothing to look at */
	if (!f || wp_format_write_mem(f, m, &o, &body, &len, &st, err, sizeof(err)) < 0) {
		wp_cv_event(WP_CV_INFO, "info", NULL, 0, "%s not sent to Pyroscope: %s", what,
			    f ? err : "no pprof writer");
		return -1;
	}
	from = (double)((int64_t)p->samples[0].t_ns + p->realtime_offset_ns) / 1e9;
	until = (double)((int64_t)wp_profile_last_ns(p) + p->realtime_offset_ns) / 1e9;
	if (cfg.app[0])
		snprintf(app, sizeof(app), "%s", cfg.app);
	else
		program_name(p, app, sizeof(app));
	snprintf(name, sizeof(name), "%s{%s}", app, cfg.labels);
	n = (size_t)snprintf(url, sizeof(url), "%s/ingest?name=", cfg.base);
	n = put_escaped(url, n, sizeof(url), name);
	if (n + 128 >= sizeof(url) ||
	    (size_t)snprintf(url + n, sizeof(url) - n,
			     "&from=%.0f&until=%.0f&format=pprof&sampleRate=%u&spyName=libwallprof",
			     floor(from), ceil(until) > floor(from) ? ceil(until) : floor(from) + 1,
			     p->hz) >= sizeof(url) - n) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "%s not sent to Pyroscope: its URL would be longer than %zu bytes "
			    "(WALLPROF_PYROSCOPE_URL, _APP, _LABELS)",
			    what, sizeof(url) - 1);
		free(body);
		return -1;
	}
	{
		char ctype[128];
		size_t mlen = 0;
		char *multi = multipart(body, len, ctype, sizeof(ctype), &mlen);
		struct wp_upload_item it = {
			.url = url,
			.category = NULL,
			.content_type = ctype,
			.gzip = 0, /* pprof is gzipped already */
			.body = multi,
			.len = mlen,
			.what = what,
		};
		size_t h = 0;

		if (cfg.tenant_hdr[0])
			it.headers[h++] = cfg.tenant_hdr;
		if (cfg.token_hdr[0])
			it.headers[h++] = cfg.token_hdr;
		if (!multi) {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "%s not sent to Pyroscope: out of memory", what);
			rc = -1;
		} else {
			rc = wp_cv_send_put(run, &it);
		}
		free(multi);
	}
	free(body);
	return rc;
}
