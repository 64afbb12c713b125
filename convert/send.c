/* send: what the library's converter uploads once a dump is converted
 * (convert.h): a chunk as a Sentry profile_chunk envelope, an exit,
 * snapshot or exec profile as a Sentry profile with its transaction (when
 * chunks are off: they already hold those samples), and either as pprof to
 * Pyroscope's /ingest (pyroscope.c). Everything goes through the spool (upload/upload.h):
 * put first, then a flush bounded by WALLPROF_UPLOAD_TIMEOUT, so what is
 * not sent by then waits for the next flush or the next run. */
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
	int send_args;         /* the command line's arguments too */
	unsigned timeout_s;
	char spool_dir[4096];
	struct wp_spool_config spool;
};

static struct wp_cv_send cfg;
static double cap_ms; /* CLOCK_MONOTONIC ms by which flushes must end (0: none) */

void wp_cv_send_cap(double deadline_ms)
{
	cap_ms = deadline_ms > 0 ? deadline_ms : 0;
}

void wp_cv_env_str(const char *name, char *out, size_t max)
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

int wp_cv_env_flag(const char *name, int def)
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

int wp_cv_send_load(void)
{
	static int loaded;
	char dsn[1024], err[256];
	const char *v;

	if (loaded)
		return wp_cv_send_on();
	loaded = 1;
	memset(&cfg, 0, sizeof(cfg));
	wp_cv_env_str("WALLPROF_SENTRY_DSN", dsn, sizeof(dsn));
	if (dsn[0]) {
		if (wp_dsn_parse(dsn, &cfg.dsn, err, sizeof(err)) == 0)
			cfg.sentry = 1;
		/* else the library said so at start */
	}
	cfg.pyroscope = wp_cv_pyroscope_load();
	if (!cfg.sentry && !cfg.pyroscope)
		return 0;
	wp_cv_env_str("WALLPROF_SENTRY_ENVIRONMENT", cfg.environment, sizeof(cfg.environment));
	wp_cv_env_str("WALLPROF_SENTRY_RELEASE", cfg.release, sizeof(cfg.release));
	cfg.send_args = wp_cv_env_flag("WALLPROF_SEND_ARGS", 1);
	cfg.timeout_s = DEFAULT_UPLOAD_TIMEOUT;
	/* As the library read it (it said so once, at start, if it was bad). */
	v = getenv("WALLPROF_UPLOAD_TIMEOUT");
	if (v && *v) {
		char *end;
		unsigned long t = strtoul(v, &end, 10);

		if (!*end && t >= 1 && t <= MAX_UPLOAD_TIMEOUT)
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

/* The profiler id in 32 lowercase hex digits. */
static void profiler_hex(const struct wp_profile *p, char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", p->profiler_id[i]);
}

/* "<pid>-<profiler id>": the spool's run of the profiled process. */
static void run_name(const struct wp_profile *p, char *out, size_t len)
{
	char id[33];

	profiler_hex(p, id);
	snprintf(out, len, "%u-%s", p->pid, id);
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

int wp_cv_send_put(const char *run, const struct wp_upload_item *it)
{
	char err[512];

	if (wp_spool_put(&cfg.spool, run, it, err, sizeof(err)) == 0)
		return 1;
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

	profiler_hex(p, id);
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

		rc = wp_cv_send_put(run, &it);
	}
	free(body);
	return rc;
}

static int send_model(const struct wp_model *m);

int wp_cv_send_model(const struct wp_model *whole)
{
	struct wp_model tail;
	int rc;

	if (!wp_cv_send_on())
		return 0;
	/* With chunks on, an exit, exec or snapshot profile holds samples the
	 * chunks carry: only what no chunk took goes, as the next chunk. */
	if (whole->p.tail_chunk) {
		if (wp_cv_tail_model(whole, &tail) < 0) {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "upload: out of memory for the last chunk");
			return -1;
		}
		rc = send_model(&tail);
		wp_cv_tail_free(&tail);
		return rc;
	}
	if (!whole->p.chunk && whole->p.chunks_on)
		return 0;
	return send_model(whole);
}

/* Spools `m` (a whole profile or the tail of one) and flushes the spool. */
static int send_model(const struct wp_model *m)
{
	const struct wp_profile *p;
	char run[64], what[96];
	struct wp_flush_result r;
	double deadline;
	int queued = 0, failed = 0, rc;

	p = &m->p;
	run_name(p, run, sizeof(run));
	if (p->chunk)
		snprintf(what, sizeof(what), "chunk %u of process %u", p->chunk, p->pid);
	else if (p->snapshot)
		snprintf(what, sizeof(what), "snapshot %d of process %u", p->snapshot, p->pid);
	else
		snprintf(what, sizeof(what), "the profile of process %u", p->pid);
	if (cfg.sentry)
		rc = put_sentry(m, run, what), queued += rc > 0, failed += rc < 0;
	if (cfg.pyroscope)
		rc = wp_cv_pyroscope_put(m, run, what), queued += rc > 0, failed += rc < 0;
	if (!queued) /* nothing worth sending (a tail of a tick), or nothing spooled */
		return failed ? -1 : 1;
	memset(&r, 0, sizeof(r));
	deadline = wp_cv_mono_ms() + cfg.timeout_s * 1000.0;
	if (cap_ms > 0 && cap_ms < deadline)
		deadline = cap_ms; /* the first process is exiting: its bound */
	if (wp_spool_flush(&cfg.spool, run, deadline, &r, say, NULL) < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "upload: %s", r.last_error);
		return 1;
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
		/* In the index, the root's report shows the last word on
		 * uploads when something is left: this one says a backlog is
		 * gone (only then: the index is not to grow by a line a chunk). */
		wp_cv_event(wp_cv_to_index() && r.sent > (unsigned)queued ? WP_CV_INFO
									  : WP_CV_DEBUG,
			    "info", NULL, 0, "upload: %u sent, 0 left", r.sent);
	return 1;
}
