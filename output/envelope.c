/* envelope: a Sentry profile or chunk in its envelope, in memory
 * (envelope.h). The payload is written first, through the Sentry writer
 * into memory (wp_format_write_mem), since its header gives its length;
 * headers and the transaction event are small jansson objects. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "envelope.h"
#include "jw.h"

/* Appends `v` as one compact line of JSON (released); NULL is out of memory. */
static void put_line(struct wp_out_sink *s, json_t *v, const char *what)
{
	char *text = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(16)) : NULL;

	json_decref(v);
	if (!text) {
		wp_sink_oom(s, what);
		return;
	}
	wp_sink_write(s, text, strlen(text));
	wp_sink_write(s, "\n", 1);
	free(text);
}

/* One item: its header, `{"type":type[,"platform":platform],"length":len}`,
 * then the payload and a newline. */
static void put_item(struct wp_out_sink *s, const char *type, const char *platform,
		     const char *data, size_t len)
{
	json_t *h = json_object();
	int bad = wp_jset(h, "type", json_string(type));

	if (platform)
		bad |= wp_jset(h, "platform", wp_jstr(platform));
	bad |= wp_jset(h, "length", json_integer((json_int_t)len));
	if (bad) {
		json_decref(h);
		h = NULL;
	}
	put_line(s, h, "the envelope");
	wp_sink_write(s, data, len);
	wp_sink_write(s, "\n", 1);
}

/* The envelope header: event_id when given, sdk. No sent_at (it is
 * optional): an envelope may wait in the spool for hours, and Relay would
 * take the time it was built for the time it was sent and shift its
 * timestamps by the difference. */
static json_t *env_header(const char *event_id)
{
	json_t *h = json_object();
	int bad = 0;

	if (event_id)
		bad |= wp_jset(h, "event_id", json_string(event_id));
	bad |= wp_jset(h, "sdk", wp_jsdk());
	if (bad) {
		json_decref(h);
		return NULL;
	}
	return h;
}

/* The platform the Sentry writer puts in the payload (sentry_model.c). */
static const char *platform_of(const struct wp_model *m, const struct wp_format_opts *o)
{
	if (o->platform)
		return o->platform;
	return m->platform ? m->platform : "native";
}

/* The Sentry payload of `m` with options `o`, in memory, without the
 * writer's final newline. Returns 0 or -1 (err set). */
static int payload(const struct wp_model *m, const struct wp_format_opts *o, char **data,
		   size_t *len, struct wp_out_stats *st, char *err, size_t errlen)
{
	if (wp_format_write_mem(wp_format_find("sentry"), m, o, data, len, st, err, errlen) < 0)
		return -1;
	while (*len > 0 && (*data)[*len - 1] == '\n')
		(*data)[--*len] = 0;
	return 0;
}

/* Hands the built envelope over, or frees it after a failure. */
static int finish(struct wp_out_sink *s, char **out, size_t *len, struct wp_out_stats *st)
{
	if (wp_sink_mem_take(s, out, len) < 0) {
		if (s->err && s->errlen && !s->err[0])
			snprintf(s->err, s->errlen, "cannot build the Sentry envelope");
		return -1;
	}
	if (st)
		st->bytes = *len;
	return 0;
}

static double seconds(int64_t ns)
{
	return (double)(ns / 1000000000) + (double)(ns % 1000000000) / 1e9;
}

/* The transaction event the profile belongs to (envelope.h). */
static json_t *txn_event(const struct wp_model *m, const struct wp_format_opts *o,
			 const struct wp_out_stats *st)
{
	json_t *e = json_object(), *trace = json_object(), *ctx = json_object();
	char *name = wp_out_sentry_txn_name(&m->p, o->no_args);
	int bad = !name;

	bad |= wp_jset(trace, "trace_id", json_string(o->trace_id));
	bad |= wp_jset(trace, "span_id", json_string(o->segment_id));
	bad |= wp_jset(trace, "op", json_string("process"));
	bad |= wp_jset(ctx, "trace", trace);
	bad |= wp_jset(e, "type", json_string("transaction"));
	bad |= wp_jset(e, "event_id", json_string(o->transaction_id));
	bad |= wp_jset(e, "transaction", wp_jstr(name));
	bad |= wp_jset(e, "start_timestamp", json_real(seconds(st->first_unix_ns)));
	bad |= wp_jset(e, "timestamp", json_real(seconds(st->last_unix_ns)));
	bad |= wp_jset(e, "contexts", ctx);
	bad |= wp_jset(e, "platform", wp_jstr(platform_of(m, o)));
	bad |= wp_jset(e, "sdk", wp_jsdk());
	if (o->release)
		bad |= wp_jset(e, "release", wp_jstr(o->release));
	if (o->environment)
		bad |= wp_jset(e, "environment", wp_jstr(o->environment));
	free(name);
	if (bad) {
		json_decref(e);
		return NULL;
	}
	return e;
}

int wp_envelope_profile(const struct wp_model *m, const struct wp_format_opts *o, char **out,
			size_t *len, struct wp_out_stats *st, char *err, size_t errlen)
{
	static const struct wp_format_opts none;
	struct wp_format_opts po = o ? *o : none;
	struct wp_out_stats local;
	struct wp_out_sink s;
	char txn[33], trace[33], span[17];
	char *data, *text;
	size_t dlen;
	json_t *ev;

	*out = NULL;
	*len = 0;
	if (!st)
		st = &local;
	/* One set of ids for the profile, the event and the envelope. */
	po.chunk = 0;
	if (!po.transaction_id) {
		wp_random_hex(txn, 16, 1);
		po.transaction_id = txn;
	}
	if (!po.trace_id) {
		wp_random_hex(trace, 16, 1);
		po.trace_id = trace;
	}
	if (!po.segment_id) {
		wp_random_hex(span, 8, 0);
		po.segment_id = span;
	}
	if (payload(m, &po, &data, &dlen, st, err, errlen) < 0)
		return -1;
	if (st->nr_samples == 0) {
		if (err && errlen)
			snprintf(err, errlen, "no samples for a Sentry profile");
		free(data);
		return -1;
	}
	wp_sink_mem_open(&s, err, errlen);
	put_line(&s, env_header(po.transaction_id), "the envelope");
	ev = txn_event(m, &po, st);
	text = ev ? json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(16)) : NULL;
	json_decref(ev);
	if (!text)
		wp_sink_oom(&s, "the transaction event");
	else
		put_item(&s, "transaction", NULL, text, strlen(text));
	free(text);
	put_item(&s, "profile", platform_of(m, &po), data, dlen);
	free(data);
	return finish(&s, out, len, st);
}

int wp_envelope_chunk(const struct wp_model *m, const struct wp_format_opts *o, char **out,
		      size_t *len, struct wp_out_stats *st, char *err, size_t errlen)
{
	static const struct wp_format_opts none;
	struct wp_format_opts co = o ? *o : none;
	struct wp_out_sink s;
	char *data;
	size_t dlen;

	*out = NULL;
	*len = 0;
	co.chunk = 1;
	if (payload(m, &co, &data, &dlen, st, err, errlen) < 0)
		return -1;
	wp_sink_mem_open(&s, err, errlen);
	put_line(&s, env_header(NULL), "the envelope");
	put_item(&s, "profile_chunk", platform_of(m, &co), data, dlen);
	free(data);
	return finish(&s, out, len, st);
}
