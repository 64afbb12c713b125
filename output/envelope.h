/* envelope: what an upload to Sentry sends, built in memory from a model
 * (docs/FORMATS.md, "Sentry envelopes"). Each item is one line of JSON
 * header with the payload's `length` in bytes, the payload, and a newline:
 *
 *   wp_envelope_profile  {"event_id","sdk"}  (no sent_at: see envelope.c)
 *                        {"type":"transaction","length"}  a transaction event
 *                        {"type":"profile","platform","length"}  the v1 profile
 *   wp_envelope_chunk    {"sdk"}
 *                        {"type":"profile_chunk","platform","length"}  a v2 chunk
 *
 * Not async-signal-safe. */
#ifndef WP_ENVELOPE_H
#define WP_ENVELOPE_H

#include <stddef.h>

#include "formats.h"

/* A v1 profile (formats.h's Sentry options in `o`, which may be NULL; its
 * chunk flag is ignored) with the transaction event it belongs to, which
 * Relay requires in the same envelope: named as the profile's transaction
 * (wp_out_sentry_txn_name), from the first sample to the last, with
 * o->transaction_id, o->trace_id and o->segment_id (random when NULL) as
 * its event_id, trace_id and span_id, which the profile's transaction and
 * the envelope header carry too. `*out` gets the envelope, malloc'd, `*len`
 * bytes long (plus a NUL it does not count); `st` (may be NULL) the
 * profile's stats, `bytes` the envelope's. A profile over Sentry's 30 s is
 * built all the same (st->duration_s says it). Returns 0, or -1 with a
 * one-line reason in `err` (a profile without samples is refused) and
 * `*out` NULL. */
int wp_envelope_profile(const struct wp_model *m, const struct wp_format_opts *o, char **out,
			size_t *len, struct wp_out_stats *st, char *err, size_t errlen);

/* A v2 profile chunk (o->chunk need not be set) alone in its envelope. The
 * chunk keeps only the threads with 2 or more samples with a stack; none
 * left gives -1 with an `err` that begins with WP_OUT_TOO_FEW (output.h),
 * for the caller to skip the chunk; samples spanning more than
 * WP_SENTRY_CHUNK_MAX_SECONDS give -1 too. Otherwise as above. */
int wp_envelope_chunk(const struct wp_model *m, const struct wp_format_opts *o, char **out,
		      size_t *len, struct wp_out_stats *st, char *err, size_t errlen);

#endif
