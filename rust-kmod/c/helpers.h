/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What fctrace's Rust code cannot reach by itself: inline functions, macros with static
 * keys, per-CPU and `current` accessors. Each helper is a few lines; all policy is in Rust.
 */
#ifndef FCTRACE_HELPERS_H
#define FCTRACE_HELPERS_H

#include <linux/types.h>

struct pt_regs;
struct trace_buffer;
struct kprobe;
struct module;
struct super_block;

struct trace_buffer *fctrace_rb_alloc(unsigned long size);

/* What fctrace_task_context() found the probed instruction running in. */
#define FCTRACE_CTX_NONE 0	/* NMI, or neither the task nor an interrupt it follows */
#define FCTRACE_CTX_TASK 1	/* the task itself, on its own stack */
#define FCTRACE_CTX_SOFTIRQ 2	/* a softirq (or other code off the task's stack) */
#define FCTRACE_CTX_HARDIRQ 3	/* a hardware interrupt handler */

/*
 * From a probe handler: the context the probed instruction ran in. Interrupt contexts
 * are reported only when irqs is set (otherwise FCTRACE_CTX_NONE). *sleepable tells
 * whether a task context could sleep. via_ftrace: 0 for a handler entered through int3,
 * FCTRACE_VIA_DIE for one called by the die notifier chain in a debug trap (NMI-like as
 * int3, inside the chain's RCU read side), else the handler is an ftrace callback (or an
 * optimized kprobe's detour) that disabled preemption this many times.
 */
#define FCTRACE_VIA_DIE 0x10000
int fctrace_task_context(const struct pt_regs *regs, unsigned int via_ftrace, bool irqs,
			 bool *sleepable);
const unsigned long *fctrace_graph_ret_stack(int *top, int *retp_off);
unsigned long fctrace_rethook_saved_ret(unsigned long frame, unsigned long tramp);
/* The current task's state is TASK_RUNNING (else it waits for arming by polling). */
bool fctrace_task_running(void);

void fctrace_current_ids(u32 *pid, u32 *tgid);
unsigned long fctrace_current_task(void);
void fctrace_current_comm(u8 *comm16);
u64 fctrace_clock(void);
u32 fctrace_cpu(void);
/*
 * Whether the current task may be traced (its thread group's bit of the hot mask), for
 * a probe's handler: a pass it rules out is counted.
 */
bool fctrace_probe_traced(void);
/* The passes fctrace_probe_traced() ruled out, on all CPUs. */
unsigned long fctrace_untraced_probe_hits(void);
/*
 * The thread group of thread `pid` (in the caller's PID namespace), and in `*kthread`
 * whether it is a kernel thread; -ESRCH if there is none, or the group is dead or dying
 * (zombie, exiting).
 */
int fctrace_pid_to_tgid(int pid, bool *kthread);
/* Whether thread group `tgid` (global) is alive: not dead, not dying. */
bool fctrace_tgid_alive(u32 tgid);
bool fctrace_tgid_is_kthread(u32 tgid);
bool fctrace_current_is_kworker(void);
/* Whether the current task runs one of fctrace's own work items (c/wait.c). */
bool fctrace_current_is_own_worker(void);
/*
 * The scheduling class (`struct sched_class *`) of thread group `tgid`'s leader, 0 if
 * there is none; and the idle class (init_task's: the boot CPU's idle task). Their
 * methods run in atomic context, where a traced task cannot wait for arming.
 */
u64 fctrace_tgid_sched_class(u32 tgid);
u64 fctrace_idle_sched_class(void);
/* Global `tgid` as the current task's PID namespace numbers it, 0 if it cannot see it. */
u32 fctrace_tgid_vnr(u32 tgid);
int fctrace_task_tgid(const void *task);
/*
 * Who may open a file of fctracefs: to write, CAP_SYS_ADMIN; to read, CAP_PERFMON (or
 * CAP_SYS_ADMIN); to read a trace (`trace`, `trace_pipe`), also no lockdown
 * (LOCKDOWN_TRACEFS). 0 or -EPERM.
 */
int fctrace_may_open(bool read, bool write, bool trace);
/* security_locked_down(LOCKDOWN_KPROBES): 0, or -EPERM when probes may not be armed. */
int fctrace_locked_down(void);
/* Whether the current task may see kernel addresses (kptr_restrict, as %pK decides). */
bool fctrace_may_see_addrs(void);
/* A kernel address, hashed with a key made at the first call (what readers see instead). */
u32 fctrace_ptr_hash(u64 v);
unsigned int fctrace_nofs_save(void);
void fctrace_nofs_restore(unsigned int flags);
bool fctrace_addr_in_self(unsigned long addr);
/* The file system's kill_sb (the kernel's function for it differs between series). */
void fctrace_kill_sb(struct super_block *sb);
int fctrace_mountpoint_create(void);
void fctrace_mountpoint_remove(void);
void fctrace_module_get(void);
void fctrace_module_put(void);
void fctrace_schedule_sync(void);
void fctrace_cancel_sync(void);
/*
 * Runs fctrace_optimize_work() in ms milliseconds; with push_back, that many after the
 * last call (releasing the blockers of optimizable probes once arming is quiet).
 */
void fctrace_schedule_optimize(unsigned int ms, bool push_back);
/* Runs fctrace_reap_work() in ms milliseconds (lazy disarming). */
void fctrace_schedule_reap(unsigned int ms);
void fctrace_reschedule_reap(unsigned int ms);
/* Waits until every probe handler running now has returned. May sleep. */
void fctrace_synchronize_handlers(void);
/* This CPU's gs base (per-CPU offset). Call with preemption off. */
unsigned long fctrace_gs_base(void);
/* Gives a registered, disabled kprobe on a `cs call` a correct emulation, enables it. */
int fctrace_kprobe_fix_long_call(struct kprobe *p);

struct file;
struct poll_table_struct;
void fctrace_wake_readers(void);
/* A trace_pipe reader waits until ready(arg) (or a signal comes). */
int fctrace_wait_ready(bool (*ready)(void *arg), void *arg);
unsigned int fctrace_poll_ready(struct file *file, struct poll_table_struct *pt,
				bool (*ready)(void *arg), void *arg);
void fctrace_flush_cpus(bool (*cond)(int cpu, void *info), void (*func)(void *info),
			void *info);
int fctrace_reader_nap(unsigned int ms);
/* CPU hotplug: a CPU going down calls fctrace_flush_this_cpu() (Rust), interrupts off. */
int fctrace_cpu_down_register(void);
void fctrace_cpu_down_unregister(void);
void fctrace_flush_this_cpu(void);
void fctrace_wake_sync(void);
/*
 * lossless option: a traced task waits in the trampoline until the reader has consumed
 * (fctrace_throttle_wake()) or ms milliseconds pass. Returns nonzero if a signal is
 * pending (the task must go on to handle it).
 */
int fctrace_throttle_sleep(unsigned int ms);
void fctrace_throttle_wake(void);
/* How often fctrace_throttle_wake() was called (readers took events). */
u32 fctrace_throttle_progress(void);
/*
 * Arming by the work item: a traced task in the trampoline reads the sequence number,
 * checks whether its request is done, and if not sleeps until the work item bumps the
 * number (fctrace_arm_wake()), ms milliseconds pass, or a fatal signal comes. Returns 1
 * when woken by a bump, 0 on timeout, -1 on a fatal signal. A task whose state is not
 * TASK_RUNNING (a wait loop's) polls instead, keeping its state.
 */
u32 fctrace_arm_seq(void);
int fctrace_arm_sleep(u32 seq, unsigned int ms);
void fctrace_arm_wake(void);

/*
 * The stack a word at addr is on, as a key: the current task (its task_struct's address)
 * for its own stack, this CPU's hard-interrupt stack (its top) for that one, 0 for any
 * other (exception stacks) or none.
 */
unsigned long fctrace_stack_key(unsigned long addr);
/* Where the per-CPU IRQ stack pointer is (7.x: not exported); nothing on 6.12. */
void fctrace_set_hardirq_stack_ptr(unsigned long addr);
/*
 * The word at addr if it is an aligned word of one of those stacks (*val, and the key
 * returned), read without the no-fault path (those stacks are mapped); else 0.
 */
unsigned long fctrace_stack_word(unsigned long addr, unsigned long *val);
/*
 * The frames that called the one at ip (sp, bp: its registers) on the current task's
 * stack, innermost first, as the ORC unwinder finds them: rets[i] the return address into
 * the ith caller, slots[i] the stack word that holds it. Up to n, and none past an
 * exception frame; the number found (0 without CONFIG_UNWINDER_ORC). arm64: from the
 * frame records, bp the frame pointer; slots[i] the record (see context.c).
 */
int fctrace_unwind_callers(unsigned long ip, unsigned long sp, unsigned long bp,
			   unsigned long *rets, unsigned long *slots, int n);
/* The context fctrace_return runs in: FCTRACE_CTX_* (interrupts only when irqs). */
int fctrace_return_ctx(bool irqs);
bool fctrace_current_exiting(void);
unsigned long fctrace_irq_save(void);
void fctrace_irq_restore(unsigned long flags);
/*
 * Where a task whose return through fctrace_return has nowhere to go is sent:
 * rewind_stack_and_make_dead(), found by name at load (0: not found).
 */
void fctrace_set_dead_end(unsigned long addr);
/* Whether fctrace_set_dead_end() was given an address. */
bool fctrace_dead_end_known(void);
/*
 * A return came through fctrace_return that fctrace has no address for: warns once, and
 * returns if the task can be made to die as after an oops (fctrace_return sends it to
 * the dead end); where it cannot (not a task's own context), panics.
 */
void fctrace_return_lost(unsigned long retp);
/* arm64: a task sent to wait for arming has nowhere to go on (trampoline_arm64.S). */
void fctrace_bp_lost(void);
/*
 * The sched_process_exit tracepoint calls fctrace_task_exit(), sched_process_exec
 * fctrace_task_exec() (module lifetime).
 */
int fctrace_exit_hook_register(void);
void fctrace_exit_hook_unregister(void);
/*
 * The module notifier calls fctrace_module_text_gone(start, end) (Rust) when a module's
 * text [start, end) goes away, in process context (it may sleep), and
 * fctrace_module_text_coming() for the text of a module that comes.
 */
int fctrace_module_hook_register(void);
void fctrace_module_hook_unregister(void);
void fctrace_module_text_gone(unsigned long start, unsigned long end);
void fctrace_module_text_coming(unsigned long start, unsigned long end);
/* Sleeps ms milliseconds in TASK_IDLE (no hung-task report, no signal wakes it). */
void fctrace_sleep_idle(unsigned int ms);
/* The tracer's mutex: lock, lock unless a signal comes first (-EINTR), try, unlock. */
void fctrace_tracer_lock(void);
int fctrace_tracer_lock_interruptible(void);
bool fctrace_tracer_trylock(void);
void fctrace_tracer_unlock(void);
/*
 * ftrace's recursion protection around fctrace_return's handler, as ftrace callbacks
 * have: functions it calls are not traced by function_graph for this task meanwhile.
 * Returns a negative value when the context is inside a callback already.
 */
int fctrace_recursion_lock(void);
void fctrace_recursion_unlock(int bit);
/* Whether this context level's bits, and the transition bit, are both held already. */
bool fctrace_recursion_held(void);

/*
 * Entry hooks: adds the ftrace sites ips[0..n) to fctrace's ftrace_ops (registered with
 * its first filter); clears them all (unregistered first: waits for callbacks in flight).
 * Process context, never with a spinlock held.
 */
int fctrace_entry_hooks_add(const unsigned long *ips, unsigned int n);
void fctrace_entry_hooks_clear(void);

/* Implemented in Rust. */
bool fctrace_entry_wanted(u32 tgid);
void fctrace_entry_hook(unsigned long ip, struct pt_regs *regs, unsigned int levels, bool shared);
void fctrace_task_exit(unsigned long task, u32 tgid, bool group_dead);
void fctrace_task_exec(u32 pid, u32 old_pid, u32 tgid, bool secureexec);
unsigned long fctrace_return_handler(unsigned long sp, unsigned long rax);
void fctrace_sync_work(void);
void fctrace_reap_work(void);
void fctrace_optimize_work(void);
void fctrace_arm_pending(unsigned long flags);
void fctrace_arm_pending_entry(unsigned long flags);

/*
 * args option: copies up to len bytes of the string at src (user memory below
 * TASK_SIZE_MAX, else kernel memory) into dst without faulting; the second page is only
 * read if the first holds no NUL. Returns the bytes copied, or -EFAULT. Any context.
 */
long fctrace_copy_str(void *dst, unsigned long src, unsigned long len);
/*
 * The size of /sys/kernel/btf/<name> (name: "vmlinux", or a module's; 0: none), and
 * reading it into buf. Process context.
 */
long fctrace_btf_size(const char *name);
long fctrace_btf_read(const char *name, void *buf, unsigned long len);

#endif
