/* cancel: threads cancelled inside wrapped calls (test/e2e/cancel.py). A C
 * program: libgcc_s, which the unwind of a cancelled thread needs, is not
 * in its global scope; glibc loads it for itself at the first
 * pthread_cancel.
 *
 *   cancel blocked   five threads, each blocked in a different interposed
 *                    call (read on a pipe, nanosleep, pthread_cond_wait,
 *                    poll, accept), cancelled after 300 ms and joined.
 *                    Prints "cancel: 5 of 5 cancelled"
 *   cancel cleanup   a thread blocked in read with a cleanup handler
 *                    (pthread_cleanup_push) that spins 400 ms of CPU in
 *                    spin_in_cleanup, cancelled after 200 ms. Prints
 *                    "cleanup: ran, cancelled" */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define N 5

static int fds[2], lsock = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void unlock(void *m)
{
	pthread_mutex_unlock(m);
}

static void *in_read(void *a)
{
	char c;

	(void)a;
	return (void *)(long)read(fds[0], &c, 1);
}

static void *in_nanosleep(void *a)
{
	struct timespec ts = { 30, 0 };

	(void)a;
	return (void *)(long)nanosleep(&ts, NULL);
}

static void *in_cond_wait(void *a)
{
	(void)a;
	pthread_mutex_lock(&mu);
	pthread_cleanup_push(unlock, &mu);
	for (;;)
		pthread_cond_wait(&cv, &mu);
	pthread_cleanup_pop(1);
	return NULL;
}

static void *in_poll(void *a)
{
	struct pollfd p = { fds[0], POLLIN, 0 };

	(void)a;
	return (void *)(long)poll(&p, 1, -1);
}

static void *in_accept(void *a)
{
	(void)a;
	return (void *)(long)accept(lsock, NULL, NULL);
}

static volatile unsigned long sink;
static volatile int cleanup_ran;

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void spin_in_cleanup(void *arg)
{
	double end = cpu_s() + 0.4;

	(void)arg;
	while (cpu_s() < end)
		for (int i = 0; i < 10000; i++)
			sink += (unsigned long)i;
	cleanup_ran = 1;
}

static void *read_with_cleanup(void *arg)
{
	char c;

	(void)arg;
	pthread_cleanup_push(spin_in_cleanup, NULL);
	if (read(fds[0], &c, 1) < 0)
		perror("cancel: read");
	pthread_cleanup_pop(0);
	return NULL;
}

static int cleanup(void)
{
	struct timespec pause = { 0, 200000000 };
	pthread_t t;
	void *r;

	if (pipe(fds) < 0 || pthread_create(&t, NULL, read_with_cleanup, NULL) != 0)
		return 1;
	nanosleep(&pause, NULL); /* its wait, for the profile; cancel needs none */
	pthread_cancel(t);
	pthread_join(t, &r);
	printf("cleanup: %s, %s\n", cleanup_ran ? "ran" : "did not run",
	       r == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
	return cleanup_ran && r == PTHREAD_CANCELED ? 0 : 1;
}

static int blocked(void)
{
	void *(*fn[N])(void *) = { in_read, in_nanosleep, in_cond_wait, in_poll, in_accept };
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timespec pause = { 0, 300000000 };
	pthread_t t[N];
	int i, cancelled = 0;

	if (pipe(fds) < 0 || (lsock = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    bind(lsock, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lsock, 1) < 0) {
		perror("cancel: set-up");
		return 1;
	}
	for (i = 0; i < N; i++)
		pthread_create(&t[i], NULL, fn[i], NULL);
	nanosleep(&pause, NULL); /* their wait, for the profile; cancel needs none */
	for (i = 0; i < N; i++) {
		void *r;

		pthread_cancel(t[i]);
		pthread_join(t[i], &r);
		cancelled += r == PTHREAD_CANCELED;
	}
	printf("cancel: %d of %d cancelled\n", cancelled, N);
	return cancelled == N ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "blocked"))
		return blocked();
	if (argc == 2 && !strcmp(argv[1], "cleanup"))
		return cleanup();
	fprintf(stderr, "usage: cancel blocked|cleanup\n");
	return 2;
}
