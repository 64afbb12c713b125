/* profile: ownership helpers for struct wp_profile (profile.h). */
#include <stdlib.h>
#include <string.h>

#include "profile.h"

int wp_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int wp_profile_sentry_ok(const struct wp_profile *p)
{
	uint32_t *tids;
	size_t i;
	int ok = 0;

	if (p->nr_samples < 2)
		return 0;
	tids = malloc(p->nr_samples * sizeof(*tids));
	if (!tids)
		return 1; /* cannot tell: write it */
	for (i = 0; i < p->nr_samples; i++)
		tids[i] = p->samples[i].tid;
	qsort(tids, p->nr_samples, sizeof(*tids), wp_cmp_u32);
	for (i = 1; i < p->nr_samples && !ok; i++)
		ok = tids[i] == tids[i - 1];
	free(tids);
	return ok;
}

void wp_profile_free(struct wp_profile *p)
{
	size_t i;

	if (!p)
		return;
	for (i = 0; p->modules && i < p->nr_modules; i++)
		free(p->modules[i].path);
	free(p->modules);
	free(p->pcs);
	free(p->stack_frames);
	free(p->stack_off);
	free(p->samples);
	free(p->threads);
	free(p->cmdline);
	memset(p, 0, sizeof(*p));
}
