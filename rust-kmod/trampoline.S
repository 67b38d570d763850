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
 * which then runs again, now with its callee armed. That return is RET_UNCALLED: no call
 * brought the task here, and the flags must reach the probed instruction as they were (a
 * conditional jump into another function's code, `jb __check_object_size.cold+0x1a`, is
 * such a site), which call-depth accounting's return thunk would not leave them (`shlq`
 * on its depth counter). A task sent here from the single step of a pre-site
 * (engine/step.rs) returns with the trap flag set in the flags it pops, so that it stops
 * on the call site again.
 *
 * The unwinder. The word the pre-handler pushed is not a return address: the task goes on
 * at that instruction, not after it, and ORC looks a return address up at the byte before
 * it (the call's own instruction), which here is the instruction before the probed one,
 * whose stack may differ (a jump target after an epilogue's pops), or the function before
 * (an entry hook's ftrace site without ENDBR). So both trampolines first describe where
 * the task goes on as an interrupt frame (IRET_FRAME: ip = that instruction, sp = the stack
 * pointer it runs with), which the unwinder takes as exact: /proc/PID/stack, hung-task
 * dumps and livepatch's reliable unwinding of a task waiting here see the probed function
 * at the probed instruction, then its callers (selftest lifecycle/trampoline_stack.tc).
 */
#include <linux/linkage.h>
#include <asm/nospec-branch.h>
#include <asm/unwind_hints.h>
#include <asm/alternative.h>
#include <asm/cpufeatures.h>
#include <asm/segment.h>
#include <asm/smap.h>

/* The registers a call may clobber (the argument, return-value and scratch registers). */
.macro PUSH_SCRATCH
	pushq	%rax
	pushq	%rcx
	pushq	%rdx
	pushq	%rsi
	pushq	%rdi
	pushq	%r8
	pushq	%r9
	pushq	%r10
	pushq	%r11
.endm

.macro POP_SCRATCH
	popq	%r11
	popq	%r10
	popq	%r9
	popq	%r8
	popq	%rdi
	popq	%rsi
	popq	%rdx
	popq	%rcx
	popq	%rax
.endm

/*
 * With 0(%rsp) the address where the task goes on (and the stack pointer it goes on with
 * just above it), pushes a spare word (%rax's value) and an interrupt frame that says so:
 *
 *	48(%rsp)  where the task goes on (G)	40(%rsp)  spare (%rax's value)
 *	32(%rsp)  ss				24(%rsp)  sp = the address above G's word
 *	16(%rsp)  the flags			 8(%rsp)  cs
 *	 0(%rsp)  ip = G
 *
 * (no instruction here changes the flags). Clobbers nothing.
 */
.macro IRET_FRAME
	pushq	%rax
	leaq	16(%rsp), %rax		/* the stack pointer above G's word */
	pushq	$__KERNEL_DS
	pushq	%rax
	pushfq
	pushq	$__KERNEL_CS
	pushq	40(%rsp)		/* G */
	UNWIND_HINT_IRET_REGS
	movq	40(%rsp), %rax
.endm

/*
 * With the scratch registers pushed over an IRET_FRAME: the flags the frame keeps, and
 * where (a single step sets the trap flag there).
 */
#define FRAME_FLAGS	(9*8 + 16)
#define FRAME_SPARE	(9*8 + 40)

/*
 * After the handler: pops the scratch registers and the frame, leaving the flags in the
 * spare word just below G's, then pops them. Only the return to G is left (a `ret`, or
 * RET_UNCALLED's call, lea and ret): a trap flag a single step set traps after each of
 * those instructions, and the step handler lets the task go on until it stands at G.
 */
.macro LEAVE_FRAME
	movq	FRAME_FLAGS(%rsp), %rax
	movq	%rax, FRAME_SPARE(%rsp)
	POP_SCRATCH
	leaq	40(%rsp), %rsp		/* lea: the flags are not touched */
	UNWIND_HINT sp_reg=ORC_REG_SP sp_offset=16 type=UNWIND_HINT_TYPE_CALL
	popfq
.endm

/*
 * The last `ret` of a trampoline that returns where no call was made (fctrace_return to
 * the real return address, fctrace_entry_trampoline to a function's ftrace site). Like
 * function_graph's return_to_handler, a call just before it keeps the return stack buffer
 * balanced (the `ret` consumes the entry this call pushes), and the `ret` bypasses
 * call-depth accounting's return thunk: no call was accounted for it.
 */
.macro RET_UNCALLED
	ANNOTATE_INTRA_FUNCTION_CALL
	call	.Lrop_\@
	int3
.Lrop_\@:
	leaq	8(%rsp), %rsp
	ALTERNATIVE __stringify(RET), \
		    __stringify(ANNOTATE_UNRET_SAFE; ret; int3), \
		    X86_FEATURE_CALL_DEPTH
.endm

	.text
SYM_CODE_START(fctrace_trampoline)
	UNWIND_HINT_FUNC
	ANNOTATE_NOENDBR		/* entered by the pre-handler's regs->ip, not a call */
	IRET_FRAME
	PUSH_SCRATCH
	movq	FRAME_FLAGS(%rsp), %rdi	/* the flags the probed instruction ran with */
	leaq	FRAME_FLAGS(%rsp), %rsi	/* where they are kept: a single step sets TF there */
	call	fctrace_arm_pending
	LEAVE_FRAME
	RET_UNCALLED	/* not RET: call-depth accounting's thunk changes the flags */
SYM_CODE_END(fctrace_trampoline)

/*
 * fctrace_entry_trampoline: where an entry hook (engine/entry.rs) sends a traced task whose
 * function is not yet armed. ftrace's trampoline returns here instead of into the function,
 * at the function's entry stack pointer, with %rax set to the function's ftrace site (%rax
 * carries no argument into a function; kernel code is built without SSE, so not even a
 * variadic one reads %al). Pushed, it is where the task goes on: the task waits as in
 * fctrace_trampoline, then the ftrace site runs again, now with its function armed.
 * The entry hook sends a task here only where it is the function's only ftrace user (no
 * other callback can have changed %rax or the instruction pointer).
 */
SYM_CODE_START(fctrace_entry_trampoline)
	UNWIND_HINT_FUNC
	ANNOTATE_NOENDBR
	pushq	%rax
	UNWIND_HINT_FUNC
	IRET_FRAME
	PUSH_SCRATCH
	movq	FRAME_FLAGS(%rsp), %rdi	/* the flags at the function's entry */
	call	fctrace_arm_pending_entry
	LEAVE_FRAME
	RET_UNCALLED
SYM_CODE_END(fctrace_entry_trampoline)

/*
 * fctrace_ret_site: a bare RET. The kernel patches it when it loads the module, like every
 * return it has (apply_returns()): into `ret`, or a jump to the return thunk it chose for
 * this CPU (srso_return_thunk, call_depth_return_thunk, ...). engine/arming/thunks.rs reads it
 * to learn that choice from the live text. Never called.
 */
SYM_FUNC_START(fctrace_ret_site)
	ANNOTATE_NOENDBR		/* its address is read, never called */
	RET
SYM_FUNC_END(fctrace_ret_site)

/*
 * fctrace_return: where a function that a traced task called returns to (engine/returns.rs).
 *
 * When fctrace follows a call, it replaces the return address on the stack with
 * fctrace_return_site and keeps the real one in the stack's return stack. The function's
 * `ret` lands here with the stack pointer 8 bytes above that word. We save every register a
 * function may return in or that special calling conventions keep (preemption thunks,
 * user-copy routines and the like clobber nothing), and the flags, and with interrupts off
 * call fctrace_return_handler(stack pointer, rax), which records the return and gives back
 * the real return address. It goes into the word the `ret` took, and a `ret` goes there.
 * Like function_graph's return_to_handler, a call just before that last `ret` keeps the
 * return stack buffer balanced, and the `ret` bypasses call-depth accounting's return
 * thunk: no call was accounted for it. The flags are kept (some functions return a result
 * in them), and user access is closed while the handler runs.
 *
 * The unwinder looks a return address up at the address before it, so the int3 before
 * fctrace_return_site carries the hint that ends an unwind there.
 */
SYM_CODE_START(fctrace_return)
	UNWIND_HINT_UNDEFINED
	ANNOTATE_NOENDBR
	int3
SYM_INNER_LABEL(fctrace_return_site, SYM_L_GLOBAL)
	UNWIND_HINT_UNDEFINED
	ANNOTATE_NOENDBR
	leaq	-8(%rsp), %rsp		/* lea: the flags are the function's, kept as they are */
	UNWIND_HINT_FUNC
	pushfq
	cli
	ASM_CLAC			/* a user copy's routine may return here; popfq restores AC */
	PUSH_SCRATCH
	leaq	11*8(%rsp), %rdi	/* the stack pointer the ret left */
	movq	%rax, %rsi		/* the return value */
	call	fctrace_return_handler
	testq	%rax, %rax
	jz	.Lreturn_lost
	movq	%rax, 10*8(%rsp)	/* the real return address, where the ret took ours */
	POP_SCRATCH
	popfq
	RET_UNCALLED	/* (the function's own ret consumed the RSB entry of its call) */
.Lreturn_lost:
	/*
	 * No address to go to (fctrace_return_lost() warned, and found that this task can
	 * die): as after an oops, rewind_stack_and_make_dead(SIGKILL), reached by a ret
	 * (it has no endbr) with the function's flags, interrupts on if they were.
	 */
	movq	fctrace_dead_end(%rip), %rax
	movq	%rax, 10*8(%rsp)
	POP_SCRATCH
	popfq
	movl	$9, %edi		/* SIGKILL */
	RET_UNCALLED
SYM_CODE_END(fctrace_return)
