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
 *     blocking realsignal [CALL...]  a real SIGUSR1 (handler without SA_RESTART),
 *                                  sent by another thread 200 ms after the main
 *                                  thread blocks, interrupts each of a list of
 *                                  calls (all, or the ones named): one line per
 *                                  call, -1 EINTR (or the call's own EINTR
 *                                  code) after ~200 ms
 *     blocking transfer N_MB       writes N_MB MiB into a pipe in 16 MiB write()
 *                                  calls while a slow reader (4 KiB reads)
 *                                  drains it; prints "transfer writes=W short=S
 *                                  eintr=E written=B read=R elapsed_ms=T": a
 *                                  blocking write to a pipe returns the full
 *                                  count unless a signal handler runs during it
 *     blocking list                the battery's call names, one per line
 *
 * Helpers that must wait (a writer, a child, a lock holder) wait on absolute
 * CLOCK_MONOTONIC deadlines and retry on EINTR, so only the call under test
 * can be disturbed by a profiler. waitpid/wait4 print rc=0 when they reaped
 * the child (its pid is not deterministic), open_fifo rc=0 when it opened.
 *
 * Built twice: build/progs/blocking, and build/progs/blocking_fortify with
 * -D_FORTIFY_SOURCE=2, where poll, ppoll, read, recv and recvfrom become
 * __poll_chk, __ppoll_chk, __read_chk, __recv_chk and __recvfrom_chk. glibc
 * only calls those when the buffer size is known and the length is not a
 * compile-time constant, hence the volatile lengths (one_fd, one_byte).
 *
 * The syscall_* entries make the same calls through syscall(), which no
 * wrapper of a libc function sees. System V IPC objects, the aio context and
 * the temporary directory (FIFO, lock files) are removed at exit; POSIX
 * message queues are unlinked as soon as they are open. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/futex.h>
#include <mqueue.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
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

/* Lengths the compiler cannot see, so that the fortified build calls the
 * __*_chk variants (see the top). */
static volatile nfds_t one_fd = 1;
static volatile size_t one_byte = 1;

#define FOREVER_NS (3600 * 1000000000LL) /* "never" for a helper: the process exits first */

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
static pthread_rwlock_t held_rw = PTHREAD_RWLOCK_INITIALIZER;
static sem_t held_locked;    /* posted once the holder has the lock */
static int64_t hold_until;   /* CLOCK_MONOTONIC: when the holder lets go */

static void *hold_until_deadline(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&held);
	sem_post(&held_locked);
	sleep_until(hold_until);
	pthread_mutex_unlock(&held);
	return NULL;
}

static void *hold_rw_until_deadline(void *arg)
{
	(void)arg;
	pthread_rwlock_wrlock(&held_rw);
	sem_post(&held_locked);
	sleep_until(hold_until);
	pthread_rwlock_unlock(&held_rw);
	return NULL;
}

/* Starts `holder` and returns once it holds its lock until `until`. */
static void hold_lock(void *(*holder)(void *), int64_t until)
{
	hold_until = until;
	sem_init(&held_locked, 0, 0);
	start_thread(holder, NULL);
	sem_wait_retry(&held_locked);
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
	int n = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "wpt-blocking-%d",
			 (int)getpid());
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	if (bind(fd, (struct sockaddr *)addr, *len) != 0)
		die("bind");
	if (listen(fd, backlog) != 0)
		die("listen");
	return fd;
}

/* ---- resources of the newer calls, removed at exit ---- */

#define MAX_IPC 4
#define MSG_BYTES 1024           /* msgsnd_full: one message; the queue holds msgmnb bytes */
#define MQ_BYTES 16              /* POSIX queues: message size (one message per queue) */
#define FULL_BYTES (4u << 20)    /* *_full: one write of this many bytes */

static int msq_ids[MAX_IPC], n_msq, sem_ids[MAX_IPC], n_sem;
static volatile int exiting; /* cleanup() runs: the objects helpers use go away */
static aio_context_t aio_ctx;
static char tmp_dir[256], fifo_path[sizeof tmp_dir + 8];

struct wpt_msg {
	long mtype;
	char mtext[MSG_BYTES];
};

static void cleanup(void)
{
	exiting = 1;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (int i = 0; i < n_msq; i++)
		msgctl(msq_ids[i], IPC_RMID, NULL);
	for (int i = 0; i < n_sem; i++)
		semctl(sem_ids[i], 0, IPC_RMID);
	if (aio_ctx)
		syscall(SYS_io_destroy, aio_ctx);
	if (fifo_path[0])
		unlink(fifo_path);
	if (tmp_dir[0])
		rmdir(tmp_dir);
}

/* A System V message queue, empty, or full when `full` (msgsnd blocks). */
static int new_msq(int full)
{
	static struct wpt_msg m = { 1, "wpt" };
	int id = msgget(IPC_PRIVATE, IPC_CREAT | 0600);

	if (id < 0)
		die("msgget");
	if (n_msq < MAX_IPC)
		msq_ids[n_msq++] = id;
	while (full && msgsnd(id, &m, MSG_BYTES, IPC_NOWAIT) == 0)
		;
	if (full && errno != EAGAIN)
		die("msgsnd (filling the queue)");
	return id;
}

/* A System V semaphore set of one semaphore, value 0. */
static int new_sem(void)
{
	int id = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);

	if (id < 0)
		die("semget");
	if (n_sem < MAX_IPC)
		sem_ids[n_sem++] = id;
	return id;
}

/* A POSIX message queue of one MQ_BYTES message, empty or full, unlinked
 * right away (it lives while open). */
static mqd_t new_mq(int full)
{
	static int seq;
	char name[64];
	struct mq_attr attr = { .mq_maxmsg = 1, .mq_msgsize = MQ_BYTES };

	snprintf(name, sizeof name, "/wpt-blocking-%d-%d", (int)getpid(), seq++);
	mqd_t q = mq_open(name, O_RDWR | O_CREAT | O_EXCL, 0600, &attr);
	if (q == (mqd_t)-1)
		die("mq_open");
	mq_unlink(name);
	if (full && mq_send(q, "full", 5, 0) != 0)
		die("mq_send (filling the queue)");
	return q;
}

/* A private temporary directory (FIFO, lock files), removed at exit. */
static const char *temp_dir(void)
{
	if (!tmp_dir[0]) {
		const char *base = getenv("TMPDIR");

		if (!base || !*base || strlen(base) > sizeof tmp_dir - 32)
			base = "/tmp";
		snprintf(tmp_dir, sizeof tmp_dir, "%s/wpt-blocking-XXXXXX", base);
		if (!mkdtemp(tmp_dir)) {
			tmp_dir[0] = 0;
			die("mkdtemp");
		}
	}
	return tmp_dir;
}

/* An unlinked file open twice: two open file descriptions of one inode
 * (flock and OFD locks of one do not let the other through). */
static void open_twice(int fds[2])
{
	char path[sizeof tmp_dir + 16];

	snprintf(path, sizeof path, "%s/lock-XXXXXX", temp_dir());
	fds[0] = mkstemp(path);
	if (fds[0] < 0)
		die("mkstemp");
	unlink(path);
	snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
	fds[1] = open(path, O_RDWR);
	if (fds[1] < 0)
		die("open /proc/self/fd");
}

/* A FIFO in the temporary directory, removed at exit. */
static void make_fifo(void)
{
	snprintf(fifo_path, sizeof fifo_path, "%s/fifo", temp_dir());
	if (mkfifo(fifo_path, 0600) != 0) {
		fifo_path[0] = 0;
		die("mkfifo");
	}
}

static int ofd_lock(int fd, short type, int cmd)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET }; /* the whole file, l_pid 0 */

	return fcntl(fd, cmd, &fl);
}

/* A child that takes a POSIX (per-process) write lock on all of `fd`, and
 * holds it until `until`; returns once the child has it. The child only
 * makes async-signal-safe calls. */
static pid_t fork_lock_holder(int fd, int64_t until)
{
	int p[2];
	char c;
	ssize_t n;

	make_pipe(p);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(p[0]);
		if (ofd_lock(fd, F_WRLCK, F_SETLK) != 0)
			_exit(3);
		write_byte(p[1]);
		sleep_until(until);
		ofd_lock(fd, F_UNLCK, F_SETLK);
		_exit(0);
	}
	close(p[1]);
	while ((n = read(p[0], &c, sizeof c)) < 0)
		if (errno != EINTR)
			die("read (lock holder)");
	if (n != 1) {
		fprintf(stderr, "blocking: the lock-holding child could not lock\n");
		exit(2);
	}
	close(p[0]);
	return pid;
}

/* Fills a pipe or stream socket until a write would block. */
static void fill(int fd)
{
	static char chunk[4096];
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
		die("fcntl O_NONBLOCK");
	for (;;) {
		if (write(fd, chunk, sizeof chunk) < 0) {
			if (errno == EAGAIN)
				break;
			if (errno != EINTR)
				die("write (fill)");
		}
	}
	if (fcntl(fd, F_SETFL, fl) != 0)
		die("fcntl");
}

static char full_buf[FULL_BYTES];
static volatile size_t full_bytes = FULL_BYTES;

struct drain {
	int fd;
	size_t want;
};

/* Reads d->want bytes from d->fd from deadline_ns on. */
static void *drain_at_deadline(void *arg)
{
	struct drain *d = arg;
	static char buf[65536];
	size_t got = 0;

	sleep_until(deadline_ns);
	while (got < d->want) {
		ssize_t n = read(d->fd, buf, sizeof buf);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("read (drain)");
		got += (size_t)n;
	}
	return NULL;
}

static void start_drain(int fd, size_t want)
{
	static struct drain d;

	d.fd = fd;
	d.want = want;
	start_thread(drain_at_deadline, &d);
}

/* A helper's call failed: fatal, unless the call under test has already
 * returned and the process is removing the object at exit. */
static void *helper_failed(const char *what)
{
	if (!exiting)
		die(what);
	return NULL;
}

static int msq_arg;

static void *msgsnd_at_deadline(void *arg)
{
	struct wpt_msg m = { 1, "wpt" };

	(void)arg;
	sleep_until(deadline_ns);
	while (msgsnd(msq_arg, &m, 4, 0) != 0)
		if (errno != EINTR)
			return helper_failed("msgsnd (helper)");
	return NULL;
}

static void *msgrcv_at_deadline(void *arg)
{
	static struct wpt_msg m;

	(void)arg;
	sleep_until(deadline_ns);
	while (msgrcv(msq_arg, &m, sizeof m.mtext, 0, 0) < 0)
		if (errno != EINTR)
			return helper_failed("msgrcv (helper)");
	return NULL;
}

static int sem_arg;

static void *semop_at_deadline(void *arg)
{
	struct sembuf up = { 0, 1, 0 };

	(void)arg;
	sleep_until(deadline_ns);
	while (semop(sem_arg, &up, 1) != 0)
		if (errno != EINTR)
			return helper_failed("semop (helper)");
	return NULL;
}

static mqd_t mq_arg;

static void *mq_send_at_deadline(void *arg)
{
	(void)arg;
	sleep_until(deadline_ns);
	while (mq_send(mq_arg, "wpt", 4, 0) != 0)
		if (errno != EINTR)
			die("mq_send (helper)");
	return NULL;
}

static void *mq_receive_at_deadline(void *arg)
{
	char buf[MQ_BYTES];

	(void)arg;
	sleep_until(deadline_ns);
	while (mq_receive(mq_arg, buf, sizeof buf, NULL) < 0)
		if (errno != EINTR)
			die("mq_receive (helper)");
	return NULL;
}

static int unlock_fd;

static void *flock_unlock_at_deadline(void *arg)
{
	(void)arg;
	sleep_until(deadline_ns);
	if (flock(unlock_fd, LOCK_UN) != 0)
		die("flock LOCK_UN");
	return NULL;
}

static void *ofd_unlock_at_deadline(void *arg)
{
	(void)arg;
	sleep_until(deadline_ns);
	if (ofd_lock(unlock_fd, F_UNLCK, F_OFD_SETLK) != 0)
		die("fcntl F_OFD_SETLK F_UNLCK");
	return NULL;
}

static void *open_fifo_at_deadline(void *arg)
{
	(void)arg;
	sleep_until(deadline_ns);
	while (open(fifo_path, O_WRONLY) < 0) /* left open: the reader must not see EOF */
		if (errno != EINTR)
			return helper_failed("open (FIFO writer)"); /* removed at exit */
	return NULL;
}

static void *sleep_forever(void *arg)
{
	sleep_until(now_ns() + FOREVER_NS);
	return arg;
}

static struct timespec monotonic_deadline(void)
{
	return ns_to_ts(deadline_ns);
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
	return poll(&p, one_fd, (int)timeout_ms);
}

static long c_poll_wake(void)
{
	int fds[2];

	make_pipe(fds);
	start_thread(write_at_deadline, &fds[1]);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	return poll(&p, one_fd, -1);
}

static long c_ppoll(void)
{
	int fds[2];

	make_pipe(fds);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	struct timespec ts = ms_to_ts(timeout_ms);
	return ppoll(&p, one_fd, &ts, NULL);
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
	hold_lock(hold_until_deadline, deadline_ns);
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
	return read(fds[0], &c, one_byte);
}

static long c_read_rcvtimeo(void)
{
	int sv[2];
	char c;

	make_socketpair(sv);
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	return read(sv[0], &c, one_byte);
}

static long c_recv(void)
{
	int sv[2];
	char c;

	make_socketpair(sv);
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	return recv(sv[0], &c, one_byte, 0);
}

static long c_recvfrom(void)
{
	int sv[2];
	char c;

	make_socketpair(sv);
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	return recvfrom(sv[0], &c, one_byte, 0, NULL, NULL);
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

/* -- through syscall(): no libc wrapper of the call itself is involved -- */

static long c_syscall_nanosleep(void)
{
	struct timespec ts = ms_to_ts(timeout_ms);

	return syscall(SYS_nanosleep, &ts, NULL);
}

static long c_syscall_clock_nanosleep(void)
{
	struct timespec ts = ms_to_ts(timeout_ms);

	return syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL);
}

/* x86-64 has the old poll and epoll_wait system calls; other architectures
 * only ppoll and epoll_pwait: say so instead of passing silently. */
__attribute__((unused)) static void no_syscall(const char *name)
{
	fprintf(stderr, "blocking: %s: no such system call on this architecture\n", name);
	exit(2);
}

static long c_syscall_poll(void)
{
#ifdef SYS_poll
	int fds[2];

	make_pipe(fds);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	return syscall(SYS_poll, &p, 1, (int)timeout_ms);
#else
	no_syscall("poll");
	return -1;
#endif
}

static long c_syscall_ppoll(void)
{
	int fds[2];

	make_pipe(fds);
	struct pollfd p = { .fd = fds[0], .events = POLLIN };
	struct timespec ts = ms_to_ts(timeout_ms);
	return syscall(SYS_ppoll, &p, 1, &ts, NULL, 8);
}

static long c_syscall_epoll_wait(void)
{
#ifdef SYS_epoll_wait
	int fds[2];
	struct epoll_event ev;

	make_pipe(fds);
	return syscall(SYS_epoll_wait, epoll_on(fds[0]), &ev, 1, (int)timeout_ms);
#else
	no_syscall("epoll_wait");
	return -1;
#endif
}

static long c_syscall_epoll_pwait(void)
{
	int fds[2];
	struct epoll_event ev;

	make_pipe(fds);
	return syscall(SYS_epoll_pwait, epoll_on(fds[0]), &ev, 1, (int)timeout_ms, NULL, 8);
}

static uint32_t futex_word; /* 0, and stays 0: FUTEX_WAIT on 0 sleeps until the timeout */

static long c_syscall_futex_wait(void)
{
	struct timespec ts = ms_to_ts(timeout_ms);

	return syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
}

static long c_syscall_futex_wait_bitset(void)
{
	struct timespec ts = monotonic_deadline(); /* absolute, CLOCK_MONOTONIC */

	return syscall(SYS_futex, &futex_word, FUTEX_WAIT_BITSET_PRIVATE, 0, &ts, NULL,
		       FUTEX_BITSET_MATCH_ANY);
}

static long c_syscall_semtimedop(void)
{
	struct sembuf down = { 0, -1, 0 };
	struct timespec ts = ms_to_ts(timeout_ms);

	return syscall(SYS_semtimedop, new_sem(), &down, 1, &ts);
}

static long c_syscall_msgrcv(void)
{
	static struct wpt_msg m;

	msq_arg = new_msq(0);
	start_thread(msgsnd_at_deadline, NULL);
	return syscall(SYS_msgrcv, msq_arg, &m, sizeof m.mtext, 0L, 0);
}

/* An aio context with nothing submitted: io_getevents waits out its timeout. */
static long c_syscall_io_getevents(void)
{
	struct io_event ev;
	struct timespec ts = ms_to_ts(timeout_ms);

	if (syscall(SYS_io_setup, 1, &aio_ctx) != 0)
		die("io_setup");
	return syscall(SYS_io_getevents, aio_ctx, 1L, 1L, &ev, &ts);
}

static long c_syscall_read_pipe(void)
{
	int fds[2];
	char c;

	make_pipe(fds);
	start_thread(write_at_deadline, &fds[1]);
	return syscall(SYS_read, fds[0], &c, 1);
}

static long c_syscall_wait4(void)
{
	int status = 0;
	pid_t child = fork_child();

	return reaped((pid_t)syscall(SYS_wait4, child, &status, 0, NULL), child, status);
}

/* -- System V IPC -- */

static long c_msgrcv(void)
{
	static struct wpt_msg m;

	msq_arg = new_msq(0);
	start_thread(msgsnd_at_deadline, NULL);
	return msgrcv(msq_arg, &m, sizeof m.mtext, 0, 0);
}

static long c_msgsnd_full(void)
{
	static struct wpt_msg m = { 1, "wpt" };

	msq_arg = new_msq(1);
	start_thread(msgrcv_at_deadline, NULL);
	return msgsnd(msq_arg, &m, MSG_BYTES, 0);
}

static long c_semop(void)
{
	struct sembuf down = { 0, -1, 0 };

	sem_arg = new_sem();
	start_thread(semop_at_deadline, NULL);
	return semop(sem_arg, &down, 1);
}

static long c_semtimedop(void)
{
	struct sembuf down = { 0, -1, 0 };
	struct timespec ts = ms_to_ts(timeout_ms);

	return semtimedop(new_sem(), &down, 1, &ts);
}

/* -- POSIX message queues -- */

static long c_mq_receive(void)
{
	char buf[MQ_BYTES];

	mq_arg = new_mq(0);
	start_thread(mq_send_at_deadline, NULL);
	return mq_receive(mq_arg, buf, sizeof buf, NULL);
}

static long c_mq_timedreceive(void)
{
	char buf[MQ_BYTES];
	struct timespec ts = realtime_deadline();

	return mq_timedreceive(new_mq(0), buf, sizeof buf, NULL, &ts);
}

static long c_mq_send_full(void)
{
	mq_arg = new_mq(1);
	start_thread(mq_receive_at_deadline, NULL);
	return mq_send(mq_arg, "wpt", 4, 0);
}

static long c_mq_timedsend_full(void)
{
	struct timespec ts = realtime_deadline();

	return mq_timedsend(new_mq(1), "wpt", 4, 0, &ts);
}

static long c_epoll_pwait2(void)
{
	int fds[2];
	struct epoll_event ev;
	struct timespec ts = ms_to_ts(timeout_ms);

	make_pipe(fds);
	return epoll_pwait2(epoll_on(fds[0]), &ev, 1, &ts, NULL);
}

/* -- pthread: the clock and timed variants, read-write locks, timed joins -- */

static long c_cond_clockwait(void)
{
	struct timespec ts = monotonic_deadline();

	pthread_mutex_lock(&cond_lock);
	int rc = pthread_cond_clockwait(&cond, &cond_lock, CLOCK_MONOTONIC, &ts);
	pthread_mutex_unlock(&cond_lock);
	return rc;
}

static long c_mutex_timedlock(void)
{
	hold_lock(hold_until_deadline, now_ns() + FOREVER_NS);
	struct timespec ts = realtime_deadline();
	return pthread_mutex_timedlock(&held, &ts);
}

static long c_mutex_clocklock(void)
{
	hold_lock(hold_until_deadline, now_ns() + FOREVER_NS);
	struct timespec ts = monotonic_deadline();
	return pthread_mutex_clocklock(&held, CLOCK_MONOTONIC, &ts);
}

static long c_sem_clockwait(void)
{
	sem_t sem;
	struct timespec ts = monotonic_deadline();

	sem_init(&sem, 0, 0);
	return sem_clockwait(&sem, CLOCK_MONOTONIC, &ts);
}

static long c_rwlock_rdlock(void)
{
	hold_lock(hold_rw_until_deadline, deadline_ns);
	int rc = pthread_rwlock_rdlock(&held_rw);
	if (rc == 0)
		pthread_rwlock_unlock(&held_rw);
	return rc;
}

static long c_rwlock_wrlock(void)
{
	hold_lock(hold_rw_until_deadline, deadline_ns);
	int rc = pthread_rwlock_wrlock(&held_rw);
	if (rc == 0)
		pthread_rwlock_unlock(&held_rw);
	return rc;
}

static long c_rwlock_timedrdlock(void)
{
	hold_lock(hold_rw_until_deadline, now_ns() + FOREVER_NS);
	struct timespec ts = realtime_deadline();
	return pthread_rwlock_timedrdlock(&held_rw, &ts);
}

static long c_rwlock_timedwrlock(void)
{
	hold_lock(hold_rw_until_deadline, now_ns() + FOREVER_NS);
	struct timespec ts = realtime_deadline();
	return pthread_rwlock_timedwrlock(&held_rw, &ts);
}

static long c_rwlock_clockrdlock(void)
{
	hold_lock(hold_rw_until_deadline, now_ns() + FOREVER_NS);
	struct timespec ts = monotonic_deadline();
	return pthread_rwlock_clockrdlock(&held_rw, CLOCK_MONOTONIC, &ts);
}

static long c_rwlock_clockwrlock(void)
{
	hold_lock(hold_rw_until_deadline, now_ns() + FOREVER_NS);
	struct timespec ts = monotonic_deadline();
	return pthread_rwlock_clockwrlock(&held_rw, CLOCK_MONOTONIC, &ts);
}

static long c_timedjoin_np(void)
{
	pthread_t t = start_thread(sleep_forever, NULL);
	struct timespec ts = realtime_deadline();

	return pthread_timedjoin_np(t, NULL, &ts);
}

static long c_clockjoin_np(void)
{
	pthread_t t = start_thread(sleep_forever, NULL);
	struct timespec ts = monotonic_deadline();

	return pthread_clockjoin_np(t, NULL, CLOCK_MONOTONIC, &ts);
}

/* -- recvmmsg: SO_RCVTIMEO (its own timeout argument NULL), and woken -- */

static long recvmmsg_one(int fd)
{
	static char c;
	static struct iovec iov = { &c, 1 };
	struct mmsghdr mm;

	memset(&mm, 0, sizeof mm);
	mm.msg_hdr.msg_iov = &iov;
	mm.msg_hdr.msg_iovlen = 1;
	return recvmmsg(fd, &mm, 1, 0, NULL);
}

static long c_recvmmsg_rcvtimeo(void)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0)
		die("socketpair");
	set_timeo(sv[0], SO_RCVTIMEO, timeout_ms);
	return recvmmsg_one(sv[0]);
}

static long c_recvmmsg_wake(void)
{
	static int sv[2];

	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0)
		die("socketpair");
	start_thread(write_at_deadline, &sv[1]);
	return recvmmsg_one(sv[0]);
}

/* -- FULL_BYTES in one call into a pipe or socket a helper drains from the
 * deadline on: the call returns the full count, never a short one -- */

static long c_write_full(void)
{
	int fds[2];

	make_pipe(fds);
	start_drain(fds[0], full_bytes);
	return write(fds[1], full_buf, full_bytes);
}

static long c_writev_full(void)
{
	int fds[2];
	struct iovec iov[2] = { { full_buf, full_bytes / 2 },
				{ full_buf + full_bytes / 2, full_bytes - full_bytes / 2 } };

	make_pipe(fds);
	start_drain(fds[0], full_bytes);
	return writev(fds[1], iov, 2);
}

static long c_send_full(void)
{
	int sv[2];

	make_socketpair(sv);
	start_drain(sv[1], full_bytes);
	return send(sv[0], full_buf, full_bytes, 0);
}

static long c_sendto_full(void)
{
	int sv[2];

	make_socketpair(sv);
	start_drain(sv[1], full_bytes);
	return sendto(sv[0], full_buf, full_bytes, 0, NULL, 0);
}

static long c_sendmsg_full(void)
{
	int sv[2];
	struct iovec iov[2] = { { full_buf, full_bytes / 2 },
				{ full_buf + full_bytes / 2, full_bytes - full_bytes / 2 } };
	struct msghdr msg;

	make_socketpair(sv);
	start_drain(sv[1], full_bytes);
	memset(&msg, 0, sizeof msg);
	msg.msg_iov = iov;
	msg.msg_iovlen = 2;
	return sendmsg(sv[0], &msg, 0);
}

/* -- file locks and FIFOs -- */

static long c_flock(void)
{
	int fds[2];

	open_twice(fds);
	if (flock(fds[0], LOCK_EX) != 0)
		die("flock");
	unlock_fd = fds[0];
	start_thread(flock_unlock_at_deadline, NULL);
	return flock(fds[1], LOCK_EX);
}

static long c_ofd_setlkw(void)
{
	int fds[2];

	open_twice(fds);
	if (ofd_lock(fds[0], F_WRLCK, F_OFD_SETLK) != 0)
		die("fcntl F_OFD_SETLK");
	unlock_fd = fds[0];
	start_thread(ofd_unlock_at_deadline, NULL);
	return ofd_lock(fds[1], F_WRLCK, F_OFD_SETLKW);
}

/* POSIX record locks belong to the process: a child holds this one. */
static long c_setlkw(void)
{
	int fds[2];

	open_twice(fds);
	fork_lock_holder(fds[0], deadline_ns);
	return ofd_lock(fds[0], F_WRLCK, F_SETLKW);
}

static long c_lockf(void)
{
	int fds[2];

	open_twice(fds);
	fork_lock_holder(fds[0], deadline_ns);
	return lockf(fds[0], F_LOCK, 0);
}

/* open() of a FIFO for reading waits for a writer. */
static long c_open_fifo(void)
{
	make_fifo();
	start_thread(open_fifo_at_deadline, NULL);
	int fd = open(fifo_path, O_RDONLY);
	return fd >= 0 ? 0 : fd;
}

/* -- waiting for any signal: every signal blocked in this thread; the
 * profiler's own must never be the one returned -- */

static long c_sigtimedwait_full(void)
{
	sigset_t all;
	struct timespec ts = ms_to_ts(timeout_ms);

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	return sigtimedwait(&all, NULL, &ts);
}

static long c_sigwaitinfo_full(void)
{
	sigset_t all;
	siginfo_t si;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	arm_usr1_timer();
	return sigwaitinfo(&all, &si);
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
	{ "syscall_nanosleep", c_syscall_nanosleep },
	{ "syscall_clock_nanosleep", c_syscall_clock_nanosleep },
	{ "syscall_poll", c_syscall_poll },
	{ "syscall_ppoll", c_syscall_ppoll },
	{ "syscall_epoll_wait", c_syscall_epoll_wait },
	{ "syscall_epoll_pwait", c_syscall_epoll_pwait },
	{ "syscall_futex_wait", c_syscall_futex_wait },
	{ "syscall_futex_wait_bitset", c_syscall_futex_wait_bitset },
	{ "syscall_semtimedop", c_syscall_semtimedop },
	{ "syscall_msgrcv", c_syscall_msgrcv },
	{ "syscall_io_getevents", c_syscall_io_getevents },
	{ "syscall_read_pipe", c_syscall_read_pipe },
	{ "syscall_wait4", c_syscall_wait4 },
	{ "msgrcv", c_msgrcv },
	{ "msgsnd_full", c_msgsnd_full },
	{ "semop", c_semop },
	{ "semtimedop", c_semtimedop },
	{ "mq_receive", c_mq_receive },
	{ "mq_timedreceive", c_mq_timedreceive },
	{ "mq_send_full", c_mq_send_full },
	{ "mq_timedsend_full", c_mq_timedsend_full },
	{ "epoll_pwait2", c_epoll_pwait2 },
	{ "cond_clockwait", c_cond_clockwait },
	{ "mutex_timedlock", c_mutex_timedlock },
	{ "mutex_clocklock", c_mutex_clocklock },
	{ "sem_clockwait", c_sem_clockwait },
	{ "rwlock_rdlock", c_rwlock_rdlock },
	{ "rwlock_wrlock", c_rwlock_wrlock },
	{ "rwlock_timedrdlock", c_rwlock_timedrdlock },
	{ "rwlock_timedwrlock", c_rwlock_timedwrlock },
	{ "rwlock_clockrdlock", c_rwlock_clockrdlock },
	{ "rwlock_clockwrlock", c_rwlock_clockwrlock },
	{ "timedjoin_np", c_timedjoin_np },
	{ "clockjoin_np", c_clockjoin_np },
	{ "recvmmsg_rcvtimeo", c_recvmmsg_rcvtimeo },
	{ "recvmmsg_wake", c_recvmmsg_wake },
	{ "write_full", c_write_full },
	{ "writev_full", c_writev_full },
	{ "send_full", c_send_full },
	{ "sendto_full", c_sendto_full },
	{ "sendmsg_full", c_sendmsg_full },
	{ "flock", c_flock },
	{ "ofd_setlkw", c_ofd_setlkw },
	{ "setlkw", c_setlkw },
	{ "lockf", c_lockf },
	{ "open_fifo", c_open_fifo },
	{ "sigtimedwait_full", c_sigtimedwait_full },
	{ "sigwaitinfo_full", c_sigwaitinfo_full },
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
			fprintf(stderr, "blocking: churn: %s rc=%ld errno=%s after %lld us\n",
				c->name, rc, rc == -1 ? strerrorname_np(err) : "0",
				(long long)(took / 1000));
	}
	printf("churn calls=%ld bad=%ld elapsed_ms=%lld\n", calls, bad,
	       (long long)((now_ns() - t0 + 500000) / 1000000));
}

/* ---- realsignal: a real signal still interrupts the calls ---- */

static pthread_t main_thread;
static int64_t armed_at;  /* realsignal: when the current call started */
static sem_t armed;       /* posted when armed_at is set */
static sem_t fired;       /* posted once the call's SIGUSR1 is sent */

static void usr1_handler(int sig)
{
	(void)sig;
	usr1_hits++;
}

/* Sends SIGUSR1 to the main thread REAL_SIGNAL_DELAY_MS after each call
 * starts. The main thread waits for `fired` before the next call, so a call
 * that returned early (another signal interrupted it) does not shift the
 * signal into the next one. */
static void *real_signaller(void *arg)
{
	int rounds = *(int *)arg;

	for (int i = 0; i < rounds; i++) {
		sem_wait_retry(&armed);
		sleep_until(armed_at + REAL_SIGNAL_DELAY_MS * 1000000LL);
		pthread_kill(main_thread, SIGUSR1);
		sem_post(&fired);
	}
	return NULL;
}

static int rs_pipe[2], rs_sock[2], rs_listen, rs_epoll;
static sem_t rs_sem;
static pid_t rs_child;

static long r_pause(void)
{
	return pause();
}

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

	return poll(&p, one_fd, REAL_SIGNAL_CALL_MS);
}

static long r_ppoll(void)
{
	struct pollfd p = { .fd = rs_pipe[0], .events = POLLIN };
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return ppoll(&p, one_fd, &ts, NULL);
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

	return read(rs_pipe[0], &c, one_byte);
}

static long r_recv(void)
{
	char c;

	return recv(rs_sock[0], &c, one_byte, 0);
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

/* The newer calls: each blocks until the signal (nothing arrives, a full
 * pipe, socket or queue nobody drains, a lock held for an hour). */

static int rs_dgram[2], rs_full_pipe[2], rs_full_sock[2], rs_msq, rs_msq_full, rs_semid;
static int rs_flock[2], rs_ofd[2], rs_posix[2];
static mqd_t rs_mq, rs_mq_full;
static pid_t rs_lock_child;
static char rs_buf[65536];
static volatile size_t rs_buf_bytes = sizeof rs_buf;

static long r_recvfrom(void)
{
	char c;

	return recvfrom(rs_sock[0], &c, one_byte, 0, NULL, NULL);
}

static long r_pselect(void)
{
	fd_set r;
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	FD_ZERO(&r);
	FD_SET(rs_pipe[0], &r);
	return pselect(rs_pipe[0] + 1, &r, NULL, NULL, &ts, NULL);
}

static long r_epoll_pwait(void)
{
	struct epoll_event ev;

	return epoll_pwait(rs_epoll, &ev, 1, REAL_SIGNAL_CALL_MS, NULL);
}

static long r_epoll_pwait2(void)
{
	struct epoll_event ev;
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return epoll_pwait2(rs_epoll, &ev, 1, &ts, NULL);
}

static struct timespec rs_deadline(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	ts.tv_sec += REAL_SIGNAL_CALL_MS / 1000;
	return ts;
}

static long r_sem_timedwait(void)
{
	struct timespec ts = rs_deadline(CLOCK_REALTIME);

	return sem_timedwait(&rs_sem, &ts);
}

static long r_sem_clockwait(void)
{
	struct timespec ts = rs_deadline(CLOCK_MONOTONIC);

	return sem_clockwait(&rs_sem, CLOCK_MONOTONIC, &ts);
}

static long r_wait4(void)
{
	int status;
	pid_t got = wait4(rs_child, &status, 0, NULL);

	return got == rs_child ? 0 : got;
}

static long r_semop(void)
{
	struct sembuf down = { 0, -1, 0 };

	return semop(rs_semid, &down, 1);
}

static long r_semtimedop(void)
{
	struct sembuf down = { 0, -1, 0 };
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return semtimedop(rs_semid, &down, 1, &ts);
}

static long r_msgrcv(void)
{
	static struct wpt_msg m;

	return msgrcv(rs_msq, &m, sizeof m.mtext, 0, 0);
}

static long r_msgsnd(void)
{
	static struct wpt_msg m = { 1, "wpt" };

	return msgsnd(rs_msq_full, &m, MSG_BYTES, 0);
}

static long r_mq_receive(void)
{
	char buf[MQ_BYTES];

	return mq_receive(rs_mq, buf, sizeof buf, NULL);
}

static long r_mq_timedreceive(void)
{
	char buf[MQ_BYTES];
	struct timespec ts = rs_deadline(CLOCK_REALTIME);

	return mq_timedreceive(rs_mq, buf, sizeof buf, NULL, &ts);
}

static long r_mq_send(void)
{
	return mq_send(rs_mq_full, "wpt", 4, 0);
}

static long r_mq_timedsend(void)
{
	struct timespec ts = rs_deadline(CLOCK_REALTIME);

	return mq_timedsend(rs_mq_full, "wpt", 4, 0, &ts);
}

static long r_recvmmsg(void)
{
	return recvmmsg_one(rs_dgram[0]);
}

static long r_write(void)
{
	return write(rs_full_pipe[1], rs_buf, rs_buf_bytes);
}

static long r_writev(void)
{
	struct iovec iov[2] = { { rs_buf, rs_buf_bytes / 2 }, { rs_buf, rs_buf_bytes / 2 } };

	return writev(rs_full_pipe[1], iov, 2);
}

static long r_send(void)
{
	return send(rs_full_sock[0], rs_buf, rs_buf_bytes, 0);
}

static long r_sendto(void)
{
	return sendto(rs_full_sock[0], rs_buf, rs_buf_bytes, 0, NULL, 0);
}

static long r_sendmsg(void)
{
	struct iovec iov = { rs_buf, rs_buf_bytes };
	struct msghdr msg;

	memset(&msg, 0, sizeof msg);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	return sendmsg(rs_full_sock[0], &msg, 0);
}

static long r_flock(void)
{
	return flock(rs_flock[1], LOCK_EX);
}

static long r_ofd_setlkw(void)
{
	return ofd_lock(rs_ofd[1], F_WRLCK, F_OFD_SETLKW);
}

static long r_setlkw(void)
{
	return ofd_lock(rs_posix[0], F_WRLCK, F_SETLKW);
}

static long r_lockf(void)
{
	return lockf(rs_posix[0], F_LOCK, 0);
}

static long r_open_fifo(void)
{
	int fd = open(fifo_path, O_RDONLY);

	return fd >= 0 ? 0 : fd;
}

static long r_syscall_nanosleep(void)
{
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return syscall(SYS_nanosleep, &ts, NULL);
}

static long r_syscall_clock_nanosleep(void)
{
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL);
}

static long r_syscall_poll(void)
{
#ifdef SYS_poll
	struct pollfd p = { .fd = rs_pipe[0], .events = POLLIN };

	return syscall(SYS_poll, &p, 1, REAL_SIGNAL_CALL_MS);
#else
	no_syscall("poll");
	return -1;
#endif
}

static long r_syscall_ppoll(void)
{
	struct pollfd p = { .fd = rs_pipe[0], .events = POLLIN };
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return syscall(SYS_ppoll, &p, 1, &ts, NULL, 8);
}

static long r_syscall_epoll_wait(void)
{
#ifdef SYS_epoll_wait
	struct epoll_event ev;

	return syscall(SYS_epoll_wait, rs_epoll, &ev, 1, REAL_SIGNAL_CALL_MS);
#else
	no_syscall("epoll_wait");
	return -1;
#endif
}

static long r_syscall_epoll_pwait(void)
{
	struct epoll_event ev;

	return syscall(SYS_epoll_pwait, rs_epoll, &ev, 1, REAL_SIGNAL_CALL_MS, NULL, 8);
}

static long r_syscall_futex_wait(void)
{
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
}

static long r_syscall_futex_wait_bitset(void)
{
	struct timespec ts = rs_deadline(CLOCK_MONOTONIC);

	return syscall(SYS_futex, &futex_word, FUTEX_WAIT_BITSET_PRIVATE, 0, &ts, NULL,
		       FUTEX_BITSET_MATCH_ANY);
}

static long r_syscall_semtimedop(void)
{
	struct sembuf down = { 0, -1, 0 };
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return syscall(SYS_semtimedop, rs_semid, &down, 1, &ts);
}

static long r_syscall_msgrcv(void)
{
	static struct wpt_msg m;

	return syscall(SYS_msgrcv, rs_msq, &m, sizeof m.mtext, 0L, 0);
}

static long r_syscall_io_getevents(void)
{
	struct io_event ev;
	struct timespec ts = ms_to_ts(REAL_SIGNAL_CALL_MS);

	return syscall(SYS_io_getevents, aio_ctx, 1L, 1L, &ev, &ts);
}

static long r_syscall_read_pipe(void)
{
	char c;

	return syscall(SYS_read, rs_pipe[0], &c, 1);
}

static long r_syscall_wait4(void)
{
	int status;
	pid_t got = (pid_t)syscall(SYS_wait4, rs_child, &status, 0, NULL);

	return got == rs_child ? 0 : got;
}

/* Everything the newer realsignal calls block on. */
static void realsignal_setup(void)
{
	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, rs_dgram) != 0)
		die("socketpair");
	make_pipe(rs_full_pipe);
	fill(rs_full_pipe[1]);
	make_socketpair(rs_full_sock);
	fill(rs_full_sock[0]);
	rs_msq = new_msq(0);
	rs_msq_full = new_msq(1);
	rs_semid = new_sem();
	rs_mq = new_mq(0);
	rs_mq_full = new_mq(1);
	if (syscall(SYS_io_setup, 1, &aio_ctx) != 0)
		die("io_setup");
	open_twice(rs_flock);
	if (flock(rs_flock[0], LOCK_EX) != 0)
		die("flock");
	open_twice(rs_ofd);
	if (ofd_lock(rs_ofd[0], F_WRLCK, F_OFD_SETLK) != 0)
		die("fcntl F_OFD_SETLK");
	open_twice(rs_posix);
	rs_lock_child = fork_lock_holder(rs_posix[0], deadline_ns); /* killed at the end */
	make_fifo();
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
	{ "recvfrom", r_recvfrom },
	{ "pselect", r_pselect },
	{ "epoll_pwait", r_epoll_pwait },
	{ "epoll_pwait2", r_epoll_pwait2 },
	{ "sem_timedwait", r_sem_timedwait },
	{ "sem_clockwait", r_sem_clockwait },
	{ "wait4", r_wait4 },
	{ "semop", r_semop },
	{ "semtimedop", r_semtimedop },
	{ "msgrcv", r_msgrcv },
	{ "msgsnd", r_msgsnd },
	{ "mq_receive", r_mq_receive },
	{ "mq_timedreceive", r_mq_timedreceive },
	{ "mq_send", r_mq_send },
	{ "mq_timedsend", r_mq_timedsend },
	{ "recvmmsg", r_recvmmsg },
	{ "write", r_write },
	{ "writev", r_writev },
	{ "send", r_send },
	{ "sendto", r_sendto },
	{ "sendmsg", r_sendmsg },
	{ "flock", r_flock },
	{ "ofd_setlkw", r_ofd_setlkw },
	{ "setlkw", r_setlkw },
	{ "lockf", r_lockf },
	{ "open_fifo", r_open_fifo },
	{ "syscall_nanosleep", r_syscall_nanosleep },
	{ "syscall_clock_nanosleep", r_syscall_clock_nanosleep },
	{ "syscall_poll", r_syscall_poll },
	{ "syscall_ppoll", r_syscall_ppoll },
	{ "syscall_epoll_wait", r_syscall_epoll_wait },
	{ "syscall_epoll_pwait", r_syscall_epoll_pwait },
	{ "syscall_futex_wait", r_syscall_futex_wait },
	{ "syscall_futex_wait_bitset", r_syscall_futex_wait_bitset },
	{ "syscall_semtimedop", r_syscall_semtimedop },
	{ "syscall_msgrcv", r_syscall_msgrcv },
	{ "syscall_io_getevents", r_syscall_io_getevents },
	{ "syscall_read_pipe", r_syscall_read_pipe },
	{ "syscall_wait4", r_syscall_wait4 },
};

#define NR_REAL (sizeof real_calls / sizeof real_calls[0])

static const struct call *rs_calls[NR_REAL]; /* the ones to run, in order */
static int rs_ncalls;

/* The calls named in names[0..n-1], or all of real_calls when n is 0. */
static int select_real_calls(char **names, int n)
{
	if (n == 0) {
		for (size_t i = 0; i < NR_REAL; i++)
			rs_calls[rs_ncalls++] = &real_calls[i];
		return 1;
	}
	if (n > (int)NR_REAL)
		return 0;
	for (int k = 0; k < n; k++) {
		size_t i = 0;

		while (i < NR_REAL && strcmp(names[k], real_calls[i].name) != 0)
			i++;
		if (i == NR_REAL)
			return 0;
		rs_calls[rs_ncalls++] = &real_calls[i];
	}
	return 1;
}

static void run_realsignal(void)
{
	struct sigaction sa;
	struct sockaddr_un addr;
	socklen_t len;
	sigset_t set;
	int rounds = rs_ncalls;

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
	sem_init(&fired, 0, 0);
	deadline_ns = now_ns() + 3600 * 1000000000LL;
	rs_child = fork_child(); /* exits in an hour; killed below */
	realsignal_setup();

	main_thread = pthread_self();
	pthread_t signaller = start_thread(real_signaller, &rounds);
	for (int i = 0; i < rs_ncalls; i++) {
		int64_t t0 = now_ns();
		long rc;
		int err;

		armed_at = t0;
		sem_post(&armed);
		errno = 0;
		rc = rs_calls[i]->fn();
		err = errno;
		print_result(rs_calls[i]->name, rc, err, t0);
		/* This call's SIGUSR1 is handled before the next call starts. */
		sem_wait_retry(&fired);
		for (int64_t end = now_ns() + 1000000000LL; usr1_hits <= i && now_ns() < end;)
			sched_yield();
	}
	pthread_join(signaller, NULL);
	kill(rs_child, SIGKILL);
	while (waitpid(rs_child, NULL, 0) < 0 && errno == EINTR)
		;
	kill(rs_lock_child, SIGKILL);
	while (waitpid(rs_lock_child, NULL, 0) < 0 && errno == EINTR)
		;
	if (usr1_hits != rs_ncalls)
		fprintf(stderr, "blocking: realsignal: %d SIGUSR1 handled, want %d\n",
			(int)usr1_hits, rs_ncalls);
}

/* ---- transfer: big writes into a pipe must not come back short ---- */

#define TRANSFER_WRITE (16u << 20) /* bytes per write() */
#define TRANSFER_READ 4096         /* bytes per read() of the slow reader */

struct xfer {
	int fd;
	uint64_t got;
};

static void *slow_reader(void *arg)
{
	struct xfer *x = arg;
	static char buf[TRANSFER_READ];

	for (;;) {
		ssize_t n = read(x->fd, buf, sizeof buf);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("read (transfer)");
		if (n == 0)
			return NULL;
		x->got += (uint64_t)n;
	}
}

/* Writes mb MiB in TRANSFER_WRITE-byte write() calls (a short one is
 * completed by the next) while slow_reader drains the pipe; prints
 * "transfer writes=W short=S eintr=E written=B read=R elapsed_ms=T". */
static void run_transfer(long mb)
{
	int fds[2];
	struct xfer x;
	uint64_t total = (uint64_t)mb << 20, done = 0;
	long writes = 0, shorts = 0, eintr = 0;
	char *buf = malloc(TRANSFER_WRITE);

	if (!buf)
		die("malloc");
	memset(buf, 'x', TRANSFER_WRITE);
	make_pipe(fds);
	x.fd = fds[0];
	x.got = 0;
	pthread_t reader = start_thread(slow_reader, &x);
	int64_t t0 = now_ns();
	while (done < total) {
		size_t want =
			total - done < TRANSFER_WRITE ? (size_t)(total - done) : TRANSFER_WRITE;
		ssize_t n = write(fds[1], buf, want);

		writes++;
		if (n < 0) {
			if (errno != EINTR)
				die("write (transfer)");
			eintr++;
			continue;
		}
		if ((size_t)n < want)
			shorts++;
		done += (uint64_t)n;
	}
	close(fds[1]);
	int err = pthread_join(reader, NULL);
	if (err)
		die_err("pthread_join", err);
	printf("transfer writes=%ld short=%ld eintr=%ld written=%llu read=%llu elapsed_ms=%lld\n",
	       writes, shorts, eintr, (unsigned long long)done, (unsigned long long)x.got,
	       (long long)((now_ns() - t0 + 500000) / 1000000));
	free(buf);
}

static void usage(void)
{
	fprintf(stderr, "usage: blocking CALL TIMEOUT_MS | retrypoll TIMEOUT_MS | churn MS |\n"
			"       realsignal [CALL...] | transfer N_MB | list\n"
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
	long transfer_mb = 0;

	if (argc == 2 && !strcmp(argv[1], "list")) {
		for (size_t i = 0; i < NR_BATTERY; i++)
			printf("%s\n", battery[i].name);
		return 0;
	}
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "transfer")) {
		if (argc != 3)
			usage();
		transfer_mb = strtol(argv[2], NULL, 10);
		if (transfer_mb < 1 || transfer_mb > 65536)
			usage();
	} else if (!strcmp(argv[1], "realsignal")) {
		if (!select_real_calls(argv + 2, argc - 2))
			usage();
	} else {
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

	if (atexit(cleanup) != 0)
		die_err("atexit", ENOMEM);

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
	else if (transfer_mb)
		run_transfer(transfer_mb);
	else
		run_battery_call(c);
	return 0;
}
