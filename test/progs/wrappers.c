/* wrappers: the interposed calls at their edges: bad arguments, huge
 * timeouts, threads that block right after running, datagrams with
 * MSG_WAITALL. Each mode prints lines that must be the same with and without
 * the profiler.
 *
 *   wrappers badargs      bad pointers and counts the kernel rejects (EFAULT,
 *                         EINVAL); each in a child, which must not die
 *   wrappers hugetimeout  ppoll with a {LONG_MAX, 0} timeout on a pipe written
 *                         after 300 ms: returns 1
 *   wrappers busyblock    2 s of: 3 ms of CPU, then a 7 ms nanosleep issued with
 *                         a raw `syscall` instruction; counts early wake-ups
 *   wrappers udpwaitall   20 datagrams of 100 bytes, each read with
 *                         recv(MSG_WAITALL): one datagram each time
 *   wrappers sndtimeo     send into a full socket with SO_SNDTIMEO 0.5 s: EAGAIN
 *                         after about 0.5 s (printed in tenths)
 *   wrappers longconnect  a TCP connect to a listener whose queue is full, with
 *                         SO_SNDTIMEO of 49.7 days (2^32 ms and a bit), ended
 *                         by the program's SIGALRM after 1.2 s: EINTR */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- badargs ---- */

static struct iovec *volatile no_iov; /* NULL, hidden from the compiler */

static long bad_writev_null(void)
{
	return writev(1, no_iov, 1);
}
static long bad_writev_count(void)
{
	static struct iovec v = { "x", 1 };
	volatile int cnt = 1 << 30; /* hidden from the compiler's bounds check */

	return writev(1, &v, cnt);
}
static long bad_sendmsg_null(void)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -2;
	return sendmsg(sv[0], NULL, 0);
}
static long bad_sys_nanosleep(void)
{
	return syscall(SYS_nanosleep, (void *)8, NULL);
}
static long bad_sys_futex(void)
{
	int w = 0;

	return syscall(SYS_futex, &w, 0 /* FUTEX_WAIT */, 0, (void *)8, NULL, 0);
}
static long bad_nanosleep_req(void)
{
	return nanosleep((void *)8, NULL);
}

static void one_bad(const char *what, long (*f)(void))
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		long r;

		errno = 0;
		r = f();
		printf("%s: %ld %s\n", what, r, r < 0 ? strerrorname_np(errno) : "0");
		fflush(stdout);
		_exit(0);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(st))
		printf("%s: killed by signal %d\n", what, WTERMSIG(st));
}

static int mode_badargs(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	one_bad("writev(1, NULL, 1)", bad_writev_null);
	one_bad("writev(1, &one, 1 << 30)", bad_writev_count);
	one_bad("sendmsg(s, NULL, 0)", bad_sendmsg_null);
	one_bad("syscall(SYS_nanosleep, 8, NULL)", bad_sys_nanosleep);
	one_bad("syscall(SYS_futex, WAIT, timeout 8)", bad_sys_futex);
	one_bad("nanosleep(8, NULL)", bad_nanosleep_req);
	return 0;
}

/* ---- hugetimeout ---- */

static int mode_hugetimeout(void)
{
	struct timespec big = { LONG_MAX, 0 }, d = { 0, 300000000 };
	struct pollfd f;
	int p[2], r;
	pid_t pid;

	if (pipe(p) < 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		while (clock_nanosleep(CLOCK_MONOTONIC, 0, &d, &d) == EINTR)
			;
		if (write(p[1], "x", 1) < 0)
			_exit(1);
		_exit(0);
	}
	f.fd = p[0];
	f.events = POLLIN;
	r = ppoll(&f, 1, &big, NULL);
	printf("ppoll({LONG_MAX, 0}) on a pipe written after 300 ms: %d\n", r);
	waitpid(pid, NULL, 0);
	return 0;
}

/* ---- busyblock ---- */

__attribute__((noipa)) static long raw_nanosleep(const struct timespec *req, struct timespec *rem)
{
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_nanosleep), "D"(req), "S"(rem)
			 : "rcx", "r11", "memory");
	return ret;
}

static int mode_busyblock(void)
{
	double end = now_s() + 2;
	int early = 0, n = 0;

	while (now_s() < end) {
		double t = now_s();
		struct timespec d = { 0, 7000000 }, rem;
		volatile unsigned long x = 0;

		while (now_s() < t + 0.003)
			x++;
		if (raw_nanosleep(&d, &rem) == -EINTR)
			early++;
		n++;
	}
	printf("busyblock: %d of %d raw nanosleeps ended early\n", early, n);
	return 0;
}

/* ---- udpwaitall ---- */

static int mode_udpwaitall(void)
{
	int r = socket(AF_INET, SOCK_DGRAM, 0), s = socket(AF_INET, SOCK_DGRAM, 0), other = 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	pid_t pid;

	if (r < 0 || s < 0 || bind(r, (void *)&a, sizeof(a)) < 0 ||
	    getsockname(r, (void *)&a, &len) < 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		char d[100];

		for (int i = 0; i < 20; i++) {
			struct timespec gap = { 0, 20000000 };

			memset(d, 'a' + i, sizeof(d));
			while (clock_nanosleep(CLOCK_MONOTONIC, 0, &gap, &gap) == EINTR)
				;
			if (sendto(s, d, sizeof(d), 0, (void *)&a, sizeof(a)) < 0)
				_exit(1);
		}
		_exit(0);
	}
	for (int i = 0; i < 20; i++) {
		char buf[1024];
		ssize_t n = recv(r, buf, sizeof(buf), MSG_WAITALL);

		other += n != 100 || buf[0] != 'a' + i;
	}
	printf("udpwaitall: %d of 20 receives were not the next datagram\n", other);
	waitpid(pid, NULL, 0);
	return 0;
}

/* ---- sndtimeo ---- */

static int mode_sndtimeo(void)
{
	static char buf[1 << 20];
	struct timeval tv = { 0, 500000 };
	int sv[2], fl;
	double t0;
	ssize_t r;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 1;
	fl = fcntl(sv[0], F_GETFL);
	fcntl(sv[0], F_SETFL, fl | O_NONBLOCK);
	while (send(sv[0], buf, sizeof(buf), 0) > 0)
		;
	fcntl(sv[0], F_SETFL, fl);
	setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	t0 = now_s();
	r = send(sv[0], buf, sizeof(buf), 0);
	printf("sndtimeo: send -> %zd %s after %.1f s\n", r, r < 0 ? strerrorname_np(errno) : "0",
	       now_s() - t0);
	return 0;
}

/* ---- longconnect ---- */

static void on_alarm(int sig)
{
	(void)sig;
}

static int mode_longconnect(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { 4294968, 0 }; /* 4294968000 ms: 704 ms past 2^32 */
	struct sigaction sa = { .sa_handler = on_alarm };
	socklen_t len = sizeof(a);
	int l, c, i, rc;
	double t0;

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 0) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0)
		return 1;
	for (i = 0; i < 4; i++) { /* fill the accept queue: later SYNs are dropped */
		int f = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

		if (f < 0)
			return 1;
		(void)connect(f, (struct sockaddr *)&a, sizeof(a));
	}
	usleep(100000);
	c = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	sigaction(SIGALRM, &sa, NULL); /* no SA_RESTART: the connect ends */
	alarm(0);
	{
		struct itimerval it = { { 0, 0 }, { 1, 200000 } };

		setitimer(ITIMER_REAL, &it, NULL);
	}
	t0 = now_s();
	rc = connect(c, (struct sockaddr *)&a, sizeof(a));
	printf("longconnect: connect -> %d %s after %.0f s\n", rc,
	       rc < 0 ? strerrorname_np(errno) : "0", now_s() - t0);
	return 0;
}

int main(int argc, char **argv)
{
	const char *m = argc == 2 ? argv[1] : "";

	if (!strcmp(m, "badargs"))
		return mode_badargs();
	if (!strcmp(m, "hugetimeout"))
		return mode_hugetimeout();
	if (!strcmp(m, "busyblock"))
		return mode_busyblock();
	if (!strcmp(m, "udpwaitall"))
		return mode_udpwaitall();
	if (!strcmp(m, "sndtimeo"))
		return mode_sndtimeo();
	if (!strcmp(m, "longconnect"))
		return mode_longconnect();
	fprintf(stderr, "usage: wrappers badargs|hugetimeout|busyblock|udpwaitall|sndtimeo|"
			"longconnect\n");
	return 2;
}
