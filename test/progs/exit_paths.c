/* exit_paths: ends that run the program's own code at the very end.
 * Usage: exit_paths MODE
 *   pthread_exit_atexit  main opens "atexit.log", registers an atexit handler,
 *                        leaves buffered stdout, starts two threads
 *                        (wpt_tail_work, 0.6 s each) and calls pthread_exit.
 *                        The last thread ends the process: the handler writes
 *                        "atexit ran" to the log through the descriptor main
 *                        opened, and stdout is flushed ("main: buffered",
 *                        "atexit: stdout").
 *   pthread_exit_short   the same with 16 detached threads of 5 ms each (too
 *                        short to be seen by a sampling tick).
 *   pthread_exit_cleanup main pushes a cleanup handler that works 0.4 s
 *                        (wpt_cleanup_work), starts a thread that works 0.8 s
 *                        (wpt_tail_work) and calls pthread_exit; the thread
 *                        prints "cleanup: done".
 *   thrd_exit            a C11 thread (thrd_create: not through pthread_create)
 *                        works 0.5 s (wpt_tail_work) while main leaves by
 *                        thrd_exit; prints "thrd: done" from the thread.
 *   raw_exit [SECONDS]   a thread (pthread_create) works SECONDS (0.5;
 *                        wpt_tail_work)
 *                        while main leaves by a raw exit system call (only the
 *                        kernel sees it); the thread writes "raw: done" to
 *                        stdout (write(2): no exit() flushes stdio then) and
 *                        returns, and the process ends with it, status 0.
 *   raw_exit_all SECONDS STATUS  main leaves by a raw exit with STATUS while
 *                        a thread works SECONDS (wpt_tail_work), writes
 *                        "raw: done" and leaves by a raw exit too (status 0):
 *                        no thread's end runs any code, and the process ends
 *                        with its last thread (Linux 6.18 reports that
 *                        thread's status).
 *   handler_exit         a SIGALRM handler calls _exit(7) while the main
 *                        thread allocates and frees in a loop (wpt_malloc_work):
 *                        the handler interrupts malloc now and then.
 *   handler_exec PROG    the same, but the handler execs PROG (no arguments).
 *   handler_exec_fails   the handler's exec fails (no such file) and it returns;
 *                        main then works 0.4 s more (wpt_after_work) and
 *                        returns 0.
 * stdout is a pipe in the tests: fully buffered, flushed only at exit. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <threads.h>
#include <unistd.h>

#include "work.h"

WPT_WORK(wpt_tail_work)
WPT_WORK(wpt_after_work)
WPT_WORK(wpt_cleanup_work)

static void cleanup_spin(void *arg)
{
	(void)arg;
	wpt_cleanup_work(0.4);
}

static void *cleanup_tail(void *arg)
{
	(void)arg;
	wpt_tail_work(0.8);
	printf("cleanup: done\n");
	return NULL;
}

static int log_fd = -1;
static const char *exec_prog;
static volatile sig_atomic_t exec_failed;

static void at_exit(void)
{
	if (write(log_fd, "atexit ran\n", 11) != 11)
		printf("atexit: write: %m\n");
	printf("atexit: stdout\n");
}

static void *short_tail(void *arg)
{
	(void)arg;
	wpt_tail_work(0.005);
	return NULL;
}

static void *tail(void *arg)
{
	(void)arg;
	wpt_tail_work(0.6);
	return NULL;
}

static double raw_secs = 0.5;

static void *raw_tail(void *arg)
{
	(void)arg;
	wpt_tail_work(raw_secs);
	if (write(1, "raw: done\n", 10) != 10)
		return NULL;
	return NULL;
}

static void *raw_tail_raw(void *arg)
{
	raw_tail(arg);
	syscall(SYS_exit, 0);
	return NULL;
}

static int c11_tail(void *arg)
{
	(void)arg;
	wpt_tail_work(0.5);
	printf("thrd: done\n");
	return 0;
}

static void on_alarm(int sig)
{
	(void)sig;
	if (exec_prog) {
		char *args[] = { (char *)exec_prog, NULL };

		execv(exec_prog, args);
		exec_failed = 1;
		return;
	}
	_exit(7);
}

/* Allocation churn: the malloc lock is held a good share of the time. */
__attribute__((noipa)) static void wpt_malloc_work(void)
{
	void *p[64] = { 0 };
	unsigned i = 0;

	for (;;) {
		free(p[i % 64]);
		p[i % 64] = malloc(16 + (i * 37) % 4000);
		i++;
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "pthread_exit_atexit") || !strcmp(mode, "pthread_exit_short")) {
		int is_short = !strcmp(mode, "pthread_exit_short"), n = is_short ? 16 : 2;
		pthread_attr_t a;
		pthread_t t;

		log_fd = open("atexit.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (log_fd < 0)
			return 2;
		atexit(at_exit);
		printf("main: buffered\n"); /* not flushed */
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		while (n--)
			pthread_create(&t, &a, is_short ? short_tail : tail, NULL);
		pthread_exit(NULL);
	}
	if (!strcmp(mode, "handler_exit") || (!strcmp(mode, "handler_exec") && argc == 3)) {
		struct itimerval it = { { 0, 0 }, { 0, 400000 } };

		exec_prog = argc == 3 ? argv[2] : NULL;
		signal(SIGALRM, on_alarm);
		setitimer(ITIMER_REAL, &it, NULL);
		wpt_malloc_work();
	}
	if (!strcmp(mode, "thrd_exit")) {
		thrd_t t;

		if (thrd_create(&t, c11_tail, NULL) != thrd_success)
			return 2;
		thrd_detach(t);
		thrd_exit(0);
	}
	if (!strcmp(mode, "raw_exit")) {
		pthread_t t;

		if (argc == 3)
			raw_secs = atof(argv[2]);
		if (pthread_create(&t, NULL, raw_tail, NULL))
			return 2;
		syscall(SYS_exit, 0);
	}
	if (!strcmp(mode, "pthread_exit_cleanup")) {
		pthread_t t;

		if (pthread_create(&t, NULL, cleanup_tail, NULL))
			return 2;
		pthread_cleanup_push(cleanup_spin, NULL);
		pthread_exit(NULL);
		pthread_cleanup_pop(0);
	}
	if (!strcmp(mode, "raw_exit_all") && argc == 4) {
		pthread_t t;

		raw_secs = atof(argv[2]);
		if (pthread_create(&t, NULL, raw_tail_raw, NULL))
			return 2;
		syscall(SYS_exit, atoi(argv[3]));
	}
	if (!strcmp(mode, "handler_exec_fails")) {
		struct itimerval it = { { 0, 0 }, { 0, 300000 } };

		exec_prog = "/nonexistent/program";
		signal(SIGALRM, on_alarm);
		setitimer(ITIMER_REAL, &it, NULL);
		while (!exec_failed)
			wpt_tail_work(0.01);
		wpt_after_work(0.4);
		printf("exec from the handler failed; main went on\n");
		return 0;
	}
	fprintf(stderr, "usage: exit_paths pthread_exit_atexit|pthread_exit_short|"
			"pthread_exit_cleanup|thrd_exit|"
			"raw_exit [SECONDS]|raw_exit_all SECONDS STATUS|handler_exit|"
			"handler_exec PROG|handler_exec_fails\n");
	return 2;
}
