/* symbolize/build_id: the GNU build-id in an ELF note area. Pure memory
 * parsing: the preloaded library reads loaded objects' build-ids with it
 * (preload/modules.c), the converter the vDSO's. */
#include <elf.h>
#include <link.h>
#include <string.h>

#include "symbolize.h"

int wp_sym_build_id_note(const void *notes, size_t size, uint8_t *out, uint32_t *len)
{
	const unsigned char *p = notes;
	size_t off = 0;
	while (off + sizeof(ElfW(Nhdr)) <= size) {
		const ElfW(Nhdr) *nh = (const void *)(p + off);
		size_t name = off + sizeof(*nh);
		size_t desc = name + ((nh->n_namesz + 3) & ~3u);
		size_t next = desc + ((nh->n_descsz + 3) & ~3u);
		if (desc + nh->n_descsz > size)
			return 0;
		if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
		    !memcmp(p + name, "GNU", 4) && nh->n_descsz > 0) {
			*len = nh->n_descsz < WP_BUILD_ID_MAX ? nh->n_descsz : WP_BUILD_ID_MAX;
			memcpy(out, p + desc, *len);
			return 1;
		}
		off = next;
	}
	return 0;
}
