// SPDX-License-Identifier: GPL-2.0
/*
 * fct_pingpong N: a hackbench-like pipe ping-pong. A parent and a forked child pass one
 * byte back and forth over two pipes N times (2N writes, 2N reads, each side sleeping
 * on the other), then the parent prints "ns <elapsed nanoseconds>" and "ops <N>".
 * Used by `cargo xtask bench` as an untraced "other task" running code the traced
 * process does not run (apart from the read/write system call layer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	int ping[2], pong[2];
	long long t0;
	char c = 'x';
	pid_t child;
	long i;

	if (pipe(ping) || pipe(pong)) {
		perror("pipe");
		return 1;
	}
	child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		for (i = 0; i < n; i++)
			if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	t0 = now_ns();
	for (i = 0; i < n; i++)
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) {
			perror("ping-pong");
			return 1;
		}
	printf("ns %lld\nops %ld\n", now_ns() - t0, n);
	return waitpid(child, NULL, 0) == child ? 0 : 1;
}
