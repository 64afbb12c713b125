/* sampler: the injected runtime. The constructor preallocates everything and
 * starts the sampler thread; every tick the sampler lists the process's
 * threads and sends each one a profiling signal whose handler unwinds into the
 * thread's own slot; the sampler moves finished slots into the ring. Dumps
 * (exit, snapshot signal) symbolize and write off the signal path. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../output/output.h"
#include "../symbolize/symbolize.h"
#include "../unwind/unwind.h"
#include "ring.h"
#include "sampler.h"
#include "wallprof.h"

/* Slot states. The sampler moves IDLE->SENT and READY->IDLE; the handler
 * moves SENT->READY. One signal in flight per thread at most. */
enum { S_FREE, S_IDLE, S_SENT, S_READY };

/* Events for the sampler, in a futex word. */
#define EV_STOP 0x1
#define EV_SNAPSHOT 0x2

/* Cookie in si_value: magic | generation (24 bits) | slot index (24 bits). */
#define COOKIE_MAGIC 0x57b0ull

struct slot {
	_Atomic uint32_t state;
	_Atomic uint32_t gen;  /* bumped when the slot changes owner */
	uint32_t tid;
	uint32_t next;         /* hash chain: slot index + 1, 0 ends */
	uint64_t t_ns;         /* tick of the signal in flight */
	uint32_t nr;           /* frames in buf, written by the handler */
	uint32_t uflags;       /* WP_UNW_*, written by the handler */
	uint64_t scan;         /* last thread scan that listed this thread */
	uint64_t *buf;         /* max_depth + WP_UNW_SCRATCH entries */
};

/* Shared state. The constructor writes it before the sampler starts; then
 * the sampler thread owns everything except the slots' handler fields, the
 * event word and the flags marked atomic. */
static struct {
	struct wp_config cfg;
	pid_t pid;
	int started;
	_Atomic int sampling;       /* handler does captures; sampler sends */
	_Atomic uint32_t events;
	pthread_t sampler;
	pid_t sampler_tid;

	struct slot *slots;
	uint32_t nr_slots, hiwater;
	uint32_t *buckets;          /* tid hash: slot index + 1 */
	uint32_t nr_buckets;
	uint32_t *free_list;
	uint32_t nr_free;
	uint64_t scan;
	char *dents;
	size_t dents_len;

	struct wp_ring *ring;
	struct wp_modmap mods;
	struct wp_counters ctr;
	struct wp_thread *names;    /* every thread seen in the window, latest name */
	size_t nr_names, cap_names;

	int signal;                 /* the sampling signal in use */
	struct sigaction prog_act;  /* the program's view of the sampling signal */
	int snapshot_signal;        /* 0 when snapshots are off */
	struct sigaction prev_snap_act;
	int snapshot_seq;

	/* dumper thread for snapshots */
	pthread_t dumper;
	_Atomic pid_t dumper_tid;
	_Atomic int dumper_done;
	int dumper_running;
	int snapshots_waiting;
	struct wp_profile dump_profile;

	char cmdline[1024];
	uint64_t start_ns;
	int64_t rt_offset;
} g;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* async-signal-safe */
static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait_until(_Atomic uint32_t *w, uint32_t val, uint64_t deadline)
{
	struct timespec ts = { (time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull) };

	/* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
	syscall(SYS_futex, w, FUTEX_WAIT_BITSET_PRIVATE, val, &ts, NULL, FUTEX_BITSET_MATCH_ANY);
}

/* ---- signal handlers ------------------------------------------------ */

/* A sampling signal that is not ours: do what the program asked for.
 * async-signal-safe */
static void forward_foreign(int sig, siginfo_t *si, void *uc)
{
	struct sigaction act = g.prog_act;

	if (act.sa_flags & SA_SIGINFO) {
		if (act.sa_sigaction)
			act.sa_sigaction(sig, si, uc);
		return;
	}
	if (act.sa_handler == SIG_IGN)
		return;
	if (act.sa_handler != SIG_DFL) {
		act.sa_handler(sig);
		return;
	}
	/* Default action. Every signal we accept for sampling terminates by
	 * default, except these two which are ignored. */
	if (sig == SIGWINCH || sig == SIGURG)
		return;
	act.sa_handler = SIG_DFL;
	act.sa_flags = 0;
	sigemptyset(&act.sa_mask);
	__sigaction(sig, &act, NULL);
	syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), sig); /* delivered on return */
}

/* async-signal-safe */
static void on_sample_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	uint64_t v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	uint32_t idx = (uint32_t)(v & 0xffffff), gen = (uint32_t)((v >> 24) & 0xffffff);
	struct slot *s;
	unsigned fl;

	if (si->si_code != SI_QUEUE || si->si_pid != g.pid || (v >> 48) != COOKIE_MAGIC) {
		forward_foreign(sig, si, uc);
		errno = saved;
		return;
	}
	if (idx >= g.nr_slots || !atomic_load_explicit(&g.sampling, memory_order_relaxed))
		goto out;
	s = &g.slots[idx];
	if ((atomic_load_explicit(&s->gen, memory_order_acquire) & 0xffffff) != gen ||
	    atomic_load_explicit(&s->state, memory_order_acquire) != S_SENT)
		goto out; /* stale: the slot was recycled */
	s->nr = (uint32_t)wp_unwind_capture(uc, s->buf, (int)g.cfg.max_depth, &fl);
	s->uflags = fl;
	atomic_store_explicit(&s->state, S_READY, memory_order_release);
out:
	errno = saved;
}

/* async-signal-safe */
static void on_snapshot_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;

	(void)sig;
	(void)si;
	(void)uc;
	atomic_fetch_or(&g.events, EV_SNAPSHOT);
	futex_wake(&g.events);
	errno = saved;
}

/* ---- threads --------------------------------------------------------- */

static void read_comm(uint32_t tid, char name[16])
{
	char path[64];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%u/comm", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, name, 15);
	close(fd);
	if (n <= 0)
		return;
	if (name[n - 1] == '\n')
		n--;
	name[n] = 0;
}

static void name_thread(uint32_t tid)
{
	struct wp_thread *t = NULL;
	size_t i;

	for (i = 0; i < g.nr_names; i++) {
		if (g.names[i].tid == tid) {
			t = &g.names[i];
			break;
		}
	}
	if (!t) {
		if (g.nr_names == g.cap_names) {
			size_t cap = g.cap_names ? g.cap_names * 2 : 64;
			struct wp_thread *n = realloc(g.names, cap * sizeof(*n));

			if (!n)
				return;
			g.names = n;
			g.cap_names = cap;
		}
		t = &g.names[g.nr_names++];
		t->tid = tid;
		t->name[0] = 0;
	}
	read_comm(tid, t->name);
}

static struct slot *slot_find(uint32_t tid)
{
	uint32_t v = g.buckets[tid & (g.nr_buckets - 1)];

	while (v) {
		struct slot *s = &g.slots[v - 1];

		if (s->tid == tid)
			return s;
		v = s->next;
	}
	return NULL;
}

static struct slot *slot_alloc(uint32_t tid)
{
	uint32_t idx, *b;
	struct slot *s;

	if (g.nr_free == 0)
		return NULL;
	idx = g.free_list[--g.nr_free];
	s = &g.slots[idx];
	s->tid = tid;
	b = &g.buckets[tid & (g.nr_buckets - 1)];
	s->next = *b;
	*b = idx + 1;
	if (idx + 1 > g.hiwater)
		g.hiwater = idx + 1;
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
	atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
	return s;
}

static void slot_free(struct slot *s)
{
	uint32_t idx = (uint32_t)(s - g.slots);
	uint32_t *p = &g.buckets[s->tid & (g.nr_buckets - 1)];

	while (*p && *p != idx + 1)
		p = &g.slots[*p - 1].next;
	if (*p)
		*p = s->next;
	/* A late handler sees the new generation and leaves the slot alone. */
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
	atomic_store_explicit(&s->state, S_FREE, memory_order_release);
	g.free_list[g.nr_free++] = idx;
}

/* Lists /proc/self/task: new threads get a slot, vanished ones lose theirs. */
static void scan_threads(void)
{
	int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	pid_t dumper = atomic_load(&g.dumper_tid);
	uint32_t i;

	if (fd < 0)
		return;
	g.scan++;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, g.dents, g.dents_len);
		long off = 0;

		if (n <= 0)
			break;
		while (off < n) {
			struct {
				uint64_t ino;
				int64_t off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *d = (void *)(g.dents + off);
			char *end;
			unsigned long tid = strtoul(d->name, &end, 10);
			struct slot *s;

			off += d->reclen;
			if (*end || tid == 0 || (pid_t)tid == g.sampler_tid || (pid_t)tid == dumper)
				continue;
			s = slot_find((uint32_t)tid);
			if (!s) {
				s = slot_alloc((uint32_t)tid);
				if (!s) {
					g.ctr.nr_threads_untracked++;
					continue;
				}
				name_thread((uint32_t)tid);
			}
			s->scan = g.scan;
		}
	}
	close(fd);
	for (i = 0; i < g.hiwater; i++) {
		struct slot *s = &g.slots[i];

		if (atomic_load(&s->state) != S_FREE && s->scan != g.scan)
			slot_free(s);
	}
}

/* Moves every finished capture into the ring. */
static void collect(void)
{
	uint32_t i;

	for (i = 0; i < g.hiwater; i++) {
		struct slot *s = &g.slots[i];
		uint32_t flags = 0;

		if (atomic_load_explicit(&s->state, memory_order_acquire) != S_READY)
			continue;
		if (!(s->uflags & WP_UNW_BLOCKED))
			flags |= WP_SAMPLE_ON_CPU;
		if (s->uflags & WP_UNW_TRUNCATED) {
			flags |= WP_SAMPLE_TRUNCATED;
			g.ctr.nr_truncated++;
		}
		if (s->uflags & WP_UNW_FAILED) {
			flags |= WP_SAMPLE_PARTIAL;
			g.ctr.nr_unwind_failed++;
		}
		if (s->nr > 0)
			wp_ring_add(g.ring, s->t_ns, s->tid, flags, 0, s->buf, s->nr, 1);
		g.ctr.nr_samples++;
		atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
	}
}

/* One thread, one tick. Today: a signal whose handler captures the stack.
 * This is the seam where a blocked thread can later be sampled without one. */
static void sample_thread(struct slot *s, uint64_t now)
{
	uint32_t idx = (uint32_t)(s - g.slots);
	uint32_t gen = atomic_load_explicit(&s->gen, memory_order_relaxed) & 0xffffff;
	siginfo_t si;

	if (atomic_load_explicit(&s->state, memory_order_acquire) != S_IDLE) {
		g.ctr.nr_pending++; /* the last signal is still undelivered */
		return;
	}
	s->t_ns = now;
	atomic_store_explicit(&s->state, S_SENT, memory_order_release);
	memset(&si, 0, sizeof(si));
	si.si_signo = g.signal;
	si.si_code = SI_QUEUE;
	si.si_pid = g.pid;
	si.si_uid = getuid();
	si.si_value.sival_ptr = (void *)(uintptr_t)((COOKIE_MAGIC << 48) | ((uint64_t)gen << 24) | idx);
	if (syscall(SYS_rt_tgsigqueueinfo, g.pid, s->tid, g.signal, &si) == 0) {
		g.ctr.nr_signals++;
		return;
	}
	if (errno == ESRCH) {
		slot_free(s); /* exited since the scan */
		return;
	}
	atomic_store_explicit(&s->state, S_IDLE, memory_order_release);
	g.ctr.nr_send_failed++;
}

static void tick(uint64_t now)
{
	uint32_t i;

	collect();
	scan_threads();
	if (atomic_load(&g.sampling)) {
		for (i = 0; i < g.hiwater; i++)
			if (atomic_load_explicit(&g.slots[i].state, memory_order_relaxed) != S_FREE)
				sample_thread(&g.slots[i], now);
	}
	wp_modmap_refresh(&g.mods);
	g.ctr.nr_ticks++;
	/* Names change (pthread_setname_np): refresh about once a second. */
	if (g.ctr.nr_ticks % g.cfg.hz == 0) {
		for (i = 0; i < g.hiwater; i++)
			if (atomic_load(&g.slots[i].state) != S_FREE)
				name_thread(g.slots[i].tid);
	}
}

/* ---- dumps ------------------------------------------------------------ */

static int cmp_sample_tid(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Raw profile of the current window: ring copy plus names, modules, counters. */
static int build_profile(struct wp_profile *p, int snapshot)
{
	const struct wp_ring_stats *rs = wp_ring_stats(g.ring);
	uint32_t *tids = NULL;
	size_t i, n = 0;

	memset(p, 0, sizeof(*p));
	if (wp_ring_snapshot(g.ring, p) < 0)
		return -1;
	if (wp_modmap_copy(&g.mods, &p->modules, &p->nr_modules) < 0)
		goto fail;
	/* Threads: one entry per tid present in the samples. */
	tids = malloc((p->nr_samples + 1) * sizeof(*tids));
	p->threads = calloc(g.nr_names + 1, sizeof(*p->threads));
	if (!tids || !p->threads)
		goto fail;
	for (i = 0; i < p->nr_samples; i++)
		tids[i] = p->samples[i].tid;
	qsort(tids, p->nr_samples, sizeof(*tids), cmp_sample_tid);
	for (i = 0; i < g.nr_names; i++) {
		if (!bsearch(&g.names[i].tid, tids, p->nr_samples, sizeof(*tids), cmp_sample_tid))
			continue;
		/* The latest name for threads still alive. */
		if (slot_find(g.names[i].tid))
			read_comm(g.names[i].tid, g.names[i].name);
		p->threads[n++] = g.names[i];
	}
	p->nr_threads = n;
	free(tids);
	tids = NULL;
	p->cmdline = strdup(g.cmdline);
	if (!p->cmdline)
		goto fail;
	p->start_ns = p->nr_samples ? p->samples[0].t_ns : g.start_ns;
	p->end_ns = p->nr_samples ? p->samples[p->nr_samples - 1].t_ns : mono_ns();
	p->realtime_offset_ns = g.rt_offset;
	p->pid = (uint32_t)g.pid;
	p->main_tid = (uint32_t)g.pid;
	p->hz = g.cfg.hz;
	p->ring_seconds = g.cfg.ring_seconds;
	p->max_depth = g.cfg.max_depth;
	p->snapshot = snapshot;
	p->counters = g.ctr;
	p->counters.nr_overwritten = rs->nr_overwritten;
	p->counters.nr_dropped_full = rs->nr_dropped_full;
	return 0;
fail:
	free(tids);
	wp_profile_free(p);
	return -1;
}

/* Symbolizes and writes `p`, then frees it. Reports one line. */
static void write_profile(struct wp_profile *p)
{
	char path[WP_PATH_MAX], err[512];
	struct wp_out_opts opts = { .platform = g.cfg.platform };
	struct wp_out_stats st;
	const struct wp_counters *c = &p->counters;
	unsigned long long dropped = c->nr_pending + c->nr_send_failed + c->nr_dropped_full +
				     c->nr_overwritten + c->nr_threads_untracked;
	struct wp_sym *sym;
	uint64_t t0 = mono_ns();

	if (wp_out_expand_path(g.cfg.output, (unsigned)p->pid, p->snapshot, path, sizeof(path)) < 0) {
		wp_log(WP_LOG_ERROR, "WALLPROF_OUTPUT expands to a path that is too long; profile not written");
		goto out;
	}
	sym = wp_sym_open(p->modules, p->nr_modules);
	memset(&st, 0, sizeof(st));
	if (wp_out_sentry_write(p, sym, &opts, path, &st, err, sizeof(err)) < 0) {
		wp_log(WP_LOG_ERROR, "profile not written: %s", err);
	} else {
		char what[32] = "";

		if (p->snapshot)
			snprintf(what, sizeof(what), "snapshot %d, ", p->snapshot);
		wp_log(WP_LOG_INFO, "wrote %s (%s%zu samples, %zu threads, %.1f s, %llu dropped) in %.0f ms",
		       path, what, st.nr_samples, st.nr_threads, st.duration_s, dropped,
		       (double)(mono_ns() - t0) / 1e6);
		if (st.duration_s > WP_SENTRY_MAX_SECONDS)
			wp_log(WP_LOG_INFO, "%s covers %.1f s; Sentry rejects v1 profiles longer than %d s",
			       path, st.duration_s, WP_SENTRY_MAX_SECONDS);
	}
	if (sym)
		wp_sym_close(sym);
out:
	wp_profile_free(p);
}

static void *dumper_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "wallprof-dump");
	atomic_store(&g.dumper_tid, (pid_t)syscall(SYS_gettid));
	futex_wake((_Atomic uint32_t *)&g.dumper_tid);
	write_profile(&g.dump_profile);
	atomic_store(&g.dumper_done, 1);
	return NULL;
}

static int start_thread(pthread_t *t, void *(*fn)(void *))
{
	sigset_t all, old;
	int rc;

	/* Helper threads never take the program's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(t, NULL, fn, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

static void join_dumper(void)
{
	if (!g.dumper_running)
		return;
	pthread_join(g.dumper, NULL);
	g.dumper_running = 0;
	atomic_store(&g.dumper_tid, 0);
	atomic_store(&g.dumper_done, 0);
}

/* Sampler thread: copies the window, a dumper thread writes it while the
 * sampling goes on. */
static void start_snapshot(void)
{
	if (g.dumper_running) {
		if (!atomic_load(&g.dumper_done)) {
			g.snapshots_waiting++;
			return;
		}
		join_dumper();
	}
	collect();
	if (build_profile(&g.dump_profile, ++g.snapshot_seq) < 0) {
		wp_log(WP_LOG_ERROR, "snapshot %d not written: out of memory", g.snapshot_seq);
		return;
	}
	if (start_thread(&g.dumper, dumper_main) != 0) {
		/* No thread: write it here, sampling pauses meanwhile. */
		write_profile(&g.dump_profile);
		return;
	}
	g.dumper_running = 1;
	while (atomic_load(&g.dumper_tid) == 0)
		futex_wait_until((_Atomic uint32_t *)&g.dumper_tid, 0, mono_ns() + 100000000ull);
}

static void *sampler_main(void *arg)
{
	uint64_t period = 1000000000ull / g.cfg.hz;
	uint64_t next = mono_ns();

	(void)arg;
	prctl(PR_SET_NAME, "wallprof");
	g.sampler_tid = (pid_t)syscall(SYS_gettid); /* never samples itself */
	for (;;) {
		uint32_t ev;
		uint64_t now;

		next += period;
		for (;;) {
			ev = atomic_load(&g.events);
			if (ev & EV_STOP)
				return NULL;
			if (ev & EV_SNAPSHOT) {
				atomic_fetch_and(&g.events, ~(uint32_t)EV_SNAPSHOT);
				start_snapshot();
				continue;
			}
			if (mono_ns() >= next)
				break;
			futex_wait_until(&g.events, 0, next);
		}
		now = mono_ns();
		if (now >= next + period) {
			/* Overran (host stopped, machine busy): skip, don't burst. */
			uint64_t missed = (now - next) / period;

			g.ctr.nr_ticks_late += missed;
			next += missed * period;
		}
		if (g.dumper_running && atomic_load(&g.dumper_done)) {
			join_dumper();
			if (g.snapshots_waiting) {
				g.snapshots_waiting--;
				start_snapshot();
			}
		}
		tick(now);
	}
}

/* ---- lifecycle ---------------------------------------------------------- */

static void *map_zero(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static int alloc_state(void)
{
	size_t depth = g.cfg.max_depth + WP_UNW_SCRATCH, i;
	uint64_t samples = (uint64_t)g.cfg.hz * g.cfg.ring_seconds * 64;
	struct wp_ring_config rc;
	uint64_t *bufs;

	g.nr_slots = g.cfg.max_threads;
	g.nr_buckets = 16;
	while (g.nr_buckets < g.nr_slots * 2)
		g.nr_buckets <<= 1;
	g.slots = map_zero(g.nr_slots * sizeof(*g.slots));
	g.buckets = map_zero(g.nr_buckets * sizeof(*g.buckets));
	g.free_list = map_zero(g.nr_slots * sizeof(*g.free_list));
	bufs = map_zero(g.nr_slots * depth * sizeof(uint64_t));
	g.dents_len = 64 * 1024;
	g.dents = map_zero(g.dents_len);
	if (!g.slots || !g.buckets || !g.free_list || !bufs || !g.dents)
		return -1;
	for (i = 0; i < g.nr_slots; i++) {
		g.slots[i].buf = bufs + i * depth;
		g.free_list[i] = (uint32_t)(g.nr_slots - 1 - i);
	}
	g.nr_free = g.nr_slots;

	/* Sized for 64 threads over the whole window; with more threads the
	 * window shrinks and the loss is counted (overwritten). */
	if (samples > 4u << 20)
		samples = 4u << 20;
	rc.nr_samples = samples;
	rc.nr_pcs = 1u << 16;
	rc.nr_stacks = 1u << 16;
	rc.nr_words = 1u << 21;
	rc.window_ns = (uint64_t)g.cfg.ring_seconds * 1000000000ull;
	g.ring = wp_ring_create(&rc);
	return g.ring ? 0 : -1;
}

static int pick_signal(void)
{
	static const int fallbacks[] = { SIGPROF, SIGVTALRM, SIGPWR, SIGSTKFLT };
	const char *explicit_sig = getenv("WALLPROF_SIGNAL");
	struct sigaction old, act;
	size_t i, n = (explicit_sig && *explicit_sig) ? 1 : sizeof(fallbacks) / sizeof(*fallbacks);
	char a[24];

	for (i = 0; i < n; i++) {
		int sig = n == 1 ? g.cfg.signal : fallbacks[i];

		if (__sigaction(sig, NULL, &old) < 0)
			continue;
		if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
			wp_log(WP_LOG_DEBUG, "%s already has a handler; not using it",
			       wp_signal_name(sig, a, sizeof(a)));
			continue;
		}
		memset(&act, 0, sizeof(act));
		act.sa_sigaction = on_sample_signal;
		act.sa_flags = SA_SIGINFO | SA_RESTART;
		sigemptyset(&act.sa_mask);
		if (__sigaction(sig, &act, NULL) < 0)
			continue;
		g.prog_act = old;
		g.signal = sig;
		return 0;
	}
	wp_log(WP_LOG_ERROR, "no free signal for sampling (%s is taken; set WALLPROF_SIGNAL); profiling is off",
	       wp_signal_name(n == 1 ? g.cfg.signal : SIGPROF, a, sizeof(a)));
	return -1;
}

static void install_snapshot(void)
{
	struct sigaction old, act;
	char a[24];
	int sig = g.cfg.snapshot_signal;

	if (!sig)
		return;
	if (__sigaction(sig, NULL, &old) < 0 || old.sa_handler != SIG_DFL) {
		wp_log(WP_LOG_INFO, "%s is in use by the program; snapshots are off",
		       wp_signal_name(sig, a, sizeof(a)));
		return;
	}
	memset(&act, 0, sizeof(act));
	act.sa_sigaction = on_snapshot_signal;
	act.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&act.sa_mask);
	if (__sigaction(sig, &act, NULL) == 0) {
		g.prev_snap_act = old;
		g.snapshot_signal = sig;
	}
}

static void read_cmdline(void)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n, i;

	g.cmdline[0] = 0;
	if (fd < 0)
		return;
	n = read(fd, g.cmdline, sizeof(g.cmdline) - 1);
	close(fd);
	if (n <= 0)
		return;
	while (n > 0 && g.cmdline[n - 1] == 0)
		n--;
	for (i = 0; i < n; i++)
		if (g.cmdline[i] == 0)
			g.cmdline[i] = ' ';
	g.cmdline[n] = 0;
}

static void after_fork_child(void)
{
	/* The child has no sampler thread: it must not try to dump the parent's
	 * ring, and the snapshot signal gets its old meaning back. */
	atomic_store(&g.sampling, 0);
	g.started = 0;
	if (g.snapshot_signal)
		__sigaction(g.snapshot_signal, &g.prev_snap_act, NULL);
	g.snapshot_signal = 0;
}

void wp_sampler_start(void)
{
	struct timespec rt;
	char a[24];

	wp_config_load(&g.cfg);
	if (!g.cfg.enabled)
		return;
	g.pid = getpid();
	if (alloc_state() < 0) {
		wp_log(WP_LOG_ERROR, "cannot allocate the sample buffers (%s); profiling is off",
		       strerror(errno));
		return;
	}
	wp_unwind_init();
	read_cmdline();
	wp_modmap_refresh(&g.mods);
	if (pick_signal() < 0)
		return;
	install_snapshot();
	g.start_ns = mono_ns();
	clock_gettime(CLOCK_REALTIME, &rt);
	g.rt_offset = (int64_t)((uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec) -
		      (int64_t)g.start_ns;
	atomic_store(&g.sampling, 1);
	if (start_thread(&g.sampler, sampler_main) != 0) {
		atomic_store(&g.sampling, 0);
		wp_log(WP_LOG_ERROR, "cannot start the sampler thread; profiling is off");
		return;
	}
	g.started = 1;
	pthread_atfork(NULL, NULL, after_fork_child);
	wp_log(WP_LOG_DEBUG, "sampling every thread at %u Hz with %s, window %u s, depth %u",
	       g.cfg.hz, wp_signal_name(g.signal, a, sizeof(a)), g.cfg.ring_seconds, g.cfg.max_depth);
}

void wp_sampler_stop_and_dump(void)
{
	struct wp_profile p;

	if (!g.started || getpid() != g.pid)
		return;
	g.started = 0;
	atomic_fetch_or(&g.events, EV_STOP);
	futex_wake(&g.events);
	pthread_join(g.sampler, NULL);
	join_dumper(); /* a snapshot being written is finished, not lost */
	collect();
	atomic_store(&g.sampling, 0);
	if (build_profile(&p, 0) < 0) {
		wp_log(WP_LOG_ERROR, "profile not written: out of memory");
		return;
	}
	write_profile(&p);
}

/* ---- the program's own signal handling (interposed sigaction) ---------- */

int wp_sampler_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	char a[24];

	if (sig <= 0)
		return -2;
	if (g.signal && sig == g.signal) {
		/* Chained: the kernel keeps our handler, which forwards every
		 * signal that is not ours to what the program installed. */
		if (old)
			*old = g.prog_act;
		if (act)
			g.prog_act = *act;
		return 0;
	}
	if (g.snapshot_signal && sig == g.snapshot_signal) {
		int rc;

		if (act && (act->sa_handler != SIG_DFL || (act->sa_flags & SA_SIGINFO))) {
			/* The program wins its signal; snapshots stop. */
			g.snapshot_signal = 0;
			wp_log(WP_LOG_INFO, "the program installed its own %s handler; snapshots are off",
			       wp_signal_name(sig, a, sizeof(a)));
			rc = __sigaction(sig, act, NULL);
			if (rc == 0 && old)
				*old = g.prev_snap_act;
			return rc;
		}
		/* A query or a reset to the default: the program sees the
		 * disposition it would have without us; snapshots stay on. */
		if (old)
			*old = g.prev_snap_act;
		if (act)
			g.prev_snap_act = *act;
		return 0;
	}
	return -2; /* not ours: the caller passes it through */
}
