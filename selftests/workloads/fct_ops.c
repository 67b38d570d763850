// SPDX-License-Identifier: GPL-2.0
/*
 * fct_ops OP [FILE]: after the start gate, do exactly one operation, for the
 * ftrace-oracle tests (selftests/test.d/oracle):
 *   read FILE   open FILE, read it until EOF, close
 *   read_fresh FILE  the same, into an anonymous page mapped before the gate
 *               and never touched: the first read's copy to it page-faults
 *   pipe        pipe(), write 64 bytes into it (nobody reads them)
 *   stat FILE   stat() FILE
 *   open FILE   openat(AT_FDCWD, FILE, O_RDONLY) + close
 *   open_fresh FILE  the same, the name passed from a page of a file mapping
 *               (FILE's name written to FILE.name, mapped before the gate and
 *               never touched): not resident when openat() is called, the
 *               kernel faults it in as it copies the name
 *   mmap        mmap 4 anonymous pages, touch one, munmap
 *   mmap_pinned the same four times, bound to the CPU it runs on (set before
 *               the gate), with madvise(MADV_WILLNEED) before the munmap:
 *               the touched page's folio waits in that CPU's LRU batch,
 *               which madvise()'s lru_add_drain() drains through lru_add()
 *               (on 6.12 munmap() does too, and the test kernels have no
 *               madvise()), unless something drained it first (such as
 *               lru_add_drain_all()'s work on each CPU): one of four is
 *               enough
 *   fork        fork; the child _exit(0)s; the parent waitpid()s for it
 *   fork_rt     the same in the real-time class (SCHED_FIFO, priority 1, set
 *               before the gate; the child inherits it)
 *   readdir DIR read all entries of DIR with getdents64() (DIR opened before)
 *   write FILE  write 100 bytes to FILE (opened and truncated before)
 *   put FILE TEXT  write TEXT to FILE (opened for writing before), e.g. a
 *               sysfs attribute
 *   tcp         TCP over loopback: connect to a listening socket of its own,
 *               accept, send 100 bytes, receive them (sockets made before)
 *   unix        AF_UNIX socketpair: write 100 bytes into one end, read them
 *               from the other (socketpair made before)
 *   epoll       epoll_wait() on an eventfd, with no timeout: it sleeps until a
 *               child process writes the eventfd 200 ms after the gate opens
 *   fsync FILE  fsync() FILE, opened and written (4096 bytes) before; one
 *               byte is written again after the gate, just before fsync(), so
 *               the page is dirty even if writeback cleaned it meanwhile
 * Everything but the operation itself (the pipe's creation, buffers) is done
 * before the gate opens; "ready" is printed (and flushed) just before it, so a
 * test can wait for the process to sit in the gate's nanosleep() before it
 * starts tracing it (the shell's own work before the exec, e.g. a stat() in
 * the PATH search, stays out). Exits 0 on success.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fct_gate.h"

static void gate(void)
{
	fputs("ready\n", stdout);
	fflush(stdout);
	fct_wait_gate();
}

int main(int argc, char **argv)
{
	const char *op = argc > 1 ? argv[1] : "";
	const char *file = argc > 2 ? argv[2] : "/proc/version";
	static char buf[4096];
	int p[2];

	if (!strcmp(op, "read")) {
		int fd;
		ssize_t n;

		gate();
		fd = open(file, O_RDONLY);
		if (fd < 0)
			return 1;
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			;
		close(fd);
		return n < 0;
	}
	if (!strcmp(op, "read_fresh")) {
		char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int fd;
		ssize_t n;

		if (m == MAP_FAILED)
			return 1;
		gate();
		fd = open(file, O_RDONLY);
		if (fd < 0)
			return 1;
		while ((n = read(fd, m, 4096)) > 0)
			;
		close(fd);
		return n < 0;
	}
	if (!strcmp(op, "pipe")) {
		memset(buf, 'x', 64);
		if (pipe(p))
			return 1;
		gate();
		return write(p[1], buf, 64) != 64;
	}
	if (!strcmp(op, "stat")) {
		struct stat st;

		gate();
		return stat(file, &st) != 0;
	}
	if (!strcmp(op, "open")) {
		int fd;

		gate();
		fd = openat(AT_FDCWD, file, O_RDONLY);
		if (fd < 0)
			return 1;
		return close(fd) != 0;
	}
	if (!strcmp(op, "open_fresh")) {
		char path[4096];
		const char *name;
		int fd, nfd;

		snprintf(path, sizeof(path), "%s.name", file);
		nfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (nfd < 0 || write(nfd, file, strlen(file) + 1) < 0)
			return 1;
		name = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, nfd, 0);
		if (name == MAP_FAILED)
			return 1;
		gate();
		fd = openat(AT_FDCWD, name, O_RDONLY);
		unlink(path);
		if (fd < 0)
			return 1;
		return close(fd) != 0;
	}
	if (!strcmp(op, "mmap") || !strcmp(op, "mmap_pinned")) {
		int pinned = !strcmp(op, "mmap_pinned");
		cpu_set_t cpus;
		char *m;

		CPU_ZERO(&cpus);
		CPU_SET(sched_getcpu(), &cpus);
		if (pinned && sched_setaffinity(0, sizeof(cpus), &cpus))
			return 1;
		gate();
		for (int i = 0; i < (pinned ? 4 : 1); i++) {
			m = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
			if (m == MAP_FAILED)
				return 1;
			m[4096] = 1;
			/* ENOSYS: a kernel without CONFIG_ADVISE_SYSCALLS (the 6.12
			 * test kernels), where munmap() drains */
			if (pinned && madvise(m, 4 * 4096, MADV_WILLNEED) && errno != ENOSYS)
				return 1;
			if (munmap(m, 4 * 4096))
				return 1;
		}
		return 0;
	}
	if (!strcmp(op, "fork") || !strcmp(op, "fork_rt")) {
		struct sched_param sp = { .sched_priority = 1 };
		pid_t c;
		int st;

		if (!strcmp(op, "fork_rt") && sched_setscheduler(0, SCHED_FIFO, &sp))
			return 1;
		gate();
		c = fork();
		if (c < 0)
			return 1;
		if (c == 0)
			_exit(0);
		return waitpid(c, &st, 0) != c || st != 0;
	}
	if (!strcmp(op, "readdir")) {
		int fd = open(file, O_RDONLY | O_DIRECTORY);
		long n;

		if (fd < 0)
			return 1;
		gate();
		while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0)
			;
		return n < 0;
	}
	if (!strcmp(op, "write")) {
		int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd < 0)
			return 1;
		memset(buf, 'x', 100);
		gate();
		return write(fd, buf, 100) != 100;
	}
	if (!strcmp(op, "put") && argc > 3) {
		int fd = open(file, O_WRONLY);
		size_t len = strlen(argv[3]);

		ssize_t n;

		if (fd < 0)
			return 1;
		gate();
		n = write(fd, argv[3], len);
		if (n == (ssize_t)len)
			return 0;
		/* what went wrong, for the test's log: the traced write's result */
		fprintf(stderr, "fct_ops: put: write(%s, %zu bytes) returned %zd (%s)\n",
			file, len, n, n < 0 ? strerror(errno) : "short");
		return 1;
	}
	if (!strcmp(op, "tcp")) {
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t alen = sizeof(a);
		int l = socket(AF_INET, SOCK_STREAM, 0);
		int c = socket(AF_INET, SOCK_STREAM, 0);
		int s;

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) ||
		    listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &alen))
			return 1;
		memset(buf, 'x', 100);
		gate();
		if (connect(c, (struct sockaddr *)&a, sizeof(a)))
			return 1;
		s = accept(l, NULL, NULL);
		if (s < 0 || send(c, buf, 100, 0) != 100)
			return 1;
		return recv(s, buf, 100, MSG_WAITALL) != 100;
	}
	if (!strcmp(op, "unix")) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, p))
			return 1;
		memset(buf, 'x', 100);
		gate();
		if (write(p[0], buf, 100) != 100)
			return 1;
		return read(p[1], buf, 100) != 100;
	}
	if (!strcmp(op, "epoll")) {
		struct epoll_event ev = { .events = EPOLLIN };
		int efd = eventfd(0, 0);
		int ep = epoll_create1(0);
		uint64_t one = 1;
		pid_t c;
		int st;

		if (efd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev))
			return 1;
		c = fork();
		if (c < 0)
			return 1;
		if (c == 0) {
			fct_wait_gate();
			usleep(200000);
			_exit(write(efd, &one, sizeof(one)) != sizeof(one));
		}
		gate();
		if (epoll_wait(ep, &ev, 1, -1) != 1)
			return 1;
		return waitpid(c, &st, 0) != c || st != 0;
	}
	if (!strcmp(op, "fsync")) {
		int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd < 0)
			return 1;
		memset(buf, 'x', sizeof(buf));
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			return 1;
		gate();
		if (pwrite(fd, buf, 1, 0) != 1)
			return 1;
		return fsync(fd) != 0;
	}
	fprintf(stderr, "usage: fct_ops read|read_fresh|pipe|stat|open|mmap|mmap_pinned|fork|fork_rt|readdir|write|fsync [FILE] | put FILE TEXT | tcp|unix|epoll\n");
	return 2;
}
