/* processes: process creation under the profiler. Usage:
 *   processes fork                 fork; the child works (wpt_child_work) and exit(0)s,
 *                                  the parent works (wpt_parent_work), waits, exits 0
 *   processes forkexec PROG ARGS   fork + execv(PROG, ARGS) in the child
 *   processes vfork PROG ARGS      vfork + execv
 *   processes spawn PROG ARGS      posix_spawn
 *   processes system CMD           system(CMD)
 *   processes envwork              prints its LD_PRELOAD, works 0.3 s (wpt_exec_work), exits 0
 *   processes daemon MARKER LOG    double fork + setsid + chdir("/") + stdio closed and
 *                                  reopened on /dev/null; the log file lands on fd 2; the
 *                                  daemon works 0.5 s (wpt_daemon_work), writes MARKER
 *                                  (its pid) by rename, exits 0
 *   processes execfail             threads running, an execv that fails (no such file),
 *                                  then 1.5 s more of work with the threads (the
 *                                  profiler restarts and must not crash); exits 0
 *   processes forkthread           a thread (not main) forks; in the child that thread
 *                                  returns from its start routine, which ends the child
 *                                  with status 0; the parent waits (up to 10 s) and prints
 *                                  the child's status
 *   processes forknomem            8 times: fork; the child at once lowers RLIMIT_AS
 *                                  below what it has mapped (its new sampler cannot map
 *                                  its ring), sleeps 0.2 s and _exit(0)s; prints how
 *                                  many children ended otherwise
 *   processes forkreset            forks a child that waits (up to 10 s) until another of
 *                                  its threads sleeps in nanosleep (the test build's
 *                                  sampler holding in its restart between two rings,
 *                                  WALLPROF_TEST_FORK_RESET_HOLD_US), then forks a
 *                                  grandchild that works 0.6 s (wpt_grandchild_work) and
 *                                  exits 0; prints "sampler seen: yes|no", whether the
 *                                  hold lasted across the fork, the grandchild's pid and
 *                                  status, and the child's status
 *   processes snapfork             works 0.3 s, raises SIGUSR2 (a snapshot), then forks
 *                                  a child every millisecond until the snapshot's
 *                                  profile is in place (wallprof.PID.1.json, up to 10
 *                                  s): each child checks that its descriptors 0, 1 and
 *                                  2 are still the parent's files and exits 0, or 3;
 *                                  prints "snapfork: N of M children lost a descriptor
 *                                  (K forked during the conversion)"
 *   processes forkloader           works 0.2 s, then 10 times: forks a child that works
 *                                  0.1 s and exits 0, waits for it up to 5 s (then kills
 *                                  it); run with WALLPROF_TEST_LOADER_HOLD_US, the
 *                                  sampler holds the loader's lock at every tick; prints
 *                                  "forkloader: N of 10 children hung"
 *   processes forkinloader         a thread holds the loader's lock (it waits inside a
 *                                  dl_iterate_phdr callback) while main forks a child
 *                                  that works 0.1 s and exits 0; main waits for it up
 *                                  to 5 s (then kills it), lets the thread go; prints
 *                                  "forkinloader: the child exited 0" or "... hung"
 * The parent modes print "child PID" and "child status: exited N" /
 * "killed by N" on stdout (lines the test normalizes by pid). Every mode
 * retries its waits on EINTR. */
/* noipa on the named functions: no inlining, cloning or identical-code folding
 * (two functions with the same body would otherwise share one name). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "work.h"

extern char **environ;

WPT_WORK(wpt_parent_work)

WPT_WORK(wpt_child_work)

WPT_WORK(wpt_exec_work)

WPT_WORK(wpt_daemon_work)
WPT_WORK(wpt_grandchild_work)
WPT_WORK(wpt_snapfork_work)
WPT_WORK(wpt_forkloader_work)

/* fork() with stdout flushed first: a child that exits would print the
 * parent's buffered lines again. */
static pid_t fork_flushed(void)
{
	fflush(stdout);
	return fork();
}

static void print_status_of(const char *who, int st)
{
	if (WIFEXITED(st))
		printf("%s status: exited %d\n", who, WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		printf("%s status: killed by %d\n", who, WTERMSIG(st));
	else
		printf("%s status: 0x%x\n", who, st);
}

static void print_status(int st)
{
	print_status_of("child", st);
}

static int wait_child(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			perror("waitpid");
			exit(1);
		}
	}
	print_status(st);
	return st;
}

static int mode_fork(void)
{
	pid_t pid;

	pid = fork_flushed();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		wpt_child_work(0.3);
		exit(0);
	}
	wpt_parent_work(0.3);
	printf("child %d\n", (int)pid);
	wait_child(pid);
	return 0;
}

static int mode_forkexec(char **argv, int use_vfork)
{
	pid_t pid;

	fflush(stdout);
	pid = use_vfork ? vfork() : fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		execv(argv[0], argv);
		_exit(127);
	}
	wpt_parent_work(0.2);
	printf("child %d\n", (int)pid);
	wait_child(pid);
	return 0;
}

static int mode_spawn(char **argv)
{
	pid_t pid;
	int rc;

	fflush(stdout);
	rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
	if (rc != 0) {
		fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
		return 1;
	}
	wpt_parent_work(0.2);
	printf("child %d\n", (int)pid);
	wait_child(pid);
	return 0;
}

static int mode_system(const char *cmd)
{
	int st;

	fflush(stdout);
	wpt_parent_work(0.2);
	st = system(cmd);
	if (st == -1) {
		perror("system");
		return 1;
	}
	print_status(st);
	return 0;
}

static int mode_envwork(void)
{
	const char *p = getenv("LD_PRELOAD");

	printf("envwork: LD_PRELOAD=[%s]\n", p ? p : "(unset)");
	fflush(stdout);
	wpt_exec_work(0.3);
	printf("envwork: done\n");
	return 0;
}

static void logline(const char *msg)
{
	/* fd 2 is the log file here. */
	if (write(2, msg, strlen(msg)) < 0)
		_exit(3);
}

static int mode_daemon(const char *marker, const char *log)
{
	pid_t pid;
	int fd;
	char tmp[4096], buf[64];

	pid = fork_flushed();
	if (pid < 0)
		return 1;
	if (pid > 0) {
		/* The original process: waits for the intermediate child only. */
		int st;

		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		printf("daemon: launched\n");
		return 0;
	}
	if (setsid() < 0)
		_exit(1);
	pid = fork();
	if (pid < 0)
		_exit(1);
	if (pid > 0)
		_exit(0);
	/* The daemon. */
	if (chdir("/") < 0)
		exit(1);
	umask(022);
	close(0);
	close(1);
	close(2);
	if (open("/dev/null", O_RDONLY) != 0)
		exit(1);
	if (open("/dev/null", O_WRONLY) != 1)
		exit(1);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (fd != 2)
		exit(1);
	logline("daemon: start\n");
	wpt_daemon_work(0.5);
	logline("daemon: work done\n");
	snprintf(tmp, sizeof(tmp), "%s.tmp", marker);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		exit(1);
	snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
	if (write(fd, buf, strlen(buf)) < 0)
		exit(1);
	close(fd);
	if (rename(tmp, marker) < 0)
		exit(1);
	logline("daemon: exiting\n");
	exit(0);
}

/* ---- execfail ---- */

WPT_WORK(wpt_execfail_work)

static void *execfail_thread(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "execfail-w");
	wpt_execfail_work(1.8);
	return NULL;
}

static int mode_execfail(void)
{
	char *args[] = { "/nonexistent/wallprof-test", NULL };
	pthread_t t[3];

	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, execfail_thread, NULL);
	wpt_execfail_work(0.2);
	execv(args[0], args);
	printf("execv failed: %s\n", strerror(errno));
	fflush(stdout);
	wpt_execfail_work(1.5); /* the profiler prunes its thread names each second */
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("execfail: done\n");
	return 0;
}

/* ---- forkthread ---- */

WPT_WORK(wpt_forkthread_work)

static void *forker(void *arg)
{
	pid_t pid;
	int status;

	(void)arg;
	wpt_forkthread_work(0.1);
	pid = fork();
	if (pid == 0) {
		/* The child's only thread: returning ends the process (glibc
		 * calls exit(0) when the last thread returns). */
		wpt_forkthread_work(0.1);
		return NULL;
	}
	if (pid < 0)
		return (void *)(intptr_t)-1;
	for (int i = 0; i < 1000; i++) { /* 10 s */
		pid_t got = waitpid(pid, &status, WNOHANG);

		if (got == pid) {
			printf("forkthread: child %s %d\n",
			       WIFEXITED(status) ? "exited" : "killed by",
			       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			return NULL;
		}
		if (got < 0 && errno != EINTR)
			break;
		usleep(10000); /* bounded wait on the child's end, not synchronization */
	}
	printf("forkthread: child still running after 10 s\n");
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return NULL;
}

static int mode_forkthread(void)
{
	pthread_t t;

	pthread_create(&t, NULL, forker, NULL);
	pthread_join(t, NULL);
	return 0;
}

/* ---- forknomem: a forked child that can map nothing more ---- */

static int mode_forknomem(void)
{
	int bad = 0;

	for (int i = 0; i < 8; i++) {
		pid_t p = fork();
		int st;

		if (p < 0)
			return 1;
		if (p == 0) {
			struct rlimit rl = { 1 << 20, RLIM_INFINITY };
			struct timespec ts = { 0, 200000000 };

			setrlimit(RLIMIT_AS, &rl);
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		while (waitpid(p, &st, 0) < 0 && errno == EINTR)
			;
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	printf("forknomem: %d of 8 children did not exit 0\n", bad);
	return 0;
}

/* ---- forkreset ---- */

/* Whether a thread other than the caller is inside nanosleep now. */
static int other_thread_sleeps(void)
{
	char path[96], buf[64];
	long self = (long)gettid(), tid;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d)) != NULL) {
		FILE *f;

		tid = atol(e->d_name);
		if (tid <= 0 || tid == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/syscall", tid);
		f = fopen(path, "r");
		if (!f)
			continue;
		found = fgets(buf, sizeof(buf), f) && atol(buf) == SYS_nanosleep;
		fclose(f);
	}
	closedir(d);
	return found;
}

static int mode_forkreset(void)
{
	pid_t pid;

	pid = fork_flushed();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		struct timespec t0, t;
		pid_t gc;
		int seen = 0, st;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		do { /* polling an observable condition */
			seen = other_thread_sleeps();
			clock_gettime(CLOCK_MONOTONIC, &t);
		} while (!seen && t.tv_sec - t0.tv_sec < 10);
		printf("sampler seen: %s\n", seen ? "yes" : "no");
		gc = fork_flushed();
		if (gc < 0)
			_exit(1);
		if (gc == 0) {
			wpt_grandchild_work(0.6);
			exit(0);
		}
		/* still holding: the fork was made inside the hold */
		printf("held across the fork: %s\n", other_thread_sleeps() ? "yes" : "no");
		printf("grandchild %d\n", (int)gc);
		while (waitpid(gc, &st, 0) < 0 && errno == EINTR)
			;
		print_status_of("grandchild", st);
		fflush(stdout);
		_exit(0);
	}
	wait_child(pid);
	return 0;
}

/* ---- snapfork ---- */

static int mode_snapfork(void)
{
	struct stat mine[3];
	char path[64], raw[64];
	int lost = 0, n = 0, during = 0;
	struct timespec t0, t;

	for (int fd = 0; fd < 3; fd++)
		if (fstat(fd, &mine[fd]) < 0)
			return 1;
	wpt_snapfork_work(0.3);
	snprintf(path, sizeof(path), "wallprof.%d.1.json", (int)getpid());
	snprintf(raw, sizeof(raw), "wallprof.%d.1.raw", (int)getpid());
	raise(SIGUSR2);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do { /* forks while the snapshot is being converted */
		struct timespec ms = { 0, 1000000 };
		pid_t pid;
		int st;

		fflush(stdout);
		during += access(raw, F_OK) == 0; /* the dump is being converted */
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			for (int fd = 0; fd < 3; fd++) {
				struct stat now;

				if (fstat(fd, &now) < 0 || now.st_dev != mine[fd].st_dev ||
				    now.st_ino != mine[fd].st_ino)
					_exit(3 + fd);
			}
			_exit(0);
		}
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			if (!lost)
				printf("snapfork: a child ended with status 0x%x\n", st);
			lost++;
		}
		n++;
		nanosleep(&ms, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (access(path, F_OK) != 0 && t.tv_sec - t0.tv_sec < 10);
	printf("snapfork: %d of %d children lost a descriptor (%d forked during the "
	       "conversion)\n",
	       lost, n, during);
	return 0;
}

/* ---- forkloader ---- */

/* Waits up to `secs` for child `pid` (polling its end every 5 ms); kills it
 * past that. Returns 1 when it ended by itself (*st its status), 0 when it
 * was killed. */
static int wait_bounded(pid_t pid, int *st, int secs)
{
	struct timespec t0, t, step = { 0, 5000000 };
	int w;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do { /* polling the child's end, with a bound */
		w = waitpid(pid, st, WNOHANG);
		if (w == 0)
			nanosleep(&step, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (w == 0 && t.tv_sec - t0.tv_sec < secs);
	if (w != 0)
		return 1;
	kill(pid, SIGKILL);
	while (waitpid(pid, st, 0) < 0 && errno == EINTR)
		;
	return 0;
}

static int mode_forkloader(void)
{
	int hung = 0;

	wpt_forkloader_work(0.2);
	for (int i = 0; i < 10; i++) {
		pid_t pid;
		int st;

		pid = fork_flushed();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			wpt_forkloader_work(0.1);
			exit(0);
		}
		hung += !wait_bounded(pid, &st, 5);
	}
	printf("forkloader: %d of 10 children hung\n", hung);
	return 0;
}

/* ---- forkinloader ---- */

static int inloader_pipes[2][2]; /* [0]: the thread is in; [1]: let it go */

static int inloader_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	char c = 1;
	int *first = data;

	(void)info;
	(void)size;
	if (*first) {
		*first = 0;
		if (write(inloader_pipes[0][1], &c, 1) != 1 ||
		    read(inloader_pipes[1][0], &c, 1) != 1)
			return 1;
	}
	return 0;
}

static void *inloader_thread(void *arg)
{
	int first = 1;

	(void)arg;
	dl_iterate_phdr(inloader_cb, &first);
	return NULL;
}

static int mode_forkinloader(void)
{
	pthread_t t;
	pid_t pid;
	char c = 1;
	int st, w = 0;

	wpt_forkloader_work(0.2);
	if (pipe(inloader_pipes[0]) < 0 || pipe(inloader_pipes[1]) < 0 ||
	    pthread_create(&t, NULL, inloader_thread, NULL) != 0)
		return 1;
	if (read(inloader_pipes[0][0], &c, 1) != 1) /* the thread holds the lock */
		return 1;
	pid = fork_flushed();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		wpt_forkloader_work(0.1);
		_exit(0);
	}
	w = wait_bounded(pid, &st, 5) ? 1 : 0;
	if (write(inloader_pipes[1][1], &c, 1) != 1)
		return 1;
	pthread_join(t, NULL);
	if (!w)
		printf("forkinloader: the child hung\n");
	else if (WIFEXITED(st))
		printf("forkinloader: the child exited %d\n", WEXITSTATUS(st));
	else
		printf("forkinloader: the child was killed by %d\n", WTERMSIG(st));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "fork") == 0)
		return mode_fork();
	if (argc >= 3 && strcmp(argv[1], "forkexec") == 0)
		return mode_forkexec(argv + 2, 0);
	if (argc >= 3 && strcmp(argv[1], "vfork") == 0)
		return mode_forkexec(argv + 2, 1);
	if (argc >= 3 && strcmp(argv[1], "spawn") == 0)
		return mode_spawn(argv + 2);
	if (argc == 3 && strcmp(argv[1], "system") == 0)
		return mode_system(argv[2]);
	if (argc == 2 && strcmp(argv[1], "envwork") == 0)
		return mode_envwork();
	if (argc == 4 && strcmp(argv[1], "daemon") == 0)
		return mode_daemon(argv[2], argv[3]);
	if (argc == 2 && strcmp(argv[1], "execfail") == 0)
		return mode_execfail();
	if (argc == 2 && strcmp(argv[1], "forknomem") == 0)
		return mode_forknomem();
	if (argc == 2 && strcmp(argv[1], "forkthread") == 0)
		return mode_forkthread();
	if (argc == 2 && strcmp(argv[1], "forkreset") == 0)
		return mode_forkreset();
	if (argc == 2 && strcmp(argv[1], "snapfork") == 0)
		return mode_snapfork();
	if (argc == 2 && strcmp(argv[1], "forkloader") == 0)
		return mode_forkloader();
	if (argc == 2 && strcmp(argv[1], "forkinloader") == 0)
		return mode_forkinloader();
	fprintf(stderr, "usage: processes fork|forkexec PROG ARGS|vfork PROG ARGS|spawn PROG ARGS|"
			"system CMD|envwork|daemon MARKER LOG|execfail|forknomem|forkthread|"
			"forkreset|snapfork|forkloader|forkinloader\n");
	return 2;
}
