/* send: what the library's converter uploads once a dump is converted
 * (convert.h): a chunk as a Sentry profile_chunk envelope, an exit,
 * snapshot or exec profile as a Sentry profile with its transaction (when
 * chunks are off: they already hold those samples), and either as pprof to
 * Pyroscope's /ingest. Everything goes through the spool (upload/upload.h):
 * put first, then a flush bounded by WALLPROF_UPLOAD_TIMEOUT, so what is
 * not sent by then waits for the next flush or the next run. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../output/dsn.h"
#include "../output/envelope.h"
#include "../output/formats.h"
#include "../output/model.h"
#include "../upload/upload.h"
#include "convert.h"

#define DEFAULT_UPLOAD_TIMEOUT 5
#define MAX_UPLOAD_TIMEOUT 300

struct wp_cv_send {
	int sentry, pyroscope;
	struct wp_dsn dsn;
	char environment[128], release[200];
	char pyro_base[1024];  /* the URL without a trailing '/' */
	char pyro_app[128];    /* "" : the program's name */
	char pyro_labels[512]; /* "k=v,k=v", checked */
	int pyro_threads;      /* thread labels in Pyroscope's pprof */
	int send_args;         /* the command line's arguments too */
	int chunks;            /* WALLPROF_CHUNK_SECONDS on: profiles go as chunks only */
	unsigned timeout_s;
	char spool_dir[4096];
	struct wp_spool_config spool;
};

static struct wp_cv_send cfg;

/* A string variable without control characters, at most `max - 1` bytes,
 * into `out` (""), one event when it is not. */
static void env_str(const char *name, char *out, size_t max)
{
	const char *v = getenv(name);

	out[0] = 0;
	if (!v || !*v)
		return;
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "%s holds control characters; not sent", name);
			return;
		}
	if (strlen(v) >= max) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "%s is longer than %zu bytes; not sent",
			    name, max - 1);
		return;
	}
	memcpy(out, v, strlen(v) + 1);
}

static int env_flag(const char *name, int def)
{
	const char *v = getenv(name);

	if (!v || !*v)
		return def;
	if (!strcmp(v, "1"))
		return 1;
	if (!strcmp(v, "0"))
		return 0;
	wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "%s='%.32s' is not 0 or 1; using %d", name, v,
		    def);
	return def;
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

static void load_pyroscope(void)
{
	char url[1024];
	size_t n;

	env_str("WALLPROF_PYROSCOPE_URL", url, sizeof(url));
	if (!url[0])
		return;
	if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
		char shown[1024];

		wp_upload_redact(url, shown, sizeof(shown));
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "WALLPROF_PYROSCOPE_URL='%.64s' is not an http:// or https:// URL; "
			    "nothing sent to Pyroscope",
			    shown);
		return;
	}
	n = strlen(url);
	while (n > 0 && url[n - 1] == '/')
		url[--n] = 0;
	memcpy(cfg.pyro_base, url, n + 1);
	env_str("WALLPROF_PYROSCOPE_APP", cfg.pyro_app, sizeof(cfg.pyro_app));
	if (cfg.pyro_app[0] && strpbrk(cfg.pyro_app, "{}, =\"'")) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "WALLPROF_PYROSCOPE_APP='%.64s' holds one of {}, =\"' or a space; "
			    "using the program's name",
			    cfg.pyro_app);
		cfg.pyro_app[0] = 0;
	}
	env_str("WALLPROF_PYROSCOPE_LABELS", cfg.pyro_labels, sizeof(cfg.pyro_labels));
	if (cfg.pyro_labels[0] && !labels_ok(cfg.pyro_labels)) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "WALLPROF_PYROSCOPE_LABELS='%.64s' is not name=value,...; sent "
			    "without labels",
			    cfg.pyro_labels);
		cfg.pyro_labels[0] = 0;
	}
	cfg.pyro_threads = env_flag("WALLPROF_PYROSCOPE_THREADS", 0);
	cfg.pyroscope = 1;
}

int wp_cv_send_load(void)
{
	static int loaded;
	char dsn[1024], err[256];
	const char *v;

	if (loaded)
		return wp_cv_send_on();
	loaded = 1;
	memset(&cfg, 0, sizeof(cfg));
	env_str("WALLPROF_SENTRY_DSN", dsn, sizeof(dsn));
	if (dsn[0]) {
		if (wp_dsn_parse(dsn, &cfg.dsn, err, sizeof(err)) == 0)
			cfg.sentry = 1;
		/* else the library said so at start */
	}
	load_pyroscope();
	if (!cfg.sentry && !cfg.pyroscope)
		return 0;
	env_str("WALLPROF_SENTRY_ENVIRONMENT", cfg.environment, sizeof(cfg.environment));
	env_str("WALLPROF_SENTRY_RELEASE", cfg.release, sizeof(cfg.release));
	cfg.send_args = env_flag("WALLPROF_SEND_ARGS", 1);
	v = getenv("WALLPROF_CHUNK_SECONDS");
	cfg.chunks = v && atoi(v) > 0;
	cfg.timeout_s = DEFAULT_UPLOAD_TIMEOUT;
	v = getenv("WALLPROF_UPLOAD_TIMEOUT");
	if (v && *v) {
		char *end;
		unsigned long t = strtoul(v, &end, 10);

		if (*end || t < 1 || t > MAX_UPLOAD_TIMEOUT)
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "WALLPROF_UPLOAD_TIMEOUT='%.32s' is not 1 to %d seconds; "
				    "using %d",
				    v, MAX_UPLOAD_TIMEOUT, DEFAULT_UPLOAD_TIMEOUT);
		else
			cfg.timeout_s = (unsigned)t;
	}
	if (wp_spool_config_from_env(&cfg.spool, cfg.spool_dir, sizeof(cfg.spool_dir), err,
				     sizeof(err)) < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "%s; nothing uploaded", err);
		cfg.sentry = cfg.pyroscope = 0;
		return 0;
	}
	return 1;
}

int wp_cv_send_on(void)
{
	return cfg.sentry || cfg.pyroscope;
}

/* "<pid>-<profiler id>": the spool's run of the profiled process. */
static void run_name(const struct wp_profile *p, char *out, size_t len)
{
	size_t n = (size_t)snprintf(out, len, "%u-", p->pid);

	for (int i = 0; i < 16 && n + 2 < len; i++, n += 2)
		snprintf(out + n, len - n, "%02x", p->profiler_id[i]);
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

/* The flush's lines: an envelope dropped for good is said; one kept is
 * said once, in the summary (wp_cv_send_model). */
static void say(void *ctx, int level, const char *msg)
{
	(void)ctx;
	if (level == WP_CV_ERROR)
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "%s", msg);
	else
		wp_cv_event(WP_CV_DEBUG, "info", NULL, 0, "%s", msg);
}

/* Puts one item in the spool; an event when it cannot. */
static int put(const char *run, const struct wp_upload_item *it)
{
	char err[512];

	if (wp_spool_put(&cfg.spool, run, it, err, sizeof(err)) == 0)
		return 0;
	wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "%s not uploaded: %s", it->what, err);
	return -1;
}

/* The Sentry item of `m`: a chunk, or a profile with its transaction. */
static int put_sentry(const struct wp_model *m, const char *run, const char *what)
{
	const struct wp_profile *p = &m->p;
	struct wp_format_opts o = { 0 };
	struct wp_out_stats st;
	char err[512], id[33];
	char *body = NULL;
	size_t len = 0;
	int rc;

	for (int i = 0; i < 16; i++)
		snprintf(id + 2 * i, 3, "%02x", p->profiler_id[i]);
	o.platform = m->platform;
	o.release = cfg.release[0] ? cfg.release : NULL;
	o.environment = cfg.environment[0] ? cfg.environment : NULL;
	o.no_args = !cfg.send_args;
	if (p->chunk) {
		o.chunk = 1;
		o.profiler_id = id;
		rc = wp_envelope_chunk(m, &o, &body, &len, &st, err, sizeof(err));
	} else {
		rc = wp_envelope_profile(m, &o, &body, &len, &st, err, sizeof(err));
	}
	if (rc < 0) {
		/* a chunk with too few samples: nothing to send, as for a file */
		if (!strncmp(err, WP_OUT_TOO_FEW, strlen(WP_OUT_TOO_FEW)))
			return 0;
		wp_cv_event(WP_CV_INFO, "info", NULL, 0, "%s not sent to Sentry: %s", what, err);
		return -1;
	}
	if (!p->chunk && st.duration_s > WP_SENTRY_MAX_SECONDS) {
		wp_cv_event(WP_CV_INFO, "info", NULL, 0,
			    "%s not sent to Sentry: it covers %.1f s, Sentry takes profiles of "
			    "%d s at most (WALLPROF_CHUNK_SECONDS sends chunks instead)",
			    what, st.duration_s, WP_SENTRY_MAX_SECONDS);
		free(body);
		return -1;
	}
	{
		struct wp_upload_item it = {
			.url = cfg.dsn.endpoint,
			.category = p->chunk ? "profile_chunk" : "profile;transaction",
			.content_type = "application/x-sentry-envelope",
			.headers = { cfg.dsn.auth, NULL },
			.gzip = 1,
			.body = body,
			.len = len,
			.what = what,
		};

		rc = put(run, &it);
	}
	free(body);
	return rc;
}

/* The Pyroscope push of `m`: pprof, its time range in whole seconds. */
static int put_pyroscope(const struct wp_model *m, const char *run, const char *what)
{
	const struct wp_profile *p = &m->p;
	const struct wp_format *f = wp_format_find("pprof");
	struct wp_format_opts o = { .platform = m->platform,
				    .pprof_no_thread_labels = !cfg.pyro_threads };
	struct wp_out_stats st;
	char err[512], name[1024], url[2048], app[128];
	double from, until;
	char *body = NULL;
	size_t len = 0, n;
	int rc;

	if (!p->nr_samples)
		return 0;
	if (!f || wp_format_write_mem(f, m, &o, &body, &len, &st, err, sizeof(err)) < 0) {
		wp_cv_event(WP_CV_INFO, "info", NULL, 0, "%s not sent to Pyroscope: %s", what,
			    f ? err : "no pprof writer");
		return -1;
	}
	from = (double)((int64_t)p->samples[0].t_ns + p->realtime_offset_ns) / 1e9;
	until = (double)((int64_t)p->samples[p->nr_samples - 1].t_ns + p->realtime_offset_ns) / 1e9;
	if (cfg.pyro_app[0])
		snprintf(app, sizeof(app), "%s", cfg.pyro_app);
	else
		program_name(p, app, sizeof(app));
	snprintf(name, sizeof(name), "%s{%s}", app, cfg.pyro_labels);
	n = (size_t)snprintf(url, sizeof(url), "%s/ingest?name=", cfg.pyro_base);
	n = put_escaped(url, n, sizeof(url), name);
	snprintf(url + n, sizeof(url) - n,
		 "&from=%.0f&until=%.0f&format=pprof&sampleRate=%u&spyName=libwallprof",
		 floor(from), ceil(until) > floor(from) ? ceil(until) : floor(from) + 1, p->hz);
	{
		struct wp_upload_item it = {
			.url = url,
			.category = NULL,
			.content_type = "application/octet-stream",
			.gzip = 0, /* pprof is gzipped already */
			.body = body,
			.len = len,
			.what = what,
		};

		rc = put(run, &it);
	}
	free(body);
	return rc;
}

int wp_cv_send_model(const struct wp_model *m)
{
	const struct wp_profile *p = &m->p;
	char run[64], what[96];
	struct wp_flush_result r;
	int queued = 0, failed = 0;

	if (!wp_cv_send_on())
		return 0;
	/* With chunks on, the exit (and snapshot) profiles hold samples the
	 * chunks already carry: only the chunks go. */
	if (!p->chunk && cfg.chunks)
		return 0;
	run_name(p, run, sizeof(run));
	if (p->chunk)
		snprintf(what, sizeof(what), "chunk %u of process %u", p->chunk, p->pid);
	else if (p->snapshot)
		snprintf(what, sizeof(what), "snapshot %d of process %u", p->snapshot, p->pid);
	else
		snprintf(what, sizeof(what), "the profile of process %u", p->pid);
	if (cfg.sentry) {
		if (put_sentry(m, run, what) == 0)
			queued++;
		else
			failed++;
	}
	if (cfg.pyroscope) {
		if (put_pyroscope(m, run, what) == 0)
			queued++;
		else
			failed++;
	}
	memset(&r, 0, sizeof(r));
	if (wp_spool_flush(&cfg.spool, run, wp_cv_mono_ms() + cfg.timeout_s * 1000.0, &r, say,
			   NULL) < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "upload: %s", r.last_error);
		return queued ? 1 : -1;
	}
	if (r.left)
		wp_cv_event(WP_CV_INFO, "info", NULL, 0,
			    "upload: %u sent, %u left in the spool %s (%s); the next converter or "
			    "run sends them, or `wallprof upload`",
			    r.sent, r.left, cfg.spool_dir,
			    r.last_error[0]  ? r.last_error
			    : r.rate_limited ? "rate-limited"
					     : "out of time");
	else if (r.sent)
		/* in the index, the root's report shows the last word on
		 * uploads only when something is left: this says nothing is */
		wp_cv_event(wp_cv_to_index() ? WP_CV_INFO : WP_CV_DEBUG, "info", NULL, 0,
			    "upload: %u sent, 0 left", r.sent);
	(void)failed;
	return queued ? 1 : -1;
}
