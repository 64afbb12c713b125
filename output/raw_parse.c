/* raw (parser): the first step of the reader (raw_read.c): a raw dump's
 * file header and sections (layout in raw.h), each checked (length,
 * checksum, version, the end marker) and parsed into struct wp_raw_dump,
 * which points into the dump's bytes. Every count is backed by the bytes
 * present before anything is allocated or looped over (raw_read.c states
 * the bounds this gives). Not async-signal-safe. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raw_parse.h"

#define RING_HEAD_BYTES (14 * 8) /* v1; v2 adds 3 words */
#define META_FIXED 56 /* version 1; version 2 adds u64 ring_bytes */
#define MODL_FIXED 104

void wp_raw_set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* A tag for messages: its four bytes, non-printable ones as '?'. */
static const char *tag_name(uint32_t tag, char out[5])
{
	int i;

	for (i = 0; i < 4; i++) {
		unsigned char c = (unsigned char)(tag >> (8 * i));

		out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	out[4] = 0;
	return out;
}

/* A cursor over one section's payload; lengths are checked by the caller
 * before each fixed-size run of reads. */
struct cur {
	const unsigned char *p;
	size_t left;
};

static uint32_t rd32(struct cur *c)
{
	uint32_t v = 0;

	if (c->left >= 4) {
		memcpy(&v, c->p, 4);
		c->p += 4;
		c->left -= 4;
	}
	return v;
}

static uint64_t rd64(struct cur *c)
{
	uint64_t v = 0;

	if (c->left >= 8) {
		memcpy(&v, c->p, 8);
		c->p += 8;
		c->left -= 8;
	}
	return v;
}

static const unsigned char *rdbytes(struct cur *c, size_t n)
{
	const unsigned char *p = c->p;

	if (c->left < n)
		return NULL;
	c->p += n;
	c->left -= n;
	return p;
}

char *wp_raw_dup_bytes(const unsigned char *p, size_t n)
{
	char *s = malloc(n + 1);

	if (s) {
		memcpy(s, p, n);
		s[n] = 0;
	}
	return s;
}

void wp_raw_dump_free(struct wp_raw_dump *d)
{
	size_t i;

	for (i = 0; i < d->nr_mods; i++)
		free(d->mods[i].path);
	free(d->mods);
}

enum { OK = 0, BAD = -1, NOMEM = -2 };

static int parse_meta(struct wp_raw_dump *d, struct cur *c)
{
	uint32_t clen;

	if (c->left < (d->meta_version == 2 ? META_FIXED + 8 : META_FIXED))
		return BAD;
	d->pid = rd32(c);
	d->main_tid = rd32(c);
	d->hz = rd32(c);
	d->ring_seconds = rd32(c);
	d->max_depth = rd32(c);
	d->signal = (int)rd32(c);
	d->rt_offset = (int64_t)rd64(c);
	d->start_ns = rd64(c);
	d->dump_ns = rd64(c);
	clen = rd32(c);
	d->snapshot = rd32(c); /* 0 in version 1 */
	if (d->meta_version == 2)
		d->ring_bytes = rd64(c);
	if (clen >= sizeof(((struct wp_raw_meta *)0)->cmdline) || c->left != clen)
		return BAD;
	d->cmdline = rdbytes(c, clen);
	d->cmdline_len = clen;
	return OK;
}

static int parse_run(struct wp_raw_dump *d, struct cur *c)
{
	if (c->left != 40)
		return BAD;
	memcpy(d->profiler_id, rdbytes(c, 16), 16);
	d->chunk = rd32(c);
	d->run_flags = rd32(c);
	d->chunk_from_ns = rd64(c);
	d->chunk_to_ns = rd64(c);
	if (d->chunk && d->chunk_to_ns < d->chunk_from_ns)
		return BAD;
	return OK;
}

static int parse_ctrs(struct wp_raw_dump *d, struct cur *c)
{
	uint64_t v[sizeof(struct wp_counters) / 8];
	uint32_t n, i;

	if (c->left < 8)
		return BAD;
	n = rd32(c);
	rd32(c);
	if (c->left / 8 != n || c->left % 8)
		return BAD;
	memset(v, 0, sizeof(v));
	for (i = 0; i < n; i++) {
		uint64_t x = rd64(c);

		if (i < sizeof(v) / 8)
			v[i] = x;
	}
	memcpy(&d->ctr, v, sizeof(v));
	return OK;
}

static int parse_modl(struct wp_raw_dump *d, struct cur *c)
{
	struct wp_module m;
	uint32_t plen;

	if (c->left < MODL_FIXED)
		return BAD;
	if (d->nr_mods >= WP_RAW_MAX_MODULES)
		return BAD;
	memset(&m, 0, sizeof(m));
	m.bias = rd64(c);
	m.start = rd64(c);
	m.end = rd64(c);
	m.flags = rd32(c);
	m.build_id_len = rd32(c);
	plen = rd32(c);
	rd32(c);
	if (m.build_id_len > WP_BUILD_ID_MAX || plen >= WP_RAW_PATH_MAX ||
	    c->left != WP_BUILD_ID_MAX + (size_t)plen)
		return BAD;
	memcpy(m.build_id, rdbytes(c, WP_BUILD_ID_MAX), WP_BUILD_ID_MAX);
	if (d->nr_mods == d->cap_mods) {
		size_t cap = d->cap_mods ? d->cap_mods * 2 : 64;
		struct wp_module *n = realloc(d->mods, cap * sizeof(*n));

		if (!n)
			return NOMEM;
		d->mods = n;
		d->cap_mods = cap;
	}
	m.path = wp_raw_dup_bytes(rdbytes(c, plen), plen);
	if (!m.path)
		return NOMEM;
	d->mods[d->nr_mods++] = m;
	return OK;
}

static int parse_thrd(struct wp_raw_dump *d, struct cur *c)
{
	uint32_t n;

	if (c->left < 8)
		return BAD;
	n = rd32(c);
	rd32(c);
	if (n > WP_RAW_MAX_THREADS || c->left != (size_t)n * WP_RAW_THREAD_BYTES)
		return BAD;
	d->threads = rdbytes(c, c->left);
	d->nr_threads = n;
	return OK;
}

static int parse_ring(struct wp_raw_dump *d, struct cur *c)
{
	uint64_t cap_samples, cap_pcs, cap_stacks, cap_words, ns, np, nst, nw, nt = 0;
	size_t left, rb = d->ring_version == 2 ? 32 : 24;

	if (c->left < RING_HEAD_BYTES + (d->ring_version == 2 ? 24 : 0))
		return BAD;
	cap_samples = rd64(c);
	d->ring_cap = cap_samples;
	cap_pcs = rd64(c);
	cap_stacks = rd64(c);
	cap_words = rd64(c);
	d->window_ns = rd64(c);
	rd64(c); /* nr_added */
	d->overwritten = rd64(c);
	d->dropped_full = rd64(c);
	rd64(c); /* nr_compactions */
	rd64(c); /* head: the samples are already in ring order */
	ns = rd64(c);
	np = rd64(c);
	nst = rd64(c);
	nw = rd64(c);
	if (d->ring_version == 2) {
		uint64_t newest;

		nt = rd64(c);
		newest = rd64(c);
		if (rd64(c) != 0 || nt > WP_RAW_MAX_TICKS || newest > UINT32_MAX)
			return BAD;
		d->tick_newest = (uint32_t)newest;
	}
	left = c->left;
	if (ns > cap_samples || np > cap_pcs || nst > cap_stacks || nw > cap_words)
		return BAD;
	/* Each count is bounded by the payload before anything is multiplied. */
	if (ns > left / rb || nt > left / 8 || np > left / 16 || nst > left / 8 || nw > left / 4 ||
	    ns * rb + nt * 8 + np * 16 + nst * 8 + nw * 4 != left)
		return BAD;
	d->rec_bytes = rb;
	d->samples = rdbytes(c, ns * rb);
	d->ticks = nt ? rdbytes(c, nt * 8) : NULL;
	d->nticks = nt;
	d->pcs = rdbytes(c, np * 16);
	d->stacks = rdbytes(c, nst * 8);
	d->words = rdbytes(c, nw * 4);
	d->ns = ns;
	d->np = np;
	d->nst = nst;
	d->nw = nw;
	return OK;
}

static int known(uint32_t tag)
{
	return tag == WP_RAW_TAG_META || tag == WP_RAW_TAG_CTRS || tag == WP_RAW_TAG_MODL ||
	       tag == WP_RAW_TAG_THRD || tag == WP_RAW_TAG_RING || tag == WP_RAW_TAG_RUN;
}

/* The "seen" flag of a section that must appear exactly once, else NULL. */
static int *seen_flag(struct wp_raw_dump *d, uint32_t tag)
{
	if (tag == WP_RAW_TAG_META)
		return &d->have_meta;
	if (tag == WP_RAW_TAG_CTRS)
		return &d->have_ctrs;
	if (tag == WP_RAW_TAG_THRD)
		return &d->have_thrd;
	if (tag == WP_RAW_TAG_RING)
		return &d->have_ring;
	if (tag == WP_RAW_TAG_RUN)
		return &d->have_run;
	return NULL;
}

static int parse_section(struct wp_raw_dump *d, uint32_t tag, struct cur *c)
{
	if (tag == WP_RAW_TAG_META)
		return parse_meta(d, c);
	if (tag == WP_RAW_TAG_CTRS)
		return parse_ctrs(d, c);
	if (tag == WP_RAW_TAG_THRD)
		return parse_thrd(d, c);
	if (tag == WP_RAW_TAG_RING)
		return parse_ring(d, c);
	if (tag == WP_RAW_TAG_RUN)
		return parse_run(d, c);
	return parse_modl(d, c);
}

int wp_raw_check_header(const unsigned char *data, size_t len, char *err, size_t errlen)
{
	uint32_t v;

	if (len < 8 || memcmp(data, WP_RAW_MAGIC, 8) != 0) {
		wp_raw_set_err(err, errlen, "not a wallprof raw dump (bad magic)");
		return BAD;
	}
	if (len < 16) {
		wp_raw_set_err(err, errlen, "truncated in the file header (%zu bytes)", len);
		return BAD;
	}
	memcpy(&v, data + 8, 4);
	if (v != WP_RAW_VERSION) {
		wp_raw_set_err(err, errlen,
			       "unsupported raw dump version %u (this reader knows %u)", v,
			       WP_RAW_VERSION);
		return BAD;
	}
	memcpy(&v, data + 12, 4);
	if (v != WP_RAW_BYTE_ORDER) {
		wp_raw_set_err(err, errlen, "raw dump of another byte order (mark 0x%08x)", v);
		return BAD;
	}
	return OK;
}

int wp_raw_parse(struct wp_raw_dump *d, const unsigned char *data, size_t len, char *err,
		 size_t errlen)
{
	size_t off = 16;
	uint32_t nr_sections = 0;
	char tn[5];

	if (wp_raw_check_header(data, len, err, errlen) != OK)
		return BAD;
	for (;;) {
		uint32_t tag, ver;
		uint64_t plen, sum;
		struct cur c;
		int rc, *seen = NULL;

		if (len - off < 16) {
			wp_raw_set_err(err, errlen,
				       "truncated: %s at byte %zu (the dump was cut short)",
				       off == len ? "no end marker" : "section header cut", off);
			return BAD;
		}
		memcpy(&tag, data + off, 4);
		memcpy(&ver, data + off + 4, 4);
		memcpy(&plen, data + off + 8, 8);
		tag_name(tag, tn);
		if (plen > len - off - 16 || len - off - 16 - plen < 8) {
			wp_raw_set_err(
				err, errlen,
				"truncated: section '%s' at byte %zu needs %llu bytes, %zu left",
				tn, off, (unsigned long long)plen + 24, len - off);
			return BAD;
		}
		memcpy(&sum, data + off + 16 + plen, 8);
		if (wp_raw_checksum(data + off, 16 + plen) != sum) {
			wp_raw_set_err(err, errlen,
				       "corrupt: checksum mismatch in section '%s' at byte %zu", tn,
				       off);
			return BAD;
		}
		c.p = data + off + 16;
		c.left = plen;
		if (tag == WP_RAW_TAG_END) {
			uint64_t at = rd64(&c);
			uint32_t n = rd32(&c);

			if (ver != 1 || plen != 16 || at != off || n != nr_sections) {
				wp_raw_set_err(err, errlen, "corrupt: bad end marker at byte %zu",
					       off);
				return BAD;
			}
			off += 24 + plen;
			if (off != len) {
				wp_raw_set_err(err, errlen,
					       "corrupt: %zu bytes after the end marker",
					       len - off);
				return BAD;
			}
			break;
		}
		if (!known(tag)) {
			/* a later version's addition: skipped */
			off += 24 + plen;
			nr_sections++;
			continue;
		}
		seen = seen_flag(d, tag);
		if (ver != 1 && !((tag == WP_RAW_TAG_META || tag == WP_RAW_TAG_RING) && ver == 2)) {
			wp_raw_set_err(err, errlen, "unsupported version %u of section '%s'", ver,
				       tn);
			return BAD;
		}
		if (tag == WP_RAW_TAG_META)
			d->meta_version = ver;
		if (tag == WP_RAW_TAG_RING)
			d->ring_version = ver;
		if (seen && *seen) {
			wp_raw_set_err(err, errlen, "corrupt: section '%s' twice (byte %zu)", tn,
				       off);
			return BAD;
		}
		rc = parse_section(d, tag, &c);
		if (rc == NOMEM) {
			wp_raw_set_err(err, errlen, "out of memory");
			return BAD;
		}
		if (rc != OK) {
			wp_raw_set_err(err, errlen,
				       "corrupt: section '%s' at byte %zu is malformed", tn, off);
			return BAD;
		}
		if (seen)
			*seen = 1;
		off += 24 + plen;
		nr_sections++;
	}
	if (!d->have_meta || !d->have_ctrs || !d->have_thrd || !d->have_ring) {
		wp_raw_set_err(err, errlen, "corrupt: missing section '%s'",
			       !d->have_meta   ? "META"
			       : !d->have_ctrs ? "CTRS"
			       : !d->have_thrd ? "THRD"
					       : "RING");
		return BAD;
	}
	return OK;
}
