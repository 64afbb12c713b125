/* symbolize internals shared between debuginfo.c and the symbolizer
 * (symbolize.c, session.c): how debug files are found (no network by
 * default) and the in-memory vDSO image.
 * Not part of the module's interface; nothing here is async-signal-safe. */
#ifndef WP_SYMBOLIZE_INT_H
#define WP_SYMBOLIZE_INT_H

#include <elfutils/libdwfl.h>
#include <stddef.h>
#include <stdint.h>

#include "symbolize.h"

/* The libdwfl callbacks to use (static storage; libdwfl keeps the pointer).
 * Without WALLPROF_DEBUGINFOD=1 they never reach debuginfod. */
const Dwfl_Callbacks *wp_sym_callbacks(void);

/* Writes "/usr/lib/debug/.build-id/xx/rest.debug" for a build-id into buf.
 * Returns 0, or -1 when there is no build-id or buf is too small. */
int wp_sym_build_id_debug_path(const uint8_t *id, uint32_t len, char *buf, size_t size);

/* The file still mapped at the module's start in the process set with
 * wp_sym_set_process, opened through /proc/PID/map_files (it works after the
 * file was deleted or replaced on disk), or -1. */
int wp_sym_mapped_fd(const struct wp_module *m);

/* A memfd holding this process's vDSO image when it has `m`'s build-id (the
 * kernel's vDSO is the same image in every process), else -1. The caller
 * owns the fd. */
int wp_sym_vdso_fd(const struct wp_module *m);

/* What a copy in the debug cache stands for: the module's own file, or its
 * separate debug file (both have the module's build-id; a copy of one never
 * answers for the other). */
#define WP_SYM_COPY_MODULE 'm'
#define WP_SYM_COPY_DEBUG 'd'

/* `fd` (an ELF file about to be reported or read for its debug
 * information), or in its place, `fd` then closed, its uncompressed copy
 * from the debug cache (wp_sym_set_debug_cache): found there, or made when
 * the file has build-id `id` (the one the module was recorded with; none:
 * no copy) and its compressed .debug_* sections hold at least a quarter
 * MiB. Any failure returns `fd` as it was (symbolize/debug_cache.c). */
int wp_sym_cache_swap(int fd, const uint8_t *id, uint32_t id_len, char kind);

#endif
