/* debugid: the Sentry/Breakpad debug_id of an ELF object, derived from its
 * GNU build-id the way symbolic's ELF reader does it. */
#include <stdio.h>
#include <string.h>

#include "output.h"

int wp_out_debug_id(const uint8_t *build_id, size_t len, int little_endian, char out[37])
{
	uint8_t u[16] = { 0 };
	uint8_t t;

	if (!build_id || len == 0)
		return -1;
	memcpy(u, build_id, len < 16 ? len : 16);
	if (little_endian) {
		/* GUID layout: Data1 (4 bytes), Data2, Data3 (2 each) are stored
		 * little-endian, so a LE object's build-id bytes read reversed. */
		t = u[0], u[0] = u[3], u[3] = t;
		t = u[1], u[1] = u[2], u[2] = t;
		t = u[4], u[4] = u[5], u[5] = t;
		t = u[6], u[6] = u[7], u[7] = t;
	}
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
	return 0;
}
