/* demo: the `make demo` target. Main plus three threads for about 3 s:
 * "compute" counts primes (CPU), "sleeper" ticks every 20 ms (off-CPU),
 * "reader" blocks on a pipe and receives a message from main every 0.5 s. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NR_MESSAGES 6
#define MESSAGE_NS 500000000L /* 6 x 0.5 s = 3 s */
#define TICK_NS 20000000L
#define PRIME_LIMIT 30000

static atomic_int stop;
static int pipe_fds[2];
static long nr_primes;   /* written by compute, read after join */
static long nr_received; /* written by reader, read after join */

static void add_ns(struct timespec *t, long ns)
{
	t->tv_nsec += ns;
	while (t->tv_nsec >= 1000000000L) {
		t->tv_nsec -= 1000000000L;
		t->tv_sec++;
	}
}

__attribute__((noinline)) static int wpt_is_prime(long n)
{
	if (n < 2)
		return 0;
	for (long d = 2; d * d <= n; d++)
		if (n % d == 0)
			return 0;
	return 1;
}

__attribute__((noinline)) static long wpt_compute_primes(long limit)
{
	long count = 0;

	for (long n = 0; n < limit; n++)
		count += wpt_is_prime(n);
	return count;
}

static void *compute_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "compute");
	while (!atomic_load(&stop))
		nr_primes = wpt_compute_primes(PRIME_LIMIT);
	return NULL;
}

__attribute__((noinline)) static void wpt_sleep_tick(struct timespec *next)
{
	add_ns(next, TICK_NS);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL) == EINTR)
		;
}

static void *sleeper_main(void *arg)
{
	struct timespec next;

	(void)arg;
	pthread_setname_np(pthread_self(), "sleeper");
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(&stop))
		wpt_sleep_tick(&next);
	return NULL;
}

/* Reads one newline-terminated message; returns its length, or -1 at EOF. */
__attribute__((noinline)) static int wpt_read_pipe(int fd, char *buf, int size)
{
	int len = 0;

	while (len < size - 1) {
		ssize_t n = read(fd, buf + len, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return len ? len : -1;
		if (buf[len] == '\n')
			break;
		len++;
	}
	buf[len] = '\0';
	return len;
}

static void *reader_main(void *arg)
{
	char buf[64];

	(void)arg;
	pthread_setname_np(pthread_self(), "reader");
	while (wpt_read_pipe(pipe_fds[0], buf, sizeof(buf)) >= 0)
		nr_received++;
	return NULL;
}

/* Main waits here between two messages. */
__attribute__((noinline)) static void wpt_pace(const struct timespec *until)
{
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, until, NULL) == EINTR)
		;
}

/* Main's own work: pace the messages to the reader. */
__attribute__((noinline)) static void wpt_send_messages(void)
{
	struct timespec next;
	char msg[32];

	clock_gettime(CLOCK_MONOTONIC, &next);
	for (int i = 0; i < NR_MESSAGES; i++) {
		add_ns(&next, MESSAGE_NS);
		wpt_pace(&next);
		int len = snprintf(msg, sizeof(msg), "message %d\n", i);
		while (write(pipe_fds[1], msg, len) < 0 && errno == EINTR)
			;
	}
}

int main(void)
{
	pthread_t compute, sleeper, reader;

	if (pipe(pipe_fds) != 0) {
		perror("demo: pipe");
		return 2;
	}
	if (pthread_create(&compute, NULL, compute_main, NULL) ||
	    pthread_create(&sleeper, NULL, sleeper_main, NULL) ||
	    pthread_create(&reader, NULL, reader_main, NULL)) {
		fprintf(stderr, "demo: pthread_create failed\n");
		return 2;
	}
	wpt_send_messages();
	close(pipe_fds[1]); /* EOF ends the reader */
	atomic_store(&stop, 1);
	pthread_join(reader, NULL);
	pthread_join(sleeper, NULL);
	pthread_join(compute, NULL);
	printf("demo: %ld primes below %d, %ld messages read\n", nr_primes, PRIME_LIMIT,
	       nr_received);
	return 0;
}
