// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: Entry hooks (engine/entry.rs): fctrace's own ftrace_ops and their callback. The
 * callback must be C: it runs for every task that calls a hooked function, and decides
 * with a load and a test (two with the kworkers option) that another task's call is
 * none of fctrace's business.
 */
#include <linux/ftrace.h>
#include <linux/sched.h>
#include <linux/trace_recursion.h>
#include "helpers.h"

#ifdef CONFIG_ARM64
/* trampoline_arm64.S: where an entry hook sends a task to wait for arming. */
extern char fctrace_entry_trampoline[];
#endif

/* engine/mod.rs: a superset of the traced thread groups' bits while tracing is on. */
extern u64 fctrace_hot_mask;
/* engine/mod.rs: while tracing is on with the kworkers option, workqueue workers too. */
extern bool fctrace_hot_kworkers;

static __always_inline bool fctrace_hot(void)
{
	return (READ_ONCE(fctrace_hot_mask) & BIT_ULL(current->tgid % 64)) ||
	       (READ_ONCE(fctrace_hot_kworkers) && (current->flags & PF_WQ_WORKER));
}

/*
 * The passes of tasks fctrace does not trace through its call-site and entry probes: what
 * fctrace costs other tasks there. Each is a breakpoint trap where kprobes did not optimize
 * the probe into a jump (every one on arm64, which has no optimized kprobes). Per CPU, so
 * that counting adds no shared cache line to their path.
 */
static DEFINE_PER_CPU(unsigned long, fctrace_untraced_hits);

bool fctrace_probe_traced(void)
{
	if (likely(fctrace_hot()))
		return true;
	this_cpu_inc(fctrace_untraced_hits);
	return false;
}

unsigned long fctrace_untraced_probe_hits(void)
{
	unsigned long sum = 0;
	int cpu;

	for_each_possible_cpu(cpu)
		sum += per_cpu(fctrace_untraced_hits, cpu);
	return sum;
}

/*
 * Entry hooks (engine/entry.rs): fctrace's own ftrace_ops, filtered to exactly the functions
 * the traced tasks can reach. Other tasks pay a call into ftrace's trampoline and the
 * check in fctrace_entry_func(), not a trap.
 */
static noinline void notrace fctrace_entry_traced(unsigned long ip, struct ftrace_regs *fregs)
{
#ifdef CONFIG_X86
	struct pt_regs *regs = &arch_ftrace_regs(fregs)->regs;
#else
	/*
	 * arm64's ftrace_regs holds the argument registers, the frame pointer, the link
	 * register, the stack pointer and the pc, not a pt_regs: the handler gets a copy,
	 * the rest zero, with the interrupt mask of this context (below). Of what it
	 * changes, the link register is written back (a hooked return), and a pc set to
	 * fctrace_entry_trampoline (below).
	 */
	struct pt_regs copy = {}, *regs = ftrace_partial_regs(fregs, &copy);
#endif
	unsigned long list;
	int bit;

	if (!fctrace_entry_wanted(current->tgid))
		return;
	/*
	 * Called through ftrace's list function: another ftrace user hooks this function
	 * too. The list function holds its recursion bit of this context (and disabled
	 * preemption once more), and the other users' callbacks may change the registers
	 * (livepatch the instruction pointer, a BPF trampoline %rax).
	 */
	list = current->trace_recursion &
	       (BIT(TRACE_LIST_START + trace_get_context_bit()) |
		BIT(TRACE_LIST_START + TRACE_CTX_TRANSITION));
	bit = fctrace_recursion_lock();
	if (bit < 0)
		return;
	/*
	 * ftrace_caller() saves no flags (ftrace_regs_caller() does): the handler decides
	 * whether the task may sleep by IF, AC and DF, which ftrace's trampoline did not
	 * change.
	 */
#ifdef CONFIG_X86
	if (!ftrace_get_regs(fregs))
		regs->flags = native_save_fl();
#else
	/* As regs_irqs_disabled() reads it: the I bit, or GIC priority masking. */
	if (irqs_disabled())
		regs->pstate |= PSR_I_BIT;
	if (system_uses_irq_prio_masking())
		regs->pmr = irqs_disabled() ? GIC_PRIO_IRQOFF : GIC_PRIO_IRQON;
#endif
	fctrace_entry_hook(ip, regs, (bit >> 8 ? 2 : 1) + !!list, !!list);
#ifndef CONFIG_X86
	/* The function returns to the address ftrace_caller() restores x30 from. */
	arch_ftrace_regs(fregs)->lr = copy.regs[30];
#ifdef CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS
	/*
	 * The task is to wait for the function to be armed (Tracer::redirect_entry(), only
	 * where no other ftrace user hooks it): ftrace_caller() goes on to the trampoline as
	 * to a direct trampoline, with the argument registers restored, the function's
	 * return address in x9 and the address after its ftrace site's BL in x30.
	 */
	if (copy.pc == (unsigned long)fctrace_entry_trampoline)
		arch_ftrace_set_direct_caller(fregs, copy.pc);
#endif
#endif
	fctrace_recursion_unlock(bit);
}

/* The callback: most tasks leave after one load and one test, before any register is saved. */
static void notrace fctrace_entry_func(unsigned long ip, unsigned long parent_ip,
				       struct ftrace_ops *op, struct ftrace_regs *fregs)
{
	if (likely(!fctrace_hot()))
		return;
	fctrace_entry_traced(ip, fregs);
}

/*
 * The hooks are spread over several ops of up to FCTRACE_ENTRY_SHARD functions each: an
 * update of an ops' filter copies its whole hash (an allocation per entry) and walks every
 * ftrace record, so with one ops its cost grew with the hooked set (1.0 ms per armed
 * function while the first thousand were armed, 6 ms from 3000 to 3700). Each function is
 * in one ops only, so it still calls its ops' own trampoline and no list function.
 *
 * PERMANENT: registering fails while ftrace is disabled (sysctl kernel.ftrace_enabled),
 * and the sysctl cannot disable it meanwhile: fctrace's hooks are never silently off.
 */
#define FCTRACE_ENTRY_OPS 16
#define FCTRACE_ENTRY_SHARD 1024

static struct ftrace_ops fctrace_entry_ops[FCTRACE_ENTRY_OPS] = {
	[0 ... FCTRACE_ENTRY_OPS - 1] = {
		.func = fctrace_entry_func,
		.flags = FTRACE_OPS_FL_PERMANENT,
	},
};

/* Under the tracer's mutex (every caller holds it). */
static unsigned int fctrace_entry_count[FCTRACE_ENTRY_OPS];
static bool fctrace_entry_registered[FCTRACE_ENTRY_OPS];
static unsigned int fctrace_entry_cur;

/* Returns 1 where this registered an ops (its first batch), 0 where it only updated the
 * filter of one registered before, or a negative errno. */
int fctrace_entry_hooks_add(const unsigned long *ips, unsigned int n)
{
	unsigned int s = fctrace_entry_cur;
	struct ftrace_ops *ops;
	int fresh = 0;
	int ret;

	if (!n)
		return 0;
	/* A batch goes whole into one ops (it fails as a whole): the next one when it would
	 * overfill this one. The last ops takes whatever comes after it is full. */
	if (fctrace_entry_count[s] && fctrace_entry_count[s] + n > FCTRACE_ENTRY_SHARD &&
	    s + 1 < FCTRACE_ENTRY_OPS)
		s++;
	ops = &fctrace_entry_ops[s];
	ret = ftrace_set_filter_ips(ops, (unsigned long *)ips, n, 0, 0);
	if (ret)
		return ret;
	/* Registered only with a filter: an ops without one would hook every function. */
	if (!fctrace_entry_registered[s]) {
		ret = register_ftrace_function(ops);
		if (ret) {
			ftrace_set_filter_ips(ops, NULL, 0, 0, 1);
			return ret;
		}
		fctrace_entry_registered[s] = true;
		fresh = 1;
	}
	fctrace_entry_count[s] += n;
	fctrace_entry_cur = s;
	return fresh;
}

void fctrace_entry_hooks_clear(void)
{
	unsigned int s;

	for (s = 0; s < FCTRACE_ENTRY_OPS; s++) {
		if (fctrace_entry_registered[s]) {
			/* Waits for callbacks in flight (RCU-tasks for a module's ops). */
			unregister_ftrace_function(&fctrace_entry_ops[s]);
			fctrace_entry_registered[s] = false;
		}
		if (fctrace_entry_count[s])
			ftrace_set_filter_ips(&fctrace_entry_ops[s], NULL, 0, 0, 1);
		fctrace_entry_count[s] = 0;
	}
	fctrace_entry_cur = 0;
}
