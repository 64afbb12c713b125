/* raw_files.h: what the raw-dump unit tests share: a scratch directory,
 * whole-file reads and writes, section checksums fixed up after an edit,
 * dumps crafted in memory (a RING section of any content), and a small
 * deterministic random generator. */
#ifndef WP_TEST_RAW_FILES_H
#define WP_TEST_RAW_FILES_H

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../output/raw.h"
#include "../../preload/raw_dump.h"

static char tmpdir[1024];

/* `out` (PATH_MAX bytes) gets tmpdir/name. */
static inline void pathf(char *out, const char *name)
{
	snprintf(out, PATH_MAX, "%s/%s", tmpdir, name);
}

static inline int spit(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int ok = fd >= 0 && write(fd, data, len) == (ssize_t)len;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

/* The whole content of `fd` (rewound); NULL on failure. */
static inline unsigned char *slurp_fd(int fd, size_t *len)
{
	struct stat st;
	unsigned char *buf;

	if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return NULL;
	buf = malloc((size_t)st.st_size + 1);
	if (buf && read(fd, buf, (size_t)st.st_size) != st.st_size) {
		free(buf);
		return NULL;
	}
	*len = (size_t)st.st_size;
	return buf;
}

static inline unsigned char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	unsigned char *buf;

	if (fd < 0)
		return NULL;
	buf = slurp_fd(fd, len);
	close(fd);
	return buf;
}

/* Offset of the first section with `tag` in a dump, or 0. */
static inline size_t find_section(const unsigned char *d, size_t len, uint32_t tag, uint64_t *plen)
{
	size_t off = 16;

	while (off + 16 <= len) {
		uint32_t t;
		uint64_t n;

		memcpy(&t, d + off, 4);
		memcpy(&n, d + off + 8, 8);
		if (t == tag) {
			*plen = n;
			return off;
		}
		if (off + 24 > len || n > len - off - 24)
			break;
		off += 24 + n;
	}
	return 0;
}

/* Recomputes every section's checksum after a deliberate edit. */
static inline void fix_sums(unsigned char *d, size_t len)
{
	size_t off = 16;

	while (off + 24 <= len) {
		uint64_t n, sum;

		memcpy(&n, d + off + 8, 8);
		if (n > len - off - 24)
			break;
		sum = wp_raw_checksum(d + off, 16 + n);
		memcpy(d + off + 16 + n, &sum, 8);
		off += 24 + n;
	}
}

/* ---- dumps crafted in memory ---------------------------------------------- */

/* A RING section's tables, any content (output/raw.h documents the layout). */
struct rsample {
	uint64_t t;
	uint32_t tid, stack, flags, syscall;
};
struct rpc {
	uint64_t addr;
	uint32_t flags, zero;
};
struct rstack {
	uint32_t off, len;
};
struct spec {
	uint64_t window_ns;
	uint64_t overwritten, dropped_full; /* the ring's stats: 0 unless set */
	size_t ns, np, nst, nw;
	struct rsample *s;
	struct rpc *p;
	struct rstack *st;
	uint32_t *w;
	/* RING v2 when v2 is set (spec_v2): each record's count and first
	 * tick, and the tick table (nt times, the last tick number newest) */
	int v2;
	uint32_t *count, *tickno;
	uint64_t *ticks;
	size_t nt;
	uint32_t newest;
};

static inline void spec_alloc(struct spec *r, size_t ns, size_t np, size_t nst, size_t nw)
{
	memset(r, 0, sizeof(*r));
	r->window_ns = 30ull * 1000000000;
	r->ns = ns;
	r->np = np;
	r->nst = nst;
	r->nw = nw;
	r->s = calloc(ns + 1, sizeof(*r->s));
	r->p = calloc(np + 1, sizeof(*r->p));
	r->st = calloc(nst + 1, sizeof(*r->st));
	r->w = calloc(nw + 1, sizeof(*r->w));
	if (!r->s || !r->p || !r->st || !r->w)
		abort();
}

/* Makes `r` a RING v2 spec with `nt` ticks whose newest is number
 * `newest`; every record one tick (count 1, untimed) until set. */
static inline void spec_v2(struct spec *r, size_t nt, uint32_t newest)
{
	r->v2 = 1;
	r->nt = nt;
	r->newest = newest;
	r->count = calloc(r->ns + 1, sizeof(*r->count));
	r->tickno = calloc(r->ns + 1, sizeof(*r->tickno));
	r->ticks = calloc(nt + 1, sizeof(*r->ticks));
	if (!r->count || !r->tickno || !r->ticks)
		abort();
	for (size_t k = 0; k < r->ns; k++)
		r->count[k] = 1;
}

static inline void spec_free(struct spec *r)
{
	free(r->s);
	free(r->p);
	free(r->st);
	free(r->w);
	free(r->count);
	free(r->tickno);
	free(r->ticks);
}

/* A whole dump: META, CTRS, MODL x nr_mods, THRD as wp_raw_write writes
 * them (`meta` and `ctr` may be NULL), then the RING of `r` and END!,
 * framed with the writer's own calls. Returns a malloc'd buffer (abort on
 * failure: a broken fixture). */
static inline unsigned char *craft_dump(const struct wp_raw_meta *meta,
					const struct wp_counters *ctr, const struct wp_module *mods,
					size_t nr_mods, const struct wp_thread *threads,
					size_t nr_threads, const struct spec *r, size_t *len)
{
	unsigned char *pre, *out;
	size_t plen, off = 16, k;
	uint32_t nr_sec = 0;
	struct wp_raw_out o;
	uint64_t end_off;
	int fd = memfd_create("raw", MFD_CLOEXEC);

	if (fd < 0 || wp_raw_write(fd, meta, NULL, mods, nr_mods, threads, nr_threads, ctr) < 0)
		abort();
	pre = slurp_fd(fd, &plen);
	if (!pre)
		abort();
	/* everything before its (empty) RING section */
	for (;;) {
		uint32_t tag;
		uint64_t n;

		memcpy(&tag, pre + off, 4);
		memcpy(&n, pre + off + 8, 8);
		if (tag == WP_RAW_TAG_RING)
			break;
		off += 24 + n;
		nr_sec++;
	}
	if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0 ||
	    write(fd, pre, off) != (ssize_t)off)
		abort();
	free(pre);
	wp_raw_out_init(&o, fd);
	o.off = off;
	o.nr_sections = nr_sec;
	wp_raw_sec_begin(&o, WP_RAW_TAG_RING, r->v2 ? 2 : 1,
			 (r->v2 ? 17 * 8 + r->ns * 32 + r->nt * 8 : 14 * 8 + r->ns * 24) +
				 r->np * 16 + r->nst * 8 + r->nw * 4);
	wp_raw_out_u64(&o, r->ns);  /* capacities: the counts themselves */
	wp_raw_out_u64(&o, r->np);
	wp_raw_out_u64(&o, r->nst);
	wp_raw_out_u64(&o, r->nw);
	wp_raw_out_u64(&o, r->window_ns);
	wp_raw_out_u64(&o, r->ns);  /* nr_added */
	wp_raw_out_u64(&o, r->overwritten);
	wp_raw_out_u64(&o, r->dropped_full);
	wp_raw_out_u64(&o, 0);      /* nr_compactions */
	wp_raw_out_u64(&o, 0);      /* head */
	wp_raw_out_u64(&o, r->ns);
	wp_raw_out_u64(&o, r->np);
	wp_raw_out_u64(&o, r->nst);
	wp_raw_out_u64(&o, r->nw);
	if (r->v2) {
		wp_raw_out_u64(&o, r->nt);
		wp_raw_out_u64(&o, r->newest);
		wp_raw_out_u64(&o, 0);
	}
	for (k = 0; k < r->ns; k++) {
		wp_raw_out_bytes(&o, &r->s[k], 24);
		if (r->v2) {
			wp_raw_out_u32(&o, r->count[k]);
			wp_raw_out_u32(&o, r->tickno[k]);
		}
	}
	for (k = 0; r->v2 && k < r->nt; k++)
		wp_raw_out_u64(&o, r->ticks[k]);
	for (k = 0; k < r->np; k++)
		wp_raw_out_bytes(&o, &r->p[k], 16);
	for (k = 0; k < r->nst; k++)
		wp_raw_out_bytes(&o, &r->st[k], 8);
	wp_raw_out_bytes(&o, r->w, r->nw * 4);
	wp_raw_sec_end(&o);
	end_off = o.off;
	wp_raw_sec_begin(&o, WP_RAW_TAG_END, 1, 16);
	wp_raw_out_u64(&o, end_off);
	wp_raw_out_u32(&o, o.nr_sections);
	wp_raw_out_u32(&o, 0);
	wp_raw_sec_end(&o);
	if (wp_raw_out_flush(&o) < 0)
		abort();
	out = slurp_fd(fd, len);
	close(fd);
	if (!out)
		abort();
	return out;
}

/* xorshift64; each test file seeds it with its own constant. */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

#endif
