/* pb: protocol-buffers wire encoding into a memory buffer (pb.h). */
#include <stdlib.h>
#include <string.h>

#include "pb.h"

#define WIRE_VARINT 0u
#define WIRE_LEN 2u

void wp_pb_reset(struct wp_pb *b)
{
	b->len = 0;
	b->failed = 0;
}

void wp_pb_free(struct wp_pb *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* Room for `n` more bytes; 0, or -1 with `failed` set. */
static int reserve(struct wp_pb *b, size_t n)
{
	size_t cap;
	uint8_t *d;

	if (b->failed)
		return -1;
	if (n <= b->cap - b->len)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap - b->len < n) {
		if (cap > SIZE_MAX / 2) {
			b->failed = 1;
			return -1;
		}
		cap *= 2;
	}
	d = realloc(b->data, cap);
	if (!d) {
		b->failed = 1;
		return -1;
	}
	b->data = d;
	b->cap = cap;
	return 0;
}

static void put_varint(struct wp_pb *b, uint64_t v)
{
	if (reserve(b, 10) < 0)
		return;
	while (v >= 0x80) {
		b->data[b->len++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	b->data[b->len++] = (uint8_t)v;
}

static void put_key(struct wp_pb *b, uint32_t field, uint32_t wire)
{
	put_varint(b, ((uint64_t)field << 3) | wire);
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void wp_pb_varint(struct wp_pb *b, uint32_t field, uint64_t v)
{
	put_key(b, field, WIRE_VARINT);
	put_varint(b, v);
}

void wp_pb_varint_nz(struct wp_pb *b, uint32_t field, uint64_t v)
{
	if (v)
		wp_pb_varint(b, field, v);
}

void wp_pb_bytes(struct wp_pb *b, uint32_t field, const void *data, size_t len)
{
	put_key(b, field, WIRE_LEN);
	put_varint(b, len);
	if (len == 0 || reserve(b, len) < 0)
		return;
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

void wp_pb_msg(struct wp_pb *b, uint32_t field, const struct wp_pb *sub)
{
	if (sub->failed) {
		b->failed = 1;
		return;
	}
	wp_pb_bytes(b, field, sub->data, sub->len);
}

void wp_pb_packed(struct wp_pb *b, uint32_t field, const uint64_t *v, size_t n)
{
	size_t len = 0;

	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		len += varint_len(v[i]);
	put_key(b, field, WIRE_LEN);
	put_varint(b, len);
	for (size_t i = 0; i < n; i++)
		put_varint(b, v[i]);
}
