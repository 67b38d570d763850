// SPDX-License-Identifier: GPL-2.0
/* fct_cat FILE...: like cat (open, read, write, close), after the start gate. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include "fct_gate.h"

int main(int argc, char **argv)
{
	char buf[4096];
	int i;

	fct_wait_gate();
	for (i = 1; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		ssize_t n;

		if (fd < 0) {
			perror(argv[i]);
			return 1;
		}
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			if (write(1, buf, n) != n)
				return 1;
		close(fd);
	}
	return 0;
}
