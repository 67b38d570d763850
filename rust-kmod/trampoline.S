/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fctrace_trampoline: where a call-site probe sends a traced task whose callee is not yet
 * armed.
 *
 * The probe's pre-handler pushed the address of the probed call (or jump) instruction and
 * set regs->ip here, so this runs as if that instruction had called us: in the task's own
 * context, where it may sleep. We save every register a call or a conditional jump can
 * consume (argument registers, the retpoline scratch registers and the flags), arm the
 * callee (fctrace_arm_pending, Rust), restore them, and return to the probed instruction,
 * which then runs again, now with its callee armed.
 */
#include <linux/linkage.h>
#include <asm/nospec-branch.h>

	.text
SYM_FUNC_START(fctrace_trampoline)
	pushfq
	pushq	%rax
	pushq	%rcx
	pushq	%rdx
	pushq	%rsi
	pushq	%rdi
	pushq	%r8
	pushq	%r9
	pushq	%r10
	pushq	%r11
	movq	9*8(%rsp), %rdi		/* the flags the probed instruction ran with */
	call	fctrace_arm_pending
	popq	%r11
	popq	%r10
	popq	%r9
	popq	%r8
	popq	%rdi
	popq	%rsi
	popq	%rdx
	popq	%rcx
	popq	%rax
	popfq
	RET
SYM_FUNC_END(fctrace_trampoline)

/*
 * fctrace_ret_site: a bare RET. The kernel patches it when it loads the module, like every
 * return it has (apply_returns()): into `ret`, or a jump to the return thunk it chose for
 * this CPU (srso_return_thunk, call_depth_return_thunk, ...). engine/arming.rs reads it
 * to learn that choice from the live text. Never called.
 */
SYM_FUNC_START(fctrace_ret_site)
	RET
SYM_FUNC_END(fctrace_ret_site)
