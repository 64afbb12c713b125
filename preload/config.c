/* config: WALLPROF_* environment variables.
 * A bad value never stops the host: it is reported once and replaced. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../output/dsn.h"
#include "../output/strput.h"
#include "test_hooks.h"
#include "../output/sys.h"

#include "tree.h"
#include "wallprof.h"

static int parse_uint(const char *s, unsigned long min, unsigned long max, unsigned *out)
{
	char *end;
	unsigned long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = (unsigned)v;
	return 0;
}

static void env_uint(const char *name, unsigned def, unsigned min, unsigned max, unsigned *out)
{
	const char *s = getenv(name);

	*out = def;
	if (!s || !*s)
		return;
	if (parse_uint(s, min, max, out) < 0) {
		*out = def;
		wp_log(WP_LOG_ERROR, "%s='%.64s' is not a whole number from %u to %u; using %u",
		       name, s, min, max, def);
	}
}

int wp_config_parse_signal(const char *s, int allow_off)
{
	unsigned v;
	int sig, base = 0, off = 0;
	const char *p = s;

	if (!s || !*s)
		return -1;
	if (allow_off && (!strcasecmp(s, "off") || !strcasecmp(s, "none") || !strcmp(s, "0")))
		return 0;
	if (parse_uint(s, 1, SIGRTMAX, &v) == 0) {
		sig = (int)v;
		goto check;
	}
	if (!strncasecmp(p, "SIG", 3))
		p += 3;
	if (!strncasecmp(p, "RTMIN", 5) || !strncasecmp(p, "RTMAX", 5)) {
		base = !strncasecmp(p, "RTMIN", 5) ? SIGRTMIN : SIGRTMAX;
		p += 5;
		if (*p == '+' || *p == '-') {
			if (parse_uint(p + 1, 0, 64, &v) < 0)
				return -1;
			off = *p == '+' ? (int)v : -(int)v;
		} else if (*p) {
			return -1;
		}
		sig = base + off;
		if (sig < SIGRTMIN || sig > SIGRTMAX)
			return -1;
		goto check;
	}
	for (sig = 1; sig < SIGRTMIN; sig++) {
		const char *abbrev = sigabbrev_np(sig);

		if (abbrev && !strcasecmp(abbrev, p))
			goto check;
	}
	return -1;
check:
	/* Signals the kernel or the program's own crash handling own. */
	switch (sig) {
	case SIGKILL:
	case SIGSTOP:
	case SIGSEGV:
	case SIGBUS:
	case SIGFPE:
	case SIGILL:
	case SIGABRT:
	case SIGTRAP:
	case SIGSYS:
	case SIGCHLD:
	case SIGCONT:
	case SIGTSTP:
	case SIGTTIN:
	case SIGTTOU:
	case SIGINT:
	case SIGQUIT:
	case SIGTERM:
	case SIGHUP:
	case SIGPIPE:
		return -1;
	}
	/* glibc reserves the first two real-time signals for itself. */
	if (sig < SIGRTMIN && sig > 31)
		return -1;
	return sig;
}

/* No snprintf: the interposed sigaction, which names a signal in its one
 * line, may run in a signal handler. */
WP_AS_SAFE const char *wp_signal_name(int sig, char *buf, size_t len)
{
	const char *abbrev = sig > 0 && sig < SIGRTMIN ? sigabbrev_np(sig) : NULL;
	char num[16], *p = num + sizeof(num);
	unsigned v;
	size_t n;

	if (abbrev)
		return wp_put_str(buf, wp_put_str(buf, 0, len, "SIG"), len, abbrev), buf;
	if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
		n = wp_put_str(buf, 0, len, "SIGRTMIN+");
		sig -= SIGRTMIN;
	} else {
		n = wp_put_str(buf, 0, len, "signal ");
	}
	v = sig < 0 ? 0u - (unsigned)sig : (unsigned)sig;
	*--p = 0;
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	if (sig < 0)
		*--p = '-';
	wp_put_str(buf, n, len, p);
	return buf;
}

static void env_signal(const char *name, int def, int allow_off, int *out)
{
	const char *s = getenv(name);
	char a[24];
	int sig;

	*out = def;
	if (!s || !*s)
		return;
	sig = wp_config_parse_signal(s, allow_off);
	if (sig < 0) {
		wp_log(WP_LOG_ERROR, "%s='%.64s' is not a usable signal%s; using %s", name, s,
		       allow_off ? " or 'off'" : "",
		       def ? wp_signal_name(def, a, sizeof(a)) : "off");
		return;
	}
	*out = sig;
}

void wp_config_load(struct wp_config *c)
{
	const char *s;

	memset(c, 0, sizeof(*c));
	/* Logging first, so the other variables' messages obey it: by
	 * default the root of the profiled tree speaks, its descendants
	 * record in the tree's index (tree.h). */
	wp_tree_load();
	wp_log_init(&c->log_level, &c->log_explicit);

	s = getenv("WALLPROF_ENABLE");
	c->enabled = 1;
	if (s && *s) {
		if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "off"))
			c->enabled = 0;
		else if (strcmp(s, "1") && strcasecmp(s, "yes") && strcasecmp(s, "on"))
			wp_log(WP_LOG_ERROR, "WALLPROF_ENABLE='%.64s' is not 0 or 1; using 1", s);
	}

#if WP_TESTING
	/* Tests only: signal threads inside wrapped blocking calls on every
	 * tick, so that the EINTR-retry safety net is exercised on purpose. */
	s = getenv("WALLPROF_TEST_SIGNAL_BLOCKED");
	c->test_signal_blocked = s && !strcmp(s, "1");
	/* Tests only: check every replayed walk against libunwind. */
	s = getenv("WALLPROF_TEST_SITE_CHECK");
	c->test_site_check = s && !strcmp(s, "1");
	env_uint("WALLPROF_TEST_HANDLER_DELAY_US", 0, 0, 100000, &c->test_handler_delay_us);
	/* Tests only: hold every scan of /proc/self/task between the listing
	 * and the release of the threads it missed. */
	env_uint("WALLPROF_TEST_SCAN_HOLD_US", 0, 0, 1000000, &c->test_scan_hold_us);
	/* Tests only: a wrapped read() sends this signal to its own thread
	 * while it publishes its context. */
	env_uint("WALLPROF_TEST_ENTER_SIGNAL", 0, 0, 64, &c->test_enter_signal);
	/* Tests only: the sampler, woken from a rest by a claim or a wake,
	 * sleeps this long before it makes the ticks it slept through. */
	env_uint("WALLPROF_TEST_REST_WAKE_DELAY_US", 0, 0, 1000000, &c->test_rest_wake_delay_us);
	/* Tests only: a mask system call in our handler's walk aborts. */
	s = getenv("WALLPROF_TEST_WALK_MASK_STRICT");
	c->test_walk_mask_strict = s && !strcmp(s, "1");
	/* Tests only: the page faults of libunwind's warm-up, on stderr. */
	s = getenv("WALLPROF_TEST_WARMUP_REPORT");
	c->test_warmup_report = s && !strcmp(s, "1");
	/* Tests only: a forked child's sampler holds between giving up the
	 * ring it had and making its own. */
	env_uint("WALLPROF_TEST_FORK_RESET_HOLD_US", 0, 0, 1000000, &c->test_fork_reset_hold_us);
	/* Tests only: every tick holds the loader's lock this long. */
	env_uint("WALLPROF_TEST_LOADER_HOLD_US", 0, 0, 1000000, &c->test_loader_hold_us);
#endif

	env_uint("WALLPROF_HZ", WP_DEFAULT_HZ, 1, WP_MAX_HZ, &c->hz);
	env_uint("WALLPROF_RING_SECONDS", WP_DEFAULT_RING_SECONDS, 1, WP_MAX_RING_SECONDS,
		 &c->ring_seconds);
	env_uint("WALLPROF_MAX_DEPTH", WP_DEFAULT_MAX_DEPTH, 4, WP_MAX_MAX_DEPTH, &c->max_depth);
	env_uint("WALLPROF_RING_MB", WP_DEFAULT_RING_MB, 1, WP_MAX_RING_MB, &c->ring_mb);
	env_uint("WALLPROF_MAX_THREADS", WP_DEFAULT_MAX_THREADS, 16, WP_MAX_MAX_THREADS,
		 &c->max_threads);
	env_signal("WALLPROF_SIGNAL", SIGPROF, 0, &c->signal);
	env_signal("WALLPROF_SNAPSHOT_SIGNAL", SIGUSR2, 1, &c->snapshot_signal);
	if (c->snapshot_signal == c->signal) {
		char a[24];

		wp_log(WP_LOG_ERROR,
		       "WALLPROF_SNAPSHOT_SIGNAL is the sampling signal %s; snapshots are off",
		       wp_signal_name(c->signal, a, sizeof(a)));
		c->snapshot_signal = 0;
	}

	/* Uploads happen in the converter; a destination it could not use is
	 * said here, once, at start. */
	s = getenv("WALLPROF_SENTRY_DSN");
	if (s && *s) {
		struct wp_dsn d;
		char err[160];

		if (wp_dsn_parse(s, &d, err, sizeof(err)) < 0)
			wp_log(WP_LOG_ERROR,
			       "WALLPROF_SENTRY_DSN does not parse (%s); profiles are written to "
			       "files only",
			       err);
	}
	s = getenv("WALLPROF_PYROSCOPE_URL");
	if (s && *s && !wp_url_is_http(s))
		/* not echoed when it may hold credentials (user:pass@, with or
		 * without a scheme) */
		wp_log(WP_LOG_ERROR,
		       "WALLPROF_PYROSCOPE_URL='%.64s' is not an http:// or https:// URL; nothing is "
		       "sent to Pyroscope",
		       strchr(s, '@') ? "(not shown: it holds an '@')" : s);

	env_uint("WALLPROF_UPLOAD_TIMEOUT", WP_DEFAULT_UPLOAD_TIMEOUT, 1, WP_MAX_UPLOAD_TIMEOUT,
		 &c->upload_timeout);
	env_uint("WALLPROF_CHUNK_SECONDS", 0, 0, WP_MAX_CHUNK_SECONDS, &c->chunk_seconds);
	if (c->chunk_seconds > c->ring_seconds) {
		wp_log(WP_LOG_ERROR,
		       "WALLPROF_CHUNK_SECONDS=%u is longer than the window kept "
		       "(WALLPROF_RING_SECONDS=%u); using %u",
		       c->chunk_seconds, c->ring_seconds, c->ring_seconds);
		c->chunk_seconds = c->ring_seconds;
	}

	env_uint("WALLPROF_CONVERT_TIMEOUT", WP_DEFAULT_CONVERT_TIMEOUT, 1, WP_MAX_CONVERT_TIMEOUT,
		 &c->convert_timeout);
	s = getenv("WALLPROF_CONVERTER");
	c->converter[0] = 0;
	if (s && *s) {
		if (s[0] == '/' && strlen(s) < sizeof(c->converter))
			memcpy(c->converter, s, strlen(s) + 1);
		else
			wp_log(WP_LOG_ERROR,
			       "WALLPROF_CONVERTER='%.64s' is not an absolute path; "
			       "looking beside the library",
			       s);
	}

	s = getenv("WALLPROF_DEBUGINFOD");
	c->debuginfod = s && !strcmp(s, "1");
	if (s && *s && strcmp(s, "0") && strcmp(s, "1"))
		wp_log(WP_LOG_ERROR, "WALLPROF_DEBUGINFOD='%.64s' is not 0 or 1; using 0", s);

	s = getenv("TMPDIR");
	snprintf(c->tmpdir, sizeof(c->tmpdir), "%s",
		 s && *s == '/' && strlen(s) < sizeof(c->tmpdir) ? s : "/tmp");

	s = getenv("WALLPROF_FOLLOW_CHILDREN");
	c->follow_children = 1;
	if (s && *s) {
		if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "off"))
			c->follow_children = 0;
		else if (strcmp(s, "1") && strcasecmp(s, "yes") && strcasecmp(s, "on"))
			wp_log(WP_LOG_ERROR,
			       "WALLPROF_FOLLOW_CHILDREN='%.64s' is not 0 or 1; using 1", s);
	}

	s = getenv("WALLPROF_CPU_TIMERS");
	c->cpu_timers = 1;
	if (s && *s) {
		if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "off"))
			c->cpu_timers = 0;
		else if (strcmp(s, "1") && strcasecmp(s, "yes") && strcasecmp(s, "on"))
			wp_log(WP_LOG_ERROR, "WALLPROF_CPU_TIMERS='%.64s' is not 0 or 1; using 1",
			       s);
	}

	s = getenv("WALLPROF_OUTPUT");
	if (!s || !*s || strlen(s) >= sizeof(c->output) - 1024) {
		if (s && *s)
			wp_log(WP_LOG_ERROR, "WALLPROF_OUTPUT is longer than %zu bytes; using %s",
			       sizeof(c->output) - 1024, WP_DEFAULT_OUTPUT);
		s = WP_DEFAULT_OUTPUT;
	}
	/* Relative to the directory the program started in, whatever it
	 * chdir()s to later (daemons go to /). */
	if (s[0] != '/') {
		char cwd[WP_PATH_MAX];

		if (getcwd(cwd, sizeof(cwd)) && strlen(cwd) + 1 + strlen(s) < sizeof(c->output)) {
			size_t n = strcmp(cwd, "/") ? strlen(cwd) : 0;

			memcpy(c->output, cwd, n);
			c->output[n] = '/';
			memcpy(c->output + n + 1, s, strlen(s) + 1);
		} else {
			snprintf(c->output, sizeof(c->output), "%s", s);
			wp_log(WP_LOG_INFO,
			       "the working directory is too long to make WALLPROF_OUTPUT "
			       "'%.64s' absolute; it stays relative to the directory the program is in "
			       "when it writes a profile",
			       s);
		}
	} else {
		snprintf(c->output, sizeof(c->output), "%s", s);
	}

	s = getenv("WALLPROF_FORMAT");
	snprintf(c->formats, sizeof(c->formats), "sentry");
	if (s && *s) {
		/* Names known to the converter (output/formats.c), comma-separated. */
		static const char *const known[] = { "sentry", "pprof", "folded", "speedscope",
						     "html" };
		const char *p = s;
		int ok = strlen(s) < sizeof(c->formats);

		while (ok) {
			size_t n = strcspn(p, ","), k;

			for (k = 0; k < sizeof(known) / sizeof(*known); k++)
				if (n == strlen(known[k]) && !strncmp(p, known[k], n))
					break;
			ok = k < sizeof(known) / sizeof(*known);
			if (!p[n])
				break;
			p += n + 1;
		}
		if (ok)
			snprintf(c->formats, sizeof(c->formats), "%s", s);
		else
			wp_log(WP_LOG_ERROR,
			       "WALLPROF_FORMAT='%.64s' is not a comma-separated list of "
			       "sentry, pprof, folded, speedscope, html; using sentry",
			       s);
	}

	s = getenv("WALLPROF_SENTRY_PLATFORM");
	snprintf(c->platform, sizeof(c->platform), "native");
	if (s && *s) {
		size_t i, n = strlen(s);
		int ok = n < sizeof(c->platform);

		for (i = 0; ok && i < n; i++)
			ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
			     s[i] == '_';
		if (ok)
			snprintf(c->platform, sizeof(c->platform), "%s", s);
		else
			wp_log(WP_LOG_ERROR,
			       "WALLPROF_SENTRY_PLATFORM='%.64s' is not a lowercase word; using native",
			       s);
	}
}
