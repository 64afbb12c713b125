/* pb: the few pieces of the protocol-buffers wire format that the pprof
 * writer needs (varints, length-delimited fields, packed repeated varints),
 * appended to a growing memory buffer. No schema, no decoding: the caller
 * writes its fields in order, a nested message being encoded into a buffer
 * of its own first and then appended as one length-delimited field.
 *
 * Out of memory is sticky: the first failed growth sets `failed`, every
 * later call does nothing, and the caller checks `failed` once at the end.
 * Not async-signal-safe; one thread per buffer. */
#ifndef WP_PB_H
#define WP_PB_H

#include <stddef.h>
#include <stdint.h>

struct wp_pb {
	uint8_t *data; /* malloc'd; NULL until the first byte */
	size_t len;
	size_t cap;
	int failed;    /* an allocation failed: the content is incomplete */
};

/* Empties `b` for reuse, keeping its memory (and clearing `failed`). */
void wp_pb_reset(struct wp_pb *b);

/* Frees the memory of `b` and empties it. Idempotent. */
void wp_pb_free(struct wp_pb *b);

/* Field `field` as a varint (wire type 0): int32/int64/uint64/bool. A
 * negative int64 is passed as its two's-complement uint64 (ten bytes), as
 * protobuf does for int64. */
void wp_pb_varint(struct wp_pb *b, uint32_t field, uint64_t v);

/* wp_pb_varint, left out when `v` is 0 (proto3's default). */
void wp_pb_varint_nz(struct wp_pb *b, uint32_t field, uint64_t v);

/* Field `field` as `len` bytes (wire type 2): string, bytes, or an
 * embedded message already encoded. */
void wp_pb_bytes(struct wp_pb *b, uint32_t field, const void *data, size_t len);

/* Field `field` as the message encoded in `sub` (which is left as it is). */
void wp_pb_msg(struct wp_pb *b, uint32_t field, const struct wp_pb *sub);

/* Field `field` as a packed repeated varint of `n` values (nothing when n
 * is 0). */
void wp_pb_packed(struct wp_pb *b, uint32_t field, const uint64_t *v, size_t n);

#endif
