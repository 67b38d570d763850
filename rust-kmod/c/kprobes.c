// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: kprobes: a correct emulation for a probed 6-byte `cs call`.
 */
#include <linux/ftrace.h>
#include <linux/fs.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/hardirq.h>
#include <linux/kallsyms.h>
#include <linux/kobject.h>
#include <linux/irq_work.h>
#include <linux/kprobes.h>
#include <asm/text-patching.h>
#include <linux/mm_types.h>
#include <linux/poll.h>
#include <linux/wait.h>
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/preempt.h>
#include <linux/ptrace.h>
#include <linux/rcupdate.h>
#include <linux/binfmts.h>
#include <linux/capability.h>
#include <linux/security.h>
#include <linux/siphash.h>
#include <linux/once.h>
#include <linux/random.h>
#include <linux/pid_namespace.h>
#include <linux/ring_buffer.h>
#include <linux/rethook.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/sched/mm.h>
#include <linux/sched/rt.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/sched/task_stack.h>
#include <linux/smp.h>
#include <linux/cpuhotplug.h>
#include <linux/sysfs.h>
#include <linux/tracepoint.h>
#include <linux/trace_clock.h>
#include <linux/trace_recursion.h>
#include <linux/delay.h>
#include <asm/irq_stack.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
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
