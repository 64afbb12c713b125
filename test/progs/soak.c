/* soak: a long-running target for scripts/soak.py (make soak).
 *
 *   soak PLUGIN.so SECONDS
 *
 * Runs for SECONDS, then stops everything and exits 0 (1 if it saw an
 * anomaly). Meanwhile:
 *   - long-lived threads: "pinger"/"ponger" bounce a byte over two pipes
 *     (blocking read), "sleeper" naps in clock_nanosleep, "waiter" times out
 *     in pthread_cond_timedwait, "spinner" burns CPU;
 *   - the main loop, every ~20 ms: CHURN_THREADS short threads (every other
 *     one named "churn-N") that take a shared mutex (contended) and nap a
 *     little; dlopen + call + dlclose of PLUGIN.so; a poll() that times out
 *     and a nanosleep; every FORK_EVERY iterations a fork whose child works a
 *     little and exits normally (exit(0)), reaped with waitpid;
 *   - once a second one line on stdout:
 *       progress <seconds> iterations <I> threads <T> forks <F> dlopens <D> anomalies <A>
 *     and at the end the same line starting "soak: done".
 * An anomaly is a blocking call that returned EINTR or early/late beyond
 * reason, a child that did not exit 0, a failed dlopen or pthread_create:
 * each prints one "soak: ..." line on stderr. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHURN_THREADS 3
#define FORK_EVERY 25          /* iterations: about two forks a second */
#define LOOP_NAP_NS 15000000L  /* the main loop's nap per iteration */
#define POLL_MS 2
#define MAX_ANOMALY_LINES 20   /* stderr lines; the count goes on */

static atomic_int stop;
static atomic_long anomalies;
static atomic_long threads_created;
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t sink;
static int64_t start_ns;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((format(printf, 1, 2))) static void anomaly(const char *fmt, ...)
{
	long n = atomic_fetch_add(&anomalies, 1) + 1;
	char line[256], name[16] = "?";
	va_list ap;

	if (n > MAX_ANOMALY_LINES)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_getname_np(pthread_self(), name, sizeof(name));
	fprintf(stderr, "soak: %s (pid %d, thread %s, %.3f s)\n", line, (int)getpid(), name,
		(double)(now_ns() - start_ns) / 1e9);
}

__attribute__((noinline)) static uint64_t wpt_soak_spin(int64_t ns)
{
	int64_t end = now_ns() + ns;
	uint64_t x = (uint64_t)end;

	do {
		for (int i = 0; i < 1000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			__asm__ volatile("" : "+r"(x));
		}
	} while (now_ns() < end);
	return x;
}

/* A relative nanosleep that must not return EINTR: no signal of the program
 * is handled here, the profiler's own must not show. */
__attribute__((noinline)) static void wpt_soak_nap(long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };

	if (nanosleep(&ts, NULL) < 0)
		anomaly("nanosleep failed: %s", strerror(errno));
}

static void *pinger_main(void *arg)
{
	int *fds = arg; /* [0] read end of pong, [1] write end of ping */
	char c = 'x';

	pthread_setname_np(pthread_self(), "pinger");
	while (!atomic_load(&stop)) {
		if (write(fds[1], &c, 1) != 1) {
			anomaly("pinger: write failed: %s", strerror(errno));
			break;
		}
		ssize_t n = read(fds[0], &c, 1);
		if (n != 1) {
			anomaly("pinger: read returned %zd: %s", n,
				n < 0 ? strerror(errno) : "EOF");
			break;
		}
		wpt_soak_nap(1000000L);
	}
	close(fds[1]); /* the ponger sees EOF */
	return NULL;
}

static void *ponger_main(void *arg)
{
	int *fds = arg; /* [0] read end of ping, [1] write end of pong */
	char c;

	pthread_setname_np(pthread_self(), "ponger");
	for (;;) {
		ssize_t n = read(fds[0], &c, 1);

		if (n == 0)
			break;
		if (n < 0) {
			anomaly("ponger: read failed: %s", strerror(errno));
			break;
		}
		if (write(fds[1], &c, 1) != 1)
			break; /* the pinger stopped */
	}
	return NULL;
}

static void *sleeper_main(void *arg)
{
	struct timespec next;

	(void)arg;
	pthread_setname_np(pthread_self(), "sleeper");
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(&stop)) {
		int rc;

		next.tv_nsec += 5000000L;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		if (rc)
			anomaly("clock_nanosleep returned %s", strerror(rc));
	}
	return NULL;
}

static void *waiter_main(void *arg)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t c = PTHREAD_COND_INITIALIZER;

	(void)arg;
	pthread_setname_np(pthread_self(), "waiter");
	pthread_mutex_lock(&m);
	while (!atomic_load(&stop)) {
		struct timespec until;
		int rc;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 10000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_nsec -= 1000000000L;
			until.tv_sec++;
		}
		rc = pthread_cond_timedwait(&c, &m, &until);
		if (rc != ETIMEDOUT)
			anomaly("pthread_cond_timedwait returned %d, want ETIMEDOUT", rc);
	}
	pthread_mutex_unlock(&m);
	return NULL;
}

static void *spinner_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "spinner");
	while (!atomic_load(&stop))
		sink = wpt_soak_spin(10000000L);
	return NULL;
}

static void *churn_main(void *arg)
{
	long i = (long)(intptr_t)arg;

	if (i % 2 == 0) {
		char name[16];

		snprintf(name, sizeof(name), "churn-%ld", i % 1000);
		pthread_setname_np(pthread_self(), name);
	}
	pthread_mutex_lock(&shared_lock);
	sink = wpt_soak_spin(100000L); /* held: the others contend */
	pthread_mutex_unlock(&shared_lock);
	wpt_soak_nap(300000L);
	sink = wpt_soak_spin(200000L);
	return NULL;
}

__attribute__((noinline)) static void wpt_soak_churn(long *serial)
{
	pthread_t t[CHURN_THREADS];
	int ok[CHURN_THREADS];

	for (int i = 0; i < CHURN_THREADS; i++) {
		int rc = pthread_create(&t[i], NULL, churn_main, (void *)(intptr_t)(*serial)++);

		ok[i] = rc == 0;
		if (rc)
			anomaly("pthread_create failed: %s", strerror(rc));
		else
			atomic_fetch_add(&threads_created, 1);
	}
	for (int i = 0; i < CHURN_THREADS; i++)
		if (ok[i])
			pthread_join(t[i], NULL);
}

__attribute__((noinline)) static void wpt_soak_child(void)
{
	sink = wpt_soak_spin(3000000L);
	wpt_soak_nap(2000000L);
	exit(0); /* normally: atexit handlers and destructors run */
}

__attribute__((noinline)) static int wpt_soak_fork(void)
{
	int status;
	pid_t pid, w;

	fflush(NULL); /* nothing buffered is written twice */
	pid = fork();
	if (pid < 0) {
		anomaly("fork failed: %s", strerror(errno));
		return 0;
	}
	if (pid == 0)
		wpt_soak_child();
	w = waitpid(pid, &status, 0);
	if (w != pid) {
		anomaly("waitpid failed: %s", strerror(errno));
		return 1;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		anomaly("child %d %s %d", (int)pid,
			WIFSIGNALED(status) ? "died by signal" : "exited with",
			WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	return 1;
}

__attribute__((noinline)) static int wpt_soak_plugin(const char *path)
{
	unsigned long (*work)(double);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		static int said;

		if (!said++)
			fprintf(stderr, "soak: dlopen %s: %s\n", path, dlerror());
		atomic_fetch_add(&anomalies, 1);
		return 0;
	}
	*(void **)&work = dlsym(h, "wpt_plugin_work");
	if (work)
		sink = work(0.001);
	else
		anomaly("the plugin has no wpt_plugin_work");
	dlclose(h);
	return 1;
}

__attribute__((noinline)) static void wpt_soak_poll(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int64_t t0 = now_ns();
	int rc = poll(&p, 1, POLL_MS);
	int64_t took = now_ns() - t0;

	if (rc != 0)
		anomaly("poll returned %d (%s), want a timeout", rc,
			rc < 0 ? strerror(errno) : "ready");
	else if (took < (POLL_MS - 1) * 1000000LL)
		anomaly("poll timed out early, after %ld us", (long)(took / 1000));
}

int main(int argc, char **argv)
{
	int ping[2], pong[2], quiet[2];
	int pinger_fds[2], ponger_fds[2];
	pthread_t pinger, ponger, sleeper, waiter, spinner;
	long iterations = 0, forks = 0, dlopens = 0, serial = 0;
	double seconds;
	int64_t start, end, next_progress;

	if (argc != 3 || (seconds = atof(argv[2])) <= 0) {
		fprintf(stderr, "usage: soak PLUGIN.so SECONDS\n");
		return 2;
	}
	if (pipe(ping) || pipe(pong) || pipe(quiet)) {
		perror("soak: pipe");
		return 2;
	}
	pinger_fds[0] = pong[0];
	pinger_fds[1] = ping[1];
	ponger_fds[0] = ping[0];
	ponger_fds[1] = pong[1];
	start_ns = now_ns();
	if (pthread_create(&pinger, NULL, pinger_main, pinger_fds) ||
	    pthread_create(&ponger, NULL, ponger_main, ponger_fds) ||
	    pthread_create(&sleeper, NULL, sleeper_main, NULL) ||
	    pthread_create(&waiter, NULL, waiter_main, NULL) ||
	    pthread_create(&spinner, NULL, spinner_main, NULL)) {
		fprintf(stderr, "soak: cannot start the long-lived threads\n");
		return 2;
	}
	start = now_ns();
	start_ns = start;
	end = start + (int64_t)(seconds * 1e9);
	next_progress = start + 1000000000LL;
	while (now_ns() < end) {
		wpt_soak_churn(&serial);
		dlopens += wpt_soak_plugin(argv[1]);
		wpt_soak_poll(quiet[0]);
		if (iterations % FORK_EVERY == FORK_EVERY - 1)
			forks += wpt_soak_fork();
		wpt_soak_nap(LOOP_NAP_NS);
		iterations++;
		if (now_ns() >= next_progress) {
			printf("progress %.0f iterations %ld threads %ld forks %ld dlopens %ld anomalies %ld\n",
			       (double)(now_ns() - start) / 1e9, iterations,
			       atomic_load(&threads_created), forks, dlopens,
			       atomic_load(&anomalies));
			fflush(stdout);
			next_progress += 1000000000LL;
		}
	}
	atomic_store(&stop, 1);
	pthread_join(pinger, NULL);
	pthread_join(ponger, NULL);
	pthread_join(sleeper, NULL);
	pthread_join(waiter, NULL);
	pthread_join(spinner, NULL);
	printf("soak: done %.0f iterations %ld threads %ld forks %ld dlopens %ld anomalies %ld\n",
	       (double)(now_ns() - start) / 1e9, iterations, atomic_load(&threads_created), forks,
	       dlopens, atomic_load(&anomalies));
	fflush(stdout);
	return atomic_load(&anomalies) ? 1 : 0;
}
