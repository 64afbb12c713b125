/* state: the per-endpoint state file of the spool (docs/FORMATS.md, "The
 * upload spool"): an endpoint's rate limits and backoff, so that the next
 * converter process honours them. Several converters flush at once: a
 * save merges with what the file holds under the root's state.lock (the
 * later end of each limit and of the backoff, a success resetting the
 * backoff) and replaces it atomically; a file whose limits and backoff are
 * all over is removed, when loaded and by wp_up_state_sweep. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "upload_int.h"

#define STATE_MAGIC "WALLPROF-SPOOL-STATE 1"
#define STATE_MAX 4096
#define STATE_LOCK "state.lock"
#define LOCK_STEP_MS 5
#define LOCK_TRIES 40 /* 200 ms: holders only read and write a small file */

/* "state-<16 hex>": FNV-1a of the endpoint. */
static void state_name(const char *url, char *out, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	size_t n = wp_up_endpoint_len(url);

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)url[i];
		h *= 0x100000001b3ull;
	}
	snprintf(out, len, "state-%016llx", (unsigned long long)h);
}

static int state_name_ok(const char *name)
{
	if (strncmp(name, "state-", 6) || strlen(name) != 22)
		return 0;
	for (int i = 6; i < 22; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	return 1;
}

/* The state files' lock, tried for LOCK_TRIES steps (a holder stopped
 * must not hold a flush past its deadline); -1 when not taken (the work is
 * done unlocked then). */
static int state_lock(int rootfd)
{
	int fd = openat(rootfd, STATE_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	for (int i = 0; flock(fd, LOCK_EX | LOCK_NB); i++) {
		struct timespec ts = { 0, LOCK_STEP_MS * 1000000L };

		if ((errno != EWOULDBLOCK && errno != EINTR) || i >= LOCK_TRIES) {
			close(fd);
			return -1;
		}
		nanosleep(&ts, NULL);
	}
	return fd;
}

static void unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

/* A time read back: finite, not negative, and not absurdly far ahead (a
 * day past now for a limit, the longest backoff for the backoff). */
static double sane(double v, double now_ms, double max_ahead_ms)
{
	if (!isfinite(v) || v < 0)
		return 0;
	return v > now_ms + max_ahead_ms ? now_ms + max_ahead_ms : v;
}

/* Whether `st` holds nothing that still matters at `now`: every limit over,
 * and the backoff over for longer than the longest backoff (a failure
 * after that backs off from 1 s again). */
static int expired(const struct wp_up_state *st, double now)
{
	for (int k = 0; k < WP_UP_NCAT; k++)
		if (st->until[k] > now)
			return 0;
	return !st->backoff_ms || st->backoff_until + WP_UP_BACKOFF_MAX_MS <= now;
}

/* Reads state file `name` into `st`: of the endpoint of `url`, or of any
 * endpoint when `url` is NULL. Returns 0, 1 when there is none, -1 when it
 * is not ours, unreadable, or not a state file of that endpoint (`st`
 * zero then). */
static int read_state(int rootfd, const char *name, const char *url, double now,
		      struct wp_up_state *st)
{
	char buf[STATE_MAX + 1], *line, *save = NULL;
	size_t elen = url ? wp_up_endpoint_len(url) : 0;
	struct stat sb;
	int fd, ok = 0;
	ssize_t n;

	memset(st, 0, sizeof(*st));
	fd = openat(rootfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 1 : -1;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
		close(fd);
		return -1;
	}
	n = read(fd, buf, STATE_MAX);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char word[32], cat[32];
		double a, b;

		if (!strcmp(line, STATE_MAGIC)) {
			ok |= 1;
		} else if (!strncmp(line, "endpoint ", 9)) {
			/* another endpoint with the same hash: not ours */
			if (url && (strlen(line + 9) != elen || memcmp(line + 9, url, elen)))
				break;
			ok |= 2;
		} else if (sscanf(line, "%31s %31s %lf", word, cat, &a) == 3 &&
			   !strcmp(word, "limit")) {
			int k = strcmp(cat, "*") ? wp_up_category(cat) : WP_UP_CAT_ALL;

			if (k >= 0)
				st->until[k] = sane(a, now, WP_UP_LIMIT_MAX_S * 1e3);
		} else if (sscanf(line, "%31s %lf %lf", word, &a, &b) == 3 &&
			   !strcmp(word, "backoff")) {
			st->backoff_until = sane(a, now, WP_UP_BACKOFF_MAX_MS);
			st->backoff_ms = sane(b, 0, WP_UP_BACKOFF_MAX_MS);
		}
	}
	if (ok != 3) {
		memset(st, 0, sizeof(*st));
		return -1;
	}
	return 0;
}

/* Removes state file `name` if it still reads as expired (another
 * converter may have saved a limit since); under the lock. */
static int remove_expired(int rootfd, const char *name, const char *url, double now)
{
	struct wp_up_state st;

	if (read_state(rootfd, name, url, now, &st) || !expired(&st, now))
		return 0;
	return !unlinkat(rootfd, name, 0);
}

int wp_up_state_load(int rootfd, const char *url, struct wp_up_state *st)
{
	double now = wp_up_real_ms();
	char name[40];
	int rc;

	state_name(url, name, sizeof(name));
	rc = read_state(rootfd, name, url, now, st);
	if (rc == 0 && expired(st, now)) {
		int lk = state_lock(rootfd);

		remove_expired(rootfd, name, url, now);
		unlock(lk);
		memset(st, 0, sizeof(*st));
	}
	return rc < 0 ? -1 : 0;
}

/* Writes `st` as the state file `name` of endpoint `url`: a temporary,
 * renamed over it. */
static int write_state(int rootfd, const char *name, const char *url, const struct wp_up_state *st)
{
	char tmp[64], buf[STATE_MAX];
	size_t elen = wp_up_endpoint_len(url);
	int fd, n, len;

	if (elen > 2048)
		return -1;
	len = snprintf(buf, sizeof(buf), STATE_MAGIC "\nendpoint %.*s\nbackoff %.0f %.0f\n",
		       (int)elen, url, st->backoff_until, st->backoff_ms);
	for (int k = 0; k < WP_UP_NCAT && len > 0 && (size_t)len < sizeof(buf); k++)
		if (st->until[k] > 0)
			len += snprintf(buf + len, sizeof(buf) - (size_t)len, "limit %s %.0f\n",
					wp_up_category_name(k), ceil(st->until[k]));
	if (len <= 0 || (size_t)len >= sizeof(buf))
		return -1;
	snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
	unlinkat(rootfd, tmp, 0); /* one a crash left, whatever its mode */
	fd = openat(rootfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	n = (int)write(fd, buf, (size_t)len);
	if (close(fd) || n != len || renameat(rootfd, tmp, rootfd, name)) {
		unlinkat(rootfd, tmp, 0);
		return -1;
	}
	return 0;
}

int wp_up_state_save(int rootfd, const char *url, struct wp_up_state *st, int reset)
{
	struct wp_up_state disk;
	double now = wp_up_real_ms();
	char name[40];
	int lk, rc = 0;

	state_name(url, name, sizeof(name));
	lk = state_lock(rootfd);
	if (!read_state(rootfd, name, url, now, &disk)) {
		for (int k = 0; k < WP_UP_NCAT; k++)
			if (disk.until[k] > st->until[k])
				st->until[k] = disk.until[k];
		if (!reset && disk.backoff_until > st->backoff_until)
			st->backoff_until = disk.backoff_until;
		if (!reset && disk.backoff_ms > st->backoff_ms)
			st->backoff_ms = disk.backoff_ms;
	}
	if (expired(st, now)) {
		if (unlinkat(rootfd, name, 0) && errno != ENOENT)
			rc = -1;
	} else {
		rc = write_state(rootfd, name, url, st);
	}
	unlock(lk);
	return rc;
}

unsigned wp_up_state_sweep(int rootfd)
{
	double now = wp_up_real_ms();
	struct dirent *de;
	unsigned n = 0;
	int fd, lk;
	DIR *d;

	fd = dup(rootfd);
	if (fd < 0)
		return 0;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	lk = state_lock(rootfd);
	if (lk < 0) {
		closedir(d);
		return 0; /* the next flush sweeps */
	}
	rewinddir(d);
	while ((de = readdir(d)))
		if (state_name_ok(de->d_name))
			n += (unsigned)remove_expired(rootfd, de->d_name, NULL, now);
	unlock(lk);
	closedir(d);
	return n;
}
