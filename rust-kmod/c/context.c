// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: What a probe hit or a return runs in: the context checks of probe handlers (whether
 * the traced task may wait for arming here), and the stacks fctrace reads return
 * addresses from (the task's own, function_graph's shadow stack, rethook's list).
 */
#include <linux/ftrace.h>
#include <linux/hardirq.h>
#include <linux/kprobes.h>
#include <linux/moduleparam.h>
#include <linux/preempt.h>
#include <linux/ptrace.h>
#include <linux/rcupdate.h>
#include <linux/rethook.h>
#include <linux/sched.h>
#include <linux/sched/rt.h>
#include <linux/sched/task_stack.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#ifdef CONFIG_X86
#include <asm/irq_stack.h>
#include <asm/unwind.h>
#endif
#ifdef CONFIG_ARM64
#include <asm/compiler.h>
#endif
#include "helpers.h"

/*
 * Whether a task may sleep where a probe hit it is read from preempt_count(): without
 * CONFIG_PREEMPT_COUNT it stays 0 under a spinlock, and a task holding one would be put
 * to sleep in the arming trampoline.
 */
#ifndef CONFIG_PREEMPT_COUNT
#error "fctrace needs a kernel with CONFIG_PREEMPT_COUNT (PREEMPT, PREEMPT_DYNAMIC or DEBUG_ATOMIC_SLEEP)"
#endif

/*
 * The least stack a task must have left (below the probed instruction's stack pointer)
 * to be sent to wait in the trampoline: a quarter of it (4 KiB of 16 KiB). A task with
 * less counts as atomic: its calls not armed yet show as "not followed: atomic" and are
 * armed ahead.
 */
#define FCTRACE_STACK_RESERVE (THREAD_SIZE / 4)

/*
 * The module parameter stack_reserve (bytes, /sys/module/fctrace/parameters/) raises
 * that reserve, never lowers it: a smaller value counts as FCTRACE_STACK_RESERVE. Above
 * THREAD_SIZE no task ever waits in the trampoline (lifecycle/stack_reserve.tc).
 */
static unsigned int stack_reserve = FCTRACE_STACK_RESERVE;
module_param(stack_reserve, uint, 0644);
MODULE_PARM_DESC(stack_reserve,
		 "least kernel stack (bytes) a traced task must have left to wait in the trampoline; at least THREAD_SIZE/4");

/*
 * See fctrace_task_context(): whether the current task, not TASK_RUNNING, may wait for
 * arming by polling.
 */
static bool fctrace_may_poll(void)
{
	unsigned int state = READ_ONCE(current->__state);

	/*
	 * TASK_FREEZABLE too: do_wait()'s own state. The freezer leaves a task that is
	 * still on the run queue (polling) alone and wakes it with a fake signal instead.
	 */
	return !(state & ~(TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE | TASK_WAKEKILL |
			   TASK_NOLOAD | TASK_FREEZABLE)) &&
	       !rt_or_dl_task(current);
}

/*
 * Whether the flags of @regs let the task sleep: interrupts on and, on x86-64, neither
 * EFLAGS.AC (between stac and clac: a user copy, e.g. a call of rep_movs_alternative())
 * nor DF set: x86-64 does not switch EFLAGS on a context switch, so sleeping there would
 * run the next task on this CPU with SMAP off (or string instructions backwards). The
 * trampoline counts any that gets there anyway (stats: trampoline_unsafe_flags). On
 * arm64 the interrupt mask only: its user accesses are unprivileged loads and stores
 * (LDTR, STTR) made with PAN on, and the few windows with PAN off (uaccess_enable_
 * privileged(): atomics on user memory, in inline assembly) call no function.
 */
static bool fctrace_flags_sleepable(const struct pt_regs *regs)
{
#ifdef CONFIG_X86
	return (regs->flags & X86_EFLAGS_IF) && !(regs->flags & (X86_EFLAGS_AC | X86_EFLAGS_DF));
#else
	return !regs_irqs_disabled(regs);
#endif
}

int fctrace_task_context(const struct pt_regs *regs, unsigned int via_ftrace, bool irqs,
			 bool *sleepable)
{
	unsigned int pc = preempt_count();
	unsigned long sp = kernel_stack_pointer((struct pt_regs *)regs);
	int rcu_depth = 0;

	*sleepable = false;
	if (via_ftrace == FCTRACE_VIA_DIE) {
		/*
		 * A die notifier runs inside atomic_notifier_call_chain()'s rcu_read_lock():
		 * a read-side depth with preemptible RCU, else one more preemption level.
		 */
		if (IS_ENABLED(CONFIG_PREEMPT_RCU))
			rcu_depth = 1;
		else if (IS_ENABLED(CONFIG_PREEMPT_COUNT))
			pc -= 1;
		via_ftrace = 0;
	}
	if (via_ftrace) {
		/*
		 * An ftrace callback: kprobe_ftrace_handler() runs with preemption disabled
		 * once, fctrace's entry hook once per recursion bit it took.
		 */
		pc -= via_ftrace;
	} else {
#ifdef CONFIG_ARM64
		/*
		 * el1_brk64() enters like an NMI for RCU (ct_nmi_enter()) but counts no NMI:
		 * debug_exception_enter() disables preemption once.
		 */
		if ((pc & PREEMPT_MASK) < PREEMPT_OFFSET)
			return FCTRACE_CTX_NONE;
		pc -= PREEMPT_OFFSET;
#else
		/* exc_int3() went through irqentry_nmi_enter(): NMI_OFFSET + HARDIRQ_OFFSET. */
		if ((pc & NMI_MASK) < NMI_OFFSET)
			return FCTRACE_CTX_NONE;
		pc -= NMI_OFFSET + HARDIRQ_OFFSET;
#endif
	}
	if (pc & NMI_MASK)
		return FCTRACE_CTX_NONE;
	/*
	 * An interrupt taken while the task exits (do_exit() set PF_EXITING; its own tree
	 * was closed at do_exit()'s entry) is not the task's: tracing may stop before the
	 * interrupt returns (the process leaves set_pid at sched_process_exit), which would
	 * leave its tree open.
	 */
	if ((pc & (HARDIRQ_MASK | SOFTIRQ_OFFSET)) && (current->flags & PF_EXITING))
		return FCTRACE_CTX_NONE;
	if (pc & HARDIRQ_MASK)
		return irqs ? FCTRACE_CTX_HARDIRQ : FCTRACE_CTX_NONE;
	if (pc & SOFTIRQ_OFFSET)
		return irqs ? FCTRACE_CTX_SOFTIRQ : FCTRACE_CTX_NONE;
	/*
	 * fctrace follows the task by its stack pointer, on its own stack. Code that runs
	 * for the task on another stack (softirqs run by local_bh_enable() through
	 * call_on_irqstack(), before they count as serving; exception stacks) is not part
	 * of its call tree; with irqs it is shown as a softirq.
	 */
	if (sp - (unsigned long)task_stack_page(current) >= THREAD_SIZE)
		return irqs && !(current->flags & PF_EXITING) ? FCTRACE_CTX_SOFTIRQ :
								FCTRACE_CTX_NONE;
	/*
	 * The task does not arm itself: it waits, with a timeout, for the work item
	 * that arms (engine/wait/, arm_pending). So the sleeping locks it may hold
	 * (mmap_lock, pcpu_alloc_mutex, ...) cannot close a cycle with the locks arming
	 * takes (kprobe_mutex, cpu_hotplug_lock, text_mutex): at worst the wait times out.
	 *
	 * A task that set its state to sleep (set_current_state() before the check of a
	 * wait loop, e.g. do_wait() around wait_task_zombie(), a wait_event() condition)
	 * must not block elsewhere first: that would lose its state (and might_sleep()
	 * warns, "do not call blocking ops when !TASK_RUNNING"). It may be preempted,
	 * though (__schedule(SM_PREEMPT) keeps it on the run queue, state and all, and a
	 * wakeup meanwhile makes it TASK_RUNNING): it waits for arming by polling, and
	 * yields only through cond_resched() (fctrace_arm_sleep()). Only in the states of
	 * an ordinary wait loop, and in the fair class: the work item it waits for runs
	 * on this CPU, which a real-time task would not give up.
	 *
	 * Nor may a task whose flags forbid it (fctrace_flags_sleepable()).
	 *
	 * Nor a task deep in its stack: the trampoline's frame, the wait and the scheduler
	 * below it need room the call at hand may not have left (FCTRACE_STACK_RESERVE).
	 */
	*sleepable = sp - (unsigned long)task_stack_page(current) >=
			     max_t(unsigned long, READ_ONCE(stack_reserve), FCTRACE_STACK_RESERVE) &&
		     !(pc & (PREEMPT_MASK | SOFTIRQ_MASK)) &&
		     (task_is_running(current) || fctrace_may_poll()) &&
		     fctrace_flags_sleepable(regs) &&
		     rcu_preempt_depth() == rcu_depth && !pagefault_disabled() &&
		     !(current->flags & (PF_EXITING | PF_MEMALLOC));
	return FCTRACE_CTX_TASK;
}

/*
 * The current task's function_graph shadow stack: its words in use (*top of them) and
 * where, in a struct ftrace_ret_stack, retp lies after the saved return address
 * (*retp_off words). NULL if it has none. The lookup itself is Rust's
 * (graph_saved_ret() in crates/fctrace-core/src/retstack.rs, host-tested).
 */
const unsigned long *fctrace_graph_ret_stack(int *top, int *retp_off)
{
#ifdef CONFIG_FUNCTION_GRAPH_TRACER
	unsigned long *rs = READ_ONCE(current->ret_stack);
	int n = READ_ONCE(current->curr_ret_stack);

	*retp_off = (offsetof(struct ftrace_ret_stack, retp) -
		     offsetof(struct ftrace_ret_stack, ret)) / sizeof(long);
	if (!rs || n <= 0 || n > (int)(PAGE_SIZE / sizeof(long)))
		return NULL;
	*top = n;
	return rs;
#else
	return NULL;
#endif
}

/*
 * The return address a rethook (kretprobes, fprobe's exit handlers) saved for the
 * current task's frame whose return address sits at @frame, or 0: the newest node of
 * the task's rethook list for that frame holding something other than @tramp (a second
 * rethook on the same frame saved the first one's trampoline). rethook_find_ret_addr()
 * does the same but is not exported. Only the task adds and removes its nodes (an
 * interrupt on its CPU adds its own at the head and removes them before it returns), so
 * the task itself may walk them; at most 64 are looked at.
 */
unsigned long fctrace_rethook_saved_ret(unsigned long frame, unsigned long tramp)
{
#ifdef CONFIG_RETHOOK
	struct llist_node *node = READ_ONCE(current->rethooks.first);
	int n;

	for (n = 0; node && n < 64; n++, node = READ_ONCE(node->next)) {
		struct rethook_node *rh = container_of(node, struct rethook_node, llist);

		if (rh->frame == frame && rh->ret_addr != tramp)
			return rh->ret_addr;
	}
#endif
	return 0;
}

#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0) || !defined(CONFIG_X86)
/*
 * Since pcpu_hot was split up, the per-CPU pointer to the IRQ stack is a variable of
 * its own that is not exported (arm64's always was): its address comes from kallsyms
 * when tracing starts (fctrace_set_hardirq_stack_ptr()). Until then no address is on an
 * IRQ stack. x86-64's (hardirq_stack_ptr) points to the stack's top word, arm64's
 * (irq_stack_ptr) to its base.
 */
static void __percpu *hardirq_stack_slot;

void fctrace_set_hardirq_stack_ptr(unsigned long addr)
{
	WRITE_ONCE(hardirq_stack_slot, (void __percpu *)addr);
}

static unsigned long hardirq_stack_ptr_read(void)
{
	void __percpu *slot = READ_ONCE(hardirq_stack_slot);

	return slot ? *(unsigned long *)raw_cpu_ptr(slot) : 0;
}
#else
void fctrace_set_hardirq_stack_ptr(unsigned long addr)
{
}

static unsigned long hardirq_stack_ptr_read(void)
{
	return (unsigned long)__this_cpu_read(pcpu_hot.hardirq_stack_ptr);
}
#endif

unsigned long fctrace_stack_key(unsigned long addr)
{
	unsigned long top;

	if (addr - (unsigned long)task_stack_page(current) < THREAD_SIZE)
		return (unsigned long)current;
	top = hardirq_stack_ptr_read();
	if (!top)
		return 0;
#ifdef CONFIG_X86
	top += 8;
#else
	top += IRQ_STACK_SIZE;
#endif
	if (top > IRQ_STACK_SIZE && addr - (top - IRQ_STACK_SIZE) < IRQ_STACK_SIZE)
		return top;
	return 0;
}

unsigned long fctrace_stack_word(unsigned long addr, unsigned long *val)
{
	unsigned long key = addr & 7 ? 0 : fctrace_stack_key(addr);

	/* An aligned word below the top of a stack lies wholly in it. */
	if (key)
		*val = READ_ONCE(*(unsigned long *)addr);
	return key;
}

int fctrace_unwind_callers(unsigned long ip, unsigned long sp, unsigned long bp,
			   unsigned long *rets, unsigned long *slots, int n)
{
#ifdef CONFIG_UNWINDER_ORC
	struct unwind_state state;
	struct pt_regs regs = {};
	int i = 0;

	regs.ip = ip;
	regs.sp = sp;
	regs.bp = bp;
	regs.cs = __KERNEL_CS;
	regs.ss = __KERNEL_DS;
	/* Started from regs, the unwinder stands on the caller already. */
	for (unwind_start(&state, current, &regs, NULL); i < n && !unwind_done(&state);
	     unwind_next_frame(&state)) {
		if (state.regs || !state.sp)
			break;
		rets[i] = state.ip;
		slots[i] = state.sp - sizeof(long);
		i++;
	}
	return i;
#elif defined(CONFIG_ARM64)
	/*
	 * The frame records from @bp (a frame pointer of the function at @ip, always kept
	 * in the kernel's build): each is { the caller's record, the return address }, the
	 * address signed with pointer authentication where the function signed it. The
	 * slot given for each is its record: the stack pointer of the caller at its call
	 * where the caller's prologue left it there (`mov x29, sp`, no more stack taken).
	 * Only on this task's stack, above @sp, each record above the last.
	 */
	unsigned long low = sp, high = (unsigned long)task_stack_page(current) + THREAD_SIZE;
	unsigned long fp = bp;
	int i = 0;

	(void)ip;
	while (i < n && IS_ALIGNED(fp, 16) && fp >= low && fp < high - 16) {
		unsigned long next = READ_ONCE(((unsigned long *)fp)[0]);
		unsigned long lr = READ_ONCE(((unsigned long *)fp)[1]);

		rets[i] = ptrauth_strip_kernel_insn_pac(lr);
		slots[i] = fp;
		i++;
		if (next <= fp)
			break;
		low = fp + 16;
		fp = next;
	}
	return i;
#else
	return 0;
#endif
}

int fctrace_return_ctx(bool irqs)
{
	unsigned int pc = preempt_count();

	if (pc & NMI_MASK)
		return FCTRACE_CTX_NONE;
	if (pc & HARDIRQ_MASK)
		return irqs ? FCTRACE_CTX_HARDIRQ : FCTRACE_CTX_NONE;
	if ((pc & SOFTIRQ_OFFSET) ||
	    current_stack_pointer - (unsigned long)task_stack_page(current) >= THREAD_SIZE)
		return irqs ? FCTRACE_CTX_SOFTIRQ : FCTRACE_CTX_NONE;
	return FCTRACE_CTX_TASK;
}
