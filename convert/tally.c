/* tally: counts by key, in the order keys are first seen (see convert.h).
 * Keys are compared by pointer: the callers pass interned strings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

static size_t slot_of(const struct wp_tally *t, const void *key)
{
	size_t k = (size_t)(((uintptr_t)key * 0x9e3779b97f4a7c15ull) >> 17) & (t->cap - 1);

	while (t->index[k] && t->e[t->index[k] - 1].key != key)
		k = (k + 1) & (t->cap - 1);
	return k;
}

struct wp_tally_entry *wp_tally_add(struct wp_tally *t, const void *key)
{
	size_t k;

	if ((t->n + 1) * 2 > t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		uint32_t *index = calloc(cap, sizeof(*index));
		struct wp_tally_entry *e = realloc(t->e, (cap / 2) * sizeof(*e));

		if (!index || !e) {
			free(index);
			if (e)
				t->e = e;
			return NULL;
		}
		t->e = e;
		free(t->index);
		t->index = index;
		t->cap = cap;
		for (size_t i = 0; i < t->n; i++)
			t->index[slot_of(t, t->e[i].key)] = (uint32_t)(i + 1);
	}
	k = slot_of(t, key);
	if (!t->index[k]) {
		memset(&t->e[t->n], 0, sizeof(t->e[t->n]));
		t->e[t->n].key = key;
		t->e[t->n].order = t->n;
		t->index[k] = (uint32_t)(++t->n);
	}
	return &t->e[t->index[k] - 1];
}

const struct wp_tally_entry *wp_tally_get(const struct wp_tally *t, const void *key)
{
	size_t k;

	if (!t->cap)
		return NULL;
	k = slot_of(t, key);
	return t->index[k] ? &t->e[t->index[k] - 1] : NULL;
}

const struct wp_tally_entry *wp_tally_max(const struct wp_tally *t)
{
	const struct wp_tally_entry *best = NULL;

	for (size_t i = 0; i < t->n; i++)
		if (!best || t->e[i].n > best->n)
			best = &t->e[i];
	return best;
}

void wp_tally_free(struct wp_tally *t)
{
	free(t->e);
	free(t->index);
	memset(t, 0, sizeof(*t));
}
