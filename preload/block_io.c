/* block_io: interposed file and socket calls that block: reads and
 * receives (retried after our signal with SO_RCVTIMEO shortened to what is
 * left, and MSG_WAITALL receives finished), writes and sends (a transfer our
 * signal cut short is finished, so the program never sees a short count it
 * would not have seen without us), connect, the fortified __*_chk variants,
 * file locks and opening a FIFO. Also answers libunwind's fake validation
 * pipe (unwind.h). See block.c for the scheme, block_int.h for the classes. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../unwind/unwind.h"
#include "block_int.h"

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);
static int (*real_recvmmsg)(int, struct mmsghdr *, unsigned, int, struct timespec *);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_fcntl)(int, int, ...);
static int (*real_fcntl64)(int, int, ...);
static int (*real_flock)(int, int);
static int (*real_lockf)(int, int, off_t);
static int (*real_poll)(struct pollfd *, nfds_t, int);

void wp_block_io_init(void)
{
	(void)RESOLVE(read);
	(void)RESOLVE(recv);
	(void)RESOLVE(recvfrom);
	(void)RESOLVE(recvmsg);
	(void)RESOLVE(recvmmsg);
	(void)RESOLVE(accept);
	(void)RESOLVE(accept4);
	(void)RESOLVE(connect);
	(void)RESOLVE(write);
	(void)RESOLVE(writev);
	(void)RESOLVE(send);
	(void)RESOLVE(sendto);
	(void)RESOLVE(sendmsg);
	(void)RESOLVE(open);
	(void)RESOLVE(open64);
	(void)RESOLVE(openat);
	(void)RESOLVE(openat64);
	(void)RESOLVE(fcntl);
	(void)RESOLVE(fcntl64);
	(void)RESOLVE(flock);
	(void)RESOLVE(lockf);
	(void)RESOLVE(poll);
}

/* ---- reading ------------------------------------------------------------- */

/* A socket call interrupted by our signal with SO_RCVTIMEO set would
 * restart its full timeout: retry with what is left of it instead. Our
 * signal only reaches a wrapped call it raced into right after the thread
 * was seen running, so the time already spent is taken from the moment the
 * EINTR came back (reading the clock on every call would cost the fast
 * path more than the error it avoids). Returns the option to restore
 * (tv_sec < 0: nothing to restore). */
static struct timeval shorten_timeout(int fd, int opt, uint64_t spent, int *expired)
{
	struct timeval tv, orig = { -1, 0 };
	socklen_t len = sizeof(tv);
	uint64_t full;

	*expired = 0;
	if (getsockopt(fd, SOL_SOCKET, opt, &tv, &len) < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0))
		return orig;
	full = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
	if (spent >= full) {
		*expired = 1;
		return orig;
	}
	orig = tv;
	tv.tv_sec = (time_t)((full - spent) / 1000000000ull);
	tv.tv_usec = (suseconds_t)(((full - spent) % 1000000000ull + 999) / 1000);
	if (tv.tv_usec >= 1000000) { /* rounded up to a whole second */
		tv.tv_sec++;
		tv.tv_usec -= 1000000;
	}
	setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
	return orig;
}

static void restore_timeout(int fd, int opt, struct timeval orig)
{
	if (orig.tv_sec >= 0)
		setsockopt(fd, SOL_SOCKET, opt, &orig, sizeof(orig));
}

/* Sets `res` to `call`, called once, then again each time our signal alone
 * interrupted it, with the socket's timeout `opt` (SO_RCVTIMEO, SO_SNDTIMEO;
 * nothing on other descriptors) shortened to what is left. Every EINTR is
 * judged by OURS(): one from the program's own signal, even during a retry,
 * returns. */
#define RETRY_TIMEO(res, fd, opt, call)                                       \
	do {                                                                  \
		uint64_t t0 = 0;                                              \
		int expired, e_;                                              \
		(res) = (call);                                               \
		while ((res) < 0 && errno == EINTR && OURS()) {               \
			uint64_t now = wp_now_ns();                           \
			struct timeval o;                                     \
			if (!t0)                                              \
				t0 = now;                                     \
			o = shorten_timeout((fd), (opt), now - t0, &expired); \
			if (expired) {                                        \
				errno = EAGAIN;                               \
				break;                                        \
			}                                                     \
			(res) = (call);                                       \
			e_ = errno;                                           \
			restore_timeout((fd), (opt), o);                      \
			errno = e_;                                           \
		}                                                             \
	} while (0)

#define RETRY_RECV(fd, call) RETRY_TIMEO(rc, fd, SO_RCVTIMEO, call)

WP_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	ssize_t rc;

	if (__builtin_expect(fd == WP_UNW_FAKE_RFD, 0)) {
		errno = EAGAIN; /* libunwind's validation pipe: empty */
		return -1;
	}
	if (!RESOLVE(read))
		NO_REAL(-1);
	BLOCK(SYS_read, real_read);
	RETRY_RECV(fd, real_read(fd, buf, n));
	return rc;
}

/* A MSG_WAITALL receive that our signal cut short: without us it would have
 * waited for the rest. Finishes it (once more under the same rules). */
/* Whether a stream socket: only there does MSG_WAITALL wait for the rest
 * (a datagram is whole or not at all). */
static int is_stream(int fd)
{
	int type = 0;
	socklen_t len = sizeof(type);

	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

#define FINISH_WAITALL(call_more)                                                                 \
	do {                                                                                      \
		ssize_t last_ = rc;                                                               \
		if (!(rc > 0 && (size_t)rc < n && (flags & MSG_WAITALL) && !(flags & MSG_PEEK) && \
		      wp_block_cut(wp_b.s, wp_b.seq, rc) && is_stream(fd)))                       \
			break;                                                                    \
		while ((size_t)rc < n) {                                                          \
			size_t got_ = (size_t)rc;                                                 \
			RETRY_RECV(fd, (call_more));                                              \
			last_ = rc;                                                               \
			rc = last_ > 0 ? (ssize_t)got_ + last_ : (ssize_t)got_;                   \
			if (last_ <= 0 || !wp_block_cut(wp_b.s, wp_b.seq, last_))                 \
				break;                                                            \
		}                                                                                 \
	} while (0)

WP_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	ssize_t rc;

	if (!RESOLVE(recv))
		NO_REAL(-1);
	BLOCK(SYS_recvfrom, real_recv);
	RETRY_RECV(fd, real_recv(fd, buf, n, flags));
	FINISH_WAITALL(real_recv(fd, (char *)buf + got_, n - got_, flags));
	return rc;
}

WP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
			   socklen_t *alen)
{
	ssize_t rc;

	if (!RESOLVE(recvfrom))
		NO_REAL(-1);
	BLOCK(SYS_recvfrom, real_recvfrom);
	RETRY_RECV(fd, real_recvfrom(fd, buf, n, flags, addr, alen));
	FINISH_WAITALL(real_recvfrom(fd, (char *)buf + got_, n - got_, flags, NULL, NULL));
	return rc;
}

WP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	ssize_t rc;

	if (!RESOLVE(recvmsg))
		NO_REAL(-1);
	BLOCK(SYS_recvmsg, real_recvmsg);
	RETRY_RECV(fd, real_recvmsg(fd, msg, flags));
	return rc;
}

WP_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned vlen, int flags, struct timespec *tmo)
{
	int rc;

	/* Its timeout is only looked at between datagrams: the same again. */
	if (!RESOLVE(recvmmsg))
		NO_REAL(-1);
	BLOCK(SYS_recvmmsg, real_recvmmsg);
	RETRY_RECV(fd, real_recvmmsg(fd, v, vlen, flags, tmo));
	return rc;
}

WP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	int rc;

	if (!RESOLVE(accept))
		NO_REAL(-1);
	BLOCK(SYS_accept, real_accept);
	RETRY_RECV(fd, real_accept(fd, addr, alen));
	return rc;
}

WP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	int rc;

	if (!RESOLVE(accept4))
		NO_REAL(-1);
	BLOCK(SYS_accept4, real_accept4);
	RETRY_RECV(fd, real_accept4(fd, addr, alen, flags));
	return rc;
}

/* Fortified variants: glibc's size check, then the wrapper. */

WP_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return read(fd, buf, n);
}

WP_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return recv(fd, buf, n, flags);
}

WP_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
				 struct sockaddr *addr, socklen_t *alen)
{
	if (n > buflen)
		__chk_fail();
	return recvfrom(fd, buf, n, flags, addr, alen);
}

/* ---- writing ------------------------------------------------------------- */

/* Whether writes to `fd` return at once instead of waiting (`flags`:
 * MSG_DONTWAIT of a send). */
static int nonblocking(int fd, int flags)
{
	int fl = fcntl(fd, F_GETFL);

	return (flags & MSG_DONTWAIT) || fl < 0 || (fl & O_NONBLOCK);
}

/* A blocking write into a pipe or stream socket that our signal interrupts
 * after some bytes went returns the short count: a program that does not
 * loop (Python's unbuffered stdout) loses the rest. These wrappers finish
 * the transfer, and only then: the count the system call returned is the
 * one our handler saw it return (wp_block_cut), on a descriptor that waits.
 * A short count for any other reason (a non-blocking descriptor, the
 * program's own signal, RLIMIT_FSIZE, a full disk) is returned as is. An
 * EINTR before any byte went is retried. `total` is evaluated only after
 * the kernel accepted the arguments; `more` sets `last_` to what its last
 * system call returned. */
#define XFER(first, more, total, flags)                             \
	do {                                                        \
		size_t done_, total_;                               \
		ssize_t r_, last_;                                  \
		RETRY_TIMEO(r_, fd, SO_SNDTIMEO, (first));          \
		if (r_ <= 0 || !wp_block_cut(wp_b.s, wp_b.seq, r_)) \
			return r_;                                  \
		done_ = (size_t)r_;                                 \
		total_ = (total);                                   \
		if (done_ >= total_ || nonblocking(fd, (flags)))    \
			return r_;                                  \
		while (done_ < total_) {                            \
			RETRY_TIMEO(r_, fd, SO_SNDTIMEO, (more));   \
			if (r_ <= 0)                                \
				break;                              \
			done_ += (size_t)r_;                        \
			if (!wp_block_cut(wp_b.s, wp_b.seq, last_)) \
				break;                              \
		}                                                   \
		return (ssize_t)done_;                              \
	} while (0)

WP_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	if (__builtin_expect(fd == WP_UNW_FAKE_WFD, 0))
		return wp_unwind_fake_write(buf, n);
	if (!RESOLVE(write))
		NO_REAL(-1);
	BLOCK(SYS_write, real_write);
	XFER(real_write(fd, buf, n), (last_ = real_write(fd, (const char *)buf + done_, n - done_)),
	     n, 0);
}

WP_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	if (!RESOLVE(send))
		NO_REAL(-1);
	BLOCK(SYS_sendto, real_send);
	XFER(real_send(fd, buf, n, flags),
	     (last_ = real_send(fd, (const char *)buf + done_, n - done_, flags)), n, flags);
}

WP_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
			 socklen_t alen)
{
	if (!RESOLVE(sendto))
		NO_REAL(-1);
	BLOCK(SYS_sendto, real_sendto);
	XFER(real_sendto(fd, buf, n, flags, addr, alen),
	     (last_ = real_sendto(fd, (const char *)buf + done_, n - done_, flags, addr, alen)), n,
	     flags);
}

/* The rest of a vector after `done` bytes: writes the part of the segment
 * it stops in, then hands the following segments (a suffix of the caller's
 * array, no copy) to `more`. Returns bytes written by this step, or -1. */
static ssize_t iov_rest(int fd, const struct iovec *iov, int cnt, size_t done,
			ssize_t (*more)(int, const struct iovec *, int, void *), void *arg,
			ssize_t *last)
{
	int k = 0;

	while (k < cnt && done >= iov[k].iov_len)
		done -= iov[k++].iov_len;
	if (k == cnt)
		return *last = 0;
	if (done) {
		struct iovec part = { (char *)iov[k].iov_base + done, iov[k].iov_len - done };
		ssize_t r = *last = more(fd, &part, 1, arg), r2;

		/* The segment's rest went whole: the following ones at once
		 * (the caller goes on only after a step our signal cut). */
		if (r < (ssize_t)part.iov_len || k + 1 == cnt)
			return r;
		r2 = more(fd, iov + k + 1, cnt - k - 1, arg);
		if (r2 <= 0)
			return r; /* *last: the first part went whole, no cut */
		*last = r2;
		return r + r2;
	}
	return *last = more(fd, iov + k, cnt - k, arg);
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
	size_t t = 0;

	for (int i = 0; i < cnt; i++)
		t += iov[i].iov_len;
	return t;
}

static ssize_t writev_more(int fd, const struct iovec *iov, int cnt, void *arg)
{
	(void)arg;
	return real_writev(fd, iov, cnt);
}

WP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	if (!RESOLVE(writev))
		NO_REAL(-1);
	BLOCK(SYS_writev, real_writev);
	XFER(real_writev(fd, iov, cnt), iov_rest(fd, iov, cnt, done_, writev_more, NULL, &last_),
	     iov_total(iov, cnt), 0);
}

struct sendmsg_args {
	const struct msghdr *msg;
	int flags;
};

static ssize_t sendmsg_more(int fd, const struct iovec *iov, int cnt, void *arg)
{
	const struct sendmsg_args *a = arg;
	/* The address again (a connected stream ignores it), the control data
	 * (descriptors, credentials) not: it went with the first part. */
	struct msghdr rest = {
		a->msg->msg_name, a->msg->msg_namelen, (struct iovec *)iov, (size_t)cnt, NULL, 0, 0
	};

	return real_sendmsg(fd, &rest, a->flags);
}

WP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct sendmsg_args a = { msg, flags };

	if (!RESOLVE(sendmsg))
		NO_REAL(-1);
	BLOCK(SYS_sendmsg, real_sendmsg);
	/* MSG_ZEROCOPY: each send is a completion the program counts. */
	XFER(real_sendmsg(fd, msg, flags),
	     iov_rest(fd, msg->msg_iov, (int)msg->msg_iovlen, done_, sendmsg_more, &a, &last_),
	     iov_total(msg->msg_iov, (int)msg->msg_iovlen),
	     flags | ((flags & MSG_ZEROCOPY) ? MSG_DONTWAIT : 0));
}

/* ---- connecting ---------------------------------------------------------- */

WP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t alen)
{
	struct pollfd p = { fd, POLLOUT, 0 };
	struct deadline d = { 0, 0 };
	struct timeval tv;
	socklen_t len = sizeof(tv);
	int rc, err;

	if (!RESOLVE(connect) || !RESOLVE(poll))
		NO_REAL(-1);
	BLOCK(SYS_connect, real_connect);
	rc = real_connect(fd, addr, alen);
	if (!(rc < 0 && errno == EINTR && OURS()))
		return rc;
	/* Reissue it: an AF_UNIX connect starts over (with what is left of
	 * SO_SNDTIMEO); a TCP one goes on in the background and answers
	 * EALREADY (or EISCONN once done). */
	{
		uint64_t t0 = wp_now_ns();
		int expired, e;

		do {
			struct timeval o =
				shorten_timeout(fd, SO_SNDTIMEO, wp_now_ns() - t0, &expired);

			if (expired) {
				errno = EAGAIN;
				return -1;
			}
			rc = real_connect(fd, addr, alen);
			e = errno;
			restore_timeout(fd, SO_SNDTIMEO, o);
			errno = e;
		} while (rc < 0 && errno == EINTR && OURS());
	}
	if (rc == 0 || errno == EISCONN)
		return 0;
	if (errno != EALREADY)
		return rc;
	/* Wait for the background connection as the blocking call would have
	 * (SO_SNDTIMEO bounds it). */
	if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) == 0 && (tv.tv_sec || tv.tv_usec)) {
		/* In nanoseconds: milliseconds in an int end at 24.8 days. */
		struct timespec ts = { tv.tv_sec, (long)tv.tv_usec * 1000 };

		deadline_ts(&d, &ts);
	} else {
		deadline_ms(&d, -1);
	}
	while (((rc = real_poll(&p, 1, left_ms(&d))) < 0 && errno == EINTR && OURS()) ||
	       (rc == 0 && !d.infinite && left_ns(&d) > 0))
		;
	if (rc < 0)
		return -1;
	if (rc == 0) {
		errno = EINPROGRESS; /* what a timed-out blocking connect reports */
		return -1;
	}
	len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -1;
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* ---- locks and FIFOs: the kernel restarts them after our handler ----------- */

WP_EXPORT int flock(int fd, int op)
{
	if (!RESOLVE(flock))
		NO_REAL(-1);
	if (op & LOCK_NB)
		return real_flock(fd, op);
	{
		BLOCK(SYS_flock, real_flock);
		return real_flock(fd, op);
	}
}

WP_EXPORT int lockf(int fd, int cmd, off_t len)
{
	if (!RESOLVE(lockf))
		NO_REAL(-1);
	if (cmd != F_LOCK)
		return real_lockf(fd, cmd, len);
	{
		BLOCK(SYS_fcntl, real_lockf);
		return real_lockf(fd, cmd, len);
	}
}

/* fcntl's third argument is an int or a pointer: passed on as a pointer-
 * sized word, as glibc itself reads it. Only the waiting lock commands
 * publish. */
#define FCNTL(name)                                         \
	WP_EXPORT int name(int fd, int cmd, ...)            \
	{                                                   \
		va_list ap;                                 \
		void *arg;                                  \
		va_start(ap, cmd);                          \
		arg = va_arg(ap, void *);                   \
		va_end(ap);                                 \
		if (!RESOLVE(name))                         \
			NO_REAL(-1);                        \
		if (cmd != F_SETLKW && cmd != F_OFD_SETLKW) \
			return real_##name(fd, cmd, arg);   \
		{                                           \
			BLOCK(SYS_fcntl, real_##name);      \
			return real_##name(fd, cmd, arg);   \
		}                                           \
	}

FCNTL(fcntl)
FCNTL(fcntl64)

/* open() of a FIFO waits for the other end. */
#define HAS_MODE(flags) (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE)

/* The mode argument, read only when the flags say there is one. */
#define OPEN_MODE(flags)                   \
	mode_t mode = 0;                   \
	if (HAS_MODE(flags)) {             \
		va_list ap;                \
		va_start(ap, flags);       \
		mode = va_arg(ap, mode_t); \
		va_end(ap);                \
	}

/* Only an open that may wait (no O_NONBLOCK, no O_CREAT) publishes. */
#define OPEN_CALL(name, flags, call)            \
	if (!RESOLVE(name))                     \
		NO_REAL(-1);                    \
	if ((flags) & (O_NONBLOCK | O_CREAT))   \
		return (call);                  \
	{                                       \
		BLOCK(SYS_openat, real_##name); \
		return (call);                  \
	}

#define OPEN(name)                                                     \
	WP_EXPORT int name(const char *path, int flags, ...)           \
	{                                                              \
		OPEN_MODE(flags)                                       \
		OPEN_CALL(name, flags, real_##name(path, flags, mode)) \
	}

#define OPENAT(name)                                                          \
	WP_EXPORT int name(int dirfd, const char *path, int flags, ...)       \
	{                                                                     \
		OPEN_MODE(flags)                                              \
		OPEN_CALL(name, flags, real_##name(dirfd, path, flags, mode)) \
	}

OPEN(open)
OPEN(open64)
OPENAT(openat)
OPENAT(openat64)
