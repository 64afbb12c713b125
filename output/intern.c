/* intern: dense ids for byte strings (intern.h). FNV-1a hashing, linear
 * probing, the slot array doubled at half load. */
#include <stdlib.h>
#include <string.h>

#include "intern.h"

static uint64_t hash(const void *key, size_t len)
{
	const uint8_t *p = key;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h ^ (h >> 29);
}

static int grow_slots(struct wp_intern *t)
{
	size_t n = t->nr_slots ? t->nr_slots * 2 : 64;
	uint32_t *s = calloc(n, sizeof(*s));

	if (!s)
		return -1;
	for (size_t id = 0; id < t->nr; id++) {
		size_t i = hash(t->keys[id], t->lens[id]) & (n - 1);

		while (s[i])
			i = (i + 1) & (n - 1);
		s[i] = (uint32_t)id + 1;
	}
	free(t->slots);
	t->slots = s;
	t->nr_slots = n;
	return 0;
}

static int grow_keys(struct wp_intern *t)
{
	size_t n = t->cap ? t->cap * 2 : 64;
	char **k;
	size_t *l;

	k = realloc(t->keys, n * sizeof(*k));
	if (!k)
		return -1;
	t->keys = k;
	l = realloc(t->lens, n * sizeof(*l));
	if (!l)
		return -1;
	t->lens = l;
	t->cap = n;
	return 0;
}

int64_t wp_intern_id(struct wp_intern *t, const void *key, size_t len)
{
	size_t i;
	char *copy;

	if (t->nr >= UINT32_MAX - 1)
		return -1;
	if ((t->nr + 1) * 2 > t->nr_slots && grow_slots(t) < 0)
		return -1;
	i = hash(key, len) & (t->nr_slots - 1);
	while (t->slots[i]) {
		uint32_t id = t->slots[i] - 1;

		if (t->lens[id] == len && memcmp(t->keys[id], key, len) == 0)
			return id;
		i = (i + 1) & (t->nr_slots - 1);
	}
	if (t->nr == t->cap && grow_keys(t) < 0)
		return -1;
	copy = malloc(len + 1);
	if (!copy)
		return -1;
	if (len)
		memcpy(copy, key, len);
	copy[len] = 0;
	t->keys[t->nr] = copy;
	t->lens[t->nr] = len;
	t->slots[i] = (uint32_t)t->nr + 1;
	return (int64_t)t->nr++;
}

int64_t wp_intern_str(struct wp_intern *t, const char *s)
{
	if (!s)
		s = "";
	return wp_intern_id(t, s, strlen(s));
}

void wp_intern_free(struct wp_intern *t)
{
	for (size_t i = 0; i < t->nr; i++)
		free(t->keys[i]);
	free(t->keys);
	free(t->lens);
	free(t->slots);
	memset(t, 0, sizeof(*t));
}
