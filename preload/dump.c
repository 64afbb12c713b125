/* dump: everything the library writes is a raw dump of the window
 * (output/raw.h), written with system calls only on memory prepared at
 * start, and handed to the converter program (convert.h) in a process of
 * its own: at exit, before an exec, for a snapshot, on a fatal signal and
 * for an exit or exec from a signal handler. Also the fatal-signal handler
 * itself and its installation (see dump.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../output/strput.h"
#include "../output/event.h"
#include "../output/output.h"
#include "../output/raw.h"
#include "convert.h"
#include "dump.h"
#include "raw_dump.h"
#include "lifecycle.h"
#include "runtime.h"
#include "park.h"
#include "sample.h"
#include "sampler.h"
#include "threads.h"
#include "tree.h"

/* Everything the library writes is a raw dump of the window (output/raw.h),
 * written with system calls only; the converter program turns it into the
 * profile in a process of its own (convert.h). One dump space per path that
 * may run at the same time: `exit_space` for the exit, an exec, a fatal
 * signal and an exit or exec from a signal handler (one at a time: the
 * dump_once guard), `snap_space` for the sampler's snapshots. Off the stack:
 * a fatal signal may run on an 8 KiB alternate signal stack, of which the
 * kernel's signal frame already takes 3.3 KiB with AVX-512. */
struct dump_names {
	char json[WP_PATH_MAX], json_fb[WP_PATH_MAX]; /* the profile, and its fallback */
	char raw[WP_PATH_MAX], raw_fb[WP_PATH_MAX];   /* the dump, and its fallback */
};
struct dump_space {
	struct wp_raw_meta meta;
	struct wp_counters ctr;
	struct wp_threads_view threads; /* the table as this dump reads it (one load) */
	struct wp_raw_out out;
	struct wp_conv conv;
	struct dump_names n;
	char line[WP_PATH_MAX + 200];
	uint64_t chunk_to_ns; /* chunk_space: where this chunk ends */
	uint32_t chunk_k;     /* chunk_space: this chunk's number */
	int no_tail;          /* exit_space: an exec from a handler, no chunk of its tail */
};
static struct dump_space exit_space = { .conv = WP_CONV_NONE },
			 snap_space = { .conv = WP_CONV_NONE },
			 chunk_space = { .conv = WP_CONV_NONE };
static struct dump_names exit_names; /* computed at start and in a forked child */
static char out_base[WP_PATH_MAX]; /* the profile's name without ".json": exec dumps add to it */
static int snapshot_seq;           /* snapshots taken (the sampler's) */
static int snapshots_waiting;      /* snapshots asked for while one converts (the sampler's) */
static uint8_t profiler_id[16];    /* random, this process's (a forked child draws its own) */
/* Periodic chunks (WALLPROF_CHUNK_SECONDS), the sampler's (the exit path's
 * once it has stopped): the last chunk's number, and where the next begins
 * (0: at the start of profiling). */
static uint32_t chunk_seq;
static uint64_t chunk_from_ns;

/* The raw dump of the process (exit_space) is written at most once: FREE,
 * TAKEN by its one writer (the exit path, or the first handler path), then
 * DONE. The exit path before an exec gives it back (the exec may fail), and
 * so does the thaw after a failed exec from a handler (wp_dump_rearm). A
 * futex word: a second dumper waits for DONE. Inherited by a forked child
 * as it is. */
enum { DUMP_FREE, DUMP_TAKEN, DUMP_DONE };
static _Atomic uint32_t dump_once;

/* Takes the process's raw dump for the caller: 1, or 0 when another has it
 * or had it. async-signal-safe */
WP_AS_SAFE static int dump_take(void)
{
	uint32_t v = DUMP_FREE;

	return atomic_compare_exchange_strong(&dump_once, &v, DUMP_TAKEN);
}

/* Waits up to 2 s for the one who took the dump to finish it.
 * async-signal-safe */
WP_AS_SAFE static void dump_wait_done(void)
{
	for (int i = 0; i < 200; i++) {
		uint32_t v = atomic_load(&dump_once);
		struct timespec ts = { 0, 10000000 };

		if (v == DUMP_DONE)
			return;
		wp_syscall(SYS_futex, &dump_once, FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0);
	}
}

/* The dump is written: waiters go on. async-signal-safe */
WP_AS_SAFE static void dump_done(void)
{
	atomic_store(&dump_once, DUMP_DONE);
	wp_futex_wake(&dump_once);
}

/* async-signal-safe */
WP_AS_SAFE int wp_dump_busy(void)
{
	return atomic_load(&dump_once) != DUMP_FREE;
}

/* async-signal-safe */
WP_AS_SAFE void wp_dump_rearm(void)
{
	atomic_store(&dump_once, DUMP_FREE);
}

/* The four paths of a dump: `base` is the profile's name without ".json",
 * `tag` "", ".<n>" (snapshot) or ".exec<k>"; the fallbacks are the same
 * names in $TMPDIR (or /tmp), unique per process whatever the configured
 * name. async-signal-safe */
WP_AS_SAFE static void dump_paths(struct dump_names *d, const char *json, const char *tag)
{
	size_t n;

	if (json != d->json)
		wp_put_str(d->json, 0, sizeof(d->json), json);
	n = strlen(d->json);
	n = n > 5 && !strcmp(d->json + n - 5, ".json") ? n - 5 : n;
	if (n + 5 < sizeof(d->raw)) {
		memcpy(d->raw, d->json, n);
		memcpy(d->raw + n, ".raw", 5);
	} else {
		d->raw[0] = 0;
	}
	n = wp_put_str(d->json_fb, 0, sizeof(d->json_fb), g->fix.cfg.tmpdir);
	n = wp_put_str(d->json_fb, n, sizeof(d->json_fb), "/wallprof.");
	n = wp_put_uint(d->json_fb, n, sizeof(d->json_fb), (unsigned)g->fix.pid);
	n = wp_put_str(d->json_fb, n, sizeof(d->json_fb), tag);
	memcpy(d->raw_fb, d->json_fb, n);
	wp_put_str(d->raw_fb, n, sizeof(d->raw_fb), ".raw");
	wp_put_str(d->json_fb, n, sizeof(d->json_fb), ".json");
}

/* Whether some thread has two samples: else Sentry would reject the
 * profile (NotEnoughSamples), and a child that exec'd or _exit'ed at once
 * is not worth a dump. The converter decides on the window; this is the
 * cheap check before it (counts since start: the window of a process that
 * lived less than it, which is when this says no). Not in a handler: says
 * so in one line. */
static int long_enough(int level, int snapshot)
{
	const struct wp_ring_stats *rs = wp_ring_stats(g->smp.ring);
	struct wp_counters c = g->smp.ctr;
	unsigned long long dropped;
	size_t i;
	struct wp_threads_view v;

	c.nr_dropped_full = rs->nr_dropped_full; /* the ring's own */
	c.nr_overwritten = rs->nr_overwritten;
	dropped = wp_counters_dropped(&c);
	wp_threads_view(&v);
	for (i = 0; i < v.nr; i++)
		if (v.e[i].nr_samples >= 2)
			return 1;
	wp_log_event(level, "short", NULL, dropped,
		     "%s%llu sample%s in %.0f ms, fewer than 2 on every thread: too short for a "
		     "profile, none written (WALLPROF_HZ=%u)",
		     snapshot ? "snapshot: " : "", (unsigned long long)g->smp.ctr.nr_samples,
		     g->smp.ctr.nr_samples == 1 ? "" : "s",
		     (double)(wp_mono_ns() - g->smp.start_ns) / 1e6, g->fix.cfg.hz);
	return 0;
}

/* Writes the raw dump of the window to sp->raw (else sp->raw_fb), locked
 * for the converter, and starts the converter on it (`detach`: nobody will
 * wait for it). The ring, names and module map hold still meanwhile (the
 * sampler is stopped, parked, or the caller). `sig`: the fatal signal, or 0.
 * Returns 0 when the converter runs; else one line says where the dump
 * stays, or that none could be written. async-signal-safe */
WP_AS_SAFE static int dump(struct dump_space *sp, int sig, int snapshot, int detach)
{
	struct wp_raw_meta *meta = &sp->meta;
	struct wp_conv_req rq;
	const char *path = sp->n.raw, *json = sp->n.json, *abbrev = sig ? sigabbrev_np(sig) : NULL;
	size_t n = 0, cap = sizeof(sp->line), nr_mods;
	const struct wp_module *mods;
	int fd = -1, rc = -1, i, xfsz_was_pending, taken = 0;
	/* the kernel's 8-byte masks: a sigset_t is 128 bytes of stack each */
	unsigned long xfsz = 1ul << (SIGXFSZ - 1), old_mask, pending;

	memset(meta, 0, sizeof(*meta));
	meta->pid = (uint32_t)g->fix.pid;
	meta->main_tid = (uint32_t)g->fix.pid;
	meta->hz = g->fix.cfg.hz;
	meta->ring_seconds = g->fix.cfg.ring_seconds;
	meta->max_depth = g->fix.cfg.max_depth;
	meta->realtime_offset_ns = g->smp.rt_offset;
	meta->start_ns = g->smp.start_ns;
	meta->snapshot = (uint32_t)snapshot;
	meta->ring_bytes = wp_ring_bytes(&g->fix.ring_cfg);
	memcpy(meta->profiler_id, profiler_id, sizeof(profiler_id));
	if (g->fix.cfg.chunk_seconds) {
		meta->run_flags = WP_RUN_CHUNKS_ON;
		meta->chunk_from_ns =
			chunk_from_ns > meta->start_ns ? chunk_from_ns : meta->start_ns;
		if (sp == &chunk_space) {
			meta->chunk = sp->chunk_k;
			meta->chunk_to_ns = sp->chunk_to_ns;
		} else if (sp == &exit_space && !sp->no_tail) {
			/* what no chunk took, everything since the last period,
			 * is the last chunk: the converter makes it */
			meta->run_flags |= WP_RUN_TAIL;
			meta->chunk = chunk_seq + 1;
			meta->chunk_to_ns = wp_mono_ns() + 1;
		}
	}
	memcpy(meta->cmdline, g->smp.cmdline, sizeof(meta->cmdline));
	meta->cmdline[sizeof(meta->cmdline) - 1] = 0;
	meta->signal = sig;
	sp->ctr = g->smp.ctr;
	sp->ctr.nr_eintr_retried = atomic_load(&g->sh.nr_eintr_retried);
	/* One load of the table; each entry's liveness is computed as it is
	 * written (wp_threads_flags): a dump writes nothing in the table, which
	 * the sampler (and another dump) may be reading. */
	wp_threads_view(&sp->threads);
	/* SIGXFSZ held back: past RLIMIT_FSIZE the write must fail with EFBIG,
	 * not kill the program. One our write raised is taken off again; one
	 * that was already pending stays. */
	wp_syscall(SYS_rt_sigprocmask, SIG_BLOCK, &xfsz, &old_mask, 8);
	pending = 0;
	wp_syscall(SYS_rt_sigpending, &pending, 8);
	xfsz_was_pending = !!(pending & xfsz);
	/* System calls, not libc's names: those would reach our own wrappers. */
	for (i = 0; i < 2 && rc < 0; i++) {
		path = i ? sp->n.raw_fb : sp->n.raw;
		if (!path[0])
			continue;
		fd = (int)wp_syscall(SYS_openat, AT_FDCWD, path,
				     O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
		if (fd < 0)
			continue;
		/* Held while we write it and by a converter while it reads it.
		 * A dump already there is never written over: another
		 * process's under the same name (a template without %p, a pid
		 * namespace) being written, converted or waiting for the
		 * tree's converter, or one left behind, a profile still to
		 * convert. The fallback, unique per pid, is used instead. */
		if (wp_syscall(SYS_flock, fd, LOCK_EX | LOCK_NB) < 0 ||
		    wp_syscall(SYS_lseek, fd, 0, SEEK_END) != 0) {
			wp_syscall(SYS_close, fd);
			fd = -1;
			taken |= i == 0;
			continue;
		}
		/* The count before the array (modules.c stores them the other
		 * way round): a sampler that did not park may be adding one. */
		nr_mods = __atomic_load_n(&g->smp.mods.nr, __ATOMIC_ACQUIRE);
		mods = __atomic_load_n(&g->smp.mods.mods, __ATOMIC_ACQUIRE);
		rc = wp_raw_write_out(&sp->out, fd, meta, g->smp.ring, mods, nr_mods, sp->threads.e,
				      sp->threads.nr, wp_threads_flags, &sp->threads, &sp->ctr);
		if (rc < 0) {
			wp_syscall(SYS_close, fd);
			wp_syscall(SYS_unlink, path);
			fd = -1;
		}
	}
	/* A dump that took the fallback because its name was taken: its
	 * profile goes there too (the name may be another process's
	 * profile), and one line says so. */
	if (rc == 0 && taken && path == sp->n.raw_fb) {
		size_t k = 0, kc = sizeof(sp->line);

		json = sp->n.json_fb;
		k = wp_put_str(sp->line, k, kc, sp->n.raw);
		k = wp_put_str(sp->line, k, kc,
			       " holds another dump (another process's with a "
			       "WALLPROF_OUTPUT without %p, or one left to convert); this profile "
			       "goes to ");
		k = wp_put_str(sp->line, k, kc, json);
		wp_log_raw(WP_LOG_ERROR, "error", NULL, 0, sp->line, k);
	}
	/* A descendant leaves its dump to the tree's converter (see
	 * output/dump_queue.h): its line while we still hold the dump (a
	 * converter tries again later), under the SIGXFSZ guard. Paths that
	 * are relative or hold control characters are not written there: the
	 * dump gets a converter of its own. */
	if (rc == 0 && detach && wp_convert_program() && wp_tree_index() &&
	    wp_event_append_dump(wp_tree_index(), (unsigned)g->fix.pid, path, json,
				 sp->n.json_fb) == 0) {
		wp_syscall(SYS_close, fd);
		fd = -1;
	}
	pending = 0;
	wp_syscall(SYS_rt_sigpending, &pending, 8);
	if (!xfsz_was_pending && (pending & xfsz)) {
		struct timespec zero = { 0, 0 };

		while (wp_syscall(SYS_rt_sigtimedwait, &xfsz, NULL, &zero, 8) < 0 && errno == EINTR)
			;
	}
	wp_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old_mask, NULL, 8);
	if (sig) {
		n = wp_put_str(sp->line, n, cap, "SIG");
		n = wp_put_str(sp->line, n, cap, abbrev ? abbrev : "?");
		n = wp_put_str(sp->line, n, cap, ": ");
	}
	if (rc < 0) {
		n = wp_put_str(sp->line, n, cap, "could not write the raw profile; no profile");
		wp_log_raw(WP_LOG_ERROR, "error", NULL, 0, sp->line, n);
		return -1;
	}
	if (fd < 0) {
		/* left to the tree's converter: make sure one runs */
		if (wp_convert_ensure_tree(&sp->conv, wp_tree_index()) >= 0)
			return 0;
		n = wp_put_str(sp->line, n, cap, "wrote raw profile ");
		n = wp_put_str(sp->line, n, cap, path);
		n = wp_put_str(sp->line, n, cap, "; could not start ");
		n = wp_put_str(sp->line, n, cap, wp_convert_program());
		n = wp_put_str(sp->line, n, cap, " (the first process tries again at its exit)");
		wp_log_raw(WP_LOG_ERROR, "error", path, 0, sp->line, n);
		return -1;
	}
	rq.raw_fd = fd;
	rq.raw = path;
	rq.json = json;
	rq.fallback = sp->n.json_fb;
	rq.detach = detach;
	rq.index = wp_tree_index();
	if (wp_convert_start(&sp->conv, &rq) < 0) {
		wp_syscall(SYS_close, fd);
		n = wp_put_str(sp->line, n, cap, "wrote raw profile ");
		n = wp_put_str(sp->line, n, cap, path);
		n = wp_put_str(
			sp->line, n, cap,
			wp_convert_program()
				? "; could not start "
				: "; no converter found (WALLPROF_CONVERTER, or wallprof "
				  "beside libwallprof.so): convert it with wallprof convert");
		if (wp_convert_program())
			n = wp_put_str(sp->line, n, cap, wp_convert_program());
		wp_log_raw(WP_LOG_ERROR, "error", path, 0, sp->line, n);
		return -1;
	}
	wp_syscall(SYS_close, fd);
	return 0;
}

/* CLOCK_MONOTONIC deadline for a conversion the caller waits for. */
/* async-signal-safe */
WP_AS_SAFE static uint64_t convert_deadline(void)
{
	return wp_mono_ns() + (uint64_t)g->fix.cfg.convert_timeout * 1000000000ull;
}

/* The root waits for its conversions, so that the profile exists when the
 * program's parent sees it end; a descendant's goes on in the background
 * (its exit is not delayed by more than its raw dump), unless WALLPROF_LOG
 * asks every process to speak: then its lines come on its own stderr, as
 * the root's. async-signal-safe */
WP_AS_SAFE static int detached(void)
{
	return !wp_tree_is_root() && !g->fix.cfg.log_explicit;
}

/* Sampler thread: a snapshot of the window, converted in the background;
 * the sampler relays its report on later ticks (wp_dump_snapshot_poll). */
void wp_dump_snapshot(void)
{
	char json[WP_PATH_MAX], tag[24];
	int n;

	if (!g->smp.ring)
		return; /* no ring (a forked child that could not map one) */
	if (snap_space.conv.pid && !wp_convert_poll(&snap_space.conv)) {
		snapshots_waiting++;
		return;
	}
	wp_sample_collect();
	wp_park_count();
	n = ++snapshot_seq;
	if (wp_out_expand_path(g->fix.cfg.output, (unsigned)g->fix.pid, n, json, sizeof(json)) <
	    0) {
		wp_log(WP_LOG_ERROR,
		       "WALLPROF_OUTPUT expands to a path that is too long; "
		       "snapshot %d not written",
		       n);
		return;
	}
	wp_threads_refresh_names();
	if (!long_enough(WP_LOG_INFO, n))
		return;
	snprintf(tag, sizeof(tag), ".%d", n);
	dump_paths(&snap_space.n, json, tag);
	dump(&snap_space, 0, n, 0);
}

/* Sampler thread, every tick: a finished snapshot conversion is reported,
 * and the next requested snapshot starts. */
void wp_dump_snapshot_poll(void)
{
	if (!snap_space.conv.pid || !wp_convert_poll(&snap_space.conv))
		return;
	if (snapshots_waiting) {
		snapshots_waiting--;
		wp_dump_snapshot();
	}
}

int wp_dump_snapshot_converting(void)
{
	return snap_space.conv.pid != 0;
}

/* Sampler thread, stopping: a snapshot being converted is finished, not
 * lost. */
void wp_dump_snapshot_finish(void)
{
	if (snap_space.conv.pid)
		wp_convert_wait(&snap_space.conv, convert_deadline(), 0);
}

/* The paths of chunk `k` or the first free number after it:
 * "<name>.chunk<k>.json" with neither it nor its dump there (an exec'd image
 * of the same pid, or a run before with the pid, wrote some: never over
 * them). Returns the number, 0 when the name is too long or 1000 numbers are
 * taken in a row. */
static uint32_t chunk_paths(struct dump_space *sp, uint32_t k)
{
	char tag[40];
	uint32_t last = k + 1000;
	size_t n;

	if (!out_base[0])
		return 0;
	for (; k < last; k++) {
		n = wp_put_uint(tag, wp_put_str(tag, 0, sizeof(tag), ".chunk"), sizeof(tag), k);
		n = wp_put_str(sp->n.json, wp_put_str(sp->n.json, 0, sizeof(sp->n.json), out_base),
			       sizeof(sp->n.json), tag);
		if (n + 6 >= sizeof(sp->n.json))
			return 0;
		memcpy(sp->n.raw, sp->n.json, n + 1);
		wp_put_str(sp->n.json, n, sizeof(sp->n.json), ".json");
		wp_put_str(sp->n.raw, n, sizeof(sp->n.raw), ".raw");
		if (access(sp->n.json, F_OK) != 0 && access(sp->n.raw, F_OK) != 0)
			break;
	}
	if (k == last)
		return 0;
	dump_paths(&sp->n, sp->n.json, tag);
	return k;
}

/* One chunk: the samples since the last one (or the start), as a dump of
 * their own left to a converter in the background. The sampler's, or the
 * exit path's once the sampler has stopped. */
static void chunk(void)
{
	uint64_t now = wp_mono_ns();
	uint32_t k;

	if (chunk_from_ns < g->smp.start_ns)
		chunk_from_ns = g->smp.start_ns; /* the first, or a restart (fork, failed exec) */
	k = chunk_paths(&chunk_space, chunk_seq + 1);
	if (!k) {
		wp_log(WP_LOG_ERROR, "WALLPROF_OUTPUT's chunk names are too long or all taken; "
				     "no chunk written");
		chunk_from_ns = now;
		return;
	}
	chunk_space.chunk_k = k;
	chunk_space.chunk_to_ns = now + 1; /* samples stamped up to now */
	wp_threads_refresh_names();
	/* no line for a chunk too short for a profile: the converter says */
	dump(&chunk_space, 0, 0, 1);
	/* Published together, after the dump: a fatal signal's dump taken
	 * meanwhile (its freeze gave up waiting for us) numbers its tail from
	 * the last chunk finished, and overlaps none. */
	chunk_seq = k;
	chunk_from_ns = now + 1;
	wp_log(WP_LOG_DEBUG, "chunk %u: written in %.2f ms (sampling paused meanwhile)", k,
	       (double)(wp_mono_ns() - now) / 1e6);
}

void wp_dump_chunk(void)
{
	if (!g->smp.ring)
		return;
	wp_sample_collect();
	wp_park_count();
	chunk();
}

/* The paths of the image's profile before an exec: "<name>.exec<k>.json",
 * the first k with neither the profile nor its dump (which the converter
 * may still hold) there; the exec'd image has the same pid and writes the
 * plain name at its own exit. Returns k, -1 when the name is too long, -2
 * when .exec0 to .exec999 are all taken. async-signal-safe (access(2) and
 * string copies) */
WP_AS_SAFE __attribute__((noinline)) static int exec_paths(struct dump_space *sp)
{
	char tag[32];
	char *json = sp->n.json, *raw = sp->n.raw; /* built in place, off the stack */
	size_t n;
	int k;

	if (!out_base[0])
		return -1;
	for (k = 0; k < 1000; k++) {
		wp_put_uint(tag, wp_put_str(tag, 0, sizeof(tag), ".exec"), sizeof(tag),
			    (unsigned)k);
		n = wp_put_str(json, wp_put_str(json, 0, sizeof(sp->n.json), out_base),
			       sizeof(sp->n.json), tag);
		if (n + 6 >= sizeof(sp->n.raw))
			return -1;
		memcpy(raw, json, n + 1);
		wp_put_str(json, n, sizeof(sp->n.json), ".json");
		wp_put_str(raw, n, sizeof(sp->n.raw), ".raw");
		if (access(json, F_OK) != 0 && access(raw, F_OK) != 0)
			break;
	}
	if (k == 1000)
		return -2; /* not over the last one */
	dump_paths(&sp->n, json, tag);
	return k;
}

/* The dump of a fatal signal (`sig`), or of an exit or exec (`exec`) from a
 * signal handler: the thread may hold any lock of the program's (malloc's
 * among them), so only system calls on memory prepared beforehand. Once
 * per process: a second caller waits for the first (a SIGSEGV while an
 * exit from a handler dumps), up to 2 s, then returns. The sampler is
 * parked meanwhile so that the ring, names and module map hold still; it
 * stays parked (the process is ending) unless an exec fails.
 * async-signal-safe */
WP_AS_SAFE void wp_dump_handler(int sig, int exec)
{
	int i;

	if (!wp_life_started() || getpid() != g->fix.pid || !g->smp.ring)
		return;
	if (!dump_take()) {
		dump_wait_done();
		return;
	}
	atomic_store(&g->sh.sampling, 0);
	if (wp_syscall(SYS_gettid) != g->smp.sampler_tid) {
		/* give up waiting after 200 ms (the reader copes) */
		atomic_fetch_or(&g->sh.events, EV_FREEZE);
		wp_futex_wake(&g->sh.events);
		for (i = 0; i < 20 && !atomic_load(&g->sh.frozen); i++) {
			struct timespec ts = { 0, 10000000 };

			wp_syscall(SYS_futex, &g->sh.frozen, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
		}
	}
	if (!exec)
		exit_space.n = exit_names;
	/* An exec from a handler: no chunk of the tail (the image may go on if
	 * the exec fails, and its next chunk takes those samples). */
	exit_space.no_tail = exec;
	if ((!exec || exec_paths(&exit_space) >= 0) && dump(&exit_space, sig, 0, detached()) == 0)
		wp_convert_wait(&exit_space.conv, convert_deadline(), 1);
	dump_done();
}

/* The exit dump (`exec` 0), or the image's before an exec, from a program
 * thread outside any handler of its own, once the sampler is stopped and
 * its last captures collected. */
void wp_dump_exit(int exec)
{
	int k;

	if (!g->smp.ring)
		return; /* a forked child that could not map its ring: nothing kept */
	if (!dump_take()) {
		/* a fatal signal's dump on another thread: it is the profile */
		dump_wait_done();
		return;
	}
	wp_threads_refresh_names();
	/* Before an exec, the image's last chunk (what the periodic ones have
	 * not taken). At the exit, the exit dump says what that is (RUN!'s
	 * tail) and its converter makes the chunk of it: no dump more for
	 * every short process of a tree. */
	if (exec && g->fix.cfg.chunk_seconds)
		chunk();
	/* From here, uploads have WALLPROF_UPLOAD_TIMEOUT: the tree's
	 * converter is told when that ends. */
	if (!exec)
		wp_tree_exiting(wp_mono_ns() / 1000000 + g->fix.cfg.upload_timeout * 1000ull);
	exit_space.n = exit_names;
	exit_space.no_tail = exec; /* before an exec, chunk() took it */
	if (exec && (k = exec_paths(&exit_space)) < 0)
		wp_log(WP_LOG_ERROR,
		       k == -1 ? "WALLPROF_OUTPUT expands to a path that is too long; "
				 "no profile before exec"
			       : "the profiles of 1000 images before exec are there "
				 "already (.exec0 to .exec999); no profile before this exec");
	else if (long_enough(exec ? WP_LOG_DEBUG : WP_LOG_INFO, 0) &&
		 dump(&exit_space, 0, 0, detached()) == 0)
		wp_convert_wait(&exit_space.conv, convert_deadline(), 1);
	if (exec) {
		atomic_store(&dump_once, DUMP_FREE); /* the exec may fail: later dumps */
		return;
	}
	dump_done();
	wp_tree_report(convert_deadline()); /* the root's final exit: one word for the tree */
}


/* Terminating signals whose default action we wrap: on death, a raw dump of
 * the ring first (async-signal-safe), then the same death. */
static const int fatal_signals[] = {
	SIGSEGV, SIGBUS,  SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS,  SIGQUIT,
	SIGXCPU, SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGALRM, SIGUSR1,
};

/* Stack the fatal path uses below the kernel's signal frame (3.3 KiB with
 * AVX-512; an 8 KiB alternate stack leaves 4.7 KiB), measured on a painted
 * alternate stack (test exit_altstack_depth; gcc 12 -O2): 8.3 KiB before
 * (raw_dump's line, meta and counters and wp_raw_write's 2 KiB writer on
 * the stack), 11.1 KiB when a libc function on the way was still unbound
 * (the loader's lazy binding saves the vector registers on the stack); now
 * 496 bytes: the big items are in `exit_space`, and files are opened and written
 * with system calls. The library is linked with -z now, so that no libc
 * function is ever bound on this path. */
/* async-signal-safe */
WP_AS_SAFE static void on_fatal_signal(int sig, siginfo_t *si, void *uc)
{
	static const struct sigaction dfl = { .sa_handler = SIG_DFL };
	int saved = errno;

	(void)si;
	(void)uc;
	wp_dump_handler(sig, 0);
	/* Die exactly as without us: default action, same signal, core dump
	 * if enabled. The signal is blocked in here, so it hits on return
	 * (a faulting instruction would also fault again). */
	__sigaction(sig, &dfl, NULL);
	wp_syscall(SYS_tgkill, getpid(), wp_syscall(SYS_gettid), sig);
	errno = saved;
}

/* async-signal-safe */
WP_AS_SAFE int wp_dump_install_fatal_one(int sig)
{
	struct sigaction act;

	memset(&act, 0, sizeof(act));
	act.sa_sigaction = on_fatal_signal;
	act.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
	/* Every signal waits while it runs (then the process is gone): no
	 * handler lands on top of it on a small alternate stack, ours for
	 * sampling least of all (the unwinder needs 8 KiB). A fault in it
	 * still kills, by that signal: the kernel unblocks it. */
	sigfillset(&act.sa_mask);
	return __sigaction(sig, &act, NULL);
}

/* The exit dump's paths, and the base of the exec dumps' names: computed
 * here, not in a signal handler. At start and in a forked child. */
static void set_dump_paths(void)
{
	char json[WP_PATH_MAX];

	if (wp_out_sibling_path(g->fix.cfg.output, (unsigned)g->fix.pid, "", out_base,
				sizeof(out_base)) < 0)
		out_base[0] = 0;
	if (wp_out_expand_path(g->fix.cfg.output, (unsigned)g->fix.pid, 0, json, sizeof(json)) < 0)
		json[0] = 0;
	dump_paths(&exit_names, json, "");
	/* a new profiler id: Sentry tells one process's chunks by it */
	if (wp_syscall(SYS_getrandom, profiler_id, sizeof(profiler_id), 0) !=
	    (long)sizeof(profiler_id)) {
		uint64_t x = wp_mono_ns() ^ ((uint64_t)g->fix.pid << 32);

		memcpy(profiler_id, &x, 8);
		x = (uint64_t)g->smp.rt_offset * 0x9e3779b97f4a7c15ull ^ x;
		memcpy(profiler_id + 8, &x, 8);
	}
}

void wp_dump_install_fatal(void)
{
	size_t i;

	set_dump_paths();
	for (i = 0; i < sizeof(fatal_signals) / sizeof(*fatal_signals); i++) {
		int sig = fatal_signals[i];
		struct sigaction old;

		if (sig == g->sig.signal || sig == g->sig.snapshot_signal)
			continue;
		if (__sigaction(sig, NULL, &old) < 0 || (old.sa_flags & SA_SIGINFO) ||
		    old.sa_handler != SIG_DFL)
			continue; /* the program (or the parent's SIG_IGN) has it */
		if (wp_dump_install_fatal_one(sig) == 0)
			g->sig.fatal_installed[sig] = 1;
	}
}

/* async-signal-safe */
WP_AS_SAFE int wp_dump_fatal_ours(const struct sigaction *a)
{
	return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == on_fatal_signal;
}

void wp_dump_forked(void)
{
	/* The parent's conversions: their descriptors are not the child's
	 * business, and a dump the parent was writing is not the child's. */
	wp_convert_forked(&snap_space.conv);
	wp_convert_forked(&chunk_space.conv);
	wp_convert_forked(&exit_space.conv);
	chunk_seq = 0;
	chunk_from_ns = 0;
	atomic_store(&dump_once, DUMP_FREE);
	snapshots_waiting = 0;
	snapshot_seq = 0;
	set_dump_paths();
}
