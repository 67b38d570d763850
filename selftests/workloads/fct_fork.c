// SPDX-License-Identifier: GPL-2.0
/*
 * fct_fork FILE: after the start gate, fork a child that reads FILE (open, read
 * until EOF, close) and exits; the parent prints "child <PID>", waits for it,
 * then reads FILE itself. For follow-forks tests (vfs_read in both processes).
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fct_gate.h"

static void readall(const char *f)
{
	char buf[4096];
	int fd = open(f, O_RDONLY);

	if (fd < 0)
		return;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

int main(int argc, char **argv)
{
	const char *f = argc > 1 ? argv[1] : "/proc/version";
	pid_t c;

	fct_wait_gate();
	c = fork();
	if (c < 0)
		return 1;
	if (c == 0) {
		readall(f);
		_exit(0);
	}
	printf("child %d\n", (int)c);
	fflush(stdout);
	waitpid(c, NULL, 0);
	readall(f);
	return 0;
}
