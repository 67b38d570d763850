// SPDX-License-Identifier: GPL-2.0
/*
 * fct_preempt N: preemption at a preempt_enable(), on purpose. A child pinned to CPU 0
 * with SCHED_FIFO blocks reading a pipe; the parent, pinned to CPU 0 too, writes one
 * byte N times (after the start gate), 300 ms apart. Each write wakes the real-time
 * child on the writer's CPU, so the writer is preempted as soon as it re-enables
 * preemption (at the wait queue lock's unlock): preempt_schedule_thunk -> __schedule.
 * Prints "ready" before the gate; exits 0 if every byte made the round trip.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fct_gate.h"

static int pin_cpu0(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(0, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	struct timespec gap = { 0, 300 * 1000 * 1000 };
	int down[2], up[2], i, st;
	char c = 'x';
	pid_t child;

	if (pipe(down) || pipe(up) || pin_cpu0()) {
		perror("setup");
		return 1;
	}
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		struct sched_param sp = { .sched_priority = 10 };

		if (sched_setscheduler(0, SCHED_FIFO, &sp))
			_exit(2);
		for (i = 0; i < n; i++)
			if (read(down[0], &c, 1) != 1 || write(up[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	nanosleep(&gap, NULL); /* the child blocks in read() */
	fputs("ready\n", stdout);
	fflush(stdout);
	fct_wait_gate();
	for (i = 0; i < n; i++) {
		if (write(down[1], &c, 1) != 1 || read(up[0], &c, 1) != 1)
			return 1;
		nanosleep(&gap, NULL);
	}
	return waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}
