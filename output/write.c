/* write: atomic file output (temporary beside the target, fsync, rename) and
 * output path templates. Runs inside the profiled process at dump time, so it
 * never prints and never touches stdio streams. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "output.h"

#ifdef WP_TEST_HOOKS
int wp_out_fail_write_at;
#endif

static void set_err(char *err, size_t errlen, const char *what, const char *path, int e)
{
	char buf[128];

	if (err && errlen)
		snprintf(err, errlen, "%s %s: %s", what, path, strerror_r(e, buf, sizeof(buf)));
}

void wp_out_random(void *buf, size_t len)
{
	static uint64_t counter;
	unsigned char *b = buf;
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = getrandom(b + done, len - done, GRND_NONBLOCK);
		if (n > 0)
			done += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else
			break;
	}
	/* Early boot or seccomp: ids only need to be unlikely to collide. */
	while (done < len) {
		struct timespec ts;
		uint64_t x;

		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		x ^= (uint64_t)getpid() << 32;
		x += __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull;
		/* splitmix64 finalizer */
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
		x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
		x ^= x >> 31;
		for (int i = 0; i < 8 && done < len; i++, x >>= 8)
			b[done++] = (unsigned char)x;
	}
}

int wp_out_atomic_open(struct wp_out_atomic *a, const char *path, char *err, size_t errlen)
{
	const char *slash, *base;
	size_t dirlen, cap;
	int tries;

	a->fd = -1;
	a->tmp = NULL;
	a->path = path;
	a->bytes = 0;
	if (!path || !*path) {
		set_err(err, errlen, "cannot create", "\"\"", ENOENT);
		return -1;
	}
	slash = strrchr(path, '/');
	base = slash ? slash + 1 : path;
	dirlen = (size_t)(base - path);
	if (!*base) {
		set_err(err, errlen, "cannot create", path, EISDIR);
		return -1;
	}
	{
		/* A device, FIFO or socket at the target (/dev/null, a named
		 * pipe, /dev/stdout's link): written through, never replaced
		 * (a rename over /dev/null, as root, would make it a file). */
		struct stat st;

		if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
			a->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
			if (a->fd >= 0)
				return 0;
			set_err(err, errlen, "cannot open", path, errno);
			return -1;
		}
	}
	cap = dirlen + strlen(base) + 48;
	a->tmp = malloc(cap);
	if (!a->tmp) {
		set_err(err, errlen, "cannot create", path, ENOMEM);
		return -1;
	}
	for (tries = 0; tries < 8; tries++) {
		uint32_t r;

		wp_out_random(&r, sizeof(r));
		snprintf(a->tmp, cap, "%.*s.%s.tmp.%ld.%08x", (int)dirlen, path, base,
			 (long)getpid(), r);
		/* O_EXCL + O_NOFOLLOW: never reuse or write through anything
		 * planted at the temporary name. */
		a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
		if (a->fd >= 0)
			return 0;
		if (errno != EEXIST)
			break;
	}
	set_err(err, errlen, "cannot create", path, errno);
	free(a->tmp);
	a->tmp = NULL;
	return -1;
}

int wp_out_atomic_write(struct wp_out_atomic *a, const void *data, size_t len, char *err,
			size_t errlen)
{
	const char *p = data;
	ssize_t n;

	while (len > 0) {
#ifdef WP_TEST_HOOKS
		if (wp_out_fail_write_at > 0 && --wp_out_fail_write_at == 0) {
			errno = ENOSPC;
			n = -1;
		} else
#endif
		{
			n = write(a->fd, p, len);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			set_err(err, errlen, "cannot write", a->path, errno);
			return -1;
		}
		if (n == 0) {
			set_err(err, errlen, "cannot write", a->path, EIO);
			return -1;
		}
		p += n;
		len -= (size_t)n;
		a->bytes += (size_t)n;
	}
	return 0;
}

void wp_out_atomic_abort(struct wp_out_atomic *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	if (a->tmp)
		unlink(a->tmp);
	free(a->tmp);
	a->tmp = NULL;
}

/* Makes the rename itself durable; best effort, the data is already synced. */
static void sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int fd;

	if (!slash) {
		dir = strdup(".");
	} else {
		dir = strndup(path, slash == path ? 1 : (size_t)(slash - path));
	}
	if (!dir)
		return;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(dir);
}

int wp_out_atomic_commit(struct wp_out_atomic *a, char *err, size_t errlen)
{
	int fd = a->fd;

	if (a->tmp && fsync(fd) < 0 && errno != EINVAL && errno != EROFS) {
		set_err(err, errlen, "cannot sync", a->path, errno);
		goto fail;
	}
	a->fd = -1;
	/* close() can report a deferred write error (NFS); it closes either way. */
	if (close(fd) < 0 && errno != EINTR) {
		set_err(err, errlen, "cannot write", a->path, errno);
		goto fail;
	}
	if (!a->tmp)
		return 0; /* written through (a device or a FIFO) */
	/* rename() replaces a symlink at the target rather than following it. */
	if (rename(a->tmp, a->path) < 0) {
		set_err(err, errlen, "cannot rename to", a->path, errno);
		goto fail;
	}
	sync_dir(a->path);
	free(a->tmp);
	a->tmp = NULL;
	return 0;
fail:
	wp_out_atomic_abort(a);
	return -1;
}

int wp_out_write_atomic(const char *path, const char *data, size_t len, char *err, size_t errlen)
{
	struct wp_out_atomic a;

	if (wp_out_atomic_open(&a, path, err, errlen) < 0)
		return -1;
	if (wp_out_atomic_write(&a, data, len, err, errlen) < 0) {
		wp_out_atomic_abort(&a);
		return -1;
	}
	return wp_out_atomic_commit(&a, err, errlen);
}

/* Appends `s` (n bytes) to out[*pos]; keeps room for the terminator. */
static int put(char *out, size_t outlen, size_t *pos, const char *s, size_t n)
{
	if (n >= outlen - *pos)
		return -1;
	memcpy(out + *pos, s, n);
	*pos += n;
	out[*pos] = '\0';
	return 0;
}

int wp_out_expand_path(const char *tmpl, unsigned pid, int n, char *out, size_t outlen)
{
	static const char ext[] = ".json";
	const size_t extlen = sizeof(ext) - 1;
	char num[24];
	size_t pos = 0, k;
	int has_n = 0;
	const char *s;

	if (!out || outlen == 0)
		return -1;
	out[0] = '\0';
	if (!tmpl)
		return -1;
	for (s = tmpl; *s; s++) {
		int r;

		if (s[0] == '%' && s[1] == 'p') {
			k = (size_t)snprintf(num, sizeof(num), "%u", pid);
			r = put(out, outlen, &pos, num, k);
			s++;
		} else if (s[0] == '%' && s[1] == 'n') {
			k = (size_t)snprintf(num, sizeof(num), "%d", n);
			r = put(out, outlen, &pos, num, k);
			has_n = 1;
			s++;
		} else if (s[0] == '%' && s[1] == '%') {
			r = put(out, outlen, &pos, "%", 1);
			s++;
		} else {
			/* Any other '%' is kept literally. */
			r = put(out, outlen, &pos, s, 1);
		}
		if (r < 0)
			goto overflow;
	}
	if (n >= 1 && !has_n) {
		k = (size_t)snprintf(num, sizeof(num), ".%d", n);
		if (pos >= extlen && strcmp(out + pos - extlen, ext) == 0) {
			/* Snapshots of "x.json" become "x.<n>.json". */
			pos -= extlen;
			out[pos] = '\0';
			if (put(out, outlen, &pos, num, k) < 0 ||
			    put(out, outlen, &pos, ext, extlen) < 0)
				goto overflow;
		} else if (put(out, outlen, &pos, num, k) < 0) {
			goto overflow;
		}
	}
	return 0;
overflow:
	out[0] = '\0';
	return -1;
}

int wp_out_sibling_path(const char *tmpl, unsigned pid, const char *suffix, char *out,
			size_t outlen)
{
	size_t n, k = strlen(suffix);

	if (wp_out_expand_path(tmpl, pid, 0, out, outlen) < 0)
		return -1;
	n = strlen(out);
	if (n > 5 && !strcmp(out + n - 5, ".json"))
		n -= 5;
	if (n + k + 1 > outlen)
		return -1;
	memcpy(out + n, suffix, k + 1);
	return 0;
}
