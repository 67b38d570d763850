/* SPDX-License-Identifier: GPL-2.0 */
/*
 * arm64's trampolines: fctrace_entry_trampoline, where an entry hook sends a traced task
 * to wait for its function to be armed, fctrace_bp_trampoline, where a breakpoint does,
 * and fctrace_return, where a followed function returns to.
 */
#include <linux/linkage.h>
#include <asm/assembler.h>

/*
 * Stores (stp) or loads (ldp) x0 to x9 (last 9) or x0 to x17 (last 17) in pairs at [sp],
 * [sp, #16], and so on.
 */
.macro REG_PAIRS op, last
	\op	x0, x1, [sp]
	\op	x2, x3, [sp, #16]
	\op	x4, x5, [sp, #32]
	\op	x6, x7, [sp, #48]
	\op	x8, x9, [sp, #64]
	.if \last == 17
	\op	x10, x11, [sp, #80]
	\op	x12, x13, [sp, #96]
	\op	x14, x15, [sp, #112]
	\op	x16, x17, [sp, #128]
	.endif
.endm

/*
 * fctrace_entry_trampoline: an entry hook (engine/entry.rs, c/entry_ops.c) found the
 * traced task entering a function that is not armed yet, in a context where it may sleep.
 * ftrace_caller() goes on here as to a direct trampoline (`BR X17`): the argument
 * registers x0 to x8 are the function's, x9 holds its return address, x30 the address
 * after its ftrace site's BL, and the stack pointer is the function's entry stack pointer.
 * x10 to x17 carry nothing there: ftrace_caller() changes them at every hooked entry, so
 * no caller can expect them kept. Nor do the flags.
 *
 * We save the argument registers, build the frame records ftrace_caller() builds (one for
 * the caller, with the return address; one for the function, at its ftrace site), so that
 * the unwinder sees a task waiting here in the function called from its caller, and call
 * fctrace_arm_pending_entry(), which waits for the function to be armed. Then, with every
 * register as the function was entered, x9 its return address, we go on at its ftrace
 * site's BL: ftrace's callback runs again and finds the function armed. The `RET` goes
 * through x16: it needs no landing pad (BTI).
 */

/* x0 to x8, then the frame records at FRAME_RECORDS: 16-byte aligned. */
#define ENTRY_REGS	(10 * 8)
#define ENTRY_FRAME	(ENTRY_REGS + 32)

SYM_CODE_START(fctrace_entry_trampoline)
	bti	c
	sub	sp, sp, #ENTRY_FRAME
	REG_PAIRS stp, 9
	/* The caller's frame record (its return address), then the function's. */
	stp	x29, x9, [sp, #ENTRY_REGS + 16]
	add	x29, sp, #ENTRY_REGS + 16
	stp	x29, x30, [sp, #ENTRY_REGS]
	add	x29, sp, #ENTRY_REGS
	mov	x0, xzr			/* no flags to check (x86-64's AC and DF) */
	bl	fctrace_arm_pending_entry
	ldr	x16, [sp, #ENTRY_REGS + 8]	/* after the ftrace site's BL */
	sub	x16, x16, #AARCH64_INSN_SIZE
	ldr	x29, [sp, #ENTRY_REGS + 16]
	REG_PAIRS ldp, 9
	mov	x30, x9
	add	sp, sp, #ENTRY_FRAME
	ret	x16
SYM_CODE_END(fctrace_entry_trampoline)

/*
 * fctrace_bp_trampoline, fctrace_bp_entry_trampoline: where a breakpoint's handler sends
 * a traced task whose callee is not armed yet (engine/wait/resume.rs). The exception
 * return brings the task here with every register as it was at the probed instruction,
 * whose address resume.rs keeps for the task: here nothing may be lost, any register may
 * still be needed there.
 *
 * We save what C may change (x0 to x18, x30, the flags) and x29, build a frame record
 * that puts the task at the probed instruction for the unwinder (at a function's entry
 * or a tail call, fctrace_bp_entry_trampoline, the function has no frame of its own: a
 * record for its caller too, with the return address in x30, as ftrace_caller() builds),
 * and call fctrace_arm_pending_bp(), which waits. Then every register is put back and
 * the task runs into fctrace_bp_resume.
 */
#define BP_REGS		(22 * 8)	/* x0 to x18, x29, x30, NZCV */
#define BP_FRAME	(BP_REGS + 32)	/* and two frame records */

.macro BP_TRAMPOLINE records
	bti	jc
	sub	sp, sp, #BP_FRAME
	REG_PAIRS stp, 17
	stp	x18, x29, [sp, #144]
	mrs	x0, nzcv
	stp	x30, x0, [sp, #160]
	bl	fctrace_bp_resume_addr	/* x0: the probed instruction */
	.if \records == 2
	ldr	x1, [sp, #160]		/* the return address into the caller */
	stp	x29, x1, [sp, #BP_REGS + 16]
	add	x29, sp, #BP_REGS + 16
	.endif
	stp	x29, x0, [sp, #BP_REGS]
	add	x29, sp, #BP_REGS
	bl	fctrace_arm_pending_bp
	ldr	x0, [sp, #168]
	msr	nzcv, x0
	REG_PAIRS ldp, 17
	ldp	x18, x29, [sp, #144]
	ldr	x30, [sp, #160]
	add	sp, sp, #BP_FRAME
	b	fctrace_bp_resume
.endm

SYM_CODE_START(fctrace_bp_trampoline)
	BP_TRAMPOLINE 1
SYM_CODE_END(fctrace_bp_trampoline)

SYM_CODE_START(fctrace_bp_entry_trampoline)
	BP_TRAMPOLINE 2
SYM_CODE_END(fctrace_bp_entry_trampoline)

/*
 * fctrace_bp_resume: a NOP that carries the resume probe, registered from the start of
 * tracing until no task has a place kept. Its handler sends the task to the probed
 * instruction kept for it, with every register as the trampoline put it back: as the
 * breakpoint found it.
 *
 * fctrace_bp_lost_site: where a task goes that had no address kept (or ran past the
 * probe: kprobes disabled while it waited). fctrace_bp_forget() gives its place back,
 * fctrace_bp_lost() warns once; then, as after an oops, make_task_dead(SIGKILL).
 */
SYM_CODE_START(fctrace_bp_resume)
	nop
SYM_INNER_LABEL(fctrace_bp_lost_site, SYM_L_GLOBAL)
	bl	fctrace_bp_forget
	bl	fctrace_bp_lost
	adr_l	x16, fctrace_dead_end
	ldr	x16, [x16]
	mov	x0, #9			/* SIGKILL */
	br	x16
SYM_CODE_END(fctrace_bp_resume)

/*
 * fctrace_return: where a function that a traced task called returns to
 * (engine/returns.rs).
 *
 * When fctrace follows a call, the return address the function was entered with goes into
 * the stack's return stack, and the link register gets fctrace_return_site instead: at the
 * function's ftrace site (the entry hook's ftrace_regs, before the prologue saves it,
 * signed or on the shadow call stack), or as a call-site probe makes the `BL` itself. The
 * function's `RET` lands here with the stack pointer it was entered with; the return
 * stack keys its entry by the word below it, as x86-64's return address word would be.
 *
 * We save what C may change (x0 to x18, the flags), mask interrupts, and call
 * fctrace_return_handler(stack pointer, x0), which records the return and gives back
 * the real return address; then, with every register as the function returned, return
 * there. Not only the registers a value is returned in: fctrace follows calls of
 * functions without an ftrace site (lib/kstrtox.c's), and GCC's interprocedural register
 * allocation lets their callers keep values in x9 to x17 across such a call, which it
 * knows does not change them (_kstrtoull() keeps its result pointer in x14 across
 * _parse_integer_fixup_radix()). The link register is not signed: a `RET` needs no
 * landing pad (BTI), and the function's own prologue and epilogue signed and
 * authenticated our address.
 *
 * No address (fctrace_return_handler() returned 0 after fctrace_return_lost() warned and
 * found that this task can die): as after an oops, make_task_dead(SIGKILL), whose address
 * fctrace_dead_end holds.
 */

/* Saved: x0 to x18, DAIF, NZCV, then the frame record (x29, x30): 16-byte aligned. */
#define RET_REGS	(22 * 8)
#define RET_FRAME	(RET_REGS + 16)

SYM_CODE_START(fctrace_return)
	/* Never entered at its symbol: a trap, as x86-64's int3. */
	brk	#0x800
SYM_INNER_LABEL(fctrace_return_site, SYM_L_GLOBAL)
	sub	sp, sp, #RET_FRAME
	REG_PAIRS stp, 17
	mrs	x9, daif
	stp	x18, x9, [sp, #144]
	mrs	x9, nzcv
	str	x9, [sp, #160]
	stp	x29, x30, [sp, #RET_REGS]
	add	x29, sp, #RET_REGS
	/* Interrupts (and FIQs) masked, as the handler expects. */
	msr	daifset, #3
	add	x0, sp, #RET_FRAME	/* the stack pointer the RET left */
	ldr	x1, [sp]		/* the value returned */
	bl	fctrace_return_handler
	cbz	x0, .Lreturn_lost
	mov	x30, x0
	ldr	x9, [sp, #160]
	msr	nzcv, x9
	ldp	x18, x9, [sp, #144]
	msr	daif, x9
	REG_PAIRS ldp, 17
	ldr	x29, [sp, #RET_REGS]
	add	sp, sp, #RET_FRAME
	ret
.Lreturn_lost:
	ldp	x18, x9, [sp, #144]
	msr	daif, x9
	ldr	x29, [sp, #RET_REGS]
	add	sp, sp, #RET_FRAME
	/* (x16: a BR through it may land on the `BTI C` of a function) */
	adr_l	x16, fctrace_dead_end
	ldr	x16, [x16]
	mov	x0, #9			/* SIGKILL */
	br	x16
SYM_CODE_END(fctrace_return)
