/* flush: wp_spool_flush (upload.h). The caller's run first, then the runs
 * of processes that are gone, each under its lock; per item Sentry's
 * transport rules (2xx sent, 429 kept under its limit, other 4xx dropped,
 * network errors and 5xx kept with the endpoint backed off); every request
 * bounded by the flush's deadline. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "upload_int.h"

#define RUN_LOCK "lock"
#define STALE_S 3600   /* a run whose newest item is older is adopted whatever its pid */
#define LOCK_STEP_MS 10
#define MIN_REQUEST_MS 5 /* less time left than this: no new request */

struct endpoint {
	char *key; /* the URL up to its query */
	struct wp_up_state st;
	int stopped; /* a network error or 5xx in this flush */
	int said;    /* its backoff told */
};

struct flush {
	const struct wp_spool_config *sc;
	int rootfd;
	double deadline;
	struct wp_flush_result *r;
	wp_upload_say_fn *say;
	void *ctx;
	struct wp_up_http *http;
	struct endpoint *ep;
	size_t nep;
	int stop; /* out of time, or libcurl could not be loaded */
};

void wp_upload_redact(const char *in, char *out, size_t len)
{
	size_t o = 0;

	if (!len)
		return;
	while (*in && o + 1 < len) {
		const char *auth, *at = NULL;
		size_t n;

		if (strncmp(in, "://", 3)) {
			out[o++] = *in++;
			continue;
		}
		/* the authority: up to a path, query, fragment, blank or quote */
		auth = in + 3;
		n = strcspn(auth, "/?#\"'<> \t\r\n");
		for (size_t i = 0; i < n; i++)
			if (auth[i] == '@')
				at = auth + i;
		if (!at) {
			out[o++] = *in++;
			continue;
		}
		for (const char *r = "://***"; *r && o + 1 < len; r++)
			out[o++] = *r;
		in = at; /* the '@' and the host follow */
	}
	out[o] = '\0';
}

static void say(struct flush *f, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(struct flush *f, int level, const char *fmt, ...)
{
	char raw[8192], msg[512]; /* raw holds a whole URL: none is cut before redaction */
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	/* URLs (items', Location's, libcurl's messages) may carry user:pass@ */
	wp_upload_redact(raw, msg, sizeof(msg));
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
	if (level <= 2) {
		size_t n = strnlen(msg, sizeof(f->r->last_error) - 1);

		memcpy(f->r->last_error, msg, n);
		f->r->last_error[n] = '\0';
	}
	if (f->say)
		f->say(f->ctx, level, msg);
}

static int pid_alive(unsigned pid)
{
	return pid && (!kill((pid_t)pid, 0) || errno == EPERM);
}

static struct endpoint *endpoint(struct flush *f, const char *url)
{
	size_t n = wp_up_endpoint_len(url);
	struct endpoint *e;
	void *p;

	for (size_t i = 0; i < f->nep; i++)
		if (strlen(f->ep[i].key) == n && !memcmp(f->ep[i].key, url, n))
			return &f->ep[i];
	p = realloc(f->ep, (f->nep + 1) * sizeof(*f->ep));
	if (!p)
		return NULL;
	f->ep = p;
	e = &f->ep[f->nep];
	memset(e, 0, sizeof(*e));
	e->key = strndup(url, n);
	if (!e->key)
		return NULL;
	f->nep++;
	wp_up_state_load(f->rootfd, url, &e->st);
	return e;
}

/* The whole file of item `name`, or NULL (errno ENOENT: gone meanwhile;
 * EFBIG: over any item's size). */
static char *read_item(int runfd, const char *name, size_t *len)
{
	int fd = openat(runfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	size_t n = 0;
	char *buf;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = ENOENT;
		return NULL;
	}
	if ((uint64_t)st.st_size > (uint64_t)WP_UP_MAX_HEAD + WP_UP_MAX_BODY) {
		close(fd);
		errno = EFBIG;
		return NULL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break; /* shrank: the parser says truncated */
		n += (size_t)r;
	}
	close(fd);
	*len = n;
	return buf;
}

static void drop(struct flush *f, int runfd, const char *run, const char *name)
{
	if (!unlinkat(runfd, name, 0))
		f->r->dropped++;
	(void)run;
}

/* One item: sent, kept or dropped. */
static void send_item(struct flush *f, int runfd, const char *run, const char *name)
{
	struct wp_up_state before;
	struct wp_up_parsed it;
	struct wp_up_response rs;
	struct wp_up_request rq;
	struct endpoint *ep;
	char err[160];
	const char *what;
	double left, wait;
	size_t len = 0;
	char *buf;

	left = f->deadline - wp_up_mono_ms();
	if (left < MIN_REQUEST_MS) {
		f->stop = 1;
		return;
	}
	buf = read_item(runfd, name, &len);
	if (!buf) {
		if (errno == EFBIG) {
			say(f, 1, "spool: deleted %s/%s: over 256 MiB, not a spool item", run,
			    name);
			drop(f, runfd, run, name);
		}
		return;
	}
	if (wp_up_item_parse(buf, len, &it, err, sizeof(err))) {
		say(f, 1, "spool: deleted %s/%s: %s", run, name, err);
		drop(f, runfd, run, name);
		goto out;
	}
	what = it.what[0] ? it.what : name;
	ep = endpoint(f, it.url);
	if (!ep) {
		say(f, 1, "spool: out of memory");
		f->stop = 1;
		goto out;
	}
	if (ep->stopped)
		goto out;
	if (ep->st.backoff_until > wp_up_real_ms()) {
		if (!ep->said++)
			say(f, 3, "%s: backed off for %.1f s more after errors", ep->key,
			    (ep->st.backoff_until - wp_up_real_ms()) / 1e3);
		goto out;
	}
	wait = wp_up_limited(&ep->st, it.category, wp_up_real_ms());
	if (wait > 0) {
		f->r->rate_limited++;
		say(f, 3, "%s: rate-limited for %.1f s more; kept", what, wait / 1e3);
		goto out;
	}

	rq.url = it.url;
	rq.content_type = it.content_type;
	rq.headers = it.headers;
	rq.gzip = it.gzip;
	rq.body = it.body;
	rq.len = it.len;
	/* libcurl is loaded for the first request that goes out; without it
	 * nothing can, and everything stays for a later flush */
	if (!f->http && !(f->http = wp_up_http_new())) {
		say(f, 2, "%s", wp_up_http_error());
		f->stop = 1;
		goto out;
	}
	wp_up_http_post(f->http, &rq, f->deadline - wp_up_mono_ms(), &rs);
	if (!rs.status && rs.permanent) {
		/* the URL itself: the endpoint is not backed off for it */
		say(f, 1, "dropped %s: %s: %s", what, ep->key, rs.error);
		drop(f, runfd, run, name);
		goto out;
	}
	before = ep->st;
	wp_up_on_response(&ep->st, rs.status, rs.retry_after, rs.rate_limits, wp_up_real_ms());
	if (memcmp(&before, &ep->st, sizeof(before)))
		wp_up_state_save(f->rootfd, it.url, &ep->st, rs.status >= 200 && rs.status < 300);

	if (rs.status >= 200 && rs.status < 300) {
		if (!unlinkat(runfd, name, 0) || errno == ENOENT)
			f->r->sent++;
		say(f, 3, "sent %s (HTTP %ld)", what, rs.status);
	} else if (rs.status == 429) {
		f->r->rate_limited++;
		say(f, 2, "%s: rate-limited by %s (HTTP 429) for %.1f s; kept", what, ep->key,
		    wp_up_limited(&ep->st, it.category, wp_up_real_ms()) / 1e3);
	} else if (rs.status >= 400 && rs.status < 500) {
		say(f, 1, "dropped %s: HTTP %ld from %s", what, rs.status, ep->key);
		drop(f, runfd, run, name);
	} else if (rs.status >= 300 && rs.status < 400) {
		/* redirects are not followed (a POST's body and credentials
		 * would go elsewhere): the address is wrong, for good */
		say(f, 1,
		    "dropped %s: HTTP %ld from %s, a redirect to %s (not followed: fix the address)",
		    what, rs.status, ep->key,
		    rs.location[0] ? rs.location : "nowhere (no Location)");
		drop(f, runfd, run, name);
	} else {
		ep->stopped = 1;
		if (rs.status)
			say(f, 2, "cannot send %s: HTTP %ld from %s; kept, retried after %.0f s",
			    what, rs.status, ep->key, ep->st.backoff_ms / 1e3);
		else
			say(f, 2, "cannot send %s to %s: %s%s; kept, retried after %.0f s", what,
			    ep->key, rs.error,
			    rs.tls ? " (a TLS certificate problem: the server's certificate or "
				     "the CA store needs fixing)"
				   : "",
			    ep->st.backoff_ms / 1e3);
	}
out:
	free(buf);
}

/* Takes the run's lock: when `wait` (our own run: its other converters
 * hold it briefly) tried without blocking until the deadline; else (a run
 * adopted) tried once, a busy run being another flush's to send. Returns
 * the lock's descriptor, or -1. */
static int lock_run(struct flush *f, int runfd, const char *run, int wait)
{
	int fd = openat(runfd, RUN_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0) {
		say(f, 1, "spool: cannot open %s/%s/" RUN_LOCK ": %s", f->sc->dir, run,
		    strerror(errno));
		return -1;
	}
	while (flock(fd, LOCK_EX | LOCK_NB)) {
		double left = f->deadline - wp_up_mono_ms();
		struct timespec ts = { 0, LOCK_STEP_MS * 1000000L };

		if (errno != EWOULDBLOCK && errno != EINTR) {
			say(f, 1, "spool: cannot lock %s/%s: %s", f->sc->dir, run, strerror(errno));
			close(fd);
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (!wait || left <= 0) {
			say(f, 3, "spool: %s is being flushed by another process; skipped", run);
			close(fd);
			return -1;
		}
		if (left < LOCK_STEP_MS)
			ts.tv_nsec = (long)(left * 1e6);
		nanosleep(&ts, NULL);
	}
	return fd;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Sends run `run`'s items, oldest first, then those put meanwhile, under
 * the run's lock (waited for when `own`); removes the run once empty if
 * its process is gone. */
static void flush_run(struct flush *f, const char *run, int own)
{
	char(*tried)[WP_UP_NAME_MAX] = NULL;
	size_t ntried = 0;
	int runfd, lockfd;

	runfd = wp_up_run_open(f->rootfd, run, 0);
	if (runfd < 0)
		return;
	lockfd = lock_run(f, runfd, run, own);
	if (lockfd < 0) {
		close(runfd);
		return;
	}
	while (!f->stop) {
		struct wp_up_list l = { 0 };
		size_t base = ntried;
		void *p;

		if (wp_up_list_run(runfd, run, &l)) {
			say(f, 1, "spool: cannot list %s/%s: %s", f->sc->dir, run, strerror(errno));
			wp_up_list_free(&l);
			break;
		}
		wp_up_list_sort(&l);
		p = realloc(tried, (ntried + l.n + 1) * sizeof(*tried));
		if (!p) {
			wp_up_list_free(&l);
			break;
		}
		tried = p;
		for (size_t i = 0; i < l.n && !f->stop; i++) {
			if (base && bsearch(l.e[i].name, tried, base, sizeof(*tried), cmp_name))
				continue;
			memcpy(tried[ntried++], l.e[i].name, WP_UP_NAME_MAX);
			send_item(f, runfd, run, l.e[i].name);
		}
		wp_up_list_free(&l);
		if (ntried == base)
			break; /* nothing new since the last listing */
		qsort(tried, ntried, sizeof(*tried), cmp_name);
	}
	free(tried);
	if (!f->stop && !pid_alive(wp_up_run_pid(run))) {
		struct wp_up_list l = { 0 };

		if (!wp_up_list_run(runfd, run, &l) && l.n == 0) {
			unlinkat(runfd, RUN_LOCK, 0);
			unlinkat(f->rootfd, run, AT_REMOVEDIR); /* fails if anything came */
		}
		wp_up_list_free(&l);
	}
	close(lockfd);
	close(runfd);
}

/* Whether a run other than ours, whose items are `l`, is left to its own
 * process: its pid lives and its newest item is younger than an hour (an
 * older one means the pid was reused, or its converter cannot send). */
static int live(const char *run, const struct wp_up_list *l)
{
	int64_t newest = 0;

	if (!pid_alive(wp_up_run_pid(run)))
		return 0;
	for (size_t i = 0; i < l->n; i++)
		if (l->e[i].mtime_s > newest)
			newest = l->e[i].mtime_s;
	return !newest || (int64_t)time(NULL) - newest < STALE_S;
}

/* Lists run `run`'s items into `l`; -1 when it cannot be opened. */
static int list_run(struct flush *f, const char *run, struct wp_up_list *l)
{
	int fd = wp_up_run_open(f->rootfd, run, 0);

	if (fd < 0)
		return -1;
	wp_up_list_run(fd, run, l);
	close(fd);
	return 0;
}

static int run_live(struct flush *f, const char *run)
{
	struct wp_up_list l = { 0 };
	int rc;

	if (!pid_alive(wp_up_run_pid(run)))
		return 0;
	rc = list_run(f, run, &l) ? 1 : live(run, &l);
	wp_up_list_free(&l);
	return rc;
}

/* What is still spooled once the flush ends: r->left, the items of the
 * runs this flush answers for (its own, and those of processes gone, which
 * it adopted or could adopt); r->running, those of live processes, their
 * own converters' to send. */
static void count_left(struct flush *f, const char *run)
{
	char(*runs)[WP_UP_RUN_MAX] = NULL;
	size_t n = 0;

	if (wp_up_list_runs(f->rootfd, &runs, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		struct wp_up_list l = { 0 };

		if (!list_run(f, runs[i], &l)) {
			if ((run && !strcmp(runs[i], run)) || !live(runs[i], &l))
				f->r->left += (unsigned)l.n;
			else
				f->r->running += (unsigned)l.n;
		}
		wp_up_list_free(&l);
	}
	free(runs);
}

int wp_spool_flush(const struct wp_spool_config *sc, const char *run, double deadline_ms,
		   struct wp_flush_result *r, wp_upload_say_fn *say_fn, void *ctx)
{
	struct flush f = { .sc = sc, .deadline = deadline_ms, .r = r, .say = say_fn, .ctx = ctx };
	char(*runs)[WP_UP_RUN_MAX] = NULL;
	size_t nruns = 0;
	unsigned pruned;

	memset(r, 0, sizeof(*r));
	f.rootfd = wp_up_root_open(sc->dir, 0, r->last_error, sizeof(r->last_error));
	if (f.rootfd == -2) {
		r->last_error[0] = '\0';
		return 0; /* no spool, nothing to send */
	}
	if (f.rootfd < 0)
		return -1;
	pruned = wp_up_take_pruned(f.rootfd) +
		 wp_up_prune(f.rootfd, sc->max_files, sc->max_bytes, 0);
	wp_up_state_sweep(f.rootfd);
	if (pruned) {
		r->dropped += pruned;
		say(&f, 2,
		    "spool: %u item%s dropped, the oldest, to keep the spool within its bounds",
		    pruned, pruned == 1 ? "" : "s");
	}
	if (wp_up_list_runs(f.rootfd, &runs, &nruns)) {
		snprintf(r->last_error, sizeof(r->last_error), "spool: cannot list %s: %s", sc->dir,
			 strerror(errno));
		close(f.rootfd);
		return -1;
	}
	if (run && wp_up_run_name_ok(run))
		flush_run(&f, run, 1);
	for (size_t i = 0; i < nruns && !f.stop; i++)
		if ((!run || strcmp(runs[i], run)) && !run_live(&f, runs[i]))
			flush_run(&f, runs[i], 0);
	free(runs);
	wp_up_http_free(f.http);
	for (size_t i = 0; i < f.nep; i++)
		free(f.ep[i].key);
	free(f.ep);
	count_left(&f, run);
	close(f.rootfd);
	return 0;
}
