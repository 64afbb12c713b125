/* profile: ownership helpers for struct wp_profile (profile.h). */
#include <stdlib.h>
#include <string.h>

#include "profile.h"

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
