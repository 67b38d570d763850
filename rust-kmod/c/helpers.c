// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: One-line wrappers of what Rust cannot reach by itself (inline functions, macros,
 * per-CPU and `current` accessors), sorted by name. Declared in helpers.h; wrapped once
 * in Rust, by sys/ or by the wrapper that owns the registration (buffer.rs).
 */
#include <linux/fs.h>
#include <linux/kallsyms.h>
#include <linux/kobject.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/once.h>
#include <linux/random.h>
#include <linux/ring_buffer.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/security.h>
#include <linux/siphash.h>
#include <linux/smp.h>
#include <linux/sysfs.h>
#include <linux/trace_clock.h>
#include <linux/trace_recursion.h>
#include <linux/version.h>
#include "helpers.h"

/* ksym.rs sizes its symbol buffers with this. */
static_assert(KSYM_SYMBOL_LEN <= 1024);

bool fctrace_addr_in_self(unsigned long addr)
{
	return within_module(addr, THIS_MODULE);
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

void fctrace_current_comm(u8 *comm16)
{
	memcpy(comm16, current->comm, 16);
	comm16[15] = 0;
}

bool fctrace_current_exiting(void)
{
	return current->flags & PF_EXITING;
}

void fctrace_current_ids(u32 *pid, u32 *tgid)
{
	*pid = current->pid;
	*tgid = current->tgid;
}

/* The current task, as a key that no exec changes (its task_struct's address). */
unsigned long fctrace_current_task(void)
{
	return (unsigned long)current;
}

/* The base of the gs segment on this CPU: where %gs-relative (per-CPU) reads read. */
#ifdef CONFIG_X86
unsigned long fctrace_gs_base(void)
{
	return raw_cpu_read(this_cpu_off);
}
#endif

void fctrace_irq_restore(unsigned long flags)
{
	local_irq_restore(flags);
}

unsigned long fctrace_irq_save(void)
{
	unsigned long flags;

	local_irq_save(flags);
	return flags;
}

/*
 * The file system's kill_sb. Before 7.0, simple_fill_super()'s dentries hold an extra
 * reference that kill_litter_super() drops; since, they are persistent dentries that
 * kill_anon_super() drops (and kill_litter_super() is gone).
 */
void fctrace_kill_sb(struct super_block *sb)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
	kill_anon_super(sb);
#else
	kill_litter_super(sb);
#endif
}

int fctrace_locked_down(void)
{
	return security_locked_down(LOCKDOWN_KPROBES);
}

int fctrace_mountpoint_create(void)
{
	return sysfs_create_mount_point(kernel_kobj, "fctrace");
}

void fctrace_mountpoint_remove(void)
{
	sysfs_remove_mount_point(kernel_kobj, "fctrace");
}

void fctrace_nofs_restore(unsigned int flags)
{
	memalloc_nofs_restore(flags);
}

unsigned int fctrace_nofs_save(void)
{
	return memalloc_nofs_save();
}

static siphash_key_t fctrace_ptr_key;

u32 fctrace_ptr_hash(u64 v)
{
	get_random_once(&fctrace_ptr_key, sizeof(fctrace_ptr_key));
	return (u32)siphash_1u64(v, &fctrace_ptr_key);
}

struct trace_buffer *fctrace_rb_alloc(unsigned long size)
{
	return ring_buffer_alloc(size, RB_FL_OVERWRITE);
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
 * Both bits fctrace_recursion_lock() takes are set: a callback of this context level
 * holds them. Not necessarily one this code is nested in: the end of an interrupt's
 * softirqs (handle_softirqs() returns after it dropped SOFTIRQ_OFFSET, and the hardirq
 * level is gone by then, in irq_exit()) counts as the level of the task it
 * interrupted, whose callback may hold both. Either way every ftrace callback of this
 * level is kept out while they stay set.
 */
bool fctrace_recursion_held(void)
{
	unsigned int val = READ_ONCE(current->trace_recursion);
	unsigned int both = BIT(TRACE_FTRACE_START + trace_get_context_bit()) |
			    BIT(TRACE_FTRACE_START + TRACE_CTX_TRANSITION);

	return (val & both) == both;
}

/*
 * The module holds itself while tracing and while a hooked return may still come back
 * through fctrace_return: rmmod is refused ("in use") rather than left waiting.
 */
void fctrace_module_get(void)
{
	__module_get(THIS_MODULE);
}

void fctrace_module_put(void)
{
	module_put(THIS_MODULE);
}

/* Read by fctrace_return (trampoline.S). */
unsigned long fctrace_dead_end;

void fctrace_set_dead_end(unsigned long addr)
{
	WRITE_ONCE(fctrace_dead_end, addr);
}

bool fctrace_dead_end_known(void)
{
	return READ_ONCE(fctrace_dead_end) != 0;
}

void fctrace_return_lost(unsigned long retp)
{
	WARN_ONCE(1, "fctrace: a return through fctrace_return has no saved address: %s/%d killed\n",
		  current->comm, current->pid);
	/*
	 * The address the return was to go to is known nowhere. A task's own context dies
	 * as after an oops (its locks stay held, as they would); an interrupt's cannot: it
	 * has no stack of its own to be rewound, and make_task_dead() would panic anyway.
	 */
	if (!in_task() || !READ_ONCE(fctrace_dead_end))
		panic("fctrace: a return through fctrace_return at %px has no saved address\n",
		      (void *)retp);
}

/*
 * arm64: a task at the resume probe had no address kept to go on at (or ran past the
 * probe, kprobes disabled while it waited): trampoline_arm64.S kills it after this.
 */
void fctrace_bp_lost(void)
{
	WARN_ONCE(1, "fctrace: a task sent to wait for arming has nowhere to go on: %s/%d killed\n",
		  current->comm, current->pid);
}

/*
 * The tracer's mutex (sys::TracerMutex, one tracer at a time): the kernel's mutex with
 * the waits 6.12's kernel::sync::Mutex has no way to: interruptible, and a try.
 */
static DEFINE_MUTEX(fctrace_tracer_mutex);

void fctrace_tracer_lock(void)
{
	mutex_lock(&fctrace_tracer_mutex);
}

int fctrace_tracer_lock_interruptible(void)
{
	return mutex_lock_interruptible(&fctrace_tracer_mutex);
}

bool fctrace_tracer_trylock(void)
{
	return mutex_trylock(&fctrace_tracer_mutex);
}

void fctrace_tracer_unlock(void)
{
	mutex_unlock(&fctrace_tracer_mutex);
}

void fctrace_sleep_idle(unsigned int ms)
{
	schedule_timeout_idle(msecs_to_jiffies(ms));
}

void fctrace_synchronize_handlers(void)
{
	/*
	 * Probe handlers run with interrupts (int3) or preemption (ftrace callbacks, optimized
	 * probes' detours) off: an RCU read side either way.
	 */
	synchronize_rcu();
}

bool fctrace_task_running(void)
{
	return task_is_running(current);
}

int fctrace_task_tgid(const void *task)
{
	return ((const struct task_struct *)task)->tgid;
}

