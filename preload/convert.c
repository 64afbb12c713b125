/* convert: starting the converter on a raw dump and relaying its report
 * (see convert.h). Everything after wp_convert_init is system calls on
 * memory prepared beforehand, so that an exit from a signal handler or a
 * fatal signal can convert too. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../output/event.h"
#include "../output/strput.h"
#include "convert.h"
#include "runtime.h"
#include "../output/sys.h"

#ifndef SCHED_IDLE
#define SCHED_IDLE 5
#endif

#define CHILD_STACK (64 * 1024)

static char program[WP_PATH_MAX];
static char platform[32];
static char formats[64];
static int debuginfod;
static unsigned timeout_s, chunk_s; /* WALLPROF_CONVERT_TIMEOUT, WALLPROF_CHUNK_SECONDS */
static char env_buf[16384];
static char *env[48];

/* The converter, the `wallprof` command, beside this library, or in ../bin from it (an install
 * puts the library in lib/ and the programs in bin/). */
static void find_program(const struct wp_config *c)
{
	static const char *const where[] = { "/wallprof", "/../bin/wallprof" };
	Dl_info info;
	const char *slash;
	char *self = NULL;
	size_t i, n;

	program[0] = 0;
	if (c->converter[0]) {
		if (access(c->converter, X_OK) == 0)
			memcpy(program, c->converter, strlen(c->converter) + 1);
		else
			wp_log(WP_LOG_ERROR, "WALLPROF_CONVERTER=%s is not an executable file (%s)",
			       c->converter, strerror(errno));
		return;
	}
	/* Absolute: LD_PRELOAD=./lib.so names the library relative to a
	 * directory the program may leave (chdir) before its exit. */
	if (!dladdr((void *)find_program, &info) || !info.dli_fname ||
	    !(self = realpath(info.dli_fname, NULL)) || !(slash = strrchr(self, '/'))) {
		free(self);
		return;
	}
	n = (size_t)(slash - self);
	for (i = 0; i < sizeof(where) / sizeof(*where); i++) {
		if (n + strlen(where[i]) >= sizeof(program))
			continue;
		memcpy(program, self, n);
		memcpy(program + n, where[i], strlen(where[i]) + 1);
		if (access(program, X_OK) == 0) {
			free(self);
			return;
		}
	}
	free(self);
	program[0] = 0;
}

void wp_convert_init(const struct wp_config *c)
{
	static const char *const keep[] = {
		"PATH", "HOME", "TMPDIR", "DEBUGINFOD_URLS", "DEBUGINFOD_CACHE_PATH",
		"DEBUGINFOD_TIMEOUT", "DEBUGINFOD_MAXSIZE", "DEBUGINFOD_MAXTIME",
					    /* uploads (the converter sends): where, and how */
		"WALLPROF_SENTRY_DSN", "WALLPROF_SENTRY_ENVIRONMENT", "WALLPROF_SENTRY_RELEASE",
		"WALLPROF_PYROSCOPE_URL", "WALLPROF_PYROSCOPE_APP", "WALLPROF_PYROSCOPE_LABELS",
		"WALLPROF_PYROSCOPE_THREADS", "WALLPROF_PYROSCOPE_TENANT",
		"WALLPROF_PYROSCOPE_TOKEN", "WALLPROF_SPOOL_DIR", "WALLPROF_SPOOL_MAX_FILES",
		"WALLPROF_SPOOL_MAX_MB", "WALLPROF_UPLOAD_TIMEOUT", "WALLPROF_SEND_ARGS",
		"WALLPROF_CHUNK_SECONDS", "WALLPROF_DEBUG_CACHE", "WALLPROF_DEBUG_CACHE_MAX_MB",
		"XDG_CACHE_HOME", "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy",
		"ALL_PROXY", "no_proxy", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
		"CURL_CA_BUNDLE"
	};
	size_t i, off = 0, k = 0;

	find_program(c);
	snprintf(platform, sizeof(platform), "%s", c->platform);
	snprintf(formats, sizeof(formats), "%s", c->formats);
	debuginfod = c->debuginfod;
	timeout_s = c->convert_timeout;
	chunk_s = c->chunk_seconds;
	for (i = 0; i < sizeof(keep) / sizeof(*keep) && k + 1 < sizeof(env) / sizeof(*env); i++) {
		const char *v = getenv(keep[i]);
		int n;

		if (!v)
			continue;
		n = snprintf(env_buf + off, sizeof(env_buf) - off, "%s=%s", keep[i], v);
		if (n < 0 || (size_t)n >= sizeof(env_buf) - off) {
			wp_log(WP_LOG_ERROR,
			       "%s is too long to pass to the converter (%zu bytes left of %zu); "
			       "it is not passed",
			       keep[i], sizeof(env_buf) - off, sizeof(env_buf));
			continue;
		}
		env[k++] = env_buf + off;
		off += (size_t)n + 1;
	}
	env[k] = NULL;
}

/* async-signal-safe */
WP_AS_SAFE const char *wp_convert_program(void)
{
	return program[0] ? program : NULL;
}

/* ---- the child --------------------------------------------------------- */

struct spawn {
	char **argv;
	int raw_fd, out_fd; /* become 3 and 1 (-1: /dev/null) */
	int idle;
	unsigned long slack; /* timer slack to give back (the sampler's own is 1 ns) */
	char *stack2;       /* top of the converter's stack */
	volatile int pid;   /* the converter, as the intermediate saw it */
	volatile int err;   /* set by the converter when exec failed */
};

/* Runs in the child, on its own stack, sharing our memory until execve:
 * system calls only, nothing that writes memory the parent uses except
 * `err`. async-signal-safe */
WP_AS_SAFE static int child(void *arg)
{
	struct spawn *s = arg;
	unsigned long dfl[4] = { 0 }; /* the kernel's sigaction: SIG_DFL, no flags */
	unsigned long none = 0;
	int sig, null, raw, out;

	/* What exec does, before it: handled signals back to their default
	 * (the program's handlers are in memory the converter will not have),
	 * ignored ones stay ignored (nohup's SIGHUP). */
	for (sig = 1; sig < NSIG; sig++) {
		unsigned long old[4] = { 0 };

		if (sig == SIGKILL || sig == SIGSTOP ||
		    wp_syscall(SYS_rt_sigaction, sig, NULL, old, 8) < 0 ||
		    old[0] == (unsigned long)SIG_IGN)
			continue;
		wp_syscall(SYS_rt_sigaction, sig, dfl, NULL, 8);
	}
	null = (int)wp_syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC);
	/* Out of the way of 0..3 first, then into place. */
	raw = (int)wp_syscall(SYS_fcntl, s->raw_fd, F_DUPFD_CLOEXEC, 10);
	out = s->out_fd >= 0 ? (int)wp_syscall(SYS_fcntl, s->out_fd, F_DUPFD_CLOEXEC, 10) : null;
	if (null < 0 || raw < 0 || out < 0) {
		s->err = EMFILE;
		wp_syscall(SYS_exit, 127);
	}
	wp_syscall(SYS_dup2, null, 0);
	wp_syscall(SYS_dup2, out, 1);
	wp_syscall(SYS_dup2, null, 2);
	wp_syscall(SYS_dup2, raw, 3);
	if (wp_syscall(SYS_close_range, 4, ~0u, 0) < 0) {
		int fd;

		for (fd = 4; fd < 4096; fd++)
			wp_syscall(SYS_close, fd);
	}
	{
		/* Not the program's real-time policy: the converter is
		 * ordinary work, background work at idle priority. */
		struct sched_param sp = { 0 };

		wp_syscall(SYS_sched_setscheduler, 0, s->idle ? SCHED_IDLE : SCHED_OTHER, &sp);
	}
	if (s->slack)
		wp_syscall(SYS_prctl, PR_SET_TIMERSLACK, s->slack, 0, 0, 0);
	/* Background work is out of the terminal's reach: a ^C, ^Z or hangup
	 * meant for the program does not stop it mid-conversion. */
	if (s->idle)
		wp_syscall(SYS_setsid);
	wp_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
	wp_syscall(SYS_execve, s->argv[0], s->argv, env);
	s->err = errno ? errno : ENOEXEC;
	wp_syscall(SYS_exit, 127);
	return 127;
}

/* The intermediate: our own child, exit signal none, which never execs
 * (an exec resets the exit signal to SIGCHLD, and the program would see
 * it): it starts the converter and ends at once, so that the converter is
 * nobody's child of ours (init, or the nearest subreaper, reaps it).
 * async-signal-safe */
WP_AS_SAFE static int intermediate(void *arg)
{
	struct spawn *s = arg;
	long pid = clone(child, s->stack2, CLONE_VM | CLONE_VFORK | SIGCHLD, s);

	s->pid = pid > 0 ? (int)pid : 0;
	wp_syscall(SYS_exit, 0);
	return 0;
}

/* ---- starting it ------------------------------------------------------- */

/* Appends one argument, or an option and its value (`value` not NULL),
 * to the command line in `cv`: both or neither (paths are bounded well
 * below the room; an option left out is better than one that takes the
 * next argument as its value). async-signal-safe */
WP_AS_SAFE static void arg(struct wp_conv *cv, size_t *n, int *argc, const char *s,
			   const char *value)
{
	size_t start = *n, next;
	int need = value ? 2 : 1;

	if (*argc + need >= (int)(sizeof(cv->argv) / sizeof(*cv->argv)))
		return;
	next = wp_put_str(cv->args, *n, sizeof(cv->args), s) + 1;
	if (value)
		next = wp_put_str(cv->args, next, sizeof(cv->args), value) + 1;
	if (next >= sizeof(cv->args)) {
		cv->args[start] = 0;
		return;
	}
	cv->argv[(*argc)++] = cv->args + start;
	if (value)
		cv->argv[(*argc)++] = cv->args + start + strlen(s) + 1;
	cv->argv[*argc] = NULL;
	*n = next;
}

/* async-signal-safe */
WP_AS_SAFE int wp_convert_start(struct wp_conv *cv, const struct wp_conv_req *rq)
{
	char num[24];
	size_t an = 0;
	int ac = 0;
	int pipefd[2] = { -1, -1 }, saved = errno;
	struct spawn s;
	unsigned long all = ~0ul, old; /* the kernel's 8-byte masks */
	char *stack;
	long pid;
	int pidfd = -1;

	cv->pid = 0;
	cv->pidfd = -1;
	cv->report = -1;
	cv->in_private = wp_fds_private_here();
	cv->len = 0;
	cv->final = 0;
	wp_put_str(cv->raw, 0, sizeof(cv->raw), rq->raw);
	if (!program[0])
		return -1;
	arg(cv, &an, &ac, program, NULL);
	if (!rq->json) {
		/* the tree's converter: the dumps are named in the index */
		arg(cv, &an, &ac, "--tree", NULL);
		arg(cv, &an, &ac, "--fd", "3");
		arg(cv, &an, &ac, "--index", rq->index);
		wp_put_uint(num, 0, sizeof(num), timeout_s);
		arg(cv, &an, &ac, "--timeout", num);
		/* with chunks, one converter for all of them: it waits longer
		 * than a period for the next */
		if (chunk_s) {
			wp_put_uint(num, 0, sizeof(num), chunk_s + 3);
			arg(cv, &an, &ac, "--linger", num);
		}
	} else {
		arg(cv, &an, &ac, "--library", NULL);
		arg(cv, &an, &ac, "--fd", "3");
		arg(cv, &an, &ac, "--raw", rq->raw);
		arg(cv, &an, &ac, "-o", rq->json);
		if (rq->fallback)
			arg(cv, &an, &ac, "--fallback", rq->fallback);
		/* A module deleted or replaced on disk is read through this
		 * thread's mappings while it waits (not when detached: the
		 * process is gone). */
		if (!rq->detach) {
			wp_put_uint(num, 0, sizeof(num),
				    (unsigned long long)wp_syscall(SYS_gettid));
			arg(cv, &an, &ac, "--pid", num);
		} else if (rq->index) {
			wp_put_uint(num, 0, sizeof(num),
				    (unsigned long long)wp_syscall(SYS_getpid));
			arg(cv, &an, &ac, "--index", rq->index);
			arg(cv, &an, &ac, "--index-pid", num);
		}
	}
	arg(cv, &an, &ac, "--platform", platform);
	if (formats[0] && strcmp(formats, "sentry"))
		arg(cv, &an, &ac, "--formats", formats);
	if (debuginfod)
		arg(cv, &an, &ac, "--debuginfod", NULL);
	if (!rq->detach && wp_syscall(SYS_pipe2, pipefd, O_CLOEXEC) < 0)
		pipefd[0] = pipefd[1] = -1;
	stack = (char *)wp_syscall(SYS_mmap, NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED || (unsigned long)stack > -4096ul) {
		if (pipefd[0] >= 0) {
			wp_syscall(SYS_close, pipefd[0]);
			wp_syscall(SYS_close, pipefd[1]);
		}
		errno = saved;
		return -1;
	}
	s.argv = cv->argv;
	s.raw_fd = rq->raw_fd;
	s.out_fd = pipefd[1];
	s.idle = rq->detach;
	s.slack = (pid_t)wp_syscall(SYS_gettid) == g->smp.sampler_tid ? g->smp.slack : 0;
	s.stack2 = stack + CHILD_STACK / 2;
	s.pid = 0;
	s.err = 0;
	/* Every signal held while the children share our memory: a handler
	 * of the program's must not run on their stacks. Both are done with
	 * our memory when clone returns (vfork: the converter has exec'd and
	 * the intermediate has ended). */
	wp_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8);
	pid = clone(intermediate, stack + CHILD_STACK, CLONE_VM | CLONE_VFORK, &s);
	if (pid > 0) {
		int st;

		while (wp_syscall(SYS_wait4, pid, &st, __WCLONE, NULL) < 0 && errno == EINTR)
			;
	}
	wp_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
	wp_syscall(SYS_munmap, stack, CHILD_STACK);
	if (pipefd[1] >= 0)
		wp_syscall(SYS_close, pipefd[1]);
	if (pid <= 0 || s.pid <= 0 || s.err) {
		if (pipefd[0] >= 0)
			wp_syscall(SYS_close, pipefd[0]);
		errno = saved;
		return -1;
	}
	cv->pid = s.pid;
	cv->report = pipefd[0];
	/* A handle that cannot name another process: taken while the
	 * converter still holds its end of the pipe (it is alive, its pid not
	 * reused). Without it the pipe alone tells its end. */
	if (cv->report >= 0) {
		struct pollfd pf = { cv->report, 0, 0 };

		pidfd = (int)wp_syscall(SYS_pidfd_open, cv->pid, 0);
		if (pidfd >= 0 && wp_syscall(SYS_poll, &pf, 1, 0) != 0) {
			wp_syscall(SYS_close, pidfd); /* already gone */
			pidfd = -1;
		}
	}
	cv->pidfd = pidfd;
	errno = saved;
	return 0;
}

/* async-signal-safe */
WP_AS_SAFE int wp_convert_ensure_tree(struct wp_conv *cv, const char *index)
{
	struct wp_conv_req rq = { 0 };
	struct stat st;
	int fd, rc, saved = errno;

	if (!program[0] || !index)
		return -1;
	/* O_NONBLOCK: whoever names the index, a FIFO there does not hang us */
	fd = (int)wp_syscall(SYS_openat, AT_FDCWD, index,
			     O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		errno = saved;
		return -1;
	}
	if (wp_syscall(SYS_fstat, fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = -1;
	} else if (wp_syscall(SYS_flock, fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? 0 : -1; /* one is at work */
	} else {
		/* its copy of the descriptor holds the lock from now on */
		rq.raw_fd = fd;
		rq.raw = index;
		rq.detach = 1;
		rq.index = index;
		rc = wp_convert_start(cv, &rq) < 0 ? -1 : 1;
	}
	wp_syscall(SYS_close, fd);
	errno = saved;
	return rc;
}

/* ---- its report -------------------------------------------------------- */

static volatile int said_upload; /* a relayed line said where uploads stand */

/* async-signal-safe */
WP_AS_SAFE int wp_convert_said_upload(void)
{
	return said_upload;
}

/* One report line: "<level> TAB <kind> TAB <path> TAB <lost> TAB <message>".
 * async-signal-safe when `as_safe` */
WP_AS_SAFE static void relay(struct wp_conv *cv, char *line, size_t len, int as_safe)
{
	char *f[WP_EVENT_FIELDS], *p, *end = line + len;
	unsigned long long lost = 0;
	int level;

	if (wp_event_split(line, len, f) < 0)
		return; /* not a report line */
	level = f[0][0] >= '1' && f[0][0] <= '3' && !f[0][1] ? f[0][0] - '0' : WP_LOG_INFO;
	for (p = f[3]; *p >= '0' && *p <= '9'; p++)
		lost = lost * 10 + (unsigned long long)(*p - '0');
	if (strcmp(f[1], "wrote") && strcmp(f[1], "short") && strcmp(f[1], "error"))
		f[1] = "info";
	else
		cv->final = 1;
	if (!strncmp(f[4], "upload: ", 8)) /* any level: the newest word on uploads */
		said_upload = 1;
	if (as_safe)
		wp_log_raw(level, f[1], f[2][0] ? f[2] : NULL, lost, f[4], (size_t)(end - f[4]));
	else
		wp_log_event(level, f[1], f[2][0] ? f[2] : NULL, lost, "%.*s", (int)(end - f[4]),
			     f[4]);
}

/* Reads what is there (non-blocking); returns 1 at end of file.
 * async-signal-safe when `as_safe` */
WP_AS_SAFE static int drain(struct wp_conv *cv, int as_safe)
{
	for (;;) {
		long n;
		char *nl;

		if (cv->len == sizeof(cv->buf))
			cv->len = 0; /* a line longer than any we write: dropped */
		n = wp_syscall(SYS_read, cv->report, cv->buf + cv->len, sizeof(cv->buf) - cv->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0;
		cv->len += (size_t)n;
		while ((nl = memchr(cv->buf, '\n', cv->len))) {
			size_t used = (size_t)(nl - cv->buf) + 1;

			relay(cv, cv->buf, used - 1, as_safe);
			memmove(cv->buf, cv->buf + used, cv->len - used);
			cv->len -= used;
		}
	}
}

/* The converter is not our child (see intermediate): forgetting it is all.
 * async-signal-safe */
/* Forgets the conversion's descriptors, and returns them (-1 for none):
 * cleared before they are closed, so that a fork on another thread meanwhile
 * never leaves a child a number the program may have got back. Descriptors
 * exist only while a converter runs (pid set): a conversion never started
 * may hold zeros, and 0 is the program's stdin. async-signal-safe */
WP_AS_SAFE static void take_fds(struct wp_conv *cv, int *pidfd, int *report)
{
	*pidfd = cv->pid ? cv->pidfd : -1;
	*report = cv->pid ? cv->report : -1;
	__atomic_store_n(&cv->pidfd, -1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&cv->report, -1, __ATOMIC_SEQ_CST);
	cv->pid = 0;
}

WP_AS_SAFE void wp_convert_forget(struct wp_conv *cv)
{
	int pidfd, report;

	take_fds(cv, &pidfd, &report);
	if (pidfd >= 0)
		wp_syscall(SYS_close, pidfd);
	if (report >= 0)
		wp_syscall(SYS_close, report);
}

WP_AS_SAFE void wp_convert_forked(struct wp_conv *cv)
{
	int pidfd, report;

	if (!cv->in_private) {
		wp_convert_forget(cv);
		return;
	}
	take_fds(cv, &pidfd, &report);
}

/* One error line: `why` (and `what`), then where the raw dump stays.
 * async-signal-safe */
WP_AS_SAFE static void say_left(struct wp_conv *cv, const char *why, const char *what,
				const char *why2)
{
	size_t n = 0, cap = sizeof(cv->line);

	n = wp_put_str(cv->line, n, cap, why);
	n = wp_put_str(cv->line, n, cap, what);
	n = wp_put_str(cv->line, n, cap, why2);
	n = wp_put_str(cv->line, n, cap, "; the raw dump stays at ");
	n = wp_put_str(cv->line, n, cap, cv->raw);
	n = wp_put_str(cv->line, n, cap, " (convert it with wallprof convert)");
	wp_log_raw(WP_LOG_ERROR, "error", NULL, 0, cv->line, n);
}

/* async-signal-safe when `as_safe` */
WP_AS_SAFE int wp_convert_wait(struct wp_conv *cv, uint64_t deadline_ns, int as_safe)
{
	int saved = errno, eof = 0, rc = 0;

	if (!cv->pid)
		return 0;
	if (cv->report < 0) {
		/* detached: the process that started it leaves it running */
		wp_convert_forget(cv);
		return 0;
	}
	wp_syscall(SYS_fcntl, cv->report, F_SETFL, O_NONBLOCK);
	while (!eof || cv->pidfd >= 0) {
		struct pollfd pf[2] = { { cv->report, POLLIN, 0 }, { cv->pidfd, POLLIN, 0 } };
		uint64_t now = wp_mono_ns();
		struct timespec ts;

		if (now >= deadline_ns) {
			char num[24];

			if (cv->pidfd >= 0)
				wp_syscall(SYS_pidfd_send_signal, cv->pidfd, SIGKILL, NULL, 0);
			else /* its end of the pipe is open: it lives, its pid is its own */
				wp_syscall(SYS_kill, cv->pid, SIGKILL);
			wp_put_uint(num, 0, sizeof(num), timeout_s);
			say_left(cv,
				 "the conversion took longer than WALLPROF_CONVERT_TIMEOUT=", num,
				 " s and was stopped");
			rc = -1;
			break;
		}
		ts.tv_sec = (time_t)((deadline_ns - now) / 1000000000ull);
		ts.tv_nsec = (long)((deadline_ns - now) % 1000000000ull);
		if (wp_syscall(SYS_ppoll, pf + eof, (eof ? 0 : 1) + (cv->pidfd >= 0), &ts, NULL,
			       8) < 0 &&
		    errno != EINTR)
			break;
		if (!eof && pf[0].revents)
			eof = drain(cv, as_safe);
		if (cv->pidfd >= 0 && pf[1].revents) {
			/* Gone: what it wrote is in the pipe. A process forked
			 * meanwhile may hold the pipe's write end, so no end of
			 * file is waited for. */
			break;
		}
	}
	if (!eof && rc == 0)
		drain(cv, as_safe);
	if (rc == 0 && !cv->final) {
		say_left(cv, "the converter ended without a word (", program, ")");
		rc = -1;
	}
	wp_convert_forget(cv);
	errno = saved;
	return rc;
}

int wp_convert_poll(struct wp_conv *cv)
{
	struct pollfd pf;

	if (!cv->pid)
		return 1;
	if (cv->report < 0)
		return wp_convert_wait(cv, 0, 0), 1;
	wp_syscall(SYS_fcntl, cv->report, F_SETFL, O_NONBLOCK);
	if (!drain(cv, 0))
		return 0;
	pf.fd = cv->pidfd;
	pf.events = POLLIN;
	if (cv->pidfd >= 0 && wp_syscall(SYS_poll, &pf, 1, 0) == 0)
		return 0;
	wp_convert_forget(cv);
	return 1;
}
