/* http: one POST with libcurl, and gzip with zlib. The system's CA store
 * (libcurl's default), proxies from the environment (https_proxy,
 * no_proxy: libcurl's default), no redirects, http and https only; the
 * connection is kept for the next request of the same flush.
 *
 * libcurl is loaded (dlopen) for the first request a flush sends, not
 * linked: what it links (TLS, Kerberos, LDAP, SSH, HTTP/2, IDN:
 * some thirty libraries) costs every start of the converter 3.7 ms of CPU,
 * and the library starts one for every profile, most of which upload
 * nothing (docs/DESIGN.md, "Libraries, and why these"). */
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "../output/output.h"
#include "upload_int.h"

/* The libcurl functions we call, from the library loaded at run time;
 * their types are the header's (no reference to the symbols is made).
 * The converter flushes from one thread only. */
static struct {
	__typeof__(&curl_global_init) global_init;
	__typeof__(&curl_easy_init) easy_init;
	__typeof__(&curl_easy_cleanup) easy_cleanup;
	__typeof__(&curl_easy_reset) easy_reset;
	__typeof__(&curl_easy_setopt) easy_setopt;
	__typeof__(&curl_easy_perform) easy_perform;
	__typeof__(&curl_easy_getinfo) easy_getinfo;
	__typeof__(&curl_easy_strerror) easy_strerror;
	__typeof__(&curl_slist_append) slist_append;
	__typeof__(&curl_slist_free_all) slist_free_all;
	__typeof__(&curl_url) url;
	__typeof__(&curl_url_set) url_set;
	__typeof__(&curl_url_get) url_get;
	__typeof__(&curl_url_cleanup) url_cleanup;
	__typeof__(&curl_free) free;
} cu;

static char load_error[256];

/* Loads libcurl and initializes it, once. Returns 0, or -1 with the reason
 * in load_error. Debian's libcurl4 is libcurl.so.4; libcurl3-gnutls has the
 * same interface under another name. */
static int load_curl(void)
{
	static const char *const names[] = { "libcurl.so.4", "libcurl-gnutls.so.4" };
	static int state; /* 0 not tried, 1 loaded, -1 failed */
	void *h = NULL;

	if (state)
		return state > 0 ? 0 : -1;
	state = -1;
	/* one already loaded first (libdw's debuginfod client brings the
	 * GnuTLS build) */
	for (size_t i = 0; i < sizeof(names) / sizeof(*names) && !h; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	for (size_t i = 0; i < sizeof(names) / sizeof(*names) && !h; i++) {
		const char *e;

		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!h && i == 0) /* the first one's reason: the usual build's */
			snprintf(load_error, sizeof(load_error), "cannot load libcurl (%s)",
				 (e = dlerror()) ? e : names[i]);
	}
	if (!h)
		return -1;
	load_error[0] = 0;
#define SYM(field, name)                                                             \
	if (!(*(void **)&cu.field = dlsym(h, name))) {                               \
		snprintf(load_error, sizeof(load_error), "libcurl has no %s", name); \
		return -1;                                                           \
	}
	SYM(global_init, "curl_global_init")
	SYM(easy_init, "curl_easy_init")
	SYM(easy_cleanup, "curl_easy_cleanup")
	SYM(easy_reset, "curl_easy_reset")
	SYM(easy_setopt, "curl_easy_setopt")
	SYM(easy_perform, "curl_easy_perform")
	SYM(easy_getinfo, "curl_easy_getinfo")
	SYM(easy_strerror, "curl_easy_strerror")
	SYM(slist_append, "curl_slist_append")
	SYM(slist_free_all, "curl_slist_free_all")
	SYM(url, "curl_url")
	SYM(url_set, "curl_url_set")
	SYM(url_get, "curl_url_get")
	SYM(url_cleanup, "curl_url_cleanup")
	SYM(free, "curl_free")
#undef SYM
	if (cu.global_init(CURL_GLOBAL_DEFAULT)) {
		snprintf(load_error, sizeof(load_error), "cannot start libcurl");
		return -1;
	}
	state = 1;
	return 0;
}

const char *wp_up_http_error(void)
{
	return load_error[0] ? load_error : "cannot start libcurl";
}

struct wp_up_http {
	CURL *curl;
};

struct wp_up_http *wp_up_http_new(void)
{
	struct wp_up_http *h;

	if (load_curl() < 0)
		return NULL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->curl = cu.easy_init();
	if (!h->curl) {
		free(h);
		return NULL;
	}
	return h;
}

void wp_up_http_free(struct wp_up_http *h)
{
	if (!h)
		return;
	cu.easy_cleanup(h->curl);
	free(h);
}

/* Copies a header's value (trimmed) into `out`, appended after ", " when
 * the header came more than once. */
static void keep_value(char *out, size_t cap, const char *v, size_t n)
{
	size_t have = strlen(out);

	while (n && (*v == ' ' || *v == '\t'))
		v++, n--;
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	if (have && have + 2 < cap) {
		memcpy(out + have, ", ", 2);
		have += 2;
	}
	if (have + n >= cap)
		n = cap - have - 1;
	memcpy(out + have, v, n);
	out[have + n] = '\0';
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct wp_up_response *rs = arg;
	size_t n = size * nmemb;
	static const char ra[] = "retry-after:", rl[] = "x-sentry-rate-limits:", lo[] = "location:";

	/* A new status line (a 100 Continue before the answer): start over. */
	if (n >= 5 && !memcmp(data, "HTTP/", 5)) {
		rs->retry_after[0] = '\0';
		rs->rate_limits[0] = '\0';
		rs->location[0] = '\0';
	} else if (n > sizeof(lo) - 1 && !strncasecmp(data, lo, sizeof(lo) - 1)) {
		rs->location[0] = '\0'; /* one, the last */
		keep_value(rs->location, sizeof(rs->location), data + sizeof(lo) - 1,
			   n - (sizeof(lo) - 1));
	} else if (n > sizeof(ra) - 1 && !strncasecmp(data, ra, sizeof(ra) - 1)) {
		keep_value(rs->retry_after, sizeof(rs->retry_after), data + sizeof(ra) - 1,
			   n - (sizeof(ra) - 1));
	} else if (n > sizeof(rl) - 1 && !strncasecmp(data, rl, sizeof(rl) - 1)) {
		keep_value(rs->rate_limits, sizeof(rs->rate_limits), data + sizeof(rl) - 1,
			   n - (sizeof(rl) - 1));
	}
	return n;
}

/* The response's body is not read: Sentry's is an event id. */
static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	(void)data;
	(void)arg;
	return size * nmemb;
}

/* Appends one header line; 1 on out of memory (the list unchanged). */
static int add(struct curl_slist **l, const char *line)
{
	struct curl_slist *t = cu.slist_append(*l, line);

	if (!t)
		return 1;
	*l = t;
	return 0;
}

/* curl_easy_perform with SIGPIPE blocked: with CURLOPT_NOSIGNAL (no
 * SIGALRM of libcurl's in the converter, which has its own), libcurl does
 * not ignore SIGPIPE itself, and a TLS write to a peer that closed would
 * end the process. A SIGPIPE of ours is taken back before unblocking. */
static CURLcode perform(CURL *c)
{
	sigset_t pipe, old, pending;
	int was_pending;
	CURLcode rc;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &old);
	sigpending(&pending);
	was_pending = sigismember(&pending, SIGPIPE);
	rc = cu.easy_perform(c);
	sigpending(&pending);
	if (!was_pending && sigismember(&pending, SIGPIPE)) {
		struct timespec zero = { 0, 0 };

		sigtimedwait(&pipe, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* Whether error `rc` is the URL's own: one that no retry can fix. A
 * malformed URL or an unsupported scheme can also come of a proxy's URL
 * (https_proxy), which the operator fixes: so only when libcurl's parser
 * refuses the URL itself. */
static int permanent(CURLcode rc, const char *url)
{
	CURLU *u;
	int bad;

	if (rc == CURLE_TOO_MANY_REDIRECTS)
		return 1;
	if (rc != CURLE_URL_MALFORMAT && rc != CURLE_UNSUPPORTED_PROTOCOL)
		return 0;
	u = cu.url();
	if (!u)
		return 0;
	bad = cu.url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK;
	if (!bad) {
		char *scheme = NULL;

		bad = cu.url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK || !scheme ||
		      (strcmp(scheme, "http") && strcmp(scheme, "https"));
		cu.free(scheme);
	}
	cu.url_cleanup(u);
	return bad;
}

/* Whether error `rc` is a TLS certificate problem (the server's, the CA
 * store's, a pinned key's): kept and retried, as an operator may fix it,
 * but said as such. */
static int tls_problem(CURLcode rc)
{
	switch (rc) {
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		return 1;
	default:
		return 0;
	}
}

int wp_up_http_post(struct wp_up_http *h, const struct wp_up_request *rq, double timeout_ms,
		    struct wp_up_response *rs)
{
	char errbuf[CURL_ERROR_SIZE] = "", line[1100];
	struct curl_slist *hdrs = NULL;
	CURL *c = h->curl;
	long ms = timeout_ms < 1 ? 1 : timeout_ms > 3.6e6 ? 3600000 : (long)timeout_ms;
	CURLcode rc;
	int bad = 0;

	memset(rs, 0, sizeof(*rs));
	cu.easy_reset(c);
	snprintf(line, sizeof(line), "Content-Type: %s", rq->content_type);
	bad |= add(&hdrs, line);
	if (rq->gzip)
		bad |= add(&hdrs, "Content-Encoding: gzip");
	/* No "Expect: 100-continue" round trip before the body. */
	bad |= add(&hdrs, "Expect:");
	for (size_t i = 0; rq->headers && rq->headers[i]; i++)
		bad |= add(&hdrs, rq->headers[i]);
	if (bad) {
		cu.slist_free_all(hdrs);
		snprintf(rs->error, sizeof(rs->error), "out of memory");
		return -1;
	}

	/* Through a pointer: each value must have the type libcurl reads for
	 * its option (long, curl_off_t, a pointer), which no header checks
	 * here (curl 7.88's typecheck-gcc.h does not fire with GCC 12). */
	cu.easy_setopt(c, CURLOPT_URL, rq->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	cu.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	cu.easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	cu.easy_setopt(c, CURLOPT_POST, 1L);
	cu.easy_setopt(c, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
	cu.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->len);
	cu.easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	cu.easy_setopt(c, CURLOPT_USERAGENT, "libwallprof/" WP_VERSION);
	cu.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	cu.easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
	cu.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms);
	cu.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	cu.easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	cu.easy_setopt(c, CURLOPT_HEADERDATA, rs);
	cu.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	cu.easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);

	rc = perform(c);
	cu.slist_free_all(hdrs);
	cu.easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	cu.easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
	if (rc != CURLE_OK) {
		snprintf(rs->error, sizeof(rs->error), "%s",
			 errbuf[0] ? errbuf : cu.easy_strerror(rc));
		rs->status = 0;
		rs->permanent = permanent(rc, rq->url);
		rs->tls = tls_problem(rc);
		return -1;
	}
	cu.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &rs->status);
	if (rs->status < 100 || rs->status > 599) {
		snprintf(rs->error, sizeof(rs->error), "no HTTP status in the response");
		rs->status = 0;
		return -1;
	}
	return 0;
}

int wp_up_gzip(const void *in, size_t len, void **out, size_t *outlen)
{
	z_stream z;
	uLong cap;
	void *buf;

	memset(&z, 0, sizeof(z));
	/* 15 + 16: a gzip wrapper, no name, mtime 0 */
	if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	cap = deflateBound(&z, (uLong)len) + 32;
	buf = malloc(cap);
	if (!buf) {
		deflateEnd(&z);
		return -1;
	}
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)len;
	z.next_out = buf;
	z.avail_out = (uInt)cap;
	if (len > 0xffffffffu || deflate(&z, Z_FINISH) != Z_STREAM_END) {
		deflateEnd(&z);
		free(buf);
		return -1;
	}
	*outlen = z.total_out;
	deflateEnd(&z);
	*out = buf;
	return 0;
}
