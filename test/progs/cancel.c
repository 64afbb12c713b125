/* cancel: threads cancelled inside wrapped calls (test/e2e/cancel.py).
 * Each of five threads blocks in a different interposed call (read on a
 * pipe, nanosleep, pthread_cond_wait, poll, accept); after 300 ms main
 * cancels and joins them all. A C program: libgcc_s, which the unwind of a
 * cancelled thread needs, is loaded by glibc itself at the first
 * pthread_cancel, in its own scope, not the program's. Prints
 * "cancel: 5 of 5 cancelled". */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
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

int main(void)
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
