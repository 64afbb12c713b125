/* exits_altstack: a fatal signal handled on a small alternate signal stack,
 * as in a Rust program (every Rust thread gets an 8 KiB sigaltstack above a
 * guard page). Usage: exits_altstack MODE [PAINT_FILE]
 *   abort         main calls abort()
 *   segv          main stores through a null pointer
 *   thread_abort  the second thread calls abort() (main waits in pthread_join)
 *   thread_segv   the second thread stores through a null pointer
 *   pending_abort main blocks every signal (a raw rt_sigprocmask, which the
 *                 preload cannot see), works until a signal is pending (the
 *                 sampler's; 0.15 s at most), sends itself SIGABRT and
 *                 unblocks both at once: SIGABRT's handler and whatever the
 *                 pending one's handler is (unless SIGABRT's blocks it) are
 *                 delivered together, the second on top of the first on the
 *                 alternate stack
 * The main thread and a second thread each install an 8 KiB alternate
 * signal stack (ss_size = 8192) with a PROT_NONE page below it, and each
 * spins in wpt_altstack_work for 0.3 s before the one named dies.
 *
 * With PAINT_FILE (a measurement, not a Rust look-alike): the dying thread's
 * alternate stack is 64 KiB of PAINT_FILE, mapped shared and filled with
 * 0xa5, so that what the fatal path wrote into it survives the process. The
 * size of the kernel's signal frame is measured first (a SIGURG handler on
 * the same stack) and printed as "frame N": the signal handler's own use is
 * then 65536 - N - (offset of the first byte that is not 0xa5). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "work.h"

#define ALT_SIZE 8192
#define PAINT_SIZE 65536
#define PAINT_BYTE 0xa5

static int *volatile nullp; /* the compiler cannot know it is NULL */
static const char *paint_file;
static int thread_dies;
static int segv;
static char *volatile probe_top;
static volatile size_t probe_frame;

WPT_WORK(wpt_altstack_work)

static void say(const char *line)
{
	printf("%s\n", line);
	fflush(stdout);
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

/* The kernel's frame: from the top of the stack down to the return address
 * the handler starts with, which sits just below the ucontext. */
static void on_probe(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	probe_frame = (size_t)(probe_top - ((char *)uc - 8));
}

/* An alternate signal stack of `size` bytes above a PROT_NONE page; from
 * PAINT_FILE (shared, painted) when `paint`. */
static void alt_stack(int paint)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), size = paint ? PAINT_SIZE : ALT_SIZE;
	char *base, *sp;
	stack_t ss;

	base = mmap(NULL, page + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		die("mmap");
	if (mprotect(base, page, PROT_NONE) < 0)
		die("mprotect");
	sp = base + page;
	if (paint) {
		int fd = open(paint_file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
			die(paint_file);
		if (mmap(sp, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
		    MAP_FAILED)
			die("mmap PAINT_FILE");
		close(fd);
	}
	memset(&ss, 0, sizeof(ss));
	ss.ss_sp = sp;
	ss.ss_size = size;
	if (sigaltstack(&ss, NULL) < 0)
		die("sigaltstack");
	if (paint) {
		struct sigaction act;
		char line[64];

		memset(&act, 0, sizeof(act));
		act.sa_sigaction = on_probe;
		act.sa_flags = SA_SIGINFO | SA_ONSTACK;
		sigemptyset(&act.sa_mask);
		probe_top = sp + size;
		if (sigaction(SIGURG, &act, NULL) < 0 || raise(SIGURG) != 0)
			die("SIGURG probe");
		memset(sp, PAINT_BYTE, size);
		snprintf(line, sizeof(line), "frame %zu", probe_frame);
		say(line);
	}
}

/* A system call straight to the kernel: the preload keeps its sampling
 * signal unblocked through libc's mask functions and syscall(). */
static long raw4(long nr, long a, long b, long c, long d)
{
	register long r10 __asm__("r10") = d;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

static void pending_abort(void)
{
	uint64_t all = ~0ull, old = 0, pending = 0;
	double give_up;

	say("main: pending abort");
	raw4(SYS_rt_sigprocmask, SIG_BLOCK, (long)&all, (long)&old, 8);
	give_up = now_s() + 0.15;
	do
		wpt_altstack_work(0.002);
	while (now_s() < give_up && raw4(SYS_rt_sigpending, (long)&pending, 8, 0, 0) == 0 &&
	       !pending);
	raw4(SYS_tgkill, getpid(), raw4(SYS_gettid, 0, 0, 0, 0), SIGABRT, 0);
	raw4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, 8);
	say("not reached");
	exit(1);
}

static void end(const char *who)
{
	char line[64];

	snprintf(line, sizeof(line), "%s: %s", who, segv ? "segv" : "abort");
	say(line);
	if (segv)
		*nullp = 1;
	else
		abort();
	say("not reached");
	exit(1);
}

static void *second(void *arg)
{
	(void)arg;
	alt_stack(thread_dies && paint_file);
	wpt_altstack_work(0.3);
	if (thread_dies)
		end("thread");
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	pthread_t t;

	if (strcmp(mode, "abort") && strcmp(mode, "segv") && strcmp(mode, "thread_abort") &&
	    strcmp(mode, "thread_segv") && strcmp(mode, "pending_abort")) {
		fprintf(stderr, "usage: exits_altstack abort|segv|thread_abort|thread_segv|"
				"pending_abort [PAINT_FILE]\n");
		return 2;
	}
	thread_dies = !strncmp(mode, "thread_", 7);
	segv = strstr(mode, "segv") != NULL;
	paint_file = argc > 2 ? argv[2] : NULL;
	alt_stack(!thread_dies && paint_file);
	if (pthread_create(&t, NULL, second, NULL) != 0)
		die("pthread_create");
	wpt_altstack_work(0.3);
	if (!strcmp(mode, "pending_abort"))
		pending_abort();
	if (!thread_dies)
		end("main");
	pthread_join(t, NULL);
	say("main: not reached");
	return 1;
}
