/* user_dir: the converter's per-user cache directories (the upload spool,
 * the debug cache): $XDG_CACHE_HOME/wallprof/<leaf>, else
 * ~/.cache/wallprof/<leaf>, each only when it is ours alone; and the
 * whole-number settings that size them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "output.h"

#define PATH_BUF 4096

/* `path` into `p` (PATH_BUF bytes); its length, or -1 when it does not fit. */
static long copy_path(char *p, const char *path)
{
	size_t n = strlen(path);

	if (n >= PATH_BUF)
		return -1;
	memcpy(p, path, n + 1);
	return (long)n;
}

int wp_out_private_dir(const char *path)
{
	char p[PATH_BUF];
	struct stat st;
	long len = copy_path(p, path);
	size_t n = (size_t)len;

	if (len < 0)
		return 0;
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		p[i] = '\0';
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return 0;
		p[i] = i < n ? '/' : '\0';
	}
	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       !(st.st_mode & 022);
}

/* Whether the nearest existing directory at or above `base` is ours or
 * root's (a base that does not exist yet under /tmp is made as before),
 * and, when it is a symbolic link, whether that link is too: a HOME kept
 * by sudo, another user's XDG_CACHE_HOME or a link another user planted
 * is not, and nothing is made under it. */
static int base_is_ours(const char *base)
{
	char p[PATH_BUF];
	struct stat st;
	uid_t me = geteuid();

	if (copy_path(p, base) < 0)
		return 0;
	while (lstat(p, &st) != 0) {
		char *slash = strrchr(p, '/');

		if (errno != ENOENT || !slash || slash == p)
			return 0;
		*slash = '\0';
	}
	if (S_ISLNK(st.st_mode) && ((st.st_uid != me && st.st_uid != 0) || stat(p, &st) != 0))
		return 0;
	return S_ISDIR(st.st_mode) && (st.st_uid == me || st.st_uid == 0) &&
	       (st.st_uid == me || !(st.st_mode & 002) || (st.st_mode & S_ISVTX));
}

int wp_out_user_cache_dir(const char *leaf, char *out, size_t len)
{
	static const char *const bases[2][2] = { { "XDG_CACHE_HOME", "%s/wallprof/%s" },
						 { "HOME", "%s/.cache/wallprof/%s" } };

	for (int i = 0; i < 2; i++) {
		const char *v = getenv(bases[i][0]);
		int n;

		if (!v || v[0] != '/' || !base_is_ours(v))
			continue;
		n = snprintf(out, len, bases[i][1], v, leaf);
		if (n > 0 && (size_t)n < len && wp_out_private_dir(out))
			return 0;
	}
	return -1;
}

int wp_out_env_uint(const char *name, unsigned long long max, unsigned long long *out, char *err,
		    size_t errlen)
{
	const char *v = getenv(name);
	unsigned long long x = 0;

	if (!v || !*v)
		return 0;
	for (const char *p = v; *p; p++) {
		if (*p < '0' || *p > '9' || x > max) {
			x = max + 1;
			break;
		}
		x = x * 10 + (unsigned long long)(*p - '0');
	}
	if (x == 0 || x > max) {
		snprintf(err, errlen, "%s=\"%.40s\": want a whole number from 1 to %llu", name, v,
			 max);
		return -1;
	}
	*out = x;
	return 0;
}
