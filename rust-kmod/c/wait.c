// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: Waiting: the work items (the arming pass, lazy disarming, deferred optimization), the
 * trace readers' wait queue, the lossless throttle and the wait for arming.
 */
#include <linux/atomic.h>
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/irq_work.h>
#include <linux/poll.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/smp.h>
#include <linux/wait.h>
#include <linux/version.h>
#include <linux/workqueue.h>
#include "helpers.h"

/* The workqueue schedule_delayed_work() uses: system_wq is deprecated since 7.0. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
#define FCTRACE_WQ system_percpu_wq
#else
#define FCTRACE_WQ system_wq
#endif

/*
 * The workers running one of fctrace's own work items now (at most three at once): never
 * traced, whatever set_pid or the kworkers option say. A traced worker could be sent to
 * wait for arming, which only such a work item does.
 */
static struct task_struct *fctrace_own_workers[4];

static void fctrace_own_enter(void)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(fctrace_own_workers); i++)
		if (!cmpxchg(&fctrace_own_workers[i], NULL, current))
			return;
}

static void fctrace_own_exit(void)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(fctrace_own_workers); i++)
		cmpxchg(&fctrace_own_workers[i], current, NULL);
}

bool fctrace_current_is_own_worker(void)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(fctrace_own_workers); i++)
		if (READ_ONCE(fctrace_own_workers[i]) == current)
			return true;
	return false;
}

static void fctrace_work_fn(struct work_struct *work)
{
	fctrace_own_enter();
	fctrace_sync_work();
	fctrace_own_exit();
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

/*
 * Set once the module is going away (fctrace_cancel_sync()): nothing queues the work
 * items any more. A traced process that executes a set-user-ID program while rmmod
 * waits for hooked returns would otherwise queue them after they were cancelled, to
 * run after the module is gone.
 */
static bool fctrace_closing;

void fctrace_schedule_sync(void)
{
	/* With preemption off: fctrace_cancel_sync()'s synchronize_rcu() waits for us. */
	preempt_disable_notrace();
	if (!READ_ONCE(fctrace_closing))
		irq_work_queue(&fctrace_kick_work);
	preempt_enable_notrace();
}

static void fctrace_reap_fn(struct work_struct *work)
{
	fctrace_own_enter();
	fctrace_reap_work();
	fctrace_own_exit();
}

/* Deferrable: the periodic pass does not wake an idle CPU. */
static DECLARE_DEFERRABLE_WORK(fctrace_reap_dwork, fctrace_reap_fn);

void fctrace_schedule_reap(unsigned int ms)
{
	preempt_disable_notrace();
	if (!READ_ONCE(fctrace_closing))
		schedule_delayed_work(&fctrace_reap_dwork, msecs_to_jiffies(ms));
	preempt_enable_notrace();
}

/*
 * Runs the pass in @ms, sooner than one queued for later: tracing stopped, and the
 * resume probe goes once no task is on its way to it (arm64).
 */
void fctrace_reschedule_reap(unsigned int ms)
{
	preempt_disable_notrace();
	if (!READ_ONCE(fctrace_closing))
		mod_delayed_work(system_wq, &fctrace_reap_dwork, msecs_to_jiffies(ms));
	preempt_enable_notrace();
}

static void fctrace_optimize_fn(struct work_struct *work)
{
	fctrace_own_enter();
	fctrace_optimize_work();
	fctrace_own_exit();
}

static DECLARE_DELAYED_WORK(fctrace_optimize_dwork, fctrace_optimize_fn);

void fctrace_schedule_optimize(unsigned int ms, bool push_back)
{
	unsigned long delay = msecs_to_jiffies(ms);

	preempt_disable_notrace();
	if (!READ_ONCE(fctrace_closing)) {
		if (push_back)
			mod_delayed_work(FCTRACE_WQ, &fctrace_optimize_dwork, delay);
		else
			schedule_delayed_work(&fctrace_optimize_dwork, delay);
	}
	preempt_enable_notrace();
}

/*
 * For good (the module is being removed): from now on nothing queues the work items;
 * those queued before are cancelled, a running one waited for. Process context.
 */
void fctrace_cancel_sync(void)
{
	WRITE_ONCE(fctrace_closing, true);
	/* Whoever saw fctrace_closing false has queued its work by the end of this. */
	synchronize_rcu();
	irq_work_sync(&fctrace_kick_work);
	cancel_work_sync(&fctrace_work);
	cancel_delayed_work_sync(&fctrace_reap_dwork);
	cancel_delayed_work_sync(&fctrace_optimize_dwork);
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

/*
 * The trampoline sleeps only where the probe handler found the task free to
 * (fctrace_task_context()): preemption on, interrupts on, no RCU read side. Were that
 * decision ever wrong, the sleep would be a "scheduling while atomic" that leaves this
 * CPU's preemption count off for whoever runs next. Checked before each sleep: said
 * once, and the task does not sleep: the wait ends at once, as it would for a signal
 * (lossless) or a fatal signal (arming), never by spinning until its time is up.
 */
static bool fctrace_may_sleep_here(void)
{
	if (likely(!preempt_count() && !irqs_disabled() && !rcu_preempt_depth()))
		return true;
	WARN_ONCE(1, "fctrace: a traced task in the trampoline is atomic (preempt_count %#x, irqs %s, RCU depth %d): it does not wait\n",
		  preempt_count(), irqs_disabled() ? "off" : "on", rcu_preempt_depth());
	return false;
}

int fctrace_throttle_sleep(unsigned int ms)
{
	int seq = atomic_read(&fctrace_throttle_seq);

	if (!fctrace_may_sleep_here())
		return 1;
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

	/* As a fatal signal: the wait ends at once (no spinning for arm_wait_ms). */
	if (!fctrace_may_sleep_here())
		return -1;
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
