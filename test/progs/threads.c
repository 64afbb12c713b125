/* threads: thread life cycles under the profiler. Usage:
 *   threads churn N BATCH     creates N short-lived threads, BATCH at a time, joins
 *                             each batch; every 4th thread names itself "churn-<i>"
 *   threads sigblock          "spinblk" blocks every signal and spins 1 s
 *                             (wpt_blocked_spin); "sleepblk" blocks every signal and
 *                             sleeps 1 s in nanosleep (wpt_blocked_sleep)
 *   threads rename            a thread named "before" works 0.5 s, renames itself
 *                             "after" and works 1.5 s more
 *   threads idle N SECONDS    N threads wait in pthread_cond_wait (wpt_idle_wait) for
 *                             SECONDS while main sleeps, then all are woken and joined
 *   threads park              "parker" alternates 4 times: 300 ms in nanosleep
 *                             (wpt_park_sleep), then spins 300 ms (wpt_park_spin)
 *   threads handler           "reader" blocks in read() on a pipe (wpt_handler_read);
 *                             at 300 ms main sends it SIGUSR1, whose handler spins
 *                             300 ms (wpt_handler_spin); at 900 ms main writes to the
 *                             pipe and joins it
 *   threads rawfutex          "rawfutex" waits 0.6 s on a futex without timeout through
 *                             a raw `syscall` instruction (wpt_raw_futex_wait)
 *   threads stale             "stale" alternates 8 times: spin 50 ms
 *                             (wpt_stale_spin), then 100 ms with every signal
 *                             blocked in a raw nanosleep system call, no wrapper
 *                             (wpt_stale_masked), unblocking before it returns
 *   threads fdfull            main lowers RLIMIT_NOFILE to 1 (no process-wide
 *                             descriptor can be opened, not even in the sampler's
 *                             own table) while "fdfull" alternates 60 times
 *                             3 ms of spinning (wpt_fdfull_spin) and a 7 ms raw
 *                             poll (as in rawpoll); then main restores the limit
 *                             and prints how many polls a signal cut short
 *   threads dtor              "dtor" sets a pthread key of the program's whose
 *                             destructor spins 0.5 s (wpt_dtor_spin), and returns;
 *                             main joins it
 * Prints one deterministic result line per mode, exits 0. */
/* noipa on the named functions: no inlining, cloning or identical-code folding
 * (two functions with the same body would otherwise share one name). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
#include <unistd.h>

#include "work.h"

static void die(const char *what, int rc)
{
	fprintf(stderr, "threads: %s: %s\n", what, strerror(rc));
	exit(1);
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- churn ---- */

__attribute__((noipa)) static void *wpt_churn_thread(void *arg)
{
	uintptr_t i = (uintptr_t)arg;
	uint64_t x = i;

	if (i % 4 == 0) {
		char name[16];

		snprintf(name, sizeof(name), "churn-%u", (unsigned)(i % 100000));
		pthread_setname_np(pthread_self(), name);
	}
	for (int k = 0; k < 2000; k++) {
		x = x * 6364136223846793005ULL + 1;
		__asm__ volatile("" : "+r"(x));
	}
	return (void *)(uintptr_t)(x | 1);
}

static int mode_churn(long n, long batch)
{
	pthread_t *t = calloc((size_t)batch, sizeof(*t));
	long done = 0, ok = 0;

	if (!t)
		return 1;
	while (done < n) {
		long k, m = n - done < batch ? n - done : batch;

		for (k = 0; k < m; k++) {
			int rc = pthread_create(&t[k], NULL, wpt_churn_thread,
						(void *)(uintptr_t)(done + k));
			if (rc)
				die("pthread_create", rc);
		}
		for (k = 0; k < m; k++) {
			void *r;
			int rc = pthread_join(t[k], &r);

			if (rc)
				die("pthread_join", rc);
			ok += r != NULL;
		}
		done += m;
	}
	free(t);
	printf("churn: %ld threads, %ld ok\n", done, ok);
	return 0;
}

/* ---- sigblock ---- */

static void block_all(void)
{
	sigset_t all;
	int rc;

	sigfillset(&all);
	rc = pthread_sigmask(SIG_BLOCK, &all, NULL);
	if (rc)
		die("pthread_sigmask", rc);
}

WPT_WORK(wpt_blocked_spin)

__attribute__((noipa)) static int wpt_blocked_sleep(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) }, rem;
	int intr = 0;

	while (nanosleep(&ts, &rem) < 0) {
		if (errno != EINTR)
			return -1;
		intr++; /* cannot happen: every signal is blocked */
		ts = rem;
	}
	return intr;
}

/* Whether the thread's mask, as the program reads it back, blocks every
 * signal it can (the profiler keeps its own deliverable but must report
 * the mask the program set). */
static int sees_all_blocked(void)
{
	sigset_t cur;
	int rc;

	if ((rc = pthread_sigmask(SIG_SETMASK, NULL, &cur)))
		die("pthread_sigmask", rc);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP && sig != 32 && sig != 33 &&
		    sigismember(&cur, sig) != 1)
			return 0;
	return 1;
}

static void *spin_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "spinblk");
	block_all();
	wpt_blocked_spin(1.0);
	return (void *)(intptr_t)sees_all_blocked();
}

static void *sleep_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sleepblk");
	block_all();
	return (void *)(intptr_t)(wpt_blocked_sleep(1.0) + 1);
}

static int mode_sigblock(void)
{
	pthread_t a, b;
	void *ra, *rb;
	int rc;

	if ((rc = pthread_create(&a, NULL, spin_main, NULL)) ||
	    (rc = pthread_create(&b, NULL, sleep_main, NULL)))
		die("pthread_create", rc);
	pthread_join(a, &ra);
	pthread_join(b, &rb);
	printf("sigblock: spin done (mask %s), sleep interrupted %ld times\n",
	       ra ? "as set" : "CHANGED", (long)(intptr_t)rb - 1);
	return 0;
}

/* ---- rawpoll: blocked in a system call no wrapper sees ---- */

/* poll(NULL, 0, ms) issued with the `syscall` instruction itself, as Go's
 * runtime and some event loops do: no libc function, no wrapper. A signal
 * would end it with EINTR (poll is not restarted after a handler). Built
 * without frame pointers, as distributions build code: the profiler walks
 * it from the stack pointer the kernel reports with the CFI alone. */
#define NO_FP __attribute__((optimize("omit-frame-pointer")))

__attribute__((noipa)) NO_FP static long wpt_raw_poll(int ms)
{
	long ret;
	register long r10 __asm__("r10") = 0;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_poll), "D"(0L), "S"(0L), "d"((long)ms), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noipa)) NO_FP static void *rawpoll_main(void *arg)
{
	long timed_out = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "rawpoll");
	for (int i = 0; i < 4; i++)
		timed_out += wpt_raw_poll(500) == 0;
	return (void *)(intptr_t)timed_out;
}

WPT_WORK(wpt_fdfull_spin)

static void *fdfull_main(void *arg)
{
	long cut = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "fdfull");
	for (int i = 0; i < 60; i++) {
		wpt_fdfull_spin(0.003);
		cut += wpt_raw_poll(7) == -EINTR;
	}
	return (void *)(intptr_t)cut;
}

/* No descriptor to be had (the limit below every table's lowest free
 * one): the sampler cannot open /proc to tell whether a thread that ran is
 * blocked now; it must not signal it on a guess. */
static int mode_fdfull(void)
{
	struct rlimit was, low;
	pthread_t t;
	void *r;
	int rc;

	if (getrlimit(RLIMIT_NOFILE, &was))
		die("getrlimit", errno);
	low = was;
	low.rlim_cur = 1;
	if (setrlimit(RLIMIT_NOFILE, &low))
		die("setrlimit", errno);
	if ((rc = pthread_create(&t, NULL, fdfull_main, NULL)))
		die("pthread_create", rc);
	pthread_join(t, &r);
	setrlimit(RLIMIT_NOFILE, &was);
	printf("fdfull: %ld of 60 raw polls cut short\n", (long)(intptr_t)r);
	return 0;
}

static int mode_rawpoll(void)
{
	pthread_t t;
	void *r;
	int rc;

	if ((rc = pthread_create(&t, NULL, rawpoll_main, NULL)))
		die("pthread_create", rc);
	pthread_join(t, &r);
	printf("rawpoll: %ld of 4 raw polls timed out\n", (long)(intptr_t)r);
	return 0;
}

/* ---- rawfutex: blocked where only a signal can tell where ---- */

/* A futex wait without timeout through the `syscall` instruction: no
 * wrapper sees it, and the kernel restarts it unseen after our handler, so
 * the profiler signals the thread once there and reuses the stack the
 * signal brings. The word is woken by main after 0.6 s. */
static _Atomic int futex_word;

__attribute__((noipa)) static long wpt_raw_futex_wait(void)
{
	long ret;
	register long r10 __asm__("r10") = 0; /* no timeout */

	do
		__asm__ volatile("syscall"
				 : "=a"(ret)
				 : "a"((long)SYS_futex), "D"(&futex_word), "S"(0L /* FUTEX_WAIT */),
				   "d"(0L), "r"(r10)
				 : "rcx", "r11", "memory");
	while (atomic_load(&futex_word) == 0);
	return ret;
}

static void *rawfutex_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "rawfutex");
	return (void *)(intptr_t)wpt_raw_futex_wait();
}

static int mode_rawfutex(void)
{
	pthread_t t;
	int rc;

	if ((rc = pthread_create(&t, NULL, rawfutex_main, NULL)))
		die("pthread_create", rc);
	sleep_s(0.6);
	atomic_store(&futex_word, 1);
	syscall(SYS_futex, &futex_word, 1 /* FUTEX_WAKE */, 1, NULL, NULL, 0);
	pthread_join(t, NULL);
	printf("rawfutex: woken\n");
	return 0;
}

/* ---- stale: a signal pending while the thread does not run ---- */

WPT_WORK(wpt_stale_spin)

__attribute__((noipa)) static void wpt_stale_masked(void)
{
	struct timespec ts = { 0, 100000000 }, rem;
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	if ((rc = pthread_sigmask(SIG_BLOCK, &all, &old)))
		die("pthread_sigmask", rc);
	/* The raw system call: no wrapper publishes this wait, so the profiler
	 * sends a signal, which stays pending until the mask goes. */
	while (syscall(SYS_nanosleep, &ts, &rem) < 0 && errno == EINTR)
		ts = rem;
	if ((rc = pthread_sigmask(SIG_SETMASK, &old, NULL)))
		die("pthread_sigmask", rc);
}

static void *stale_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "stale");
	for (int i = 0; i < 8; i++) {
		wpt_stale_spin(0.05);
		wpt_stale_masked();
	}
	return NULL;
}

static int mode_stale(void)
{
	pthread_t t;
	int rc;

	if ((rc = pthread_create(&t, NULL, stale_main, NULL)))
		die("pthread_create", rc);
	pthread_join(t, NULL);
	printf("stale: done\n");
	return 0;
}

/* ---- rename ---- */

WPT_WORK(wpt_rename_work)

static void *rename_main(void *arg)
{
	(void)arg;
	wpt_rename_work(0.5);
	pthread_setname_np(pthread_self(), "after");
	wpt_rename_work(1.5);
	return NULL;
}

static int mode_rename(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	/* Named before it runs: created, then named by the creator before
	 * the thread does anything that takes time. */
	pthread_attr_init(&attr);
	if ((rc = pthread_create(&t, &attr, rename_main, NULL)))
		die("pthread_create", rc);
	pthread_setname_np(t, "before");
	pthread_join(t, NULL);
	printf("rename: done\n");
	return 0;
}

/* ---- idle: many threads in one blocking call ---- */

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static int idle_stop;

__attribute__((noipa)) static void wpt_idle_wait(void)
{
	pthread_mutex_lock(&idle_mu);
	while (!idle_stop)
		pthread_cond_wait(&idle_cv, &idle_mu);
	pthread_mutex_unlock(&idle_mu);
}

static void *idle_main(void *arg)
{
	(void)arg;
	wpt_idle_wait();
	return NULL;
}

static int mode_idle(long n, double secs)
{
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	long i;
	int rc;

	if (!t)
		return 1;
	for (i = 0; i < n; i++)
		if ((rc = pthread_create(&t[i], NULL, idle_main, NULL)))
			die("pthread_create", rc);
	sleep_s(secs);
	pthread_mutex_lock(&idle_mu);
	idle_stop = 1;
	pthread_cond_broadcast(&idle_cv);
	pthread_mutex_unlock(&idle_mu);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	free(t);
	printf("idle: %ld threads\n", n);
	return 0;
}

/* ---- park: a thread that blocks and runs in turn ---- */

__attribute__((noipa)) static void wpt_park_sleep(double s)
{
	sleep_s(s);
	__asm__ volatile("" ::: "memory"); /* no tail call: this frame stays */
}

WPT_WORK(wpt_park_spin)

static void *park_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "parker");
	for (int i = 0; i < 4; i++) {
		wpt_park_sleep(0.3);
		wpt_park_spin(0.3);
	}
	return NULL;
}

static int mode_park(void)
{
	pthread_t t;
	int rc;

	if ((rc = pthread_create(&t, NULL, park_main, NULL)))
		die("pthread_create", rc);
	pthread_join(t, NULL);
	printf("park: done\n");
	return 0;
}

/* ---- handler: a handler of the program runs over a blocked call ---- */

WPT_WORK(wpt_handler_spin)

static void on_usr1(int sig)
{
	(void)sig;
	wpt_handler_spin(0.3);
}

static int handler_pipe[2];

__attribute__((noipa)) static ssize_t wpt_handler_read(char *c)
{
	ssize_t n;

	while ((n = read(handler_pipe[0], c, 1)) < 0 && errno == EINTR)
		;
	return n;
}

static void *reader_main(void *arg)
{
	char c;

	(void)arg;
	pthread_setname_np(pthread_self(), "reader");
	return (void *)(intptr_t)wpt_handler_read(&c);
}

static int mode_handler(void)
{
	struct sigaction sa;
	pthread_t t;
	void *got;
	int rc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) < 0 || pipe(handler_pipe) < 0)
		die("setup", errno);
	if ((rc = pthread_create(&t, NULL, reader_main, NULL)))
		die("pthread_create", rc);
	sleep_s(0.3);
	pthread_kill(t, SIGUSR1);
	sleep_s(0.6);
	if (write(handler_pipe[1], "x", 1) != 1)
		die("write", errno);
	pthread_join(t, &got);
	printf("handler: read %d\n", (int)(intptr_t)got);
	return 0;
}

WPT_WORK(wpt_dtor_spin)

static void dtor_spin(void *v)
{
	(void)v;
	wpt_dtor_spin(0.5);
}

static void *dtor_main(void *arg)
{
	pthread_key_t *key = arg;

	pthread_setname_np(pthread_self(), "dtor");
	pthread_setspecific(*key, key);
	return NULL;
}

/* The program's key destructors run after ours (our key is older): the
 * thread is past our destructor for the 0.5 s its own one spins. */
static int mode_dtor(void)
{
	static pthread_key_t key;
	pthread_t t;
	int rc;

	if ((rc = pthread_key_create(&key, dtor_spin)) ||
	    (rc = pthread_create(&t, NULL, dtor_main, &key)))
		die("pthread", rc);
	pthread_join(t, NULL);
	printf("dtor: joined\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "churn") == 0)
		return mode_churn(atol(argv[2]), atol(argv[3]));
	if (argc == 2 && strcmp(argv[1], "sigblock") == 0)
		return mode_sigblock();
	if (argc == 2 && strcmp(argv[1], "rename") == 0)
		return mode_rename();
	if (argc == 2 && strcmp(argv[1], "stale") == 0)
		return mode_stale();
	if (argc == 2 && strcmp(argv[1], "rawpoll") == 0)
		return mode_rawpoll();
	if (argc == 2 && strcmp(argv[1], "rawfutex") == 0)
		return mode_rawfutex();
	if (argc == 4 && strcmp(argv[1], "idle") == 0)
		return mode_idle(atol(argv[2]), atof(argv[3]));
	if (argc == 2 && strcmp(argv[1], "park") == 0)
		return mode_park();
	if (argc == 2 && strcmp(argv[1], "handler") == 0)
		return mode_handler();
	if (argc == 2 && strcmp(argv[1], "dtor") == 0)
		return mode_dtor();
	if (argc == 2 && strcmp(argv[1], "fdfull") == 0)
		return mode_fdfull();
	fprintf(stderr, "usage: threads churn N BATCH | sigblock | rename | stale | rawpoll | "
			"rawfutex | idle N SECONDS | park | handler | dtor | fdfull\n");
	return 2;
}
