/* proc_mem: how a walk of proc_unwind reads memory (contracts in
 * proc_mem.h). Nothing of the program's is read directly: its stack is
 * copied page by page with process_vm_readv (an unmapped page ends the
 * walk, it does not fault), and so is every other word libunwind asks for
 * (the unwind tables of a module being dlclosed may vanish too). Sampler
 * thread only. */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "proc_mem.h"

#define PAGE WP_PM_PAGE
/* The stack window: pages from the one holding the stack pointer, so that
 * at least the 64 KiB above it can be read (copied on first use). */
#define WIN_PAGES 17
/* Pages of the modules' read-only segments (unwind tables, code) kept
 * across walks of one epoch, direct-mapped: 128 KiB. */
#define CACHE_PAGES 32

struct range {
	uint64_t lo, hi;
};

static struct {
	struct range *ro; /* read-only segments: their pages may be cached */
	size_t nr_ro;
	struct range *own; /* our own immutable buffers (.debug_frame copies): read directly */
	size_t nr_own;
	uint64_t *tag;     /* page address + 1 per cache slot, 0 empty */
	uint8_t *pages;
	/* the walk in progress */
	pid_t via;        /* the thread memory is read through: ours, alive */
	uint64_t win_lo;
	uint32_t win_have, win_bad; /* window pages copied / found unreadable */
	uint64_t win[WIN_PAGES * PAGE / 8];
} pm;

void wp_pm_begin(pid_t via, uint64_t sp)
{
	pm.via = via;
	pm.win_lo = sp & ~(PAGE - 1);
	pm.win_have = pm.win_bad = 0;
}

void wp_pm_cache_init(void)
{
	if (!pm.tag) {
		pm.tag = calloc(CACHE_PAGES, sizeof(*pm.tag));
		pm.pages = malloc(CACHE_PAGES * PAGE);
		if (!pm.tag || !pm.pages) {
			free(pm.tag);
			free(pm.pages);
			pm.tag = NULL;
			pm.pages = NULL;
		}
	}
}

int wp_pm_read(uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_readv(pm.via, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static int in_ranges(const struct range *r, size_t n, uint64_t lo, uint64_t hi)
{
	for (size_t i = 0; i < n; i++)
		if (lo >= r[i].lo && hi <= r[i].hi)
			return 1;
	return 0;
}

int wp_pm_read_word(uint64_t addr, void *out, size_t len)
{
	uint64_t off = addr & (PAGE - 1), page = addr - off;

	if (addr + len < addr)
		return -1;
	/* The stack, copied page by page on first use. */
	if (addr >= pm.win_lo && addr + len <= pm.win_lo + WIN_PAGES * PAGE && off + len <= PAGE) {
		unsigned k = (unsigned)((page - pm.win_lo) / PAGE);
		uint8_t *p = (uint8_t *)pm.win + k * PAGE;

		if (pm.win_bad & (1u << k))
			return -1;
		if (!(pm.win_have & (1u << k))) {
			if (wp_pm_read(page, p, PAGE) < 0) {
				pm.win_bad |= 1u << k;
				return -1;
			}
			pm.win_have |= 1u << k;
		}
		memcpy(out, p + off, len);
		return 0;
	}
	/* A read-only page of a module, cached for the epoch. */
	if (pm.tag && off + len <= PAGE) {
		unsigned k = (unsigned)((page / PAGE) % CACHE_PAGES);

		if (pm.tag[k] == page + 1) {
			memcpy(out, pm.pages + k * PAGE + off, len);
			return 0;
		}
		if (in_ranges(pm.ro, pm.nr_ro, page, page + PAGE)) {
			pm.tag[k] = 0;
			if (wp_pm_read(page, pm.pages + k * PAGE, PAGE) == 0) {
				pm.tag[k] = page + 1;
				memcpy(out, pm.pages + k * PAGE + off, len);
				return 0;
			}
		}
	}
	/* Our own tables (they live as long as the epoch): plain loads. */
	if (in_ranges(pm.own, pm.nr_own, addr, addr + len)) {
		memcpy(out, (const void *)(uintptr_t)addr, len);
		return 0;
	}
	return wp_pm_read(addr, out, len);
}

static int push_range(struct range **r, size_t *n, uint64_t lo, uint64_t hi)
{
	struct range *t = realloc(*r, (*n + 1) * sizeof(**r));

	if (!t)
		return -1;
	t[*n].lo = lo;
	t[*n].hi = hi;
	*r = t;
	++*n;
	return 0;
}

int wp_pm_add_ro(uint64_t lo, uint64_t hi)
{
	return push_range(&pm.ro, &pm.nr_ro, lo, hi);
}

int wp_pm_add_own(const void *a, size_t alen, const void *b, size_t blen)
{
	size_t own = pm.nr_own;

	if (push_range(&pm.own, &pm.nr_own, (uintptr_t)a, (uintptr_t)a + alen) < 0 ||
	    push_range(&pm.own, &pm.nr_own, (uintptr_t)b, (uintptr_t)b + blen) < 0) {
		pm.nr_own = own;
		return -1;
	}
	return 0;
}

void wp_pm_forked(void)
{
	pm.ro = pm.own = NULL;
	pm.nr_ro = pm.nr_own = 0;
	pm.tag = NULL;
	pm.pages = NULL;
}

void wp_pm_forget(void)
{
	free(pm.ro);
	free(pm.own);
	pm.ro = pm.own = NULL;
	pm.nr_ro = pm.nr_own = 0;
	if (pm.tag)
		memset(pm.tag, 0, CACHE_PAGES * sizeof(*pm.tag));
}
