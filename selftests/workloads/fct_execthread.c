// SPDX-License-Identifier: GPL-2.0
/*
 * fct_execthread N: after the start gate, a second thread execs this program again with
 * N-1 (so the exec comes from a thread that is not the process's leader, and the new
 * program gets the leader's thread id: de_thread()); at 0 it prints "done <PID>" and
 * exits. The process keeps one PID throughout, its exec'ing threads have N other ids.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "fct_gate.h"

static char *self;
static int left;

static void *worker(void *arg)
{
	char n[16];

	(void)arg;
	snprintf(n, sizeof(n), "%d", left - 1);
	execl(self, self, n, (char *)NULL);
	perror("execl");
	exit(127);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;

	left = argc > 1 ? atoi(argv[1]) : 0;
	if (left < 0 || left > 1000)
		return 2;
	self = "/proc/self/exe";
	fct_wait_gate();
	if (left == 0) {
		printf("done %d\n", (int)getpid());
		return 0;
	}
	if (pthread_create(&t, NULL, worker, NULL))
		return 1;
	for (;;)
		pause();
	return 0;
}
