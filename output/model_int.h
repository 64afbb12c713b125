/* model_int: what model.c shares with the model's JSON reader
 * (model_json.c); not for writers. Not async-signal-safe. */
#ifndef WP_MODEL_INT_H
#define WP_MODEL_INT_H

#include <stddef.h>

#include "model.h"

/* Sets up the model's string storage (m->store), everything else empty.
 * Returns 0, or -1 on out of memory. */
int wp_model_init(struct wp_model *m);

/* A copy of the `n` bytes at `s` (NUL-terminated), owned by the model and
 * shared with every equal string already stored; NULL for `s` NULL or out
 * of memory (tell them apart by `s`). */
const char *wp_model_intern(struct wp_model *m, const char *s, size_t n);

/* Once the profile, locations and frames are in place: the index
 * wp_model_thread searches. Returns 0, or -1 on out of memory. */
int wp_model_finish(struct wp_model *m);

/* Fills `m` (set up by wp_model_init) from a Sentry v1 profile libwallprof
 * wrote, the `len` bytes at `data`. Untrusted: every field's type, every
 * index and count is checked. Returns 0, or -1 with a one-line reason in
 * `err` (the model is then freed by the caller). */
int wp_model_read_json(struct wp_model *m, const char *data, size_t len, char *err, size_t errlen);

/* The x86-64 number of system call `name` (wp_out_syscall_name's
 * inverse; "syscall_<n>" gives n), or -1. syscalls.c */
int wp_out_syscall_number(const char *name);

#endif
