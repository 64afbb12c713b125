/* spool: the upload spool's directories (docs/FORMATS.md, "The upload
 * spool"): the root and its checks, one directory per run, item files
 * named by age, written atomically, listed oldest first, pruned oldest
 * first across all runs; where the spool is and its bounds (the
 * environment). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "upload_int.h"
#include "../output/output.h"

#define LIST_MAX 1000000 /* items listed at most (the rest wait) */
#define ROOT_LOCK "lock"
#define PRUNED_FILE "pruned"

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f');
}

int wp_up_run_name_ok(const char *name)
{
	size_t i = 0, n;

	while (is_digit(name[i]) && i < 11)
		i++;
	if (i == 0 || i > 10 || name[0] == '0' || name[i] != '-')
		return 0;
	for (n = 0, i++; is_hex(name[i]); i++, n++)
		;
	return n == 32 && name[i] == '\0';
}

unsigned wp_up_run_pid(const char *run)
{
	unsigned long v = strtoul(run, NULL, 10);

	return v > 0x7fffffff ? 0 : (unsigned)v;
}

/* "<16 digits>-<6 digits>-<8 hex>.item" */
int wp_up_item_name_ok(const char *name)
{
	size_t i;

	for (i = 0; i < 16; i++)
		if (!is_digit(name[i]))
			return 0;
	if (name[i++] != '-')
		return 0;
	for (; i < 23; i++)
		if (!is_digit(name[i]))
			return 0;
	if (name[i++] != '-')
		return 0;
	for (; i < 32; i++)
		if (!is_hex(name[i]))
			return 0;
	return !strcmp(name + i, ".item");
}

/* Copies a name already checked to fit (cut if not). */
static void copy_name(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

static int errf(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
	if (errlen)
		snprintf(err, errlen, fmt, a, b);
	return -1;
}

/* mkdir -p with mode 0700 for what is missing. */
static int make_dirs(const char *dir)
{
	char path[4096];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(path, dir, n + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(path, 0700) && errno != EEXIST)
		return -1;
	return 0;
}

int wp_up_root_open(const char *dir, int create, char *err, size_t errlen)
{
	struct stat st;
	int fd;

	if (!dir || !*dir)
		return errf(err, errlen, "spool: no directory%s%s", "", "");
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && create) {
		if (make_dirs(dir))
			return errf(err, errlen, "spool: cannot create %s: %s", dir,
				    strerror(errno));
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0) {
		if (errno == ENOENT && !create)
			return -2;
		return errf(err, errlen, "spool: cannot open %s: %s", dir, strerror(errno));
	}
	if (fstat(fd, &st)) {
		close(fd);
		return errf(err, errlen, "spool: cannot stat %s: %s", dir, strerror(errno));
	}
	/* Its lock, pruned and state-* files are shared by whoever uses it: a
	 * root others can write (even sticky: they could create those names
	 * first) is not ours alone. */
	if (st.st_uid != geteuid()) {
		close(fd);
		return errf(err, errlen,
			    "spool: %s is owned by another user; not used: the spool must be "
			    "yours, use one per user (WALLPROF_SPOOL_DIR)%s",
			    dir, "");
	}
	if (st.st_mode & 022) {
		close(fd);
		return errf(err, errlen,
			    "spool: %s is group- or world-writable; not used: the spool must be "
			    "yours alone, use one per user (chmod 700 it, or WALLPROF_SPOOL_DIR)%s",
			    dir, "");
	}
	return fd;
}

int wp_up_run_open(int rootfd, const char *run, int create)
{
	struct stat st;
	int fd;

	if (!wp_up_run_name_ok(run)) {
		errno = EINVAL;
		return -1;
	}
	if (create && mkdirat(rootfd, run, 0700) && errno != EEXIST)
		return -1;
	fd = openat(rootfd, run, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || st.st_uid != geteuid()) {
		close(fd);
		errno = EPERM;
		return -1;
	}
	return fd;
}

static int list_add(struct wp_up_list *l, const char *run, const char *name, const struct stat *st)
{
	struct wp_up_entry *e;

	if (l->n >= LIST_MAX)
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		void *p = realloc(l->e, cap * sizeof(*l->e));

		if (!p)
			return -1;
		l->e = p;
		l->cap = cap;
	}
	e = &l->e[l->n++];
	copy_name(e->run, sizeof(e->run), run);
	copy_name(e->name, sizeof(e->name), name);
	e->size = (uint64_t)st->st_size;
	e->mtime_s = (int64_t)st->st_mtime;
	return 0;
}

/* A listing of the directory open as `dirfd` (which stays open), from its
 * start; NULL on failure. */
static DIR *listing(int dirfd)
{
	int fd = dup(dirfd);
	DIR *d;

	if (fd < 0)
		return NULL;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return NULL;
	}
	rewinddir(d);
	return d;
}

int wp_up_list_run(int runfd, const char *run, struct wp_up_list *l)
{
	struct dirent *de;
	DIR *d = listing(runfd);

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		struct stat st;

		if (!wp_up_item_name_ok(de->d_name))
			continue;
		if (fstatat(runfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue; /* gone meanwhile, or not ours to read */
		if (list_add(l, run, de->d_name, &st)) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	const struct wp_up_entry *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->run, y->run);
}

void wp_up_list_sort(struct wp_up_list *l)
{
	if (l->n > 1)
		qsort(l->e, l->n, sizeof(*l->e), cmp_entry);
}

void wp_up_list_free(struct wp_up_list *l)
{
	free(l->e);
	memset(l, 0, sizeof(*l));
}

static int cmp_run(const void *a, const void *b)
{
	return strcmp(a, b);
}

int wp_up_list_runs(int rootfd, char (**out)[WP_UP_RUN_MAX], size_t *n)
{
	char(*v)[WP_UP_RUN_MAX] = NULL;
	size_t cap = 0;
	struct dirent *de;
	DIR *d = listing(rootfd);

	*out = NULL;
	*n = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (!wp_up_run_name_ok(de->d_name))
			continue;
		if (*n == cap) {
			size_t c = cap ? cap * 2 : 16;
			void *p;

			if (c > 100000)
				break;
			p = realloc(v, c * sizeof(*v));
			if (!p) {
				free(v);
				closedir(d);
				return -1;
			}
			v = p;
			cap = c;
		}
		copy_name(v[(*n)++], WP_UP_RUN_MAX, de->d_name);
	}
	closedir(d);
	if (*n > 1)
		qsort(v, *n, sizeof(*v), cmp_run);
	*out = v;
	return 0;
}

int wp_up_list_all(int rootfd, struct wp_up_list *l)
{
	char(*runs)[WP_UP_RUN_MAX];
	size_t n;

	if (wp_up_list_runs(rootfd, &runs, &n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		int fd = wp_up_run_open(rootfd, runs[i], 0);

		if (fd < 0)
			continue;
		if (wp_up_list_run(fd, runs[i], l)) {
			close(fd);
			free(runs);
			return -1;
		}
		close(fd);
	}
	free(runs);
	wp_up_list_sort(l);
	return 0;
}

/* The root's lock, taken for a prune and for the pruned counter; -1 when
 * it cannot be (then the work is done unlocked). */
static int root_lock(int rootfd)
{
	int fd = openat(rootfd, ROOT_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd >= 0 && flock(fd, LOCK_EX)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static unsigned read_pruned(int rootfd)
{
	char buf[24];
	int fd = openat(rootfd, PRUNED_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	ssize_t n;
	unsigned long v;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	v = strtoul(buf, NULL, 10);
	return v > 1000000000ul ? 1000000000u : (unsigned)v;
}

static void write_pruned(int rootfd, unsigned v)
{
	char buf[24];
	int fd, n;

	if (!v) {
		unlinkat(rootfd, PRUNED_FILE, 0);
		return;
	}
	fd = openat(rootfd, ".pruned.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%u\n", v);
	if (write(fd, buf, (size_t)n) != n) {
		close(fd);
		unlinkat(rootfd, ".pruned.tmp", 0);
		return;
	}
	close(fd);
	renameat(rootfd, ".pruned.tmp", rootfd, PRUNED_FILE);
}

unsigned wp_up_take_pruned(int rootfd)
{
	int lk = root_lock(rootfd);
	unsigned v = read_pruned(rootfd);

	if (v)
		write_pruned(rootfd, 0);
	if (lk >= 0)
		close(lk);
	return v;
}

/* Deletes the oldest items until the spool fits; under the root's lock. */
static unsigned prune_locked(int rootfd, unsigned max_files, uint64_t max_bytes, uint64_t keep)
{
	struct wp_up_list l = { 0 };
	uint64_t bytes = keep;
	size_t files = keep ? 1 : 0, i;
	unsigned n = 0;

	if (wp_up_list_all(rootfd, &l))
		return 0;
	for (i = 0; i < l.n; i++)
		bytes += l.e[i].size;
	files += l.n;
	for (i = 0; i < l.n && (files > max_files || bytes > max_bytes); i++) {
		int fd = wp_up_run_open(rootfd, l.e[i].run, 0);

		files--;
		bytes -= l.e[i].size;
		if (fd < 0)
			continue;
		if (!unlinkat(fd, l.e[i].name, 0))
			n++;
		close(fd);
	}
	wp_up_list_free(&l);
	return n;
}

unsigned wp_up_prune(int rootfd, unsigned max_files, uint64_t max_bytes, uint64_t keep)
{
	int lk = root_lock(rootfd);
	unsigned n = prune_locked(rootfd, max_files, max_bytes, keep);

	if (lk >= 0)
		close(lk);
	return n;
}

/* A new item's name: the time, a sequence number, randomness. */
static void item_name(char *out, size_t len)
{
	static unsigned seq;
	uint32_t r = 0;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint32_t)ts.tv_nsec ^ ((uint32_t)getpid() << 12);
	snprintf(out, len, "%016llu-%06u-%08x.item",
		 (unsigned long long)ts.tv_sec * 1000ull +
			 (unsigned long long)(ts.tv_nsec / 1000000),
		 seq++ % 1000000u, r);
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Writes the item file into run `run`: a temporary, then renamed to a new
 * name (never over another). errno set on failure. */
static int put_file(int rootfd, const char *run, const char *data, size_t len)
{
	char name[WP_UP_NAME_MAX], tmp[WP_UP_NAME_MAX + 8];
	int runfd, fd, rc = -1, e;

	runfd = wp_up_run_open(rootfd, run, 1);
	if (runfd < 0)
		return -1;
	for (int tries = 0; tries < 8; tries++) {
		item_name(name, sizeof(name));
		snprintf(tmp, sizeof(tmp), ".tmp-%s", name);
		fd = openat(runfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			if (errno == EEXIST)
				continue;
			break;
		}
		if (write_all(fd, data, len) || fsync(fd)) {
			e = errno;
			close(fd);
			unlinkat(runfd, tmp, 0);
			errno = e;
			break;
		}
		close(fd);
		rc = renameat2(runfd, tmp, runfd, name, RENAME_NOREPLACE);
		if (rc && errno == EINVAL)
			rc = renameat(runfd, tmp, runfd, name);
		if (!rc)
			break;
		e = errno;
		unlinkat(runfd, tmp, 0);
		errno = e;
		if (e != EEXIST)
			break;
	}
	e = errno;
	close(runfd);
	errno = e;
	return rc;
}

int wp_spool_put(const struct wp_spool_config *sc, const char *run, const struct wp_upload_item *it,
		 char *err, size_t errlen)
{
	void *z = NULL;
	const void *body = it->body;
	size_t len = it->len, flen;
	char *file = NULL;
	int rootfd, rc = -1;
	unsigned pruned;

	if (!run || !wp_up_run_name_ok(run))
		return errf(err, errlen, "spool: bad run name \"%.48s\" (want <pid>-<32 hex>)%s",
			    run ? run : "", "");
	if (!it->body && it->len)
		return errf(err, errlen, "spool: no body%s%s", "", "");
	if (it->gzip) {
		if (wp_up_gzip(it->body, it->len, &z, &len))
			return errf(err, errlen, "spool: cannot compress %s%s",
				    it->what ? it->what : "the item", "");
		body = z;
	}
	if (wp_up_item_encode(it, body, len, it->gzip, &file, &flen, err, errlen))
		goto out;
	if (flen > sc->max_bytes || !sc->max_files) {
		snprintf(err, errlen, "spool: %s is %zu bytes, over the spool's bound (%llu)",
			 it->what && *it->what ? it->what : "the item", flen,
			 (unsigned long long)sc->max_bytes);
		goto out;
	}
	rootfd = wp_up_root_open(sc->dir, 1, err, errlen);
	if (rootfd < 0)
		goto out;
	{
		/* Room first (the new item counted), then the file. */
		int lk = root_lock(rootfd);

		pruned = prune_locked(rootfd, sc->max_files, sc->max_bytes, flen);
		if (pruned)
			write_pruned(rootfd, read_pruned(rootfd) + pruned);
		if (lk >= 0)
			close(lk);
	}
	/* A flush that adopted the run may remove its empty directory between
	 * our mkdir and our file: once more then. */
	rc = put_file(rootfd, run, file, flen);
	if (rc && errno == ENOENT)
		rc = put_file(rootfd, run, file, flen);
	if (rc)
		snprintf(err, errlen, "spool: cannot write in %s/%s: %s", sc->dir, run,
			 strerror(errno));
	close(rootfd);
out:
	free(z);
	free(file);
	return rc;
}

int wp_spool_default_dir(char *out, size_t len)
{
	const char *v = getenv("WALLPROF_SPOOL_DIR");
	int n;

	if (v && *v) {
		n = snprintf(out, len, "%s", v);
		return n < 0 || (size_t)n >= len ? -1 : 0;
	}
	if (wp_out_user_cache_dir("spool", out, len) == 0)
		return 0;
	n = snprintf(out, len, "%s/wallprof-spool-%u",
		     (v = getenv("TMPDIR")) && v[0] == '/' ? v : "/tmp", (unsigned)geteuid());
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int wp_spool_config_from_env(struct wp_spool_config *sc, char *dirbuf, size_t dirlen, char *err,
			     size_t errlen)
{
	unsigned long long files = WP_SPOOL_DEFAULT_FILES, mb = WP_SPOOL_DEFAULT_MB;

	memset(sc, 0, sizeof(*sc));
	if (wp_spool_default_dir(dirbuf, dirlen)) {
		snprintf(err, errlen, "the spool directory's name is too long");
		return -1;
	}
	if (wp_out_env_uint("WALLPROF_SPOOL_MAX_FILES", 1000000, &files, err, errlen) ||
	    wp_out_env_uint("WALLPROF_SPOOL_MAX_MB", 1024 * 1024, &mb, err, errlen))
		return -1;
	sc->dir = dirbuf;
	sc->max_files = (unsigned)files;
	sc->max_bytes = (uint64_t)mb << 20;
	return 0;
}
