// SPDX-License-Identifier: GPL-2.0

//! Policy: what fctrace never arms (its own probe path, code that runs with the locks
//! arming needs), the debug instrumentation it neither probes nor shows, and the
//! interrupt entry functions the `irqs` option hooks.

use crate::parse;
use crate::sys::RunCtx as Ctx;
use kernel::c_str;
use kernel::prelude::*;

/// Interrupt entry functions probed with the `irqs` option: hardware interrupts (timer,
/// devices, IPIs, irq_work) and softirqs (also those run from `local_bh_enable()`).
#[cfg(target_arch = "x86_64")]
pub(crate) const IRQ_ROOTS: &[(&CStr, Ctx)] = &[
    (c_str!("__sysvec_apic_timer_interrupt"), Ctx::HardIrq),
    (c_str!("__common_interrupt"), Ctx::HardIrq),
    (c_str!("__sysvec_irq_work"), Ctx::HardIrq),
    (c_str!("__sysvec_call_function_single"), Ctx::HardIrq),
    (c_str!("__sysvec_call_function"), Ctx::HardIrq),
    (c_str!("handle_softirqs"), Ctx::SoftIrq),
];

/// arm64: every hardware interrupt (the timer, devices, IPIs and the irq_work they run
/// are interrupts of the GIC) comes through `generic_handle_domain_irq()` from the root
/// handler, which is in `.irqentry.text`, where kprobes may not probe; and softirqs.
#[cfg(target_arch = "aarch64")]
pub(crate) const IRQ_ROOTS: &[(&CStr, Ctx)] = &[
    (c_str!("generic_handle_domain_irq"), Ctx::HardIrq),
    (c_str!("handle_softirqs"), Ctx::SoftIrq),
];

/// Instrumentation that debug kernels call from every lock operation, memory access and
/// might-sleep point (KASAN, lockdep, DEBUG_PREEMPT, DEBUG_ATOMIC_SLEEP, KCOV): direct
/// calls to these are not probed and not shown. function_graph does not show them
/// either (they are `notrace`/`noinstr` or lockdep annotations); probing them would put
/// a breakpoint on every memory access of every armed function, for every task.
const INSTRUMENTATION: &[&[u8]] = &[
    b"__asan_*",
    b"__kasan_*",
    b"kasan_*",
    b"__sanitizer_*",
    b"__tsan_*",
    b"kcsan_*",
    b"lock_acquire*",
    b"lock_release",
    b"lock_acquired",
    b"lock_contended",
    b"lock_is_held_type",
    b"lock_sync",
    b"lock_set_class",
    b"lock_downgrade",
    b"lock_*pin_lock",
    b"debug_check_no_locks_*",
    b"lockdep_*",
    b"__lockdep_*",
    b"mark_lock*",
    b"fs_reclaim_acquire",
    b"fs_reclaim_release",
    b"__might_sleep",
    b"__might_resched",
    b"__might_fault",
    b"debug_smp_processor_id",
    b"__this_cpu_preempt_check",
    b"check_preemption_disabled",
    b"preempt_count_add",
    b"preempt_count_sub",
    b"trace_hardirqs_on*",
    b"trace_hardirqs_off*",
    b"rcu_read_lock_*held*",
    b"debug_lockdep_rcu_enabled",
    // lockdep's RCU checks (every rcu_read_lock(), every tracepoint site) and the
    // tracepoints of int3's own entry and exit call this: armed, every breakpoint trap
    // of every task took more traps, and the debug kernel all but stopped.
    b"rcu_is_watching",
    b"rcu_lockdep_current_cpu_online",
    b"__cant_sleep",
    b"__cant_migrate",
    // kmemleak's and KFENCE's allocation hooks (every slab allocation and free)
    b"kmemleak_*",
    b"__kmemleak_*",
    b"kfence_*",
    b"__kfence_*",
];

/// Functions fctrace never arms: its own probe path (the ring buffer, the clock, kprobes,
/// code patching) and code that runs with the locks arming needs.
const DENIED: &[&[u8]] = &[
    b"ring_buffer_*",
    b"rb_*",
    b"__rb_*",
    b"trace_clock*",
    b"*sched_clock*",
    b"local_clock*",
    b"*kprobe*",
    b"text_poke*",
    b"*jump_label*",
    b"*static_key*",
    b"*static_call*",
    b"ftrace_*",
    // Mitigation thunks, which every return or indirect call of the kernel may run
    // through (recognised by address too, see `find_thunks`), and function padding, where
    // call-depth tracking puts its accounting thunks.
    b"__x86_indirect_*",
    b"*_return_thunk",
    b"retbleed_*",
    b"srso_*",
    b"entry_untrain_ret",
    b"__pfx_*",
    b"irq_work_*",
    b"arch_irq_work_raise",
    b"copy_from_kernel_nofault*",
    b"memcpy",
    b"__memcpy",
    b"memset",
    b"__memset",
    b"stop_machine*",
    b"sprint_symbol*",
    b"kallsyms_*",
    b"*int3*",
    b"irqentry_*",
    b"synchronize_rcu*",
    // The stack unwinder and the stack depot. KASAN, kmemleak and lockdep unwind the stack
    // at every allocation and free they record (from instrumentation, never shown), but
    // arming ahead reached them through direct calls in armed code; armed, every
    // allocation of every task trapped in unwind_next_frame() at each stack frame, and the
    // debug kernel crawled. A traced call to them shows as a leaf. fctrace's own handlers
    // run the ORC unwinder too (a preemption's missing frames, `preempt.rs`): what it
    // calls is never armed either.
    b"stack_trace_save*",
    b"arch_stack_walk*",
    b"__unwind_start",
    b"unwind_next_frame",
    b"unwind_get_return_address*",
    b"get_stack_info*",
    b"*orc_find*",
    b"stack_access_ok",
    b"stack_depot_save*",
    b"__stack_depot_*",
    // The kernel's error reports: printk, and what reports a BUG, a WARN, an oops or a
    // panic. kprobes prints from its breakpoint handler when a probe is hit inside
    // another's single step, which it cannot recover from: with a probe of fctrace's on
    // printk's path, that message hit the probe again, and again, until the stack
    // overflowed; the overflow's report ran into the same probe on the per-CPU overflow
    // stack and wrote past its end (on arm64 over the IPI descriptors below it: an oops
    // in `__ipi_send_mask()`, or both CPUs stuck without a word). Whatever fctrace has
    // armed, a report must get out.
    b"*printk*",
    b"prb_*",
    b"console_*",
    b"nbcon_*",
    b"panic*",
    b"__warn*",
    b"report_bug*",
    b"dump_stack*",
    b"show_regs",
    b"__show_regs*",
    b"die",
    b"oops_*",
    // The architectures' own parts of the handlers' path: arm64's clock
    // (`sched_clock()` reads the counter through a pointer) and code patching, and the
    // interrupt an irq_work raises on this CPU.
    b"arch_counter_*",
    b"aarch64_insn_*",
    b"smp_cross_call",
    b"arm64_send_ipi",
    b"__ipi_send_*",
    b"gic_ipi_send_*",
    b"*send_IPI_self",
    // The debug instrumentation is denied too (see `INSTRUMENTATION`, which `is_denied`
    // also checks): it runs from fctrace's own handlers, a reentrancy hazard when probed.
];

/// Exceptions to [`DENIED`]: function_graph's setup of a new task at fork, which only
/// allocates the child's return stack (while function_graph is on) and runs in no path of
/// fctrace's and with no lock arming needs; and lib/rbtree's red-black tree API, whose
/// names the ring buffer's `rb_*` pattern also matches. Neither the probe handlers nor
/// the ring buffer use rbtrees; arming (vmalloc) may, but a task's own hits while it arms
/// are ignored like any others. And `__static_call_return0()`, the `return 0` that static
/// calls without a function call (`cond_resched()` under full or lazy preemption; with
/// call-depth tracking a real call, elsewhere `xor %eax, %eax` in place): no code
/// patching runs in it, and function_graph shows it.
const NOT_DENIED: &[&[u8]] = &[
    b"ftrace_graph_init_task",
    b"__static_call_return0",
    b"rb_insert_color",
    b"rb_erase",
    b"__rb_erase_color",
    b"__rb_insert_augmented",
    b"rb_first",
    b"rb_last",
    b"rb_next",
    b"rb_prev",
    b"rb_replace_node",
    b"rb_replace_node_rcu",
    b"rb_first_postorder",
    b"rb_next_postorder",
];

fn matches_any(list: &[&[u8]], name: &[u8]) -> bool {
    list.iter().any(|p| parse::glob_match(p, name))
}

/// Whether `name` is debug instrumentation (see [`INSTRUMENTATION`]).
pub(crate) fn is_instrumentation(name: &[u8]) -> bool {
    matches_any(INSTRUMENTATION, name)
}

/// Whether fctrace never arms `name` (see [`DENIED`]).
pub(crate) fn is_denied(name: &[u8]) -> bool {
    !NOT_DENIED.contains(&name) && (matches_any(DENIED, name) || is_instrumentation(name))
}
