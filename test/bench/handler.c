/* handler: cost of one sample inside the sampled thread, by stack depth.
 *
 *   handler DEPTH SECONDS [HZ]
 *
 * Links unwind/unwind.c directly. A "victim" thread recurses DEPTH frames
 * deep through noinline functions, then spins. Another thread sends it
 * SIGPROF with tgkill at HZ (default 1000) for SECONDS. Our own SA_SIGINFO
 * handler alternates two captures, signal by signal, so both are measured
 * side by side under the same conditions:
 *   even signals: wp_unwind_capture(uc, buf, 256, &flags)  (what libwallprof runs)
 *   odd signals:  a raw unw_backtrace(buf, 256 + WP_UNW_SCRATCH) (for comparison)
 * and records the time from handler entry to exit (CLOCK_MONOTONIC, read
 * through the vDSO) plus the depth captured. The first 10 of each kind are
 * warm-up (libunwind's caches) and not counted. Like the library, it
 * answers libunwind's validation pipe (unwind.h: fake descriptors) in its
 * read() and syscall(), which libunwind calls for it.
 *
 * Output, one line per kind:
 *   kind=capture n=... median_us=... p99_us=... max_us=... min_depth=... max_depth=... flags_slow=... flags_failed=...
 *   kind=unw_backtrace ... */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <dlfcn.h>
#include <stdarg.h>

#include "../../unwind/unwind.h"

/* What preload/block_io.c and block_ipc.c do for the fake pipe. */
ssize_t read(int fd, void *buf, size_t n)
{
	static ssize_t (*real)(int, void *, size_t);

	if (fd == WP_UNW_FAKE_RFD) {
		errno = EAGAIN;
		return -1;
	}
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "read");
	return real(fd, buf, n);
}

long syscall(long nr, ...)
{
	va_list ap;
	long a[6];

	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (nr == SYS_write && a[0] == WP_UNW_FAKE_WFD)
		return wp_unwind_fake_write((const void *)a[1], (size_t)a[2]);
	return (long)((long (*)(long, long, long, long, long, long,
				long))dlsym(RTLD_NEXT, "syscall"))(nr, a[0], a[1], a[2], a[3], a[4],
								   a[5]);
}

#define MAX_DEPTH 256
#define MAX_REC 200000
#define WARMUP 10

struct rec {
	uint32_t ns;
	uint16_t depth;
	uint16_t flags;
};

static struct rec recs[2][MAX_REC];
static atomic_uint nr_recs[2];
static atomic_uint nr_signals;
static uint64_t sigbuf[MAX_DEPTH + WP_UNW_SCRATCH];
static atomic_int victim_tid;
static atomic_int victim_ready;
static atomic_int stop;
static int depth_wanted;

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_sigprof(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	uint64_t t0 = now_ns(), t1;
	unsigned k = atomic_fetch_add_explicit(&nr_signals, 1, memory_order_relaxed) & 1;
	unsigned flags = 0;
	int n;

	(void)sig;
	(void)si;
	if (k == 0)
		n = wp_unwind_capture(uc, sigbuf, MAX_DEPTH, &flags);
	else
		n = unw_backtrace((void **)sigbuf, MAX_DEPTH + WP_UNW_SCRATCH);
	t1 = now_ns();
	unsigned i = atomic_fetch_add_explicit(&nr_recs[k], 1, memory_order_relaxed);
	if (i < MAX_REC) {
		recs[k][i].ns = (uint32_t)(t1 - t0 > UINT32_MAX ? UINT32_MAX : t1 - t0);
		recs[k][i].depth = (uint16_t)n;
		recs[k][i].flags = (uint16_t)flags;
	}
	errno = saved;
}

static volatile uint64_t sink;

__attribute__((noinline, noipa)) static uint64_t spin(void)
{
	uint64_t x = 1;

	atomic_store(&victim_ready, 1);
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		for (int i = 0; i < 1000; i++)
			x = (x * 6364136223846793005ULL + 1) ^ (x >> 29);
	return x;
}

/* Three distinct functions so the frames are not one PC repeated. */
__attribute__((noinline, noipa)) static uint64_t rec_a(int d);
__attribute__((noinline, noipa)) static uint64_t rec_b(int d);
__attribute__((noinline, noipa)) static uint64_t rec_c(int d);

static uint64_t rec_a(int d)
{
	uint64_t r = d <= 1 ? spin() : rec_b(d - 1);
	sink += r; /* not a tail call */
	return r + 1;
}

static uint64_t rec_b(int d)
{
	uint64_t r = d <= 1 ? spin() : rec_c(d - 1);
	sink += r;
	return r + 2;
}

static uint64_t rec_c(int d)
{
	uint64_t r = d <= 1 ? spin() : rec_a(d - 1);
	sink += r;
	return r + 3;
}

static void *victim_main(void *arg)
{
	(void)arg;
	atomic_store(&victim_tid, (int)syscall(SYS_gettid));
	sink += rec_a(depth_wanted);
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *kind, int k)
{
	unsigned n = atomic_load(&nr_recs[k]), i, m = 0, slow = 0, failed = 0;
	unsigned mind = 0xffff, maxd = 0;
	uint32_t *v;

	if (n > MAX_REC)
		n = MAX_REC;
	v = malloc(sizeof(*v) * (n + 1));
	for (i = WARMUP; i < n; i++) {
		v[m++] = recs[k][i].ns;
		if (recs[k][i].depth < mind)
			mind = recs[k][i].depth;
		if (recs[k][i].depth > maxd)
			maxd = recs[k][i].depth;
		slow += (recs[k][i].flags & WP_UNW_SLOW) != 0;
		failed += (recs[k][i].flags & WP_UNW_FAILED) != 0;
	}
	if (!m) {
		printf("kind=%s n=0\n", kind);
		free(v);
		return;
	}
	qsort(v, m, sizeof(*v), cmp_u32);
	printf("kind=%s n=%u median_us=%.3f p99_us=%.3f max_us=%.3f min_depth=%u max_depth=%u "
	       "flags_slow=%u flags_failed=%u\n",
	       kind, m, v[m / 2] / 1e3, v[(size_t)(m * 0.99)] / 1e3, v[m - 1] / 1e3, mind, maxd,
	       slow, failed);
	free(v);
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	pthread_t t;
	double secs, hz = 1000;
	uint64_t period, next, end;
	pid_t pid = getpid();

	if (argc < 3) {
		fprintf(stderr, "usage: handler DEPTH SECONDS [HZ]\n");
		return 2;
	}
	depth_wanted = atoi(argv[1]);
	secs = strtod(argv[2], NULL);
	if (argc > 3)
		hz = strtod(argv[3], NULL);
	if (depth_wanted < 1 || depth_wanted > 1000 || secs <= 0 || hz <= 0)
		return 2;
	wp_unwind_init();
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigprof;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGPROF, &sa, NULL) < 0)
		return 2;
	if (pthread_create(&t, NULL, victim_main, NULL) != 0)
		return 2;
	while (!atomic_load(&victim_ready))
		usleep(1000);
	period = (uint64_t)(1e9 / hz);
	next = now_ns();
	end = next + (uint64_t)(secs * 1e9);
	while (next < end) {
		struct timespec ts = { (time_t)(next / 1000000000ull),
				       (long)(next % 1000000000ull) };

		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		syscall(SYS_tgkill, pid, atomic_load(&victim_tid), SIGPROF);
		next += period;
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("depth=%d hz=%.0f signals=%u\n", depth_wanted, hz, atomic_load(&nr_signals));
	report("capture", 0);
	report("unw_backtrace", 1);
	return 0;
}
