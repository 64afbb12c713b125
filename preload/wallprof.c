/* wallprof: the library's entry points. Constructor and destructor, and the
 * libc functions it interposes. These are the only symbols the .so exports;
 * they carry libc's names (not wp_) because interposition needs them. */
#include <alloca.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../output/sys.h"
#include "../unwind/unwind.h"
#include "block.h"
#include "sampler.h"
#include "thread_start.h"

#define WP_EXPORT __attribute__((visibility("default")))

typedef void (*wp_sighandler)(int);

static wp_sighandler (*real_signal)(int, wp_sighandler);

typedef void (*wp_longjmp_fn)(struct __jmp_buf_tag *, int) __attribute__((noreturn));
static wp_longjmp_fn real_longjmp, real__longjmp, real_siglongjmp, real_longjmp_chk;

typedef void (*wp_exit_fn)(int) __attribute__((noreturn));
static wp_exit_fn real__exit, real__Exit;
typedef void (*wp_pexit_fn)(void *) __attribute__((noreturn));
static wp_pexit_fn real_pthread_exit;

typedef int (*wp_execve_fn)(const char *, char *const[], char *const[]);
typedef int (*wp_execv_fn)(const char *, char *const[]);
typedef int (*wp_fexecve_fn)(int, char *const[], char *const[]);
static wp_execve_fn real_execve, real_execvpe;
static wp_execv_fn real_execv, real_execvp;
static wp_fexecve_fn real_fexecve;
typedef int (*wp_timer_create_fn)(clockid_t, struct sigevent *, timer_t *);
static wp_timer_create_fn real_timer_create;
static int (*real_timer_delete)(timer_t);

__attribute__((constructor)) static void wp_init(void)
{
	wp_unwind_resolve(); /* the mmap after ours, for the program's calls */
	real_signal = (wp_sighandler(*)(int, wp_sighandler))dlsym(RTLD_NEXT, "signal");
	/* Resolved now: they are called from signal handlers. */
	real_longjmp = (wp_longjmp_fn)dlsym(RTLD_NEXT, "longjmp");
	real__longjmp = (wp_longjmp_fn)dlsym(RTLD_NEXT, "_longjmp");
	real_siglongjmp = (wp_longjmp_fn)dlsym(RTLD_NEXT, "siglongjmp");
	real_longjmp_chk = (wp_longjmp_fn)dlsym(RTLD_NEXT, "__longjmp_chk");
	real__exit = (wp_exit_fn)dlsym(RTLD_NEXT, "_exit");
	real__Exit = (wp_exit_fn)dlsym(RTLD_NEXT, "_Exit");
	real_pthread_exit = (wp_pexit_fn)dlsym(RTLD_NEXT, "pthread_exit");
	real_execve = (wp_execve_fn)dlsym(RTLD_NEXT, "execve");
	real_execvpe = (wp_execve_fn)dlsym(RTLD_NEXT, "execvpe");
	real_execv = (wp_execv_fn)dlsym(RTLD_NEXT, "execv");
	real_execvp = (wp_execv_fn)dlsym(RTLD_NEXT, "execvp");
	real_fexecve = (wp_fexecve_fn)dlsym(RTLD_NEXT, "fexecve");
	real_timer_create = (wp_timer_create_fn)dlsym(RTLD_NEXT, "timer_create");
	real_timer_delete = (int (*)(timer_t))dlsym(RTLD_NEXT, "timer_delete");
	wp_block_init();
	if (wp_sampler_start() == 0)
		wp_thread_start_init();
}

/* Runs on return from main() and on exit(), after the program's atexit
 * handlers and its own destructors. */
__attribute__((destructor)) static void wp_fini(void)
{
	wp_sampler_stop_and_dump();
}

WP_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	int rc = wp_sampler_sigaction(sig, act, old);

	return rc == -2 ? __sigaction(sig, act, old) : rc;
}

WP_EXPORT wp_sighandler signal(int sig, wp_sighandler handler)
{
	struct sigaction act, old;
	int rc;

	/* glibc's signal() is BSD-style: restartable, the signal blocked
	 * while its handler runs. */
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	if (sig > 0 && sig < NSIG)
		sigaddset(&act.sa_mask, sig);
	act.sa_flags = SA_RESTART;
	rc = wp_sampler_sigaction(sig, &act, &old);
	if (rc == -2) {
		if (!real_signal)
			real_signal =
				(wp_sighandler(*)(int, wp_sighandler))dlsym(RTLD_NEXT, "signal");
		return real_signal ? real_signal(sig, handler) : SIG_ERR;
	}
	return rc < 0 ? SIG_ERR : old.sa_handler;
}

/* ---- longjmp: a jump out of a signal handler leaves it ------------------- */

/* Before our constructor (another library's initializer jumping), the
 * real one is looked up on the spot. */
#define LONGJMP_VIA(real, name, env, val)                           \
	do {                                                        \
		wp_longjmp_fn r_ = (real);                          \
		wp_sampler_longjmp(env);                            \
		if (!r_)                                            \
			r_ = (wp_longjmp_fn)dlsym(RTLD_NEXT, name); \
		if (r_)                                             \
			r_(env, val);                               \
		abort(); /* no libc longjmp: cannot happen */       \
	} while (0)

WP_EXPORT __attribute__((noreturn)) void longjmp(struct __jmp_buf_tag env[1], int val)
{
	LONGJMP_VIA(real_longjmp, "longjmp", env, val);
}

WP_EXPORT __attribute__((noreturn)) void _longjmp(struct __jmp_buf_tag env[1], int val)
{
	LONGJMP_VIA(real__longjmp, "_longjmp", env, val);
}

WP_EXPORT __attribute__((noreturn)) void siglongjmp(struct __jmp_buf_tag env[1], int val)
{
	LONGJMP_VIA(real_siglongjmp, "siglongjmp", env, val);
}

WP_EXPORT __attribute__((noreturn)) void __longjmp_chk(struct __jmp_buf_tag env[1], int val)
{
	LONGJMP_VIA(real_longjmp_chk, "__longjmp_chk", env, val);
}

/* ---- exits the destructor does not see --------------------------------- */

static void *next_symbol(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

/* _exit and _Exit skip atexit and destructors: write the profile first.
 * A vfork child (another pid on our memory) leaves everything alone. The
 * real functions were looked up in the constructor: dlsym takes the
 * loader's lock, which a signal handler calling _exit must not. */
static __attribute__((noreturn)) void exit_after_dump(wp_exit_fn real, const char *name, int status)
{
	wp_sampler_stop_and_dump();
	if (!real)
		real = (wp_exit_fn)next_symbol(name);
	if (real)
		real(status);
	wp_syscall(SYS_exit_group, status);
	__builtin_unreachable();
}

WP_EXPORT __attribute__((noreturn)) void _exit(int status)
{
	exit_after_dump(real__exit, "_exit", status);
}

WP_EXPORT __attribute__((noreturn)) void _Exit(int status)
{
	exit_after_dump(real__Exit, "_Exit", status);
}

/* main() leaving through pthread_exit: the process ends with its last
 * other thread, which our own threads must not prevent. */
WP_EXPORT __attribute__((noreturn)) void pthread_exit(void *ret)
{
	wp_pexit_fn real =
		real_pthread_exit ? real_pthread_exit : (wp_pexit_fn)next_symbol("pthread_exit");

	wp_sampler_pthread_exit();
	if (real)
		real(ret);
	wp_syscall(SYS_exit, 0);
	__builtin_unreachable();
}

WP_EXPORT int pthread_setname_np(pthread_t t, const char *name)
{
	int (*real)(pthread_t, const char *) =
		(int (*)(pthread_t, const char *))next_symbol("pthread_setname_np");
	int rc = real ? real(t, name) : ENOSYS;

	wp_sampler_names_changed();
	return rc;
}

/* prctl(PR_SET_NAME) renames the calling thread as pthread_setname_np
 * does: the sampler reads the names again. glibc's prctl is the system
 * call itself (its four further arguments as unsigned longs, errno on
 * failure), which this is too. */
WP_EXPORT int prctl(int option, ...)
{
	unsigned long a[4];
	va_list ap;
	long rc;

	va_start(ap, option);
	for (int i = 0; i < 4; i++)
		a[i] = va_arg(ap, unsigned long);
	va_end(ap);
	rc = wp_syscall(SYS_prctl, option, a[0], a[1], a[2], a[3]);
	if (option == PR_SET_NAME && rc == 0)
		wp_sampler_names_changed();
	return (int)rc;
}

/* timer_create: the program's timers get the ids they would without us,
 * ours being placed out of their way (timers.h); the two never overlap.
 * Before our constructor (another library's), looked up on the spot. */
WP_EXPORT int timer_create(clockid_t clock, struct sigevent *sev, timer_t *id)
{
	wp_timer_create_fn real = real_timer_create;

	if (!real)
		real = (wp_timer_create_fn)next_symbol("timer_create");
	return wp_sampler_timer_create(real, clock, sev, id);
}

WP_EXPORT int timer_delete(timer_t id)
{
	int (*real)(timer_t) = real_timer_delete;

	if (!real)
		real = (int (*)(timer_t))next_symbol("timer_delete");
	return wp_sampler_timer_delete(real, id);
}

/* ---- exec: the image being replaced writes its profile first --------------- */

#define EXEC_AROUND(call)                 \
	do {                              \
		int rc_, e_;              \
		wp_sampler_before_exec(); \
		rc_ = (call);             \
		e_ = errno;               \
		wp_sampler_exec_failed(); \
		errno = e_;               \
		return rc_;               \
	} while (0)

/* The real one, looked up now if our constructor has not run yet. */
#define REAL_EXEC(var, type, name) ((var) ? (var) : ((var) = (type)next_symbol(name)))

WP_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	wp_execve_fn real = REAL_EXEC(real_execve, wp_execve_fn, "execve");

	if (!real)
		return errno = ENOSYS, -1;
	EXEC_AROUND(real(path, argv, envp));
}

WP_EXPORT int execv(const char *path, char *const argv[])
{
	wp_execv_fn real = REAL_EXEC(real_execv, wp_execv_fn, "execv");

	if (!real)
		return errno = ENOSYS, -1;
	EXEC_AROUND(real(path, argv));
}

WP_EXPORT int execvp(const char *file, char *const argv[])
{
	wp_execv_fn real = REAL_EXEC(real_execvp, wp_execv_fn, "execvp");

	if (!real)
		return errno = ENOSYS, -1;
	EXEC_AROUND(real(file, argv));
}

WP_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	wp_execve_fn real = REAL_EXEC(real_execvpe, wp_execve_fn, "execvpe");

	if (!real)
		return errno = ENOSYS, -1;
	EXEC_AROUND(real(file, argv, envp));
}

WP_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	wp_fexecve_fn real = REAL_EXEC(real_fexecve, wp_fexecve_fn, "fexecve");

	if (!real)
		return errno = ENOSYS, -1;
	EXEC_AROUND(real(fd, argv, envp));
}

/* The execl family: gather the variadic arguments into an argv. */
#define GATHER_ARGV(arg0, ap, argv)                       \
	do {                                              \
		va_list cp_;                              \
		size_t n_ = 1, i_;                        \
		va_copy(cp_, ap);                         \
		while (va_arg(cp_, char *))               \
			n_++;                             \
		va_end(cp_);                              \
		argv = alloca((n_ + 1) * sizeof(char *)); \
		argv[0] = (char *)(arg0);                 \
		for (i_ = 1; i_ <= n_; i_++)              \
			argv[i_] = va_arg(ap, char *);    \
	} while (0)

WP_EXPORT int execl(const char *path, const char *arg0, ...)
{
	char **argv;
	va_list ap;

	va_start(ap, arg0);
	GATHER_ARGV(arg0, ap, argv);
	va_end(ap);
	return execv(path, argv);
}

WP_EXPORT int execlp(const char *file, const char *arg0, ...)
{
	char **argv;
	va_list ap;

	va_start(ap, arg0);
	GATHER_ARGV(arg0, ap, argv);
	va_end(ap);
	return execvp(file, argv);
}

WP_EXPORT int execle(const char *path, const char *arg0, ...)
{
	char **argv, **envp = NULL;
	va_list ap;

	va_start(ap, arg0);
	GATHER_ARGV(arg0, ap, argv);
	envp = va_arg(ap, char **); /* after the terminating NULL */
	va_end(ap);
	return execve(path, argv, envp);
}
