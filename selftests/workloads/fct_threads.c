// SPDX-License-Identifier: GPL-2.0
/*
 * fct_threads N FILE: after the start gate, N threads each read FILE once, one after
 * another (so the trace is deterministic), and print "tid <TID>" lines.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "fct_gate.h"

static const char *file;

static void *worker(void *arg)
{
	char buf[256];
	int fd = open(file, O_RDONLY);

	printf("tid %ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	if (fd >= 0) {
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 4;
	pthread_t t[64];
	int i;

	file = argc > 2 ? argv[2] : "/proc/version";
	if (n < 1 || n > 64)
		return 2;
	/* Create the threads before the gate so set_pid sees them all. */
	fct_wait_gate();
	for (i = 0; i < n; i++) {
		if (pthread_create(&t[i], NULL, worker, NULL))
			return 1;
		pthread_join(t[i], NULL);
	}
	return 0;
}
