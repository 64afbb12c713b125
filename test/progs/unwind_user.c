/* unwind_user: a program that calls libunwind itself, the copy the library
 * links (test/e2e/unwind_user.py), from its first constructor on: after
 * the profiler's constructor, which warms libunwind up, and before its
 * sampler's first tick.
 *
 *   unwind_user fds    the same walk first, then, as a daemon does, every
 *                      descriptor from 3 up closed and a socket pair opened
 *                      at those numbers, with a message waiting in it; four
 *                      threads spin in deep recursion for a second, sampled
 *                      all along, and the message is read back: it must be
 *                      intact, with nothing else written into the pair. Run
 *                      again (exec) under a seccomp filter that fails
 *                      pidfd_open, as an old kernel would, so that the
 *                      sampler shares the program's descriptor table.
 *                      Prints "fds: intact"
 *   unwind_user walks  four threads walk their own stacks with unw_step
 *                      in a loop for a second and a half, while the
 *                      profiler samples them: every step of theirs takes
 *                      libunwind's cache lock, which a sample of ours, or
 *                      the sampler's walk of another thread, must not wait
 *                      for while the thread that holds it waits for us.
 *                      Prints
 *                      "walks: 4 threads done" */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include <errno.h>
#include <fcntl.h>
#include <libunwind.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void deep(int n, int walk)
{
	if (n) {
		deep(n - 1, walk);
		sink++;
		return;
	}
	if (walk) {
		/* unw_step: each step looks its frame up under libunwind's
		 * cache lock, with every signal blocked */
		unw_context_t ctx;
		unw_cursor_t c;

		unw_getcontext(&ctx);
		if (unw_init_local(&c, &ctx) == 0)
			while (unw_step(&c) > 0)
				sink++;
	} else {
		for (int i = 0; i < 1000; i++)
			sink += (unsigned long)i;
	}
}

static double seconds;
static int walking;

static void *spin(void *arg)
{
	double end = now() + seconds;
	int n = (int)(long)arg;

	while (now() < end)
		deep(20 + (n++ % 40), walking);
	return NULL;
}

static void run_threads(double s, int walk)
{
	pthread_t t[4];

	seconds = s;
	walking = walk;
	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, spin, (void *)(i * 7));
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
}

/* The first walk, before main: well before the profiler's first tick
 * (its constructor ran just before this one). */
__attribute__((constructor)) static void walk_first(void)
{
	void *buf[8];

	unw_backtrace(buf, 8);
}

/* pidfd_open (434 on x86_64) fails with ENOSYS from now on, in this
 * process and what it execs. */
static int no_pidfd(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 434, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(int argc, char **argv)
{
	static const char msg[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	char got[128];
	ssize_t n, extra;
	int sv[2];

	if (argc == 2 && !strcmp(argv[1], "walks")) {
		run_threads(1.5, 1);
		printf("walks: 4 threads done\n");
		return 0;
	}
	if (argc != 2 || strcmp(argv[1], "fds")) {
		fprintf(stderr, "usage: unwind_user fds|walks\n");
		return 2;
	}
	if (!getenv("UNWIND_USER_FILTERED")) {
		setenv("UNWIND_USER_FILTERED", "1", 1);
		if (no_pidfd() == 0)
			execv("/proc/self/exe", argv);
		perror("unwind_user: seccomp or exec");
		return 1;
	}
	for (int fd = 3; fd < 64; fd++)
		close(fd);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0 ||
	    write(sv[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		return 1;
	run_threads(1.0, 0);
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	n = read(sv[0], got, sizeof(got));
	extra = read(sv[1], got + 64, 64);
	printf("fds: %s\n", n == (ssize_t)sizeof(msg) && !memcmp(got, msg, sizeof(msg)) && extra < 0
				    ? "intact"
				    : "CORRUPTED");
	return 0;
}
