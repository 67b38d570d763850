// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: the thin C layer. See helpers.h.
 */
#include <linux/hardirq.h>
#include <linux/kallsyms.h>
#include <linux/kobject.h>
#include <linux/irq_work.h>
#include <linux/kprobes.h>
#include <linux/mm_types.h>
#include <linux/rwsem.h>
#include <linux/poll.h>
#include <linux/wait.h>
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/preempt.h>
#include <linux/ptrace.h>
#include <linux/rcupdate.h>
#include <linux/ring_buffer.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task_stack.h>
#include <linux/sysfs.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include "helpers.h"

/* control.rs sizes its symbol buffers with this. */
static_assert(KSYM_SYMBOL_LEN <= 1024);

struct trace_buffer *fctrace_rb_alloc(unsigned long size)
{
	return ring_buffer_alloc(size, RB_FL_OVERWRITE);
}

int fctrace_task_context(const struct pt_regs *regs, bool via_ftrace, bool irqs, bool *sleepable)
{
	unsigned int pc = preempt_count();

	*sleepable = false;
	if (via_ftrace) {
		/* kprobe_ftrace_handler() runs with preemption disabled once. */
		pc -= 1;
	} else {
		/* exc_int3() went through irqentry_nmi_enter(): NMI_OFFSET + HARDIRQ_OFFSET. */
		if ((pc & NMI_MASK) < NMI_OFFSET)
			return FCTRACE_CTX_NONE;
		pc -= NMI_OFFSET + HARDIRQ_OFFSET;
	}
	if (pc & NMI_MASK)
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
	if (regs->sp - (unsigned long)task_stack_page(current) >= THREAD_SIZE)
		return irqs ? FCTRACE_CTX_SOFTIRQ : FCTRACE_CTX_NONE;
	/*
	 * Arming takes kprobe_mutex, and kprobe_mutex -> ftrace_lock -> mmap_lock is a
	 * chain the kernel has (ftrace control files fault on user memory under
	 * ftrace_lock): a task holding its mm's mmap_lock must not arm synchronously
	 * (lockdep reports it; it is a real deadlock if a thread of the same process
	 * writes an ftrace file meanwhile). Checked conservatively: held by anyone.
	 *
	 * More generally, arming takes kprobe_mutex and cpu_hotplug_lock, so a task holding
	 * a lock that is taken inside cpu_hotplug_lock somewhere (pcpu_alloc_mutex in
	 * fork's percpu counters, found by lockdep) must not arm: with lockdep, a task
	 * holding any lock does not. Without lockdep fctrace cannot see sleeping locks
	 * (see Documentation/fctrace.rst, Known problems); mmap_lock is checked by hand.
	 *
	 * A task that set its state to sleep (set_current_state() before the check of a
	 * wait loop, e.g. in do_wait()) must not block elsewhere first: that would lose
	 * its state (and might_sleep() warns, "do not call blocking ops when
	 * !TASK_RUNNING").
	 */
	*sleepable = !(pc & (PREEMPT_MASK | SOFTIRQ_MASK)) &&
		     READ_ONCE(current->__state) == TASK_RUNNING &&
		     !lockdep_depth(current) &&
		     (regs->flags & X86_EFLAGS_IF) &&
		     !rcu_preempt_depth() && !pagefault_disabled() &&
		     !(current->flags & (PF_EXITING | PF_MEMALLOC)) &&
		     !(current->mm && rwsem_is_locked(&current->mm->mmap_lock));
	return FCTRACE_CTX_TASK;
}

void fctrace_current_ids(u32 *pid, u32 *tgid)
{
	*pid = current->pid;
	*tgid = current->tgid;
}

void fctrace_current_comm(u8 *comm16)
{
	memcpy(comm16, current->comm, 16);
	comm16[15] = 0;
}

u64 fctrace_clock(void)
{
	return local_clock();
}

u32 fctrace_cpu(void)
{
	return raw_smp_processor_id();
}

int fctrace_pid_to_tgid(int nr)
{
	struct task_struct *t;
	int tgid = -ESRCH;

	rcu_read_lock();
	t = pid_task(find_vpid(nr), PIDTYPE_PID);
	if (t && !(t->flags & PF_KTHREAD))
		tgid = t->tgid;
	else if (t)
		tgid = -EPERM;
	rcu_read_unlock();
	return tgid;
}

int fctrace_pid_alive(int tgid)
{
	struct task_struct *t;
	int alive;

	rcu_read_lock();
	t = pid_task(find_vpid(tgid), PIDTYPE_TGID);
	alive = t && !(t->flags & PF_EXITING);
	rcu_read_unlock();
	return alive;
}

int fctrace_task_tgid(const void *task)
{
	return ((const struct task_struct *)task)->tgid;
}

bool fctrace_current_last_thread(void)
{
	return atomic_read(&current->signal->live) <= 1;
}

unsigned int fctrace_nofs_save(void)
{
	return memalloc_nofs_save();
}

void fctrace_nofs_restore(unsigned int flags)
{
	memalloc_nofs_restore(flags);
}

bool fctrace_addr_in_self(unsigned long addr)
{
	return within_module(addr, THIS_MODULE);
}

struct module *fctrace_this_module(void)
{
	return THIS_MODULE;
}

int fctrace_mountpoint_create(void)
{
	return sysfs_create_mount_point(kernel_kobj, "fctrace");
}

void fctrace_mountpoint_remove(void)
{
	sysfs_remove_mount_point(kernel_kobj, "fctrace");
}

static void fctrace_work_fn(struct work_struct *work)
{
	fctrace_sync_work();
}

static DECLARE_WORK(fctrace_work, fctrace_work_fn);

/*
 * Probe handlers run in int3 (NMI-like) context, where queueing work could deadlock on the
 * workqueue's locks: they raise an irq_work, which queues the work from a safe context.
 */
static void fctrace_kick_fn(struct irq_work *work)
{
	schedule_work(&fctrace_work);
}

static struct irq_work fctrace_kick_work = IRQ_WORK_INIT(fctrace_kick_fn);

void fctrace_schedule_sync(void)
{
	irq_work_queue(&fctrace_kick_work);
}

static void fctrace_reap_fn(struct work_struct *work)
{
	fctrace_reap_work();
}

/* Deferrable: the periodic pass does not wake an idle CPU. */
static DECLARE_DEFERRABLE_WORK(fctrace_reap_dwork, fctrace_reap_fn);

void fctrace_schedule_reap(unsigned int ms)
{
	schedule_delayed_work(&fctrace_reap_dwork, msecs_to_jiffies(ms));
}

void fctrace_cancel_sync(void)
{
	irq_work_sync(&fctrace_kick_work);
	cancel_work_sync(&fctrace_work);
	cancel_delayed_work_sync(&fctrace_reap_dwork);
}

void fctrace_synchronize_handlers(void)
{
	/* Probe handlers run with interrupts off: an RCU read side. */
	synchronize_rcu();
}

extern char fctrace_trampoline[];

unsigned long fctrace_trampoline_addr(void)
{
	return (unsigned long)fctrace_trampoline;
}

unsigned long fctrace_kprobe_flag_ftrace(void)
{
	return KPROBE_FLAG_FTRACE;
}

/*
 * Readers of trace_pipe sleep on this queue. Probe handlers run in int3 (NMI-like)
 * context where taking the queue's lock could deadlock, so they queue an irq_work, which
 * does the wake-up from a safe context.
 */
static DECLARE_WAIT_QUEUE_HEAD(fctrace_waitq);

static void fctrace_wake_fn(struct irq_work *work)
{
	wake_up_all(&fctrace_waitq);
}

static struct irq_work fctrace_wake_work = IRQ_WORK_INIT(fctrace_wake_fn);

void fctrace_wake_readers(void)
{
	if (wq_has_sleeper(&fctrace_waitq))
		irq_work_queue(&fctrace_wake_work);
}

int fctrace_wait_readable(void)
{
	return wait_event_interruptible(fctrace_waitq, fctrace_readable());
}

unsigned int fctrace_poll_wait(struct file *file, struct poll_table_struct *pt)
{
	poll_wait(file, &fctrace_waitq, pt);
	return fctrace_readable() ? (EPOLLIN | EPOLLRDNORM) : 0;
}

void fctrace_wake_sync(void)
{
	wake_up_all(&fctrace_waitq);
	irq_work_sync(&fctrace_wake_work);
}

static DECLARE_WAIT_QUEUE_HEAD(fctrace_throttle_wq);
static atomic_t fctrace_throttle_seq = ATOMIC_INIT(0);

int fctrace_throttle_sleep(unsigned int ms)
{
	int seq = atomic_read(&fctrace_throttle_seq);

	wait_event_interruptible_timeout(fctrace_throttle_wq,
					 atomic_read(&fctrace_throttle_seq) != seq,
					 msecs_to_jiffies(ms));
	return signal_pending(current);
}

void fctrace_throttle_wake(void)
{
	atomic_inc(&fctrace_throttle_seq);
	wake_up_all(&fctrace_throttle_wq);
}
