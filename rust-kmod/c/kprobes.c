// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: kprobes: a correct emulation for a probed 6-byte `cs call`.
 */
#include <linux/kprobes.h>
#include <asm/text-patching.h>
#include "helpers.h"

/*
 * kprobes emulates a probed direct call with int3_emulate_call(), which pushes the
 * address CALL_INSN_SIZE (5) bytes after the call: wrong for GCC's 6-byte `cs call`
 * (Linux 6.12). This emulation uses the instruction's real length.
 */
static void fctrace_emulate_long_call(struct kprobe *p, struct pt_regs *regs)
{
	unsigned long next = regs->ip - INT3_INSN_SIZE + p->ainsn.size;

	int3_emulate_push(regs, next);
	int3_emulate_jmp(regs, next + p->ainsn.rel32);
}
NOKPROBE_SYMBOL(fctrace_emulate_long_call);

int fctrace_kprobe_fix_long_call(struct kprobe *p)
{
	/* A direct call kprobes emulates: e8 after prefixes, more than 5 bytes. */
	if (!p->ainsn.emulate_op || p->ainsn.size <= CALL_INSN_SIZE ||
	    p->ainsn.insn[p->ainsn.size - 5] != CALL_INSN_OPCODE)
		return -EINVAL;
	p->ainsn.emulate_op = fctrace_emulate_long_call;
	return enable_kprobe(p);
}
