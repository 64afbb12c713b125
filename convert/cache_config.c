/* cache_config: the debug cache's settings, from the environment the
 * library passed, handed to the symbolizer (symbolize/debug_cache.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "../output/output.h"
#include "../symbolize/symbolize.h"

#define DEFAULT_MAX_MB 1024

int wp_cv_debug_cache_load(char *err, size_t errlen)
{
	static int loaded;
	static char dir[4096];
	unsigned long long mb = DEFAULT_MAX_MB;
	const char *v = getenv("WALLPROF_DEBUG_CACHE");

	if (loaded)
		return 0;
	loaded = 1;
	if (v && !strcmp(v, "off"))
		return 0;
	if (wp_out_env_uint("WALLPROF_DEBUG_CACHE_MAX_MB", 1024 * 1024, &mb, err, errlen) < 0) {
		size_t n = strlen(err);

		snprintf(err + n, errlen - n, "; the debug cache is off");
		return -1;
	}
	if (v && *v) {
		if (v[0] != '/' || (size_t)snprintf(dir, sizeof(dir), "%s", v) >= sizeof(dir)) {
			snprintf(err, errlen,
				 "WALLPROF_DEBUG_CACHE=\"%.40s\": want an absolute directory "
				 "(shorter than %zu bytes) or off; the debug cache is off",
				 v, sizeof(dir));
			return -1;
		}
		/* Named by the user: made when missing, never used when
		 * others can write it (it would hand us any file). */
		if (!wp_out_private_dir(dir)) {
			snprintf(
				err, errlen,
				"WALLPROF_DEBUG_CACHE=%.200s: not a directory of ours that only we "
				"can write; the debug cache is off",
				dir);
			return -1;
		}
	} else if (wp_out_user_cache_dir("debug", dir, sizeof(dir)) < 0) {
		return 0; /* no private cache to be had: quietly without */
	}
	wp_sym_set_debug_cache(dir, (uint64_t)mb << 20);
	return 0;
}

void wp_cv_debug_cache_by_hand(void)
{
	char err[512];

	if (wp_cv_debug_cache_load(err, sizeof(err)) < 0)
		fprintf(stderr, "wallprof: %s\n", err);
}
