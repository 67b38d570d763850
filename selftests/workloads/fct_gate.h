/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Start gate for fctrace workloads: wait until the file named by $FCT_GATE (default
 * /tmp/fct_go) exists, polling with access() and nanosleep(), so a test can put the
 * process in set_pid before it does the work. The gate makes no read() calls.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void fct_wait_gate(void)
{
	const char *gate = getenv("FCT_GATE");
	struct timespec ts = { 0, 2 * 1000 * 1000 };

	if (!gate)
		gate = "/tmp/fct_go";
	while (access(gate, F_OK) != 0)
		nanosleep(&ts, NULL);
}
