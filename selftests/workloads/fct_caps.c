// SPDX-License-Identifier: GPL-2.0
/*
 * fct_caps [-d CAP]... [-u UID] [-g] [--] PROG [ARG...]: run PROG with less privilege.
 *   -d CAP  drop capability number CAP (21 CAP_SYS_ADMIN, 38 CAP_PERFMON, 40 at most)
 *           from the bounding set and from the effective, permitted and inheritable
 *           sets: a root PROG does not get it back at exec
 *   -u UID  become user and group UID (real, effective, saved) after dropping
 *   -g      wait for the start gate (fct_gate.h) before the exec
 * For the security selftests: root without CAP_SYS_ADMIN, a user running a set-user-ID
 * program.
 */
#define _GNU_SOURCE
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "fct_gate.h"

int main(int argc, char **argv)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	unsigned long long drop = 0;
	int uid = -1, gate = 0, i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-d") && i + 1 < argc) {
			int cap = atoi(argv[++i]);

			if (cap < 0 || cap > 63)
				return 2;
			drop |= 1ULL << cap;
		} else if (!strcmp(argv[i], "-u") && i + 1 < argc) {
			uid = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "-g")) {
			gate = 1;
		} else if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else {
			break;
		}
	}
	if (i >= argc) {
		fprintf(stderr, "usage: fct_caps [-d CAP]... [-u UID] [-g] [--] PROG [ARG...]\n");
		return 2;
	}
	for (int cap = 0; cap < 64; cap++) {
		if (!(drop & (1ULL << cap)))
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)) {
			perror("PR_CAPBSET_DROP");
			return 1;
		}
	}
	if (syscall(SYS_capget, &hdr, data)) {
		perror("capget");
		return 1;
	}
	for (int k = 0; k < 2; k++) {
		unsigned int mask = ~(unsigned int)(drop >> (32 * k));

		data[k].effective &= mask;
		data[k].permitted &= mask;
		data[k].inheritable &= mask;
	}
	if (syscall(SYS_capset, &hdr, data)) {
		perror("capset");
		return 1;
	}
	if (uid >= 0 && (setresgid(uid, uid, uid) || setresuid(uid, uid, uid))) {
		perror("setresuid");
		return 1;
	}
	if (gate)
		fct_wait_gate();
	execvp(argv[i], argv + i);
	perror(argv[i]);
	return 127;
}
