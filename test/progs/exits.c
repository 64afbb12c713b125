/* exits: every way a process ends, each after ~0.5 s of named work
 * (wpt_exit_work). Usage: exits MODE [ARG]
 *   return       return 3 from main
 *   thread_exit  a second thread works, then exit(4) while main waits in pthread_join
 *   _exit        _exit(5)
 *   _Exit        _Exit(6)
 *   pthread_exit main calls pthread_exit; two threads (wpt_tail_work) work 0.5 s more
 *                and return: the process ends with status 0
 *   exec PROG    execv(PROG, {PROG}) after the work
 *   abort        abort()
 *   segv         a store through a null pointer
 *   sigterm      prints "ready" after the work, then works on (wpt_exit_work) until
 *                killed; gives up with exit(9) after 20 s
 * stdout lines are flushed before the end, so they are the same whatever the end. */
/* noipa on the named functions: no inlining, cloning or identical-code folding
 * (two functions with the same body would otherwise share one name). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "work.h"

static int *volatile nullp; /* the compiler cannot know it is NULL */

WPT_WORK(wpt_exit_work)

WPT_WORK(wpt_tail_work)

static void say(const char *line)
{
	printf("%s\n", line);
	fflush(stdout);
}

static void *exiter(void *arg)
{
	(void)arg;
	wpt_exit_work(0.5);
	say("thread: exit(4)");
	exit(4);
}

static void *tail(void *arg)
{
	(void)arg;
	wpt_tail_work(1.0);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (strcmp(mode, "thread_exit") == 0) {
		pthread_t t;

		pthread_create(&t, NULL, exiter, NULL);
		pthread_join(t, NULL);
		say("main: not reached");
		return 1;
	}
	if (strcmp(mode, "pthread_exit") == 0) {
		pthread_t t[2];

		pthread_create(&t[0], NULL, tail, NULL);
		pthread_create(&t[1], NULL, tail, NULL);
		wpt_exit_work(0.5);
		say("main: pthread_exit");
		pthread_exit(NULL);
	}
	wpt_exit_work(0.5);
	if (strcmp(mode, "return") == 0) {
		say("main: return 3");
		return 3;
	}
	if (strcmp(mode, "_exit") == 0) {
		say("main: _exit(5)");
		_exit(5);
	}
	if (strcmp(mode, "_Exit") == 0) {
		say("main: _Exit(6)");
		_Exit(6);
	}
	if (strcmp(mode, "exec") == 0 && argc == 3) {
		char *args[] = { argv[2], NULL };

		say("main: exec");
		execv(argv[2], args);
		perror("execv");
		return 1;
	}
	if (strcmp(mode, "abort") == 0) {
		say("main: abort");
		abort();
	}
	if (strcmp(mode, "segv") == 0) {
		say("main: segv");
		*nullp = 1;
		return 1;
	}
	if (strcmp(mode, "sigterm") == 0) {
		double give_up = now_s() + 20;

		say("ready");
		while (now_s() < give_up)
			wpt_exit_work(0.1);
		return 9;
	}
	fprintf(stderr, "usage: exits return|thread_exit|_exit|_Exit|pthread_exit|exec PROG|"
			"abort|segv|sigterm\n");
	return 2;
}
