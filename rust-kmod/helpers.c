// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: the thin C layer. See helpers.h.
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

/* ksym.rs sizes its symbol buffers with this. */
static_assert(KSYM_SYMBOL_LEN <= 1024);

struct trace_buffer *fctrace_rb_alloc(unsigned long size)
{
	return ring_buffer_alloc(size, RB_FL_OVERWRITE);
}

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

bool fctrace_task_running(void)
{
	return task_is_running(current);
}

int fctrace_task_context(const struct pt_regs *regs, unsigned int via_ftrace, bool irqs,
			 bool *sleepable)
{
	unsigned int pc = preempt_count();
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
		/* exc_int3() went through irqentry_nmi_enter(): NMI_OFFSET + HARDIRQ_OFFSET. */
		if ((pc & NMI_MASK) < NMI_OFFSET)
			return FCTRACE_CTX_NONE;
		pc -= NMI_OFFSET + HARDIRQ_OFFSET;
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
	if (regs->sp - (unsigned long)task_stack_page(current) >= THREAD_SIZE)
		return irqs && !(current->flags & PF_EXITING) ? FCTRACE_CTX_SOFTIRQ :
								FCTRACE_CTX_NONE;
	/*
	 * The task does not arm itself: it waits, with a timeout, for the work item
	 * that arms (engine/wait.rs, arm_pending). So the sleeping locks it may hold
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
	 * Nor may a task with EFLAGS.AC set (between stac and clac: a user copy, e.g. a
	 * call of rep_movs_alternative()) or DF set: x86-64 does not switch EFLAGS on a
	 * context switch, so sleeping there would run the next task on this CPU with SMAP
	 * off (or string instructions backwards). The trampoline counts any that gets
	 * there anyway (stats: trampoline_unsafe_flags).
	 *
	 * Nor a task deep in its stack: the trampoline's frame, the wait and the scheduler
	 * below it need room the call at hand may not have left (FCTRACE_STACK_RESERVE).
	 */
	*sleepable = regs->sp - (unsigned long)task_stack_page(current) >=
			     max_t(unsigned long, READ_ONCE(stack_reserve), FCTRACE_STACK_RESERVE) &&
		     !(pc & (PREEMPT_MASK | SOFTIRQ_MASK)) &&
		     (task_is_running(current) || fctrace_may_poll()) &&
		     (regs->flags & X86_EFLAGS_IF) &&
		     !(regs->flags & (X86_EFLAGS_AC | X86_EFLAGS_DF)) &&
		     rcu_preempt_depth() == rcu_depth && !pagefault_disabled() &&
		     !(current->flags & (PF_EXITING | PF_MEMALLOC));
	return FCTRACE_CTX_TASK;
}

void fctrace_current_ids(u32 *pid, u32 *tgid)
{
	*pid = current->pid;
	*tgid = current->tgid;
}

/* engine/mod.rs: a superset of the traced thread groups' bits while tracing is on. */
extern u64 fctrace_hot_mask;

static __always_inline bool fctrace_hot(void)
{
	return READ_ONCE(fctrace_hot_mask) & BIT_ULL(current->tgid % 64);
}

bool fctrace_maybe_traced(void)
{
	return fctrace_hot();
}

void fctrace_current_comm(u8 *comm16)
{
	memcpy(comm16, current->comm, 16);
	comm16[15] = 0;
}

u64 fctrace_clock(void)
{
	/*
	 * ftrace's "local" clock (sched_clock() with preemption off): notrace, unlike
	 * local_clock(), which function_graph would show for a traced task whose returns
	 * fctrace records (fctrace_return's handler runs in the task's context).
	 */
	return trace_clock_local();
}

u32 fctrace_cpu(void)
{
	return raw_smp_processor_id();
}

/*
 * A thread group that is gone or going: its last thread has passed the point of
 * do_exit() where the group's live count drops to zero (it is a zombie, or exiting).
 */
static bool fctrace_group_dead(struct task_struct *t)
{
	return t->exit_state || atomic_read(&t->signal->live) == 0;
}

int fctrace_pid_to_tgid(int nr)
{
	struct task_struct *t;
	int tgid = -ESRCH;

	rcu_read_lock();
	t = pid_task(find_vpid(nr), PIDTYPE_PID);
	if (t && !(t->flags & PF_KTHREAD) && !fctrace_group_dead(t))
		tgid = t->tgid;
	rcu_read_unlock();
	return tgid;
}

bool fctrace_tgid_alive(u32 tgid)
{
	struct task_struct *t;
	bool alive;

	rcu_read_lock();
	t = pid_task(find_pid_ns(tgid, &init_pid_ns), PIDTYPE_TGID);
	alive = t && !(t->flags & PF_KTHREAD) && !fctrace_group_dead(t);
	rcu_read_unlock();
	return alive;
}

u64 fctrace_tgid_sched_class(u32 tgid)
{
	struct task_struct *t;
	u64 class = 0;

	rcu_read_lock();
	t = pid_task(find_pid_ns(tgid, &init_pid_ns), PIDTYPE_TGID);
	if (t)
		class = (u64)(unsigned long)READ_ONCE(t->sched_class);
	rcu_read_unlock();
	return class;
}

u64 fctrace_idle_sched_class(void)
{
	return (u64)(unsigned long)READ_ONCE(init_task.sched_class);
}

u32 fctrace_tgid_vnr(u32 tgid)
{
	struct pid *pid;
	u32 nr = 0;

	rcu_read_lock();
	pid = find_pid_ns(tgid, &init_pid_ns);
	if (pid)
		nr = pid_vnr(pid);
	rcu_read_unlock();
	return nr;
}

int fctrace_may_open(bool read, bool write, bool trace)
{
	if (write && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (read && !perfmon_capable())
		return -EPERM;
	if (read && trace)
		return security_locked_down(LOCKDOWN_TRACEFS);
	return 0;
}

int fctrace_locked_down(void)
{
	return security_locked_down(LOCKDOWN_KPROBES);
}

bool fctrace_may_see_addrs(void)
{
	/* Any kernel address: as %pK shows it to the current task under kptr_restrict. */
	void *p = (void *)fctrace_may_see_addrs;
	char k[24], x[24];

	snprintf(k, sizeof(k), "%pK", p);
	snprintf(x, sizeof(x), "%px", p);
	if (!strcmp(k, x))
		return true;	/* kptr_restrict 1 and CAP_SYSLOG (or no_hash_pointers) */
	if (k[strspn(k, "0")] == '\0')
		return false;	/* kptr_restrict 2, or 1 without CAP_SYSLOG */
	/* Hashed: kptr_restrict 0; /proc/kallsyms shows addresses to CAP_SYSLOG then. */
	return has_capability_noaudit(current, CAP_SYSLOG);
}

static siphash_key_t fctrace_ptr_key;

u32 fctrace_ptr_hash(u64 v)
{
	get_random_once(&fctrace_ptr_key, sizeof(fctrace_ptr_key));
	return (u32)siphash_1u64(v, &fctrace_ptr_key);
}

int fctrace_task_tgid(const void *task)
{
	return ((const struct task_struct *)task)->tgid;
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

static void fctrace_optimize_fn(struct work_struct *work)
{
	fctrace_optimize_work();
}

static DECLARE_DELAYED_WORK(fctrace_optimize_dwork, fctrace_optimize_fn);

void fctrace_schedule_optimize(unsigned int ms, bool push_back)
{
	if (push_back)
		mod_delayed_work(system_wq, &fctrace_optimize_dwork, msecs_to_jiffies(ms));
	else
		schedule_delayed_work(&fctrace_optimize_dwork, msecs_to_jiffies(ms));
}

void fctrace_cancel_sync(void)
{
	irq_work_sync(&fctrace_kick_work);
	cancel_work_sync(&fctrace_work);
	cancel_delayed_work_sync(&fctrace_reap_dwork);
	cancel_delayed_work_sync(&fctrace_optimize_dwork);
}

void fctrace_synchronize_handlers(void)
{
	/* Probe handlers run with interrupts off: an RCU read side. */
	synchronize_rcu();
}

/* The base of the gs segment on this CPU: where %gs-relative (per-CPU) reads read. */
unsigned long fctrace_gs_base(void)
{
	return raw_cpu_read(this_cpu_off);
}

extern char fctrace_trampoline[];

unsigned long fctrace_trampoline_addr(void)
{
	return (unsigned long)fctrace_trampoline;
}

extern char fctrace_ret_site[];

unsigned long fctrace_ret_site_addr(void)
{
	return (unsigned long)fctrace_ret_site;
}

unsigned long fctrace_kprobe_flag_ftrace(void)
{
	return KPROBE_FLAG_FTRACE;
}

unsigned long fctrace_kprobe_flag_disabled(void)
{
	return KPROBE_FLAG_DISABLED;
}


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

/*
 * Called when records arrive (buffer.rs: a batch in the ring buffer, or the first record
 * staged on a CPU). wq_has_sleeper()'s barrier pairs with the one a reader passes
 * between joining the queue and checking for records (prepare_to_wait(), or the
 * smp_mb() after poll_wait() below): either the reader sees the record or we see the
 * reader, so a blocked reader is never stranded with events in the buffer. (Without
 * the barrier the two checks can pass each other; a periodic recheck then had to cover
 * for it, and a blocked reader was not asleep all the time.)
 */
void fctrace_wake_readers(void)
{
	if (wq_has_sleeper(&fctrace_waitq))
		irq_work_queue(&fctrace_wake_work);
}

/* Readers wait until ready(arg): records in the ring buffer or staged on some CPU. */
int fctrace_wait_ready(bool (*ready)(void *arg), void *arg)
{
	return wait_event_interruptible(fctrace_waitq, ready(arg));
}

unsigned int fctrace_poll_ready(struct file *file, struct poll_table_struct *pt,
				bool (*ready)(void *arg), void *arg)
{
	poll_wait(file, &fctrace_waitq, pt);
	/* pairs with wq_has_sleeper() in fctrace_wake_readers(), as sock_poll_wait() */
	smp_mb();
	return ready(arg) ? (EPOLLIN | EPOLLRDNORM) : 0;
}

/*
 * Runs func(info) on every CPU for which cond(cpu, info) holds, with interrupts off
 * there, and waits for all of them. Process context (it may wait); not with interrupts
 * off.
 */
void fctrace_flush_cpus(bool (*cond)(int cpu, void *info), void (*func)(void *info),
			void *info)
{
	on_each_cpu_cond(cond, func, info, true);
}

/* A reader waits up to ms milliseconds for staged records to fill up; nonzero on a signal. */
int fctrace_reader_nap(unsigned int ms)
{
	return msleep_interruptible(ms) ? -ERESTARTSYS : 0;
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

u32 fctrace_throttle_progress(void)
{
	return atomic_read(&fctrace_throttle_seq);
}

void fctrace_throttle_wake(void)
{
	atomic_inc(&fctrace_throttle_seq);
	wake_up_all(&fctrace_throttle_wq);
}

static DECLARE_WAIT_QUEUE_HEAD(fctrace_arm_wq);
static atomic_t fctrace_arm_seqno = ATOMIC_INIT(0);

u32 fctrace_arm_seq(void)
{
	return atomic_read_acquire(&fctrace_arm_seqno);
}

/*
 * A task that set its state to sleep (see fctrace_task_context()) polls instead: it keeps
 * its state, unless a wakeup makes it TASK_RUNNING meanwhile (then its wait loop checks
 * its condition again and does not sleep), and gives the CPU up only by preemption
 * (cond_resched(), or an interrupt's return on a preemptible kernel): the work item,
 * queued on this CPU, runs then.
 */
static int fctrace_arm_poll(u32 seq, unsigned int ms)
{
	unsigned long end = jiffies + msecs_to_jiffies(ms);

	while ((u32)atomic_read_acquire(&fctrace_arm_seqno) == seq) {
		if (fatal_signal_pending(current))
			return -1;
		if (time_after_eq(jiffies, end))
			return 0;
		/*
		 * What a sleep here would tell RCU Tasks (and Tasks Trace) at its voluntary
		 * switch: the task runs no trampoline (fctrace's is module text, and the ftrace
		 * trampoline or breakpoint that sent it here has returned). A preempted task
		 * would otherwise hold up their grace periods, which kprobes' optimizer waits
		 * for holding kprobe_mutex and text_mutex, which arming needs.
		 */
		rcu_note_voluntary_context_switch(current);
		cond_resched();
		cpu_relax();
	}
	return 1;
}

int fctrace_arm_sleep(u32 seq, unsigned int ms)
{
	long r;

	if (!fctrace_task_running())
		return fctrace_arm_poll(seq, ms);
	r = wait_event_killable_timeout(fctrace_arm_wq,
					(u32)atomic_read_acquire(&fctrace_arm_seqno) != seq,
					msecs_to_jiffies(ms));

	return r < 0 ? -1 : r > 0;
}

void fctrace_arm_wake(void)
{
	atomic_inc_return_release(&fctrace_arm_seqno);
	wake_up_all(&fctrace_arm_wq);
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

/* Hooked returns: see helpers.h and engine/returns.rs. */
extern const u8 fctrace_return_site[];

unsigned long fctrace_return_addr(void)
{
	return (unsigned long)fctrace_return_site;
}

unsigned long fctrace_stack_key(unsigned long addr)
{
	unsigned long top;

	if (addr - (unsigned long)task_stack_page(current) < THREAD_SIZE)
		return (unsigned long)current;
	top = (unsigned long)__this_cpu_read(pcpu_hot.hardirq_stack_ptr) + 8;
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

bool fctrace_current_exiting(void)
{
	return current->flags & PF_EXITING;
}

unsigned long fctrace_irq_save(void)
{
	unsigned long flags;

	local_irq_save(flags);
	return flags;
}

void fctrace_irq_restore(unsigned long flags)
{
	local_irq_restore(flags);
}

bool fctrace_cmpxchg_word(unsigned long addr, unsigned long old, unsigned long new)
{
	return try_cmpxchg((unsigned long *)addr, &old, new);
}

void __noreturn fctrace_return_lost(unsigned long retp)
{
	panic("fctrace: a return through fctrace_return at %px has no saved address\n",
	      (void *)retp);
}

static struct tracepoint *fctrace_exit_tp, *fctrace_exec_tp;

static void fctrace_exit_probe(void *data, struct task_struct *p)
{
	/* After do_exit() counted the thread out of its group's live threads. */
	fctrace_task_exit((unsigned long)p, p->tgid,
			  atomic_read(&p->signal->live) == 0);
}

static void fctrace_exec_probe(void *data, struct task_struct *p, pid_t old_pid,
			       struct linux_binprm *bprm)
{
	fctrace_task_exec(p->pid, old_pid, p->tgid, bprm->secureexec);
}

static void fctrace_find_tps(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "sched_process_exit"))
		fctrace_exit_tp = tp;
	else if (!strcmp(tp->name, "sched_process_exec"))
		fctrace_exec_tp = tp;
}

int fctrace_exit_hook_register(void)
{
	int ret;

	for_each_kernel_tracepoint(fctrace_find_tps, NULL);
	if (!fctrace_exit_tp || !fctrace_exec_tp)
		return -ENOENT;
	ret = tracepoint_probe_register(fctrace_exit_tp, fctrace_exit_probe, NULL);
	if (ret)
		goto none;
	ret = tracepoint_probe_register(fctrace_exec_tp, fctrace_exec_probe, NULL);
	if (ret) {
		tracepoint_probe_unregister(fctrace_exit_tp, fctrace_exit_probe, NULL);
		tracepoint_synchronize_unregister();
		goto none;
	}
	return 0;
none:
	fctrace_exit_tp = fctrace_exec_tp = NULL;
	return ret;
}

void fctrace_exit_hook_unregister(void)
{
	if (!fctrace_exit_tp)
		return;
	tracepoint_probe_unregister(fctrace_exit_tp, fctrace_exit_probe, NULL);
	tracepoint_probe_unregister(fctrace_exec_tp, fctrace_exec_probe, NULL);
	tracepoint_synchronize_unregister();
	fctrace_exit_tp = fctrace_exec_tp = NULL;
}

/*
 * A CPU going offline flushes its staging area first (buffer.rs), on that CPU: after the
 * scheduler stopped running tasks there (CPUHP_AP_ACTIVE comes down before
 * CPUHP_AP_ONLINE_DYN), so what it staged is not stranded until it comes back.
 */
static enum cpuhp_state fctrace_cpuhp_state;

static int fctrace_cpu_down(unsigned int cpu)
{
	unsigned long flags;

	local_irq_save(flags);
	fctrace_flush_this_cpu();
	local_irq_restore(flags);
	return 0;
}

int fctrace_cpu_down_register(void)
{
	int ret = cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "fctrace:staging", NULL,
					    fctrace_cpu_down);

	if (ret < 0)
		return ret;
	fctrace_cpuhp_state = ret;
	return 0;
}

void fctrace_cpu_down_unregister(void)
{
	if (fctrace_cpuhp_state > 0)
		cpuhp_remove_state_nocalls(fctrace_cpuhp_state);
	fctrace_cpuhp_state = 0;
}

void fctrace_sleep_idle(unsigned int ms)
{
	schedule_timeout_idle(msecs_to_jiffies(ms));
}

/*
 * ftrace lets one nested callback through a context's "transition" bit (for an interrupt
 * that traces before preempt_count says so): we take that bit as well, or function_graph
 * would trace what fctrace's handlers call. Both bits in one int (the second plus one,
 * shifted).
 */
int fctrace_recursion_lock(void)
{
	int bit = ftrace_test_recursion_trylock(_THIS_IP_, _RET_IP_);
	int transition;

	if (bit < 0)
		return bit;
	transition = ftrace_test_recursion_trylock(_THIS_IP_, _RET_IP_);
	return transition < 0 ? bit : bit | (transition + 1) << 8;
}

void fctrace_recursion_unlock(int bits)
{
	if (bits >> 8)
		ftrace_test_recursion_unlock((bits >> 8) - 1);
	ftrace_test_recursion_unlock(bits & 0xff);
}

/*
 * Entry hooks (engine/entry.rs): fctrace's own ftrace_ops, filtered to exactly the functions
 * the traced tasks can reach. Other tasks pay a call into ftrace's trampoline and the
 * check in fctrace_entry_func(), not a trap.
 */
static noinline void notrace fctrace_entry_traced(unsigned long ip, struct ftrace_regs *fregs)
{
	struct pt_regs *regs = &arch_ftrace_regs(fregs)->regs;
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
	if (!ftrace_get_regs(fregs))
		regs->flags = native_save_fl();
	fctrace_entry_hook(ip, regs, (bit >> 8 ? 2 : 1) + !!list, !!list);
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

extern char fctrace_entry_trampoline[];

unsigned long fctrace_entry_trampoline_addr(void)
{
	return (unsigned long)fctrace_entry_trampoline;
}

static long fctrace_copy_nofault(void *dst, unsigned long src, unsigned long len, bool user)
{
	if (user)
		return copy_from_user_nofault(dst, (const void __user *)src, len);
	return copy_from_kernel_nofault(dst, (const void *)src, len);
}

long fctrace_copy_str(void *dst, unsigned long src, unsigned long len)
{
	bool user = src < TASK_SIZE_MAX;
	unsigned long first = min(len, PAGE_SIZE - offset_in_page(src));

	if (!src || !len)
		return -EFAULT;
	if (fctrace_copy_nofault(dst, src, first, user))
		return -EFAULT;
	if (first == len || memchr(dst, 0, first))
		return first;
	if (fctrace_copy_nofault(dst + first, src + first, len - first, user))
		return first;
	return len;
}

static struct file *fctrace_btf_open(const char *name)
{
	char path[sizeof("/sys/kernel/btf/") + MODULE_NAME_LEN];

	if (strchr(name, '/') ||
	    snprintf(path, sizeof(path), "/sys/kernel/btf/%s", name) >= sizeof(path))
		return ERR_PTR(-EINVAL);
	return filp_open(path, O_RDONLY, 0);
}

long fctrace_btf_size(const char *name)
{
	struct file *f = fctrace_btf_open(name);
	long size;

	if (IS_ERR(f))
		return 0;
	size = i_size_read(file_inode(f));
	filp_close(f, NULL);
	return size;
}

long fctrace_btf_read(const char *name, void *buf, unsigned long len)
{
	struct file *f = fctrace_btf_open(name);
	loff_t pos = 0;
	long got = 0;

	if (IS_ERR(f))
		return PTR_ERR(f);
	while (got < len) {
		ssize_t n = kernel_read(f, buf + got, len - got, &pos);

		if (n < 0) {
			got = n;
			break;
		}
		if (n == 0)
			break;
		got += n;
	}
	filp_close(f, NULL);
	return got;
}
