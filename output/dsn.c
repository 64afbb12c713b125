/* dsn: a Sentry DSN parsed into the envelope endpoint and the auth header
 * (dsn.h). Pure string work on the caller's buffers: the library checks a
 * DSN at start with it, the converter sends with it.
 *
 * Accepted: http or https (any case, written lowercase), a public key and
 * an optional secret of letters, digits and "-_.~", a host name, an IPv4
 * address or a bracketed IPv6 address ("[::1]"), an optional port
 * 1..65535, an optional path prefix, and the project id as the last path
 * segment (one trailing slash tolerated). No query, fragment, whitespace,
 * control or non-ASCII character. */
#include "dsn.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "output.h"

#define DSN_MAX 900     /* the whole DSN */
#define KEY_MAX 128     /* public key, secret */
#define HOST_MAX 256
#define PATH_MAX_ 512

static int fail(char *err, size_t errlen, const char *why)
{
	if (errlen)
		snprintf(err, errlen, "bad Sentry DSN: %s", why);
	return -1;
}

static int is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int is_key_char(char c)
{
	return is_alnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

/* A path character: RFC 3986's unreserved, sub-delims, ':', '@', '%'. */
static int is_path_char(char c)
{
	return is_key_char(c) || strchr("!$&'()*+,;=:@%/", c) != NULL;
}

static int all_of(const char *s, size_t n, int (*ok)(char))
{
	for (size_t i = 0; i < n; i++)
		if (!ok(s[i]))
			return 0;
	return 1;
}

static int is_host_char(char c)
{
	return is_alnum(c) || c == '-' || c == '.' || c == '_';
}

static int is_ip6_char(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
	       c == ':' || c == '.';
}

int wp_dsn_parse(const char *dsn, struct wp_dsn *d, char *err, size_t errlen)
{
	const char *p, *auth, *at, *host, *host_end, *port = NULL, *path, *end, *proj;
	const char *secret = NULL;
	size_t n, keylen, seclen = 0, hostlen, portlen = 0, pathlen, projlen;
	const char *scheme;
	int len;

	memset(d, 0, sizeof(*d));
	if (!dsn || !*dsn)
		return fail(err, errlen, "empty");
	n = strnlen(dsn, DSN_MAX + 1);
	if (n > DSN_MAX)
		return fail(err, errlen, "longer than 900 characters");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)dsn[i];

		if (c <= ' ' || c >= 0x7f)
			return fail(err, errlen, "whitespace, control or non-ASCII character");
	}
	if (strchr(dsn, '?') || strchr(dsn, '#'))
		return fail(err, errlen, "a query or fragment (\"?\", \"#\") in it");

	if (!strncasecmp(dsn, "https://", 8)) {
		scheme = "https";
		p = dsn + 8;
	} else if (!strncasecmp(dsn, "http://", 7)) {
		scheme = "http";
		p = dsn + 7;
	} else {
		return fail(err, errlen, "scheme must be http or https");
	}

	/* The authority ends at the first '/'; without one there is no path,
	 * hence no project id. */
	auth = p;
	path = strchr(auth, '/');
	end = dsn + n;
	if (!path)
		path = end;
	at = memchr(auth, '@', (size_t)(path - auth));
	if (!at)
		return fail(err, errlen, "no public key (\"KEY@\" before the host)");
	if (memchr(at + 1, '@', (size_t)(path - at - 1)))
		return fail(err, errlen, "more than one \"@\"");

	/* public_key[:secret] */
	keylen = (size_t)(at - auth);
	{
		const char *colon = memchr(auth, ':', keylen);

		if (colon) {
			secret = colon + 1;
			seclen = (size_t)(at - secret);
			keylen = (size_t)(colon - auth);
		}
	}
	if (!keylen)
		return fail(err, errlen, "no public key");
	if (keylen > KEY_MAX || seclen > KEY_MAX)
		return fail(err, errlen, "public key or secret longer than 128 characters");
	if (!all_of(auth, keylen, is_key_char) || (seclen && !all_of(secret, seclen, is_key_char)))
		return fail(err, errlen,
			    "the key or secret has a character other than letters, digits, -_.~");

	/* host[:port], or [ipv6][:port] */
	host = at + 1;
	if (host < path && *host == '[') {
		const char *rb = memchr(host, ']', (size_t)(path - host));

		if (!rb)
			return fail(err, errlen, "IPv6 host without its \"]\"");
		if (rb == host + 1)
			return fail(err, errlen, "no host");
		if (!all_of(host + 1, (size_t)(rb - host - 1), is_ip6_char))
			return fail(err, errlen, "bad character in the IPv6 address");
		host_end = rb + 1;
		if (host_end < path && *host_end != ':')
			return fail(err, errlen, "junk after the IPv6 address");
	} else {
		host_end = memchr(host, ':', (size_t)(path - host));
		if (!host_end)
			host_end = path;
		if (!all_of(host, (size_t)(host_end - host), is_host_char))
			return fail(err, errlen, "bad character in the host");
	}
	hostlen = (size_t)(host_end - host);
	if (!hostlen)
		return fail(err, errlen, "no host");
	if (hostlen > HOST_MAX)
		return fail(err, errlen, "host longer than 256 characters");
	if (host_end < path) {
		unsigned long v = 0;

		port = host_end + 1;
		portlen = (size_t)(path - port);
		if (!portlen || portlen > 5)
			return fail(err, errlen, "bad port");
		for (size_t i = 0; i < portlen; i++) {
			if (port[i] < '0' || port[i] > '9')
				return fail(err, errlen, "bad port");
			v = v * 10 + (unsigned long)(port[i] - '0');
		}
		if (v < 1 || v > 65535)
			return fail(err, errlen, "port out of 1..65535");
	}

	/* path: "{prefix}/{project_id}", one trailing '/' tolerated */
	if (path == end)
		return fail(err, errlen, "no project id");
	if (end - path > 1 && end[-1] == '/')
		end--;
	pathlen = (size_t)(end - path);
	if (pathlen > PATH_MAX_)
		return fail(err, errlen, "path longer than 512 characters");
	if (!all_of(path, pathlen, is_path_char))
		return fail(err, errlen, "bad character in the path");
	for (size_t i = 1; i < pathlen; i++)
		if (path[i] == '/' && path[i - 1] == '/')
			return fail(err, errlen, "empty segment (\"//\") in the path");
	proj = end;
	while (proj > path && proj[-1] != '/')
		proj--;
	projlen = (size_t)(end - proj);
	if (!projlen)
		return fail(err, errlen, "no project id");
	if (projlen >= sizeof(d->project))
		return fail(err, errlen, "project id longer than 63 characters");
	if (!all_of(proj, projlen, is_key_char))
		return fail(err, errlen,
			    "the project id has a character other than letters, digits, -_.~");

	/* The prefix is what precedes "/{project_id}": "" or "/sentry". */
	len = snprintf(d->endpoint, sizeof(d->endpoint), "%s://%.*s%s%.*s%.*s/api/%.*s/envelope/",
		       scheme, (int)hostlen, host, port ? ":" : "", (int)portlen, port ? port : "",
		       (int)(proj - 1 - path), path, (int)projlen, proj);
	if (len < 0 || (size_t)len >= sizeof(d->endpoint))
		return fail(err, errlen, "endpoint too long");
	len = snprintf(d->auth, sizeof(d->auth),
		       "X-Sentry-Auth: Sentry sentry_key=%.*s, sentry_version=7, "
		       "sentry_client=libwallprof/%s%s%.*s",
		       (int)keylen, auth, WP_VERSION, seclen ? ", sentry_secret=" : "", (int)seclen,
		       seclen ? secret : "");
	if (len < 0 || (size_t)len >= sizeof(d->auth))
		return fail(err, errlen, "auth header too long");
	memcpy(d->project, proj, projlen);
	d->project[projlen] = '\0';
	return 0;
}

int wp_url_is_http(const char *url)
{
	return !strncmp(url, "http://", 7) || !strncmp(url, "https://", 8);
}
