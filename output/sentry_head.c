/* sentry_head: the parts of a Sentry document around its profile
 * (sentry_int.h): the head of a v1 profile or a v2 chunk, the wallprof
 * section that ends a v1 profile, and the options' ids. */
#include <gnu/libc-version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "sentry_int.h"

/* The id `given`, or a random one (`nbytes` bytes; uuid: a v4 UUID). */
static json_t *jid(const char *given, size_t nbytes, int uuid)
{
	return given ? json_string(given) : wp_jrandom_hex(nbytes, uuid);
}

/* `"key":{"name":...,"version":...}` for a name and version of ours. */
static int write_sdk(struct wp_jw *w, const char *key)
{
	wp_jw_member(w, key, wp_jsdk(), 0);
	return w->failed ? -1 : 0;
}

/* platform, and release and environment when set. */
static void write_where(struct wp_jw *w, const struct wp_out_opts *opts)
{
	wp_jw_member(w, "platform", wp_jstr(opts->platform ? opts->platform : "native"), 0);
	if (opts->release)
		wp_jw_member(w, "release", wp_jstr(opts->release), 0);
	if (opts->environment)
		wp_jw_member(w, "environment", wp_jstr(opts->environment), 0);
}

/* A v2 chunk's head: no device, os, runtime or transaction (v2 has none). */
static int write_head_chunk(struct wp_jw *w, const struct wp_out_opts *opts)
{
	wp_jw_put(w, "{", 1);
	wp_jw_member(w, "version", json_string("2"), 1);
	wp_jw_member(w, "chunk_id", jid(opts->chunk_id, 16, 1), 0);
	wp_jw_member(w, "profiler_id", jid(opts->profiler_id, 16, 1), 0);
	write_where(w, opts);
	return write_sdk(w, "client_sdk");
}

static int write_head_v1(struct wp_jw *w, const struct wp_sentry_plan *pl,
			 const struct wp_out_opts *opts)
{
	const struct wp_profile *p = pl->p;
	struct utsname u;
	json_t *o;
	int bad = 0;
	char *name;

	if (uname(&u) < 0)
		memset(&u, 0, sizeof(u));
	wp_jw_put(w, "{", 1);
	wp_jw_member(w, "version", json_string("1"), 1);
	wp_jw_member(w, "event_id", wp_jrandom_hex(16, 1), 0);
	write_where(w, opts);
	wp_jw_member(w, "timestamp", wp_jtimestamp(wp_sentry_unix_ns(pl, pl->base_ns)), 0);

	o = json_object();
	bad = wp_jset(o, "architecture", wp_jstr(u.machine));
	wp_jw_member(w, "device", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);

	o = json_object();
	bad = wp_jset(o, "name", json_string("Linux"));
	bad |= wp_jset(o, "version", wp_jstr(u.release));
	bad |= wp_jset(o, "build_number", wp_jstr(u.version));
	wp_jw_member(w, "os", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);

	o = json_object();
	bad = wp_jset(o, "name", json_string("glibc"));
	bad |= wp_jset(o, "version", wp_jstr(gnu_get_libc_version()));
	wp_jw_member(w, "runtime", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);

	write_sdk(w, "client_sdk");

	name = wp_out_sentry_txn_name(p, opts->no_args);
	o = json_object();
	bad = !name;
	bad |= wp_jset(o, "id", jid(opts->transaction_id, 16, 1));
	bad |= wp_jset(o, "name", wp_jstr(name));
	bad |= wp_jset(o, "trace_id", jid(opts->trace_id, 16, 1));
	bad |= wp_jset(o, "segment_id", jid(opts->segment_id, 8, 0));
	bad |= wp_jset(o, "active_thread_id", json_integer(p->main_tid ? p->main_tid : p->pid));
	bad |= wp_jset(o, "relative_start_ns", json_string("0"));
	bad |= wp_jset(o, "relative_end_ns", wp_jdec(pl->last_elapsed));
	free(name);
	wp_jw_member(w, "transaction", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);
	return w->failed ? -1 : 0;
}

char *wp_out_sentry_txn_name(const struct wp_profile *p, int no_args)
{
	const char *c = p->cmdline ? p->cmdline : "";
	size_t n = no_args ? strcspn(c, " ") : strlen(c);
	char *name = malloc(n + 24);

	if (!name)
		return NULL;
	if (n == 0)
		snprintf(name, n + 24, "process %u", p->pid);
	else {
		memcpy(name, c, n);
		name[n] = 0;
	}
	return name;
}

/* The "threads" member of the wallprof section: every thread the sampler
 * tracked, with or without samples in the window, keyed by tid, in tid
 * order. One entry per tid (profile.h: a reused tid's entries were merged
 * by the raw reader, and only there). Streamed, one object each. */
static int write_thread_stats(struct wp_jw *w, const struct wp_sentry_plan *pl)
{
	const struct wp_profile *p = pl->p;

	wp_jw_puts(w, ",\"threads\":{");
	for (size_t i = 0; i < p->nr_threads && !w->failed; i++) {
		const struct wp_thread *t = &p->threads[pl->thr_by_tid[i]];
		json_t *o;
		char name[17];
		int bad;

		memcpy(name, t->name, 16);
		name[16] = '\0'; /* comm may fill all 16 bytes */
		o = json_object();
		bad = wp_jset(o, "name", wp_jstr(name));
		bad |= wp_jset(o, "signals", wp_jint(t->nr_signals));
		bad |= wp_jset(o, "samples", wp_jint(t->nr_samples));
		if (bad) {
			json_decref(o);
			o = NULL;
		}
		wp_jw_printf(w, "%s\"%u\":", i ? "," : "", t->tid);
		wp_jw_json(w, o);
	}
	return wp_jw_puts(w, "}");
}

int wp_sentry_tail(struct wp_jw *w, const struct wp_sentry_plan *pl)
{
	const struct wp_profile *p = pl->p;
	const struct wp_counters *c = &p->counters;

	/* Streamed member by member: "threads" can have tens of thousands. */
	wp_jw_puts(w, ",\"wallprof\":{");
	wp_jw_member(w, "version", json_string(WP_VERSION), 1);
	wp_jw_member(w, "pid", wp_jint(p->pid), 0);
	wp_jw_member(w, "hz", wp_jint(p->hz), 0);
	wp_jw_member(w, "ring_seconds", wp_jint(p->ring_seconds), 0);
	wp_jw_member(w, "max_depth", wp_jint(p->max_depth), 0);
	if (p->ring_bytes) {
		wp_jw_member(w, "ring_bytes", wp_jint(p->ring_bytes), 0);
		wp_jw_member(w, "ring_samples", wp_jint(p->ring_samples), 0);
	}
	wp_jw_member(w, "snapshot", json_integer(p->snapshot), 0);
	wp_jw_member(w, "duration_ns",
		     wp_jint(p->end_ns > pl->base_ns ? p->end_ns - pl->base_ns : pl->last_elapsed),
		     0);
	wp_jw_member(w, "samples", wp_jint(pl->nr_written), 0);
	wp_jw_member(w, "truncated_samples", wp_jint(pl->nr_truncated), 0);
	for (size_t i = 0; i < wp_nr_counter_keys; i++)
		wp_jw_member(w, wp_counter_keys[i].key, wp_jint(wp_counter_at(c, i)), 0);
	write_thread_stats(w, pl);
	wp_jw_put(w, "}", 1);
	return wp_jw_put(w, "}\n", 2);
}

int wp_sentry_head(struct wp_jw *w, const struct wp_sentry_plan *pl, const struct wp_out_opts *opts)
{
	return pl->chunk ? write_head_chunk(w, opts) : write_head_v1(w, pl, opts);
}

/* Whether `id` is `n` lowercase hex digits, not all zero (NULL: not given). */
static int id_ok(const char *id, size_t n)
{
	int nonzero = 0;

	if (!id)
		return 1;
	for (size_t i = 0; i < n; i++) {
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return 0;
		nonzero |= id[i] != '0';
	}
	return nonzero && id[n] == 0;
}

int wp_sentry_opts_check(const struct wp_out_opts *o, char *err, size_t errlen)
{
	const struct {
		const char *name, *id;
		size_t n;
	} ids[] = {
		{ "profiler_id", o->profiler_id, 32 },       { "chunk_id", o->chunk_id, 32 },
		{ "transaction id", o->transaction_id, 32 }, { "trace id", o->trace_id, 32 },
		{ "segment id", o->segment_id, 16 },
	};

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if (!id_ok(ids[i].id, ids[i].n)) {
			if (err && errlen)
				snprintf(err, errlen,
					 "invalid Sentry %s: expected %zu lowercase hex digits, "
					 "not all zero",
					 ids[i].name, ids[i].n);
			return -1;
		}
	return 0;
}
