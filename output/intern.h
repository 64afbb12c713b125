/* intern: a table that gives byte strings dense ids in first-seen order
 * (0, 1, 2, ...) and hands the same id back for equal bytes. The format
 * writers use it for pprof's string table, its functions (keyed by their
 * name's and file's ids), and speedscope's frames. It keeps a copy of every
 * key, NUL-terminated, so a key may come from a scratch buffer.
 *
 * Not async-signal-safe; one thread per table. */
#ifndef WP_INTERN_H
#define WP_INTERN_H

#include <stddef.h>
#include <stdint.h>

struct wp_intern {
	char **keys;     /* id -> its copy (NUL-terminated after `lens[id]` bytes) */
	size_t *lens;    /* id -> key length */
	size_t nr;       /* ids given */
	size_t cap;      /* room in keys/lens */
	uint32_t *slots; /* open addressing: id + 1, 0 empty */
	size_t nr_slots; /* a power of two, or 0 */
};

/* The id of the `len` bytes at `key`, a new one when not seen before.
 * Returns it, or -1 on out of memory (the table stays usable). */
int64_t wp_intern_id(struct wp_intern *t, const void *key, size_t len);

/* wp_intern_id of a NUL-terminated string; NULL counts as "". */
int64_t wp_intern_str(struct wp_intern *t, const char *s);

/* Frees every key and the table's arrays; the table is then empty. */
void wp_intern_free(struct wp_intern *t);

#endif
