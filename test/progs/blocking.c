/* blocking: the EINTR battery. Runs one blocking call that nothing wakes
 * before its timeout (or that a helper wakes after exactly the timeout), in
 * the main thread, while a "busy" thread spins in the background, and prints
 *
 *     CALL rc=<return value> errno=<errno name when rc is -1, else 0> elapsed_ms=<ms>
 *
 * The same line must come out with and without the profiler (elapsed within
 * a tolerance). Usage:
 *
 *     blocking CALL TIMEOUT_MS     one call of the battery (TIMEOUT_MS 300..1000;
 *                                  "sleep" always sleeps 1 s)
 *     blocking retrypoll TIMEOUT_MS  poll() retried with the ORIGINAL timeout on
 *                                  EINTR (the classic bug); gives up after
 *                                  10 x TIMEOUT_MS + 1 s and prints rc=-1 errno=EINTR
 *     blocking churn MS            for MS ms, short timed calls (20 us..1 ms) in a
 *                                  loop; prints "churn calls=N bad=M elapsed_ms=E",
 *                                  bad: calls that did not time out normally
 *                                  (EINTR, too soon), the first ones on stderr
 *     blocking realsignal          a real SIGUSR1 (handler without SA_RESTART),
 *                                  sent by another thread 200 ms after the main
 *                                  thread blocks, interrupts each of a list of
 *                                  calls: one line per call, -1 EINTR (or the
 *                                  call's own EINTR code) after ~200 ms
 *     blocking list                the battery's call names, one per line
 *
 * Helpers that must wait (a writer, a child, a lock holder) wait on absolute
 * CLOCK_MONOTONIC deadlines and retry on EINTR, so only the call under test
 * can be disturbed by a profiler. waitpid/wait4 print rc=0 when they reaped
 * the child (its pid is not deterministic). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REAL_SIGNAL_DELAY_MS 200 /* realsignal: signal this long after the call starts */
#define REAL_SIGNAL_CALL_MS 5000 /* realsignal: the timeout of the interrupted calls */

static long timeout_ms;
static int64_t deadline_ns;   /* CLOCK_MONOTONIC: start of the call + timeout_ms */
static volatile uint64_t sink;
static volatile sig_atomic_t usr1_hits;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct timespec ns_to_ts(int64_t ns)
{
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };

	return ts;
}

static struct timespec ms_to_ts(long ms)
{
	return ns_to_ts(ms * 1000000LL);
}

static struct timeval ms_to_tv(long ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	return tv;
}

/* CLOCK_REALTIME deadline timeout_ms from now (for the *_timedwait calls). */
static struct timespec realtime_deadline(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_nsec -= 1000000000L;
		ts.tv_sec++;
	}
	return ts;
}

static void die(const char *what)
{
	fprintf(stderr, "blocking: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void die_err(const char *what, int err)
{
	fprintf(stderr, "blocking: %s: %s\n", what, strerror(err));
	exit(2);
}

/* Sleeps until the absolute CLOCK_MONOTONIC time `ns`, whatever interrupts it. */
static void sleep_until(int64_t ns)
{
	struct timespec ts = ns_to_ts(ns);

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void sem_wait_retry(sem_t *sem)
{
	while (sem_wait(sem) != 0)
		if (errno != EINTR)
			die("sem_wait");
}

static void write_byte(int fd)
{
	while (write(fd, "x", 1) < 0)
		if (errno != EINTR)
			die("write");
}

static void make_pipe(int fds[2])
{
	if (pipe(fds) != 0)
		die("pipe");
}

static void make_socketpair(int sv[2])
{
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		die("socketpair");
}

static void set_timeo(int fd, int opt, long ms)
{
	struct timeval tv = ms_to_tv(ms);

	if (setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv) != 0)
		die("setsockopt");
}

static pthread_t start_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	int err = pthread_create(&t, NULL, fn, arg);

	if (err)
		die_err("pthread_create", err);
	return t;
}

/* ---- the background thread that keeps a running thread in the process ---- */

__attribute__((noinline)) static void wpt_busy_loop(void)
{
	uint64_t x = 88172645463325252ULL;

	for (;;) {
		for (int i = 0; i < 100000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			__asm__ volatile("" : "+r"(x));
		}
		sink = x;
	}
}

static void *busy_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "busy");
	wpt_busy_loop();
	return NULL;
}

/* ---- helpers that act at deadline_ns ---- */

static void *write_at_deadline(void *arg)
{
	sleep_until(deadline_ns);
	write_byte(*(int *)arg);
	return NULL;
}

static void *eventfd_at_deadline(void *arg)
{
	uint64_t one = 1;

	sleep_until(deadline_ns);
	while (write(*(int *)arg, &one, sizeof one) < 0)
		if (errno != EINTR)
			die("write eventfd");
	return NULL;
}

static void *post_at_deadline(void *arg)
{
	sleep_until(deadline_ns);
	if (sem_post(arg) != 0)
		die("sem_post");
	return NULL;
}

static void *exit_at_deadline(void *arg)
{
	sleep_until(deadline_ns);
	return arg;
}

static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int cond_flag; /* under cond_lock */

static void *signal_cond_at_deadline(void *arg)
{
	(void)arg;
	sleep_until(deadline_ns);
	pthread_mutex_lock(&cond_lock);
	cond_flag = 1;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&cond_lock);
	return NULL;
}

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static sem_t held_locked;

static void *hold_until_deadline(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&held);
	sem_post(&held_locked);
	sleep_until(deadline_ns);
	pthread_mutex_unlock(&held);
	return NULL;
}

/* A child that exits at deadline_ns. */
static pid_t fork_child(void)
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork");
	if (pid == 0) {
		sleep_until(deadline_ns);
		_exit(0);
	}
	return pid;
}

/* A POSIX timer that sends SIGUSR1 to the process at deadline_ns. */
static void arm_usr1_timer(void)
{
	struct sigevent sev;
	struct itimerspec its;
	timer_t timer;

	memset(&sev, 0, sizeof sev);
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGUSR1;
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0)
		die("timer_create");
	memset(&its, 0, sizeof its);
	its.it_value = ns_to_ts(deadline_ns);
	if (timer_settime(timer, TIMER_ABSTIME, &its, NULL) != 0)
		die("timer_settime");
}

static sigset_t usr1_set(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	return set;
}

static int epoll_on(int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	int efd = epoll_create1(0);

	if (efd < 0)
		die("epoll_create1");
	if (epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev) != 0)
		die("epoll_ctl");
	return efd;
}

/* A listening AF_UNIX stream socket on an abstract address unique to this
 * process; *addr receives the address. */
static int unix_listener(struct sockaddr_un *addr, socklen_t *len, int backlog)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	memset(addr, 0, sizeof *addr);
	addr->sun_family = AF_UNIX;
	/* abstract namespace: sun_path[0] == 0 */
	int n = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "wpt-blocking-%d", (int)getpid());
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	if (bind(fd, (struct sockaddr *)addr, *len) != 0)
		die("bind");
	if (listen(fd, backlog) != 0)
		die("listen");
	return fd;
}

/* ---- the battery: each function sets up, then makes the one call ---- */

static long c_nanosleep(void)
{
	struct timespec ts = ms_to_ts(timeout_ms);

	return nanosleep(&ts, NULL);
}

static long c_clock_nanosleep(void)
{
	struct timespec ts = ms_to_ts(timeout_ms);

	return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
}

static long c_clock_nanosleep_abs(void)
{
	struct timespec ts = ns_to_ts(deadline_ns);

	return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static long c_usleep(void)
{
	return usleep((useconds_t)(timeout_ms * 1000));
}

static long c_sleep(void)
{
	return sleep(1);
}

static long c_poll(void)
{
	int fds[2];

	make_pipe(fds);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	return poll(&p, 1, (int)timeout_ms);
}

static long c_poll_wake(void)
{
	int fds[2];

	make_pipe(fds);
	start_thread(write_at_deadline, &fds[1]);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	return poll(&p, 1, -1);
}

static long c_ppoll(void)
{
	int fds[2];

	make_pipe(fds);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	struct timespec ts = ms_to_ts(timeout_ms);
	return ppoll(&p, 1, &ts, NULL);
}

static long c_select(void)
{
	int fds[2];
	fd_set r;

	make_pipe(fds);
	FD_ZERO(&r);
	FD_SET(fds[0], &r);
	struct timeval tv = ms_to_tv(timeout_ms);
	return select(fds[0] + 1, &r, NULL, NULL, &tv);
}

static long c_pselect(void)
{
	int fds[2];
	fd_set r;
	sigset_t mask;

	make_pipe(fds);
	FD_ZERO(&r);
	FD_SET(fds[0], &r);
	pthread_sigmask(SIG_SETMASK, NULL, &mask);
	struct timespec ts = ms_to_ts(timeout_ms);
	return pselect(fds[0] + 1, &r, NULL, NULL, &ts, &mask);
}

static long c_epoll_wait(void)
{
	int fds[2];
	struct epoll_event ev;

	make_pipe(fds);
	int efd = epoll_on(fds[0]);
	return epoll_wait(efd, &ev, 1, (int)timeout_ms);
}

static long c_epoll_pwait(void)
{
	int fds[2];
	struct epoll_event ev;
	sigset_t mask;

	make_pipe(fds);
	int efd = epoll_on(fds[0]);
	pthread_sigmask(SIG_SETMASK, NULL, &mask);
	return epoll_pwait(efd, &ev, 1, (int)timeout_ms, &mask);
}

static long c_epoll_eventfd(void)
{
	struct epoll_event ev;
	int evfd = eventfd(0, 0);

	if (evfd < 0)
		die("eventfd");
	int efd = epoll_on(evfd);
	start_thread(eventfd_at_deadline, &evfd);
	return epoll_wait(efd, &ev, 1, -1);
}

static long c_sigtimedwait(void)
{
	sigset_t set = usr1_set(); /* blocked everywhere, never sent */
	struct timespec ts = ms_to_ts(timeout_ms);

	return sigtimedwait(&set, NULL, &ts);
}

static long c_sigwaitinfo(void)
{
	sigset_t set = usr1_set(); /* blocked everywhere; the timer sends it */
	siginfo_t si;

	arm_usr1_timer();
	return sigwaitinfo(&set, &si);
}

static long c_sigsuspend(void)
{
	sigset_t mask;

	arm_usr1_timer(); /* SIGUSR1 is blocked everywhere but inside sigsuspend */
	pthread_sigmask(SIG_SETMASK, NULL, &mask);
	sigdelset(&mask, SIGUSR1);
	return sigsuspend(&mask);
}

static long c_pause(void)
{
	sigset_t set = usr1_set();

	arm_usr1_timer(); /* only this thread unblocks SIGUSR1: it gets it */
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	return pause();
}

static long c_sem_timedwait(void)
{
	sem_t sem;

	sem_init(&sem, 0, 0);
	struct timespec ts = realtime_deadline();
	return sem_timedwait(&sem, &ts);
}

static sem_t posted_sem;

static long c_sem_wait(void)
{
	sem_init(&posted_sem, 0, 0);
	start_thread(post_at_deadline, &posted_sem);
	return sem_wait(&posted_sem);
}

static long c_cond_timedwait(void)
{
	struct timespec ts = realtime_deadline();

	pthread_mutex_lock(&cond_lock);
	int rc = pthread_cond_timedwait(&cond, &cond_lock, &ts);
	pthread_mutex_unlock(&cond_lock);
	return rc;
}

static long c_cond_wait(void)
{
	int rc = 0;

	start_thread(signal_cond_at_deadline, NULL);
	pthread_mutex_lock(&cond_lock);
	while (!cond_flag && rc == 0) /* the predicate loop every correct caller has */
		rc = pthread_cond_wait(&cond, &cond_lock);
	pthread_mutex_unlock(&cond_lock);
	return rc;
}

static long c_mutex_lock(void)
{
	sem_init(&held_locked, 0, 0);
	start_thread(hold_until_deadline, NULL);
	sem_wait_retry(&held_locked);
	int rc = pthread_mutex_lock(&held);
	if (rc == 0)
		pthread_mutex_unlock(&held);
	return rc;
}

static long c_pthread_join(void)
{
	pthread_t t = start_thread(exit_at_deadline, NULL);

	return pthread_join(t, NULL);
}

static long reaped(pid_t got, pid_t child, int status)
{
	if (got != child)
		return got;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1000 + status;
}

static long c_waitpid(void)
{
	int status = 0;
	pid_t child = fork_child();

	return reaped(waitpid(child, &status, 0), child, status);
}

static long c_wait4(void)
{
	int status = 0;
	struct rusage ru;
	pid_t child = fork_child();

	return reaped(wait4(child, &status, 0, &ru), child, status);
}

static long c_read_pipe(void)
{
	int fds[2];
	char c;

	make_pipe(fds);
	start_thread(write_at_deadline, &fds[1]);
	return read(fds[0], &c, 1);
}

static long c_read_rcvtimeo(void)
{
	int sv[2];
	char c;

	make_socketpair(sv);
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	return read(sv[0], &c, 1);
}

static long c_recv(void)
{
	int sv[2];
	char c;

	make_socketpair(sv);
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	return recv(sv[0], &c, 1, 0);
}

static long c_recvfrom(void)
{
	int sv[2];
	char c;

	make_socketpair(sv);
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	return recvfrom(sv[0], &c, 1, 0, NULL, NULL);
}

static long c_recvmsg(void)
{
	int sv[2];
	char c;
	struct iovec iov = { &c, 1 };
	struct msghdr msg;

	make_socketpair(sv);
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	memset(&msg, 0, sizeof msg);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	return recvmsg(sv[0], &msg, 0);
}

static long c_accept(void)
{
	struct sockaddr_un addr;
	socklen_t len;
	int lfd = unix_listener(&addr, &len, 1);

	set_timeo(lfd, SO_RCVTIMEO, timeout_ms);
	return accept(lfd, NULL, NULL);
}

static long c_accept4(void)
{
	struct sockaddr_un addr;
	socklen_t len;
	int lfd = unix_listener(&addr, &len, 1);

	set_timeo(lfd, SO_RCVTIMEO, timeout_ms);
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

/* connect() to an AF_UNIX listener whose backlog is full blocks until the
 * listener accepts (never here) or SO_SNDTIMEO expires: -1 EAGAIN. */
static long c_connect(void)
{
	struct sockaddr_un addr;
	socklen_t len;
	int lfd = unix_listener(&addr, &len, 0);
	int first = socket(AF_UNIX, SOCK_STREAM, 0);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	(void)lfd;
	if (first < 0 || fd < 0)
		die("socket");
	if (connect(first, (struct sockaddr *)&addr, len) != 0) /* fills the backlog */
		die("connect (first)");
	set_timeo(fd, SO_SNDTIMEO, timeout_ms);
	return connect(fd, (struct sockaddr *)&addr, len);
}

struct call {
	const char *name;
	long (*fn)(void);
};

static const struct call battery[] = {
	{ "nanosleep", c_nanosleep },
	{ "clock_nanosleep", c_clock_nanosleep },
	{ "clock_nanosleep_abs", c_clock_nanosleep_abs },
	{ "usleep", c_usleep },
	{ "sleep", c_sleep },
	{ "poll", c_poll },
	{ "poll_wake", c_poll_wake },
	{ "ppoll", c_ppoll },
	{ "select", c_select },
	{ "pselect", c_pselect },
	{ "epoll_wait", c_epoll_wait },
	{ "epoll_pwait", c_epoll_pwait },
	{ "epoll_eventfd", c_epoll_eventfd },
	{ "sigtimedwait", c_sigtimedwait },
	{ "sigwaitinfo", c_sigwaitinfo },
	{ "sigsuspend", c_sigsuspend },
	{ "pause", c_pause },
	{ "sem_timedwait", c_sem_timedwait },
	{ "sem_wait", c_sem_wait },
	{ "cond_timedwait", c_cond_timedwait },
	{ "cond_wait", c_cond_wait },
	{ "mutex_lock", c_mutex_lock },
	{ "pthread_join", c_pthread_join },
	{ "waitpid", c_waitpid },
	{ "wait4", c_wait4 },
	{ "read_pipe", c_read_pipe },
	{ "read_rcvtimeo", c_read_rcvtimeo },
	{ "recv", c_recv },
	{ "recvfrom", c_recvfrom },
	{ "recvmsg", c_recvmsg },
	{ "accept", c_accept },
	{ "accept4", c_accept4 },
	{ "connect", c_connect },
};

#define NR_BATTERY (sizeof battery / sizeof battery[0])

static void print_result(const char *name, long rc, int err, int64_t t0)
{
	int64_t elapsed = now_ns() - t0;

	printf("%s rc=%ld errno=%s elapsed_ms=%lld\n", name, rc,
	       rc == -1 ? strerrorname_np(err) : "0", (long long)((elapsed + 500000) / 1000000));
	fflush(stdout);
}

static void run_battery_call(const struct call *c)
{
	int64_t t0 = now_ns();
	long rc;
	int err;

	deadline_ns = t0 + timeout_ms * 1000000LL;
	errno = 0;
	rc = c->fn();
	err = errno;
	print_result(c->name, rc, err, t0);
}

/* ---- retrypoll: the classic bug, retrying with the original timeout ---- */

static void run_retrypoll(void)
{
	int fds[2];
	long retries = 0;
	int64_t t0, give_up;
	int rc, err;

	make_pipe(fds);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	t0 = now_ns();
	give_up = t0 + (10 * timeout_ms + 1000) * 1000000LL;
	for (;;) {
		errno = 0;
		rc = poll(&p, 1, (int)timeout_ms);
		err = errno;
		if (!(rc < 0 && err == EINTR) || now_ns() >= give_up)
			break;
		retries++;
	}
	if (retries)
		fprintf(stderr, "blocking: retrypoll: %ld EINTR retries\n", retries);
	print_result("retrypoll", rc, err, t0);
}

/* ---- churn: many short timed calls, so ticks land on entries and exits ---- */

#define CHURN_US 20 /* timeout of most churn calls */

static int ch_pipe[2], ch_epoll;
static sem_t ch_sem;

static struct timespec us_from_now(clockid_t clk, long us)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	ts.tv_nsec += us * 1000L;
	while (ts.tv_nsec >= 1000000000L) {
		ts.tv_nsec -= 1000000000L;
		ts.tv_sec++;
	}
	return ts;
}

static long h_nanosleep(void)
{
	struct timespec ts = { 0, CHURN_US * 1000L };

	return nanosleep(&ts, NULL);
}

static long h_clock_nanosleep(void)
{
	struct timespec ts = { 0, CHURN_US * 1000L };

	return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
}

static long h_clock_nanosleep_abs(void)
{
	struct timespec ts = us_from_now(CLOCK_MONOTONIC, CHURN_US);

	return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static long h_usleep(void)
{
	return usleep(CHURN_US);
}

static long h_poll(void)
{
	struct pollfd p = { .fd = ch_pipe[0], .events = POLLIN };

	return poll(&p, 1, 1);
}

static long h_ppoll(void)
{
	struct pollfd p = { .fd = ch_pipe[0], .events = POLLIN };
	struct timespec ts = { 0, CHURN_US * 1000L };

	return ppoll(&p, 1, &ts, NULL);
}

static long h_select(void)
{
	fd_set r;
	struct timeval tv = { 0, CHURN_US };

	FD_ZERO(&r);
	FD_SET(ch_pipe[0], &r);
	return select(ch_pipe[0] + 1, &r, NULL, NULL, &tv);
}

static long h_pselect(void)
{
	fd_set r;
	struct timespec ts = { 0, CHURN_US * 1000L };

	FD_ZERO(&r);
	FD_SET(ch_pipe[0], &r);
	return pselect(ch_pipe[0] + 1, &r, NULL, NULL, &ts, NULL);
}

static long h_epoll_wait(void)
{
	struct epoll_event ev;

	return epoll_wait(ch_epoll, &ev, 1, 1);
}

static long h_epoll_pwait(void)
{
	struct epoll_event ev;

	return epoll_pwait(ch_epoll, &ev, 1, 1, NULL);
}

static long h_sigtimedwait(void)
{
	sigset_t set = usr1_set();
	struct timespec ts = { 0, CHURN_US * 1000L };

	return sigtimedwait(&set, NULL, &ts);
}

static long h_sem_timedwait(void)
{
	struct timespec ts = us_from_now(CLOCK_REALTIME, CHURN_US);

	return sem_timedwait(&ch_sem, &ts);
}

static long h_cond_timedwait(void)
{
	struct timespec ts = us_from_now(CLOCK_REALTIME, CHURN_US);

	pthread_mutex_lock(&cond_lock);
	int rc = pthread_cond_timedwait(&cond, &cond_lock, &ts);
	pthread_mutex_unlock(&cond_lock);
	return rc;
}

struct churn_call {
	const char *name;
	long (*fn)(void);
	long min_us;   /* it never returns sooner */
	long want_rc;
	int want_errno; /* when want_rc is -1 */
};

static const struct churn_call churn_calls[] = {
	{ "nanosleep", h_nanosleep, CHURN_US, 0, 0 },
	{ "clock_nanosleep", h_clock_nanosleep, CHURN_US, 0, 0 },
	{ "clock_nanosleep_abs", h_clock_nanosleep_abs, CHURN_US, 0, 0 },
	{ "usleep", h_usleep, CHURN_US, 0, 0 },
	{ "poll", h_poll, 1000, 0, 0 },
	{ "ppoll", h_ppoll, CHURN_US, 0, 0 },
	{ "select", h_select, CHURN_US, 0, 0 },
	{ "pselect", h_pselect, CHURN_US, 0, 0 },
	{ "epoll_wait", h_epoll_wait, 1000, 0, 0 },
	{ "epoll_pwait", h_epoll_pwait, 1000, 0, 0 },
	{ "sigtimedwait", h_sigtimedwait, CHURN_US, -1, EAGAIN },
	{ "sem_timedwait", h_sem_timedwait, CHURN_US, -1, ETIMEDOUT },
	{ "cond_timedwait", h_cond_timedwait, CHURN_US, ETIMEDOUT, 0 },
};

#define NR_CHURN (sizeof churn_calls / sizeof churn_calls[0])

/* Cycles through churn_calls for timeout_ms; every call must time out
 * normally (its usual result, never sooner than its timeout). Prints
 * "churn calls=N bad=M elapsed_ms=E" and the first bad calls on stderr. */
static void run_churn(void)
{
	long calls = 0, bad = 0;
	int64_t t0, end;

	make_pipe(ch_pipe);
	ch_epoll = epoll_on(ch_pipe[0]);
	sem_init(&ch_sem, 0, 0);

	t0 = now_ns();
	end = t0 + timeout_ms * 1000000LL;
	for (size_t i = 0; now_ns() < end; i = (i + 1) % NR_CHURN) {
		const struct churn_call *c = &churn_calls[i];
		int64_t start = now_ns(), took;
		long rc;
		int err;

		errno = 0;
		rc = c->fn();
		err = errno;
		took = now_ns() - start;
		calls++;
		if (rc == c->want_rc && (rc != -1 || err == c->want_errno) &&
		    took >= c->min_us * 1000LL - 5000)
			continue;
		if (bad++ < 5)
			fprintf(stderr, "blocking: churn: %s rc=%ld errno=%s after %lld us\n", c->name,
				rc, rc == -1 ? strerrorname_np(err) : "0", (long long)(took / 1000));
	}
	printf("churn calls=%ld bad=%ld elapsed_ms=%lld\n", calls, bad,
	       (long long)((now_ns() - t0 + 500000) / 1000000));
}

/* ---- realsignal: a real signal still interrupts the calls ---- */

static pthread_t main_thread;
static int64_t armed_at;  /* realsignal: when the current call started */
static sem_t armed;       /* posted when armed_at is set */

static void usr1_handler(int sig)
{
	(void)sig;
	usr1_hits++;
}

/* Sends SIGUSR1 to the main thread REAL_SIGNAL_DELAY_MS after each call starts. */
static void *real_signaller(void *arg)
{
	int rounds = *(int *)arg;

	for (int i = 0; i < rounds; i++) {
		sem_wait_retry(&armed);
		sleep_until(armed_at + REAL_SIGNAL_DELAY_MS * 1000000LL);
		pthread_kill(main_thread, SIGUSR1);
	}
	return NULL;
}

static int rs_pipe[2], rs_sock[2], rs_listen, rs_epoll;
static sem_t rs_sem;
static pid_t rs_child;

static long r_pause(void) { return pause(); }

static long r_sigsuspend(void)
{
	sigset_t mask;

	pthread_sigmask(SIG_SETMASK, NULL, &mask);
	return sigsuspend(&mask);
}

static long r_nanosleep(void)
{
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return nanosleep(&ts, NULL);
}

static long r_clock_nanosleep(void)
{
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
}

static long r_poll(void)
{
	struct pollfd p = { .fd = rs_pipe[0], .events = POLLIN };

	return poll(&p, 1, REAL_SIGNAL_CALL_MS);
}

static long r_ppoll(void)
{
	struct pollfd p = { .fd = rs_pipe[0], .events = POLLIN };
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return ppoll(&p, 1, &ts, NULL);
}

static long r_select(void)
{
	fd_set r;
	struct timeval tv = ms_to_tv(REAL_SIGNAL_CALL_MS);

	FD_ZERO(&r);
	FD_SET(rs_pipe[0], &r);
	return select(rs_pipe[0] + 1, &r, NULL, NULL, &tv);
}

static long r_epoll_wait(void)
{
	struct epoll_event ev;

	return epoll_wait(rs_epoll, &ev, 1, REAL_SIGNAL_CALL_MS);
}

static long r_sigtimedwait(void)
{
	sigset_t set;
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	sigemptyset(&set);
	sigaddset(&set, SIGWINCH); /* blocked, never sent */
	return sigtimedwait(&set, NULL, &ts);
}

static long r_read(void)
{
	char c;

	return read(rs_pipe[0], &c, 1);
}

static long r_recv(void)
{
	char c;

	return recv(rs_sock[0], &c, 1, 0);
}

static long r_accept(void)
{
	return accept(rs_listen, NULL, NULL);
}

static long r_sem_wait(void)
{
	return sem_wait(&rs_sem);
}

static long r_waitpid(void)
{
	int status;
	pid_t got = waitpid(rs_child, &status, 0);

	return got == rs_child ? 0 : got;
}

static const struct call real_calls[] = {
	{ "pause", r_pause },
	{ "sigsuspend", r_sigsuspend },
	{ "nanosleep", r_nanosleep },
	{ "clock_nanosleep", r_clock_nanosleep },
	{ "poll", r_poll },
	{ "ppoll", r_ppoll },
	{ "select", r_select },
	{ "epoll_wait", r_epoll_wait },
	{ "sigtimedwait", r_sigtimedwait },
	{ "read", r_read },
	{ "recv", r_recv },
	{ "accept", r_accept },
	{ "sem_wait", r_sem_wait },
	{ "waitpid", r_waitpid },
};

#define NR_REAL (sizeof real_calls / sizeof real_calls[0])

static void run_realsignal(void)
{
	struct sigaction sa;
	struct sockaddr_un addr;
	socklen_t len;
	sigset_t set;
	int rounds = (int)NR_REAL;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = usr1_handler;
	sa.sa_flags = 0; /* no SA_RESTART: every call must see EINTR */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) != 0)
		die("sigaction");
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* main only; the others keep it blocked */
	sigemptyset(&set);
	sigaddset(&set, SIGWINCH);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	make_pipe(rs_pipe);
	make_socketpair(rs_sock);
	rs_listen = unix_listener(&addr, &len, 1);
	rs_epoll = epoll_on(rs_pipe[0]);
	sem_init(&rs_sem, 0, 0);
	sem_init(&armed, 0, 0);
	deadline_ns = now_ns() + 3600 * 1000000000LL;
	rs_child = fork_child(); /* exits in an hour; killed below */

	main_thread = pthread_self();
	pthread_t signaller = start_thread(real_signaller, &rounds);
	for (size_t i = 0; i < NR_REAL; i++) {
		int64_t t0 = now_ns();
		long rc;
		int err;

		armed_at = t0;
		sem_post(&armed);
		errno = 0;
		rc = real_calls[i].fn();
		err = errno;
		print_result(real_calls[i].name, rc, err, t0);
	}
	pthread_join(signaller, NULL);
	kill(rs_child, SIGKILL);
	while (waitpid(rs_child, NULL, 0) < 0 && errno == EINTR)
		;
	if (usr1_hits != (int)NR_REAL)
		fprintf(stderr, "blocking: realsignal: %d SIGUSR1 handled, want %d\n",
			(int)usr1_hits, (int)NR_REAL);
}

static void usage(void)
{
	fprintf(stderr, "usage: blocking CALL TIMEOUT_MS | retrypoll TIMEOUT_MS | churn MS | realsignal | list\n"
			"calls:");
	for (size_t i = 0; i < NR_BATTERY; i++)
		fprintf(stderr, " %s", battery[i].name);
	fprintf(stderr, "\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const struct call *c = NULL;
	struct sigaction sa;
	sigset_t set;

	if (argc == 2 && !strcmp(argv[1], "list")) {
		for (size_t i = 0; i < NR_BATTERY; i++)
			printf("%s\n", battery[i].name);
		return 0;
	}
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "realsignal") != 0) {
		if (argc != 3)
			usage();
		timeout_ms = strtol(argv[2], NULL, 10);
		if (timeout_ms < 1 || timeout_ms > 60000)
			usage();
		if (strcmp(argv[1], "retrypoll") != 0 && strcmp(argv[1], "churn") != 0) {
			for (size_t i = 0; i < NR_BATTERY; i++)
				if (!strcmp(argv[1], battery[i].name))
					c = &battery[i];
			if (!c)
				usage();
		}
	}

	/* SIGUSR1 has a do-nothing handler (so sigsuspend/pause return) and is
	 * blocked in every thread; only the call under test unblocks it. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = usr1_handler;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) != 0)
		die("sigaction");
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	start_thread(busy_main, NULL);

	if (!strcmp(argv[1], "realsignal"))
		run_realsignal();
	else if (!strcmp(argv[1], "retrypoll"))
		run_retrypoll();
	else if (!strcmp(argv[1], "churn"))
		run_churn();
	else
		run_battery_call(c);
	return 0;
}
