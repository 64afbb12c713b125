/* dsn: a Sentry DSN, "{scheme}://{public_key}[:{secret}]@{host}[:{port}]{path}/{project_id}",
 * parsed into the envelope endpoint and the X-Sentry-Auth header. Pure
 * string work, no allocation: the library checks a DSN at start, the
 * converter sends with it. Not async-signal-safe (snprintf). */
#ifndef WP_DSN_H
#define WP_DSN_H

#include <stddef.h>

struct wp_dsn {
	char endpoint[1024]; /* "{scheme}://{host}[:{port}]{path}/api/{project_id}/envelope/" */
	char auth[512];      /* "X-Sentry-Auth: Sentry sentry_key=..., sentry_version=7,
				sentry_client=libwallprof/<version>[, sentry_secret=...]" */
	char project[64];    /* the project id */
};

/* Whether `url` begins with http:// or https:// (a Pyroscope server's). */
int wp_url_is_http(const char *url);

/* Parses `dsn`. Returns 0, or -1 with a one-line reason in `err` ("no
 * public key", "scheme must be http or https", "no project id", ...). */
int wp_dsn_parse(const char *dsn, struct wp_dsn *d, char *err, size_t errlen);

#endif
