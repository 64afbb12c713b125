/* raw (writer): the building blocks of the raw dump a dying process writes
 * from a fatal-signal handler: the section checksum and the buffered,
 * section-framing writer. Everything here is async-signal-safe: no
 * allocation, no stdio, no locks; only write(2) (a raw system call: in the
 * preloaded library, libc's name would reach our own wrapper) and memcpy on
 * caller memory. The layout is documented in raw.h; the runtime composes
 * the whole dump (preload/raw_dump.c, the ring's section in
 * preload/ring.c); the reader is raw_read.c. */
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "raw.h"
#include "sys.h"

#ifdef WP_TEST_HOOKS
int wp_raw_fail_write_at;
#endif

/* ---- checksum ---------------------------------------------------------- */

/* async-signal-safe */
static uint64_t rotl64(uint64_t x, unsigned r)
{
	return (x << r) | (x >> (64 - r));
}

/* Each step is a bijection of h for a fixed word and of the word for a
 * fixed h, so a change confined to one word always changes the result.
 * async-signal-safe */
static void sum_word(struct wp_raw_sum *s, uint64_t w)
{
	s->h = rotl64(s->h ^ (w * 0x9e3779b97f4a7c15ull), 29) * 0xbf58476d1ce4e5b9ull +
	       0x94d049bb133111ebull;
}

/* async-signal-safe */
void wp_raw_sum_init(struct wp_raw_sum *s)
{
	s->h = 0x6a09e667f3bcc908ull;
	s->acc = 0;
	s->total = 0;
	s->nacc = 0;
}

/* async-signal-safe */
void wp_raw_sum_update(struct wp_raw_sum *s, const void *p, size_t n)
{
	const unsigned char *b = p;

	s->total += n;
	while (n > 0 && s->nacc != 0) {
		s->acc |= (uint64_t)*b++ << (8 * s->nacc);
		n--;
		if (++s->nacc == 8) {
			sum_word(s, s->acc);
			s->acc = 0;
			s->nacc = 0;
		}
	}
	while (n >= 8) {
		uint64_t w;

		memcpy(&w, b, 8);
		sum_word(s, w);
		b += 8;
		n -= 8;
	}
	while (n > 0) {
		s->acc |= (uint64_t)*b++ << (8 * s->nacc++);
		n--;
	}
}

/* async-signal-safe */
uint64_t wp_raw_sum_final(const struct wp_raw_sum *s)
{
	struct wp_raw_sum t = *s;
	uint64_t h;

	if (t.nacc)
		sum_word(&t, t.acc);
	h = t.h ^ t.total;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

/* async-signal-safe */
uint64_t wp_raw_checksum(const void *p, size_t n)
{
	struct wp_raw_sum s;

	wp_raw_sum_init(&s);
	wp_raw_sum_update(&s, p, n);
	return wp_raw_sum_final(&s);
}

/* ---- buffered, section-framing writer ----------------------------------- */

/* async-signal-safe */
static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t w;

#ifdef WP_TEST_HOOKS
		if (wp_raw_fail_write_at > 0 && --wp_raw_fail_write_at == 0) {
			errno = ENOSPC;
			return -1;
		}
#endif
		w = wp_syscall(SYS_write, fd, p, n);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else {
			return -1;
		}
	}
	return 0;
}

/* Adds the bytes buffered since the last call to the open section's sum.
 * async-signal-safe */
static void settle(struct wp_raw_out *o)
{
	if (o->in_section)
		wp_raw_sum_update(&o->sum, o->buf + o->sum_from, o->len - o->sum_from);
	o->sum_from = o->len;
}

/* async-signal-safe */
static void drain(struct wp_raw_out *o)
{
	settle(o);
	if (o->len && write_all(o->fd, o->buf, o->len) < 0)
		o->failed = 1;
	o->len = 0;
	o->sum_from = 0;
}

/* async-signal-safe */
static void put(struct wp_raw_out *o, const void *p, size_t n)
{
	const unsigned char *s = p;

	while (n > 0 && !o->failed) {
		size_t room = sizeof(o->buf) - o->len, c = n < room ? n : room;

		memcpy(o->buf + o->len, s, c);
		o->len += c;
		o->off += c;
		s += c;
		n -= c;
		if (o->len == sizeof(o->buf))
			drain(o);
	}
}

/* Accounts `n` payload bytes against the open section.
 * async-signal-safe */
static int take(struct wp_raw_out *o, size_t n)
{
	if (o->failed)
		return -1;
	if (o->in_section) {
		if (n > o->sec_left) {
			o->failed = 1;
			return -1;
		}
		o->sec_left -= n;
	}
	return 0;
}

/* async-signal-safe */
void wp_raw_out_init(struct wp_raw_out *o, int fd)
{
	o->fd = fd;
	o->failed = fd < 0;
	o->off = 0;
	o->nr_sections = 0;
	o->in_section = 0;
	o->sec_left = 0;
	wp_raw_sum_init(&o->sum);
	o->len = 0;
	o->sum_from = 0;
}

/* async-signal-safe */
void wp_raw_out_bytes(struct wp_raw_out *o, const void *p, size_t n)
{
	if (take(o, n) == 0)
		put(o, p, n);
}

static const unsigned char zeros[64];

/* async-signal-safe */
void wp_raw_out_zeros(struct wp_raw_out *o, size_t n)
{
	if (take(o, n) < 0)
		return;
	while (n > 0 && !o->failed) {
		size_t c = n < sizeof(zeros) ? n : sizeof(zeros);

		put(o, zeros, c);
		n -= c;
	}
}

/* async-signal-safe */
void wp_raw_out_u32(struct wp_raw_out *o, uint32_t v)
{
	wp_raw_out_bytes(o, &v, sizeof(v));
}

/* async-signal-safe */
void wp_raw_out_u64(struct wp_raw_out *o, uint64_t v)
{
	wp_raw_out_bytes(o, &v, sizeof(v));
}

/* async-signal-safe */
void wp_raw_sec_begin(struct wp_raw_out *o, uint32_t tag, uint32_t version, uint64_t payload_len)
{
	if (o->failed)
		return;
	if (o->in_section) {
		o->failed = 1;
		return;
	}
	settle(o);
	o->in_section = 1;
	o->sec_left = payload_len;
	wp_raw_sum_init(&o->sum);
	put(o, &tag, sizeof(tag));
	put(o, &version, sizeof(version));
	put(o, &payload_len, sizeof(payload_len));
}

/* async-signal-safe */
void wp_raw_sec_end(struct wp_raw_out *o)
{
	uint64_t sum;

	if (o->failed)
		return;
	if (!o->in_section) {
		o->failed = 1;
		return;
	}
	while (o->sec_left > 0 && !o->failed) {
		size_t c = o->sec_left < sizeof(zeros) ? (size_t)o->sec_left : sizeof(zeros);

		o->sec_left -= c;
		put(o, zeros, c);
	}
	settle(o);
	o->in_section = 0;
	sum = wp_raw_sum_final(&o->sum);
	put(o, &sum, sizeof(sum));
	o->nr_sections++;
}

/* async-signal-safe */
int wp_raw_out_flush(struct wp_raw_out *o)
{
	if (!o->failed)
		drain(o);
	return o->failed ? -1 : 0;
}
