// SPDX-License-Identifier: GPL-2.0
/*
 * fct_pipe_check MODE FILE [TIMEOUT_MS]: probe a trace_pipe-like file.
 *   nonblock: open O_RDONLY|O_NONBLOCK, read once; prints "EAGAIN", "eof" or
 *             "data <N>" (exit 0), or "error <errno text>" (exit 1).
 *   poll:     open O_RDONLY|O_NONBLOCK, poll(POLLIN) with TIMEOUT_MS (default
 *             1000); prints "readable" or "timeout" (exit 0), "error ..." (exit 1).
 *   select:   like poll, with select().
 *   slow:     open O_RDONLY (blocking), then forever: read 4 KiB, copy it to
 *             standard output, sleep TIMEOUT_MS (default 200); a slow reader
 *             that is one process (the shell's way, a dd per read, takes over a
 *             second per read on the debug kernel).
 * Busybox has no tool that does an O_NONBLOCK read or a poll.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char buf[65536];
	int timeout = argc > 3 ? atoi(argv[3]) : 1000;
	int fd;

	if (argc < 3) {
		fprintf(stderr, "usage: fct_pipe_check nonblock|poll|select|slow FILE [TIMEOUT_MS]\n");
		return 2;
	}
	fd = open(argv[2], !strcmp(argv[1], "slow") ? O_RDONLY : O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		printf("error open: %s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(argv[1], "nonblock")) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EAGAIN)
			printf("EAGAIN\n");
		else if (n < 0) {
			printf("error read: %s\n", strerror(errno));
			return 1;
		} else if (n == 0)
			printf("eof\n");
		else
			printf("data %zd\n", n);
		return 0;
	}
	if (!strcmp(argv[1], "poll")) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, timeout);

		if (r < 0) {
			printf("error poll: %s\n", strerror(errno));
			return 1;
		}
		if (r == 0)
			printf("timeout\n");
		else if (p.revents & POLLIN)
			printf("readable\n");
		else {
			printf("error revents 0x%x\n", p.revents);
			return 1;
		}
		return 0;
	}
	if (!strcmp(argv[1], "select")) {
		fd_set rf;
		struct timeval tv = { timeout / 1000, (timeout % 1000) * 1000 };
		int r;

		FD_ZERO(&rf);
		FD_SET(fd, &rf);
		r = select(fd + 1, &rf, NULL, NULL, &tv);
		if (r < 0) {
			printf("error select: %s\n", strerror(errno));
			return 1;
		}
		printf(r && FD_ISSET(fd, &rf) ? "readable\n" : "timeout\n");
		return 0;
	}
	if (!strcmp(argv[1], "slow")) {
		if (argc <= 3)
			timeout = 200;
		for (;;) {
			ssize_t n = read(fd, buf, 4096);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				printf("error read: %s\n", strerror(errno));
				return 1;
			}
			if (n == 0)
				return 0;
			if (write(1, buf, n) != n)
				return 1;
			usleep(timeout * 1000);
		}
	}
	fprintf(stderr, "unknown mode %s\n", argv[1]);
	return 2;
}
