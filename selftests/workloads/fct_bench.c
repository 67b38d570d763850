// SPDX-License-Identifier: GPL-2.0
/*
 * fct_bench N [FILE]: N small reads of FILE (default /proc/version), each a pread() of the
 * start of the file, then prints "ns <elapsed nanoseconds>" and "ops <reads done>".
 * With N = 0 it reads until SIGUSR1 arrives. With FCT_BENCH_OP=stat it stat()s FILE
 * instead of reading it. Used by `cargo xtask bench` both as the traced busy process
 * (N = 0, stopped when the other tasks are done) and as the untraced "other tasks".
 * Waits at the start gate (fct_gate.h) unless FCT_NOGATE is set. With FCT_SYNC set it
 * calls sync() just before and just after the loop: `cargo xtask icount` counts the
 * instructions executed between the two (its QEMU plugin toggles on ksys_sync()).
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "fct_gate.h"

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static volatile sig_atomic_t stop;

static void on_usr1(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	const char *file = argc > 2 ? argv[2] : "/proc/version";
	char buf[256];
	long long t0;
	long i;
	int fd;

	signal(SIGUSR1, on_usr1);
	if (!getenv("FCT_NOGATE"))
		fct_wait_gate();
	fd = open(file, O_RDONLY);
	if (fd < 0) {
		perror(file);
		return 1;
	}
	if (getenv("FCT_SYNC"))
		sync();
	t0 = now_ns();
	if (getenv("FCT_BENCH_OP") && !strcmp(getenv("FCT_BENCH_OP"), "stat")) {
		struct stat st;

		for (i = 0; n ? i < n : !stop; i++)
			if (stat(file, &st))
				return 1;
	} else {
		for (i = 0; n ? i < n : !stop; i++)
			if (pread(fd, buf, sizeof(buf), 0) < 0)
				return 1;
	}
	t0 = now_ns() - t0;
	if (getenv("FCT_SYNC"))
		sync();
	printf("ns %lld\nops %ld\n", t0, i);
	return 0;
}
