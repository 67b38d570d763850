// SPDX-License-Identifier: GPL-2.0
/*
 * fct_fuzz [-s SEED] [-n WRITES] [-t SECONDS] [-p] DIR: writes seeded random and
 * malformed input into the control files of DIR (an fctrace mount), for the stress
 * selftests.
 *
 * Each write is one of: random bytes, a valid value, a valid value with a byte changed,
 * inserted or cut, a value longer than any file takes, or a list cut across two or three
 * write()s of one open. The seed is printed first ("seed N"): the same seed gives the same
 * writes.
 *
 * Alone (without -p) every refused write is checked as users rely on it: its errno is one
 * the files document, the file reads back as it did before, and error_log has a line
 * for it. With -p other writers run at once: only the errno is checked.
 * Exit status 0, or 1 with the offending write (in hex) on standard error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned long long rng;

static unsigned int rnd(unsigned int n)
{
	/* xorshift64*: the same sequence from the same seed on every machine */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return n ? (unsigned int)((rng * 2685821657736338717ULL) >> 33) % n : 0;
}

struct file {
	const char *name;
	const char *valid[16];
};

/* The files whose state a refused write must leave as it was (trace and error_log are
 * cleared by any write, and are written only with -p). */
static char parent[16];

static struct file files[] = {
	/* the first is the parent's PID (the test's shell), set at the start */
	{ "set_pid", { parent, "", "4194304", "1", "1,1", "0", NULL } },
	{ "start_function", { "vfs_read", "vfs_write", "", "do_sys_poll", "jiffies",
			      "0xffffffff81000000", "no_such_function_xyz", NULL } },
	{ "filter", { "vfs_*", "!seq_*", "a?b", "", "vfs_read !ext4_*", NULL } },
	{ "max_depth", { "0", "5", "127", "128", NULL } },
	{ "max_probes", { "16", "60000", "15", NULL } },
	{ "disarm_after", { "0", "30", "86400", "86401", NULL } },
	{ "arm_wait_ms", { "0", "100", "60000", "60001", NULL } },
	{ "tracing_on", { "0", "1", "2", NULL } },
	{ "buffer_size_kb", { "1", "64", "1024", "0", NULL } },
	{ "options", { "retval", "noretval", "duration", "noduration", "irqs", "noirqs",
		       "args", "noargs", "lossless", "nolossless", "follow-forks",
		       "callsite", "noabstime", "errors", NULL } },
};
#define NFILES (sizeof(files) / sizeof(files[0]))

/* Cleared by any write: written only with -p. */
static const struct file trace_file = { "trace", { NULL } };
static const struct file log_file = { "error_log", { NULL } };

static const char *dir;

static int path(char *buf, size_t len, const char *name)
{
	return snprintf(buf, len, "%s/%s", dir, name) >= (int)len ? -1 : 0;
}

/* The whole content of a file (up to len - 1 bytes), or -1. */
static ssize_t slurp(const char *name, char *buf, size_t len)
{
	char p[512];
	ssize_t n, got = 0;
	int fd;

	if (path(p, sizeof(p), name) || (fd = open(p, O_RDONLY)) < 0)
		return -1;
	while (got < (ssize_t)len - 1 && (n = read(fd, buf + got, len - 1 - got)) > 0)
		got += n;
	close(fd);
	buf[got] = 0;
	return got;
}

static int expected_errno(int e)
{
	switch (e) {
	case EINVAL: case ENOSPC: case ESRCH: case ENOENT: case EPERM: case EBUSY:
	case ENOMEM: case EEXIST: case EILSEQ: case EOPNOTSUPP: case ETIMEDOUT:
		return 1;
	}
	return 0;
}

static char input[20000];

/* Makes one input for file f into `input`; returns its length, and in *cuts up to two
 * places where it is split into separate write()s (0: none). */
static size_t make(const struct file *f, size_t cuts[2])
{
	const char *v;
	size_t n, i, nv = 0;

	while (f->valid[nv])
		nv++;
	v = f->valid[rnd(nv)];
	n = strlen(v);
	memcpy(input, v, n);
	cuts[0] = cuts[1] = 0;
	switch (rnd(7)) {
	case 0: /* random bytes */
		n = rnd(64);
		for (i = 0; i < n; i++)
			input[i] = (char)rnd(256);
		break;
	case 1: /* a valid value, with or without a newline */
		if (rnd(2))
			input[n++] = '\n';
		break;
	case 2: /* a byte changed */
		if (n)
			input[rnd(n)] = (char)rnd(256);
		break;
	case 3: /* a byte inserted */
		i = rnd(n + 1);
		memmove(input + i + 1, input + i, n - i);
		input[i] = "0123456789 ,!*?-\n\t\001x"[rnd(21)];
		n++;
		break;
	case 4: /* cut short */
		n = rnd(n + 1);
		break;
	case 5: /* longer than any file takes (16 KiB), or just long */
		n = rnd(2) ? 17000 : 600;
		for (i = 0; i < n; i++)
			input[i] = "19 a_"[rnd(5)];
		break;
	case 6: /* two values, cut across write()s */
		input[n++] = ' ';
		v = f->valid[rnd(nv)];
		memcpy(input + n, v, strlen(v));
		n += strlen(v);
		input[n++] = '\n';
		cuts[0] = rnd(n);
		cuts[1] = cuts[0] + rnd(n - cuts[0]);
		break;
	}
	return n;
}

static void dump(const char *why, const struct file *f, size_t n)
{
	size_t i;

	fprintf(stderr, "FAIL: %s: %s <- %zu bytes:", why, f->name, n);
	for (i = 0; i < n && i < 64; i++)
		fprintf(stderr, " %02x", (unsigned char)input[i]);
	fprintf(stderr, "%s\n", n > 64 ? " ..." : "");
}

int main(int argc, char **argv)
{
	unsigned long long seed = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 20);
	long writes = 1000, secs = 60, done = 0, refused = 0;
	static char before[65536], after[65536], log[8192];
	int par = 0, c;
	time_t end;

	while ((c = getopt(argc, argv, "s:n:t:p")) != -1) {
		switch (c) {
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'n': writes = atol(optarg); break;
		case 't': secs = atol(optarg); break;
		case 'p': par = 1; break;
		default: return 2;
		}
	}
	if (optind != argc - 1)
		return 2;
	dir = argv[optind];
	printf("seed %llu\n", seed);
	fflush(stdout);
	rng = seed ? seed : 1;
	snprintf(parent, sizeof(parent), "%d", (int)getppid());
	end = time(NULL) + secs;
	for (; done < writes && time(NULL) < end; done++) {
		const struct file *f = &files[rnd(NFILES)];
		size_t cuts[2], n = make(f, cuts), at = 0, k;
		int fd, err = 0, taken, flags = O_WRONLY | (rnd(4) ? O_TRUNC : O_APPEND);
		char p[512];

		if (par && rnd(8) == 0)
			f = rnd(2) ? &trace_file : &log_file;
		if (!par) {
			slurp(f->name, before, sizeof(before));
			slurp("error_log", log, sizeof(log));
			/* an empty error_log shows whether this write added a line */
			if (path(p, sizeof(p), "error_log") == 0 && (fd = open(p, O_WRONLY | O_TRUNC)) >= 0) {
				if (write(fd, "\n", 1) != 1)
					perror("error_log");
				close(fd);
			}
		}
		if (path(p, sizeof(p), f->name) || (fd = open(p, flags)) < 0) {
			perror(p);
			return 1;
		}
		/* taken: an earlier write() of this open was taken (the list it set stays) */
		for (k = 0, taken = 0; k <= 2 && !err; k++) {
			size_t to = k < 2 && cuts[k] ? cuts[k] : n;

			if (to < at)
				continue;
			if (write(fd, input + at, to - at) < 0)
				err = errno;
			else if (to > at)
				taken = 1;
			at = to;
			if (at == n)
				break;
		}
		close(fd);
		if (!err)
			continue;
		refused++;
		if (!expected_errno(err)) {
			dump(strerror(err), f, n);
			return 1;
		}
		if (par || taken)
			continue;
		slurp(f->name, after, sizeof(after));
		if (strcmp(before, after)) {
			dump("a refused write changed the file", f, n);
			fprintf(stderr, "before: '%s'\nafter: '%s'\n", before, after);
			return 1;
		}
		if (slurp("error_log", log, sizeof(log)) <= 0) {
			dump("a refused write left no error_log line", f, n);
			return 1;
		}
	}
	printf("writes %ld refused %ld\n", done, refused);
	return 0;
}
