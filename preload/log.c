/* log: the library's one-line messages ("wallprof: ...") and where they go.
 *
 * A line goes to the program's stderr with write(2), never stdio (the
 * program's stderr buffer stays untouched), and only while fd 2 is still
 * the file it was at start. Programs close their stderr before they end
 * (coreutils, xz and others do, at exit, to catch write errors), and a
 * daemon gives the number to a file of its own. Then the line goes to the
 * file stderr was at start, opened again by the path it had then, when that
 * was a terminal or a regular file the program appended to, and the path
 * still names that very file; else to the tree's index (tree.h). Never into
 * whatever file now has number 2, and no descriptor of ours keeps the
 * program's stderr open: a pipe it closed must end. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../output/sys.h"
#include "as_safe.h"
#include "tree.h"
#include "wallprof.h"

int wp_log_level = WP_LOG_INFO;
static int log_explicit; /* WALLPROF_LOG was set */

/* The stderr we started with: which file and, when a line can be added to
 * it after the program closed it, the path to open it again by (empty:
 * none) and what tells that file from a later one under the same path and
 * inode number (a terminal /dev/pts/N made again, an inode reused). */
static struct {
	int known; /* fd 2 was open at start */
	dev_t dev;
	ino_t ino;
	struct timespec made; /* see made() */
	char path[PATH_MAX];
} orig;

/* What tells the file open on `fd` (`st`: its fstat) from a later one
 * under the same path and inode number: a terminal node's ctime (a later
 * /dev/pts/N has a new one; writes, reads and stty do not change it), a
 * regular file's birth time; zero when there is none. async-signal-safe */
WP_AS_SAFE static struct timespec made(int fd, const struct stat *st)
{
	struct statx sx;

	if (S_ISCHR(st->st_mode))
		return st->st_ctim;
	if (wp_syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_BTIME, &sx) < 0 ||
	    !(sx.stx_mask & STATX_BTIME))
		return (struct timespec){ 0, 0 };
	return (struct timespec){ sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec };
}

/* Whether `st` is the file stderr was at start. async-signal-safe */
WP_AS_SAFE static int is_orig(const struct stat *st)
{
	return orig.known && st->st_dev == orig.dev && st->st_ino == orig.ino;
}

/* Whether `fd` (the program's fd 2) is still the stderr we started with. */
WP_AS_SAFE static int stderr_same(int fd)
{
	struct stat st;

	return fd >= 0 && wp_syscall(SYS_fstat, fd, &st) == 0 && is_orig(&st);
}

/* At start: which file fd 2 is; and, when this process may speak, whether a
 * line can still be added to that file once the program has closed it: a
 * terminal, or a regular file the program appends to (written at a shared
 * offset instead, a line of ours would be written over, or write over the
 * program's next output). Pipes and sockets cannot be opened by a path,
 * and without a birth time a file made again under the path could take the
 * old inode's number. */
static void remember_stderr(void)
{
	struct stat st;
	ssize_t n;
	int fl;

	orig.known = fstat(STDERR_FILENO, &st) == 0;
	if (!orig.known)
		return;
	orig.dev = st.st_dev;
	orig.ino = st.st_ino;
	if (wp_log_level == WP_LOG_QUIET)
		return;
	fl = fcntl(STDERR_FILENO, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
		return;
	if (!(S_ISCHR(st.st_mode) && isatty(STDERR_FILENO)) &&
	    !(S_ISREG(st.st_mode) && (fl & O_APPEND)))
		return;
	orig.made = made(STDERR_FILENO, &st);
	if (!orig.made.tv_sec && !orig.made.tv_nsec)
		return;
	n = readlink("/proc/self/fd/2", orig.path, sizeof(orig.path) - 1);
	if (n <= 0 || orig.path[0] != '/')
		n = 0;
	orig.path[n] = 0;
}

/* The stderr we started with, opened again by its path, or -1 when that is
 * not possible or the path now names another file. Close it after use.
 * async-signal-safe */
WP_AS_SAFE static int open_original(void)
{
	struct stat st;
	struct timespec t;
	int fd;

	if (!orig.path[0] || (fd = wp_sys_open_append(orig.path, 0, &st)) < 0)
		return -1;
	if (is_orig(&st)) {
		t = made(fd, &st);
		if (t.tv_sec == orig.made.tv_sec && t.tv_nsec == orig.made.tv_nsec)
			return fd;
	}
	wp_syscall(SYS_close, fd);
	return -1;
}

/* One line to `fd`; whether all of it went. A write to a terminal from a
 * background process group, under `stty tostop`, stops the whole group
 * with SIGTTOU: a program that writes nothing there itself (`sleep 1 &`)
 * would be stopped by our line alone. With SIGTTOU blocked for the write,
 * the kernel lets it through instead of sending the signal.
 * async-signal-safe */
WP_AS_SAFE static int write_line(int fd, const char *msg, size_t len)
{
	struct iovec v[3] = { { "wallprof: ", 10 }, { (void *)msg, len }, { "\n", 1 } };
	uint64_t ttou = 1ull << (SIGTTOU - 1), old = 0;
	int blocked = wp_syscall(SYS_rt_sigprocmask, SIG_BLOCK, &ttou, &old, sizeof(old)) == 0;
	int rc = wp_sys_writev_whole(fd, v, 3);

	if (blocked)
		wp_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof(old));
	return rc == 0;
}

/* `msg` as one line on the stderr we started with: fd 2 while it is still
 * that file (`fd`: the program's fd 2 as this thread can write to it), else
 * that file opened again. Returns whether the whole line was written.
 * async-signal-safe */
WP_AS_SAFE static int show(int fd, const char *msg, size_t len)
{
	int shown;

	if (stderr_same(fd))
		return write_line(fd, msg, len);
	fd = open_original();
	if (fd < 0)
		return 0;
	shown = write_line(fd, msg, len);
	wp_syscall(SYS_close, fd);
	return shown;
}

/* Whether an event goes to the tree's index: all of a descendant's lines,
 * the root's files and too-short notes. async-signal-safe */
WP_AS_SAFE static int records(int level, const char *kind)
{
	if (!wp_tree_is_root())
		return level <= WP_LOG_INFO;
	return !strcmp(kind, "wrote") || !strcmp(kind, "short");
}

static void log_line(int level, const char *kind, const char *path, unsigned long long lost,
		     const char *fmt, va_list ap)
{
	char buf[1024];
	int n, fd, saved = errno, shown = 0, speak = level <= wp_log_level;
	size_t len, off;
	int record = records(level, kind);

	if (!speak && !record)
		return;
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n < 0)
		n = 0;
	len = (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
	/* One line, always: a control character from a variable's value
	 * (a newline, an escape) must not forge or hide a line. */
	for (off = 0; off < len; off++)
		if ((unsigned char)buf[off] < 0x20 || buf[off] == 0x7f)
			buf[off] = '?';
	if (speak) {
		fd = wp_fds_stderr();
		shown = show(fd, buf, len);
		wp_fds_stderr_done(fd);
	}
	/* A line the program's closed or replaced stderr could not show goes
	 * to the index, created if need be, never into the program's file. */
	if (record || (speak && !shown))
		wp_tree_record(kind, path, lost, buf, len, speak && !shown);
	errno = saved;
}

/* async-signal-safe (from a thread of the program's, where fd 2 is direct) */
WP_AS_SAFE void wp_log_raw(int level, const char *kind, const char *path, unsigned long long lost,
			   const char *msg, size_t len)
{
	int saved = errno, shown = 0, speak = level <= wp_log_level;
	int record = records(level, kind);

	if (speak)
		shown = show(STDERR_FILENO, msg, len);
	if (record || (speak && !shown))
		wp_tree_record(kind, path, lost, msg, len, speak && !shown);
	errno = saved;
}

void wp_log(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_line(level, level <= WP_LOG_ERROR ? "error" : "info", NULL, 0, fmt, ap);
	va_end(ap);
}

void wp_log_event(int level, const char *kind, const char *path, unsigned long long lost,
		  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_line(level, kind, path, lost, fmt, ap);
	va_end(ap);
}

/* async-signal-safe */
WP_AS_SAFE void wp_log_forked(void)
{
	wp_tree_forked();
	if (!log_explicit)
		wp_log_level = WP_LOG_QUIET;
}

void wp_log_init(int *level, int *explicit_)
{
	const char *s = getenv("WALLPROF_LOG");
	int bad = 0;

	log_explicit = s && *s;
	wp_log_level = wp_tree_is_root() ? WP_LOG_INFO : WP_LOG_QUIET;
	if (s && *s) {
		if (!strcasecmp(s, "quiet") || !strcasecmp(s, "off") || !strcmp(s, "0"))
			wp_log_level = WP_LOG_QUIET;
		else if (!strcasecmp(s, "error") || !strcmp(s, "1"))
			wp_log_level = WP_LOG_ERROR;
		else if (!strcasecmp(s, "info") || !strcmp(s, "2"))
			wp_log_level = WP_LOG_INFO;
		else if (!strcasecmp(s, "debug") || !strcmp(s, "3"))
			wp_log_level = WP_LOG_DEBUG;
		else
			bad = 1;
	}
	if (bad) /* set: it applies to every process of the tree */
		wp_log_level = WP_LOG_INFO;
	remember_stderr();
	if (bad)
		wp_log(WP_LOG_ERROR,
		       "WALLPROF_LOG='%.64s' is not quiet, error, info or debug; using info", s);
	*level = wp_log_level;
	*explicit_ = log_explicit;
}
