/* pprof_decode.h: a test-side reader of the pprof files the writer makes:
 * gunzip, then just enough of the protobuf wire format and of
 * profile.proto's messages to check what was written (fixed-size tables:
 * a test profile is small). Independent of output/pb.c on purpose. */
#ifndef WP_TEST_PPROF_DECODE_H
#define WP_TEST_PPROF_DECODE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define PD_MAX 256

struct pd_label {
	uint64_t key, str, num, num_unit;
};
struct pd_sample {
	uint64_t loc[64];
	int nr_loc;
	uint64_t val[4];
	int nr_val;
	struct pd_label lab[8];
	int nr_lab;
};
struct pd_line {
	uint64_t func, line, col;
};
struct pd_location {
	uint64_t id, mapping, address;
	struct pd_line line[8];
	int nr_line;
};
struct pd_function {
	uint64_t id, name, system_name, filename;
};
struct pd_mapping {
	uint64_t id, start, limit, offset, filename, build_id, has[4];
};
struct pd_vt {
	uint64_t type, unit;
};

struct pd_profile {
	char *str[PD_MAX];
	int nr_str;
	struct pd_vt st[4];
	int nr_st;
	struct pd_sample sample[PD_MAX];
	int nr_sample;
	struct pd_location loc[PD_MAX];
	int nr_loc;
	struct pd_function fn[PD_MAX];
	int nr_fn;
	struct pd_mapping map[16];
	int nr_map;
	struct pd_vt period_type;
	uint64_t time_nanos, duration_nanos, period, default_sample_type;
	int nr_time_nanos;
	int bad; /* malformed or over a table's size */
};

struct pd_rd {
	const uint8_t *p, *end;
	int *bad;
};

static uint64_t pd_varint(struct pd_rd *r)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		if (r->p >= r->end) {
			*r->bad = 1;
			return 0;
		}
		v |= (uint64_t)(*r->p & 0x7f) << shift;
		if (!(*r->p++ & 0x80))
			return v;
	}
	*r->bad = 1;
	return 0;
}

/* The next field: 1 with its number, and its value (wire type 0) or its
 * bytes (wire type 2) in `sub`; 0 at the end or on an error. */
static int pd_next(struct pd_rd *r, uint32_t *field, uint64_t *val, struct pd_rd *sub)
{
	uint64_t key, len;

	if (r->p >= r->end || *r->bad)
		return 0;
	key = pd_varint(r);
	*field = (uint32_t)(key >> 3);
	sub->bad = r->bad;
	switch (key & 7) {
	case 0:
		*val = pd_varint(r);
		sub->p = sub->end = NULL;
		return !*r->bad;
	case 2:
		len = pd_varint(r);
		if (*r->bad || len > (uint64_t)(r->end - r->p)) {
			*r->bad = 1;
			return 0;
		}
		sub->p = r->p;
		sub->end = r->p + len;
		r->p += len;
		*val = 0;
		return 1;
	default:
		*r->bad = 1; /* the writer uses no other wire type */
		return 0;
	}
}

/* A repeated varint field, packed (wire 2) or not. */
static void pd_repeated(struct pd_rd *sub, uint64_t val, uint64_t *out, int *n, int cap, int *bad)
{
	if (!sub->p) {
		if (*n < cap)
			out[(*n)++] = val;
		else
			*bad = 1;
		return;
	}
	while (sub->p < sub->end && !*bad) {
		uint64_t v = pd_varint(sub);

		if (*n < cap)
			out[(*n)++] = v;
		else
			*bad = 1;
	}
}

static void pd_vt(struct pd_rd *r, struct pd_vt *vt)
{
	struct pd_rd s;
	uint32_t f;
	uint64_t v;

	memset(vt, 0, sizeof(*vt));
	while (pd_next(r, &f, &v, &s))
		if (f == 1)
			vt->type = v;
		else if (f == 2)
			vt->unit = v;
}

static void pd_sample(struct pd_rd *r, struct pd_sample *smp)
{
	struct pd_rd s, s2;
	uint32_t f, f2;
	uint64_t v, v2;

	memset(smp, 0, sizeof(*smp));
	while (pd_next(r, &f, &v, &s)) {
		if (f == 1) {
			pd_repeated(&s, v, smp->loc, &smp->nr_loc, 64, r->bad);
		} else if (f == 2) {
			pd_repeated(&s, v, smp->val, &smp->nr_val, 4, r->bad);
		} else if (f == 3 && smp->nr_lab < 8) {
			struct pd_label *l = &smp->lab[smp->nr_lab++];

			while (pd_next(&s, &f2, &v2, &s2))
				if (f2 == 1)
					l->key = v2;
				else if (f2 == 2)
					l->str = v2;
				else if (f2 == 3)
					l->num = v2;
				else if (f2 == 4)
					l->num_unit = v2;
		}
	}
}

static void pd_location(struct pd_rd *r, struct pd_location *l)
{
	struct pd_rd s, s2;
	uint32_t f, f2;
	uint64_t v, v2;

	memset(l, 0, sizeof(*l));
	while (pd_next(r, &f, &v, &s)) {
		if (f == 1)
			l->id = v;
		else if (f == 2)
			l->mapping = v;
		else if (f == 3)
			l->address = v;
		else if (f == 4 && l->nr_line < 8) {
			struct pd_line *ln = &l->line[l->nr_line++];

			while (pd_next(&s, &f2, &v2, &s2))
				if (f2 == 1)
					ln->func = v2;
				else if (f2 == 2)
					ln->line = v2;
				else if (f2 == 3)
					ln->col = v2;
		}
	}
}

static void pd_function(struct pd_rd *r, struct pd_function *fn)
{
	struct pd_rd s;
	uint32_t f;
	uint64_t v;

	memset(fn, 0, sizeof(*fn));
	while (pd_next(r, &f, &v, &s))
		if (f == 1)
			fn->id = v;
		else if (f == 2)
			fn->name = v;
		else if (f == 3)
			fn->system_name = v;
		else if (f == 4)
			fn->filename = v;
}

static void pd_mapping(struct pd_rd *r, struct pd_mapping *m)
{
	struct pd_rd s;
	uint32_t f;
	uint64_t v;

	memset(m, 0, sizeof(*m));
	while (pd_next(r, &f, &v, &s))
		if (f == 1)
			m->id = v;
		else if (f == 2)
			m->start = v;
		else if (f == 3)
			m->limit = v;
		else if (f == 4)
			m->offset = v;
		else if (f == 5)
			m->filename = v;
		else if (f == 6)
			m->build_id = v;
		else if (f >= 7 && f <= 10)
			m->has[f - 7] = v;
}

/* Decodes the gzipped profile in `gz`; 0, or -1 (pd->bad set). */
static int pd_decode(const void *gz, size_t gzlen, struct pd_profile *pd)
{
	uint8_t *raw = NULL;
	size_t cap = 1 << 16, len = 0;
	z_stream z;
	struct pd_rd r, s;
	uint32_t f;
	uint64_t v;
	int rc;

	memset(pd, 0, sizeof(*pd));
	memset(&z, 0, sizeof(z));
	if (inflateInit2(&z, 15 + 16) != Z_OK)
		return pd->bad = 1, -1;
	z.next_in = (uint8_t *)gz;
	z.avail_in = (uInt)gzlen;
	do {
		if (!raw || len == cap) {
			uint8_t *n = realloc(raw, raw ? (cap *= 2) : cap);

			if (!n)
				break;
			raw = n;
		}
		z.next_out = raw + len;
		z.avail_out = (uInt)(cap - len);
		rc = inflate(&z, Z_NO_FLUSH);
		len = cap - z.avail_out;
	} while (rc == Z_OK);
	inflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(raw);
		return pd->bad = 1, -1;
	}
	r.p = raw;
	r.end = raw + len;
	r.bad = &pd->bad;
	while (pd_next(&r, &f, &v, &s)) {
		switch (f) {
		case 1:
			if (pd->nr_st < 4)
				pd_vt(&s, &pd->st[pd->nr_st++]);
			break;
		case 2:
			if (pd->nr_sample < PD_MAX)
				pd_sample(&s, &pd->sample[pd->nr_sample++]);
			else
				pd->bad = 1;
			break;
		case 3:
			if (pd->nr_map < 16)
				pd_mapping(&s, &pd->map[pd->nr_map++]);
			break;
		case 4:
			if (pd->nr_loc < PD_MAX)
				pd_location(&s, &pd->loc[pd->nr_loc++]);
			break;
		case 5:
			if (pd->nr_fn < PD_MAX)
				pd_function(&s, &pd->fn[pd->nr_fn++]);
			break;
		case 6:
			if (pd->nr_str < PD_MAX) {
				pd->str[pd->nr_str] =
					strndup((const char *)s.p, (size_t)(s.end - s.p));
				pd->nr_str++;
			} else {
				pd->bad = 1;
			}
			break;
		case 9:
			pd->time_nanos = v;
			pd->nr_time_nanos++;
			break;
		case 10:
			pd->duration_nanos = v;
			break;
		case 11:
			pd_vt(&s, &pd->period_type);
			break;
		case 12:
			pd->period = v;
			break;
		case 14:
			pd->default_sample_type = v;
			break;
		}
	}
	free(raw);
	return pd->bad ? -1 : 0;
}

static void pd_free(struct pd_profile *pd)
{
	for (int i = 0; i < pd->nr_str; i++)
		free(pd->str[i]);
	pd->nr_str = 0;
}

/* String `i` of the table, "?" when out of range. */
static const char *pd_s(const struct pd_profile *pd, uint64_t i)
{
	return i < (uint64_t)pd->nr_str && pd->str[i] ? pd->str[i] : "?";
}

#endif
