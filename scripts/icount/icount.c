// SPDX-License-Identifier: GPL-2.0
/*
 * A QEMU TCG plugin for `cargo xtask icount`: counts the guest instructions executed,
 * per instruction address, in windows that the guest opens and closes by executing the
 * instruction at toggle=ADDR (the kernel's ksys_sync(): the guest calls sync()). When a
 * window closes, its counts are appended to out=FILE:
 *
 *   # window N
 *   <address in hex> <count>
 *   ...
 *
 * A translation block's instructions are counted each time the block starts (one
 * callback per block, not per instruction: fast enough to run a benchmark under); a
 * block left early by an exception counts its remaining instructions too, which is
 * rare and close enough for per-call costs in the hundreds of instructions.
 *
 * qemu-plugin.h is QEMU 7.2's (GPL-2.0-or-later), the API version Debian 12's QEMU
 * loads.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define HBITS 22
#define HSIZE (1u << HBITS)

struct tb {
	size_t n;
	uint64_t count;
	uint64_t pcs[];
};

static struct tb **tbs;
static size_t ntbs, captbs;
static uint64_t toggle_pc;
static int on;
static int windows;
static char outfile[512] = "/tmp/icount.out";

static void tb_exec(unsigned int vcpu, void *udata)
{
	struct tb *t = udata;

	if (on)
		t->count++;
}

/* Sums the window's counts per address and appends them to the output file. */
static void dump_window(void)
{
	uint64_t *keys = calloc(HSIZE, sizeof(*keys));
	uint64_t *vals = calloc(HSIZE, sizeof(*vals));
	FILE *f = fopen(outfile, "a");

	if (!keys || !vals || !f) {
		fprintf(stderr, "icount: cannot write %s\n", outfile);
		exit(1);
	}
	for (size_t i = 0; i < ntbs; i++) {
		struct tb *t = tbs[i];

		if (!t->count)
			continue;
		for (size_t j = 0; j < t->n; j++) {
			uint64_t k = t->pcs[j];
			uint64_t h = (k * 0x9E3779B97F4A7C15ull) >> (64 - HBITS);

			while (keys[h] && keys[h] != k)
				h = (h + 1) & (HSIZE - 1);
			keys[h] = k;
			vals[h] += t->count;
		}
		t->count = 0;
	}
	fprintf(f, "# window %d\n", windows);
	for (size_t h = 0; h < HSIZE; h++)
		if (keys[h])
			fprintf(f, "%llx %llu\n", (unsigned long long)keys[h],
				(unsigned long long)vals[h]);
	fclose(f);
	free(keys);
	free(vals);
}

static void toggle_exec(unsigned int vcpu, void *udata)
{
	on = !on;
	if (!on)
		dump_window();
	windows += !on;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);
	struct tb *t = malloc(sizeof(*t) + n * sizeof(uint64_t));

	if (!t)
		exit(1);
	t->n = n;
	t->count = 0;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);

		t->pcs[i] = qemu_plugin_insn_vaddr(insn);
		if (t->pcs[i] == toggle_pc)
			qemu_plugin_register_vcpu_insn_exec_cb(insn, toggle_exec,
							       QEMU_PLUGIN_CB_NO_REGS, NULL);
	}
	if (ntbs == captbs) {
		captbs = captbs ? 2 * captbs : 65536;
		tbs = realloc(tbs, captbs * sizeof(*tbs));
		if (!tbs)
			exit(1);
	}
	tbs[ntbs++] = t;
	qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS, t);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
					   int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "toggle=", 7))
			toggle_pc = strtoull(argv[i] + 7, NULL, 16);
		else if (!strncmp(argv[i], "out=", 4))
			snprintf(outfile, sizeof(outfile), "%s", argv[i] + 4);
	}
	if (!toggle_pc)
		return -1;
	remove(outfile);
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	return 0;
}
