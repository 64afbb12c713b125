/* raw_files.h: what the raw-dump unit tests share: a scratch directory,
 * whole-file reads and writes, section checksums fixed up after an edit,
 * and a small deterministic random generator. */
#ifndef WP_TEST_RAW_FILES_H
#define WP_TEST_RAW_FILES_H

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../output/raw.h"

static char tmpdir[1024];

/* `out` (PATH_MAX bytes) gets tmpdir/name. */
static inline void pathf(char *out, const char *name)
{
	snprintf(out, PATH_MAX, "%s/%s", tmpdir, name);
}

static inline int spit(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int ok = fd >= 0 && write(fd, data, len) == (ssize_t)len;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

/* The whole content of `fd` (rewound); NULL on failure. */
static inline unsigned char *slurp_fd(int fd, size_t *len)
{
	struct stat st;
	unsigned char *buf;

	if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return NULL;
	buf = malloc((size_t)st.st_size + 1);
	if (buf && read(fd, buf, (size_t)st.st_size) != st.st_size) {
		free(buf);
		return NULL;
	}
	*len = (size_t)st.st_size;
	return buf;
}

static inline unsigned char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	unsigned char *buf;

	if (fd < 0)
		return NULL;
	buf = slurp_fd(fd, len);
	close(fd);
	return buf;
}

/* Offset of the first section with `tag` in a dump, or 0. */
static inline size_t find_section(const unsigned char *d, size_t len, uint32_t tag, uint64_t *plen)
{
	size_t off = 16;

	while (off + 16 <= len) {
		uint32_t t;
		uint64_t n;

		memcpy(&t, d + off, 4);
		memcpy(&n, d + off + 8, 8);
		if (t == tag) {
			*plen = n;
			return off;
		}
		if (off + 24 > len || n > len - off - 24)
			break;
		off += 24 + n;
	}
	return 0;
}

/* Recomputes every section's checksum after a deliberate edit. */
static inline void fix_sums(unsigned char *d, size_t len)
{
	size_t off = 16;

	while (off + 24 <= len) {
		uint64_t n, sum;

		memcpy(&n, d + off + 8, 8);
		if (n > len - off - 24)
			break;
		sum = wp_raw_checksum(d + off, 16 + n);
		memcpy(d + off + 16 + n, &sum, 8);
		off += 24 + n;
	}
}

/* xorshift64; each test file seeds it with its own constant. */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

#endif
