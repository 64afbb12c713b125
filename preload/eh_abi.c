/* eh_abi: the two entry points of the unwinder's ABI that the library's
 * own code calls, found at run time instead of linked.
 *
 * The library is built with -fexceptions so that the wrappers' cleanup
 * handlers (block_int.h) run when a thread is cancelled inside a wrapped
 * call: the compiler then names a personality routine for our frames
 * (__gcc_personality_v0) and ends each cleanup with _Unwind_Resume. Both
 * live in libgcc_s, which linking would load into every profiled process
 * (0.1 ms of start-up each, docs/PERFORMANCE.md). Instead these hidden
 * definitions bind our references at link time and forward to the
 * unwinder that is running the unwind, which is loaded by then: glibc
 * loads libgcc_s itself before it unwinds a cancelled thread, and a
 * program that throws exceptions has its unwinder already.
 *
 * Both run inside an unwind, on the unwinding thread, never in our signal
 * handlers; the lookup (once per process) takes the loader's lock, as
 * glibc's own lookup of libgcc_s does before a cancellation unwind. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* The ABI's types (the Itanium C++ ABI's base unwinder interface, which
 * libgcc implements), spelled out: <unwind.h> would declare both
 * functions with default visibility. */
struct _Unwind_Exception;
struct _Unwind_Context;
typedef int unwind_reason;  /* _Unwind_Reason_Code */
#define URC_FATAL_PHASE1_ERROR 3
typedef int unwind_action; /* _Unwind_Action */

typedef void (*resume_fn)(struct _Unwind_Exception *);
typedef unwind_reason (*personality_fn)(int, unwind_action, uint64_t, struct _Unwind_Exception *,
					struct _Unwind_Context *);

static _Atomic(resume_fn) real_resume;
static _Atomic(personality_fn) real_personality;

/* The program's unwinder (global scope: a C++ program's libgcc_s), else
 * the libgcc_s glibc loaded for itself (local scope), else loaded now. */
static void *lookup(const char *name)
{
	void *h, *p = dlsym(RTLD_DEFAULT, name);

	if (p)
		return p;
	h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
	return h ? dlsym(h, name) : NULL;
}

/* Hidden (as everything of ours): exported, they would take the program's
 * own calls. */
__attribute__((visibility("hidden"))) void _Unwind_Resume(struct _Unwind_Exception *e)
{
	resume_fn f = atomic_load_explicit(&real_resume, memory_order_acquire);

	if (!f) {
		*(void **)&f = lookup("_Unwind_Resume");
		if (!f)
			abort(); /* an unwind under way, and no unwinder to go on */
		atomic_store_explicit(&real_resume, f, memory_order_release);
	}
	f(e);
	abort(); /* _Unwind_Resume does not return */
}

__attribute__((visibility("hidden"))) unwind_reason
__gcc_personality_v0(int version, unwind_action actions, uint64_t cls, struct _Unwind_Exception *e,
		     struct _Unwind_Context *ctx)
{
	personality_fn f = atomic_load_explicit(&real_personality, memory_order_acquire);

	if (!f) {
		*(void **)&f = lookup("__gcc_personality_v0");
		if (!f)
			return URC_FATAL_PHASE1_ERROR;
		atomic_store_explicit(&real_personality, f, memory_order_release);
	}
	return f(version, actions, cls, e, ctx);
}
