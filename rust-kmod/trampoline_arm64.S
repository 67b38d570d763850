/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fctrace_return (arm64): where a function that a traced task called returns to
 * (engine/returns.rs).
 *
 * When fctrace follows a call, the return address the function was entered with goes into
 * the stack's return stack, and the link register gets fctrace_return_site instead: at the
 * function's ftrace site (the entry hook's ftrace_regs, before the prologue saves it,
 * signed or on the shadow call stack), or as a call-site probe makes the `BL` itself. The
 * function's `RET` lands here with the stack pointer it was entered with; the return
 * stack keys its entry by the word below it, as x86-64's return address word would be.
 *
 * We save every register a function may return a value in (x0 to x7, and x8, the
 * indirect result register), mask interrupts, and call fctrace_return_handler(stack
 * pointer, x0), which records the return and gives back the real return address; then
 * return there. The link register is not signed: a `RET` needs no landing pad (BTI), and
 * the function's own prologue and epilogue signed and authenticated our address.
 *
 * No address (fctrace_return_handler() returned 0 after fctrace_return_lost() warned and
 * found that this task can die): as after an oops, make_task_dead(SIGKILL), whose address
 * fctrace_dead_end holds.
 */
#include <linux/linkage.h>
#include <asm/assembler.h>

/* Saved: x0 to x8, the frame record (x29, x30) and DAIF, 16-byte aligned. */
#define FRAME_SIZE	(12 * 8)

SYM_CODE_START(fctrace_return)
	/* Never entered at its symbol: a trap, as x86-64's int3. */
	brk	#0x800
SYM_INNER_LABEL(fctrace_return_site, SYM_L_GLOBAL)
	sub	sp, sp, #FRAME_SIZE
	stp	x29, x30, [sp]
	stp	x0, x1, [sp, #16]
	stp	x2, x3, [sp, #32]
	stp	x4, x5, [sp, #48]
	stp	x6, x7, [sp, #64]
	mrs	x9, daif
	stp	x8, x9, [sp, #80]
	mov	x29, sp
	/* Interrupts (and FIQs) masked, as the handler expects. */
	msr	daifset, #3
	add	x0, sp, #FRAME_SIZE	/* the stack pointer the RET left */
	ldr	x1, [sp, #16]		/* the value returned */
	bl	fctrace_return_handler
	cbz	x0, .Lreturn_lost
	mov	x30, x0
	ldp	x8, x9, [sp, #80]
	msr	daif, x9
	ldp	x6, x7, [sp, #64]
	ldp	x4, x5, [sp, #48]
	ldp	x2, x3, [sp, #32]
	ldp	x0, x1, [sp, #16]
	ldr	x29, [sp]
	add	sp, sp, #FRAME_SIZE
	ret
.Lreturn_lost:
	ldp	x8, x9, [sp, #80]
	msr	daif, x9
	ldr	x29, [sp]
	add	sp, sp, #FRAME_SIZE
	/* (x16: a BR through it may land on the `BTI C` of a function) */
	adr_l	x16, fctrace_dead_end
	ldr	x16, [x16]
	mov	x0, #9			/* SIGKILL */
	br	x16
SYM_CODE_END(fctrace_return)
