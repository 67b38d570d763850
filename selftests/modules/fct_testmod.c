// SPDX-License-Identifier: GPL-2.0
/*
 * fct_testmod: module code for fctrace's selftests to trace into.
 *
 * Writing a name to /proc/fct_testmod calls, through procfs' ops table,
 * fct_testmod_write(), which copies the name and looks it up with
 * fct_testmod_lookup(): -ENOENT for every name but "fctrace" ("name*": any
 * name beginning with it; an argument not constant, so that the compiler
 * makes no specialised copy of the function). Module
 * functions with arguments of known types, reached by an indirect call, with
 * the module's own (split) BTF under /sys/kernel/btf/fct_testmod on a kernel
 * with CONFIG_DEBUG_INFO_BTF_MODULES. Before the lookup, fct_testmod_first(), a
 * notrace function that starts with a call, checks the name's length with
 * fct_testmod_count().
 *
 * Writing 1 or 2 to /proc/fct_testmod_edge calls fct_testmod_edge_write(), which
 * takes a spinlock and calls fct_testmod_edge_a() -> _b() -> _b2() -> _c() with it
 * held; fct_testmod_edge_c() calls fct_testmod_edge_d1() for 1 and fct_testmod_edge_d2()
 * for 2: a call chain four levels deep below a function reached through an ops table,
 * made in atomic context, whose last function calls another callee from one run to
 * the next (trace/atomic_edge.tc).
 *
 * Writing to /proc/fct_testmod_step single-steps one instruction of the module's
 * own with the trap flag, and claims the trap in a die notifier that runs after
 * fctrace's: reading the file gives how many such traps reached it
 * (trace/foreign_step.tc: fctrace leaves single steps that are not its own alone).
 *
 * Kernel threads and work items (trace/kthread.tc): the module's kernel thread
 * "fct_testmod_kt" (its PID is what /proc/fct_testmod_kthread reads) calls
 * fct_testmod_kthread_run(N) once for each N written to that file; each N written to
 * /proc/fct_testmod_work runs a work item on the system workqueue, whose function
 * fct_testmod_work_fn() calls fct_testmod_work_step(N). Each write returns when its
 * call is done.
 */
#include <linux/completion.h>
#include <linux/kdebug.h>
#include <linux/kstrtox.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/objtool.h>
#include <linux/proc_fs.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#ifdef CONFIG_X86
#include <asm/linkage.h>
#include <asm/nospec-branch.h>
#include <asm/debugreg.h>
#include <asm/processor-flags.h>
#endif

enum fct_testmod_match {
	FCT_TESTMOD_EXACT,
	FCT_TESTMOD_PREFIX,
};

/* Not inlined: a function of its own, in the module's BTF. */
static noinline int fct_testmod_lookup(const char *name, unsigned int len,
				       enum fct_testmod_match how)
{
	static const char known[] = "fctrace";

	if (how == FCT_TESTMOD_PREFIX)
		return strncmp(name, known, len) ? -ENOENT : 0;
	return len == sizeof(known) - 1 && !memcmp(name, known, len) ? 0 : -ENOENT;
}

/* A traced function (it has an ftrace site). */
static noinline unsigned int fct_testmod_count(const char *name)
{
	return strnlen(name, 64);
}

/*
 * Not traceable (notrace: no ftrace site), and its first instruction is a call, as in
 * the kernel's out-of-line copies of inline helpers on a GCC build (folio_size() calls
 * folio_order() first) or on the debug kernel (pte_unmap(), rcu_read_unlock()): that
 * call is a call site, not an ftrace site (trace/first_call.tc).
 */
static noinline notrace unsigned int fct_testmod_first(const char *name)
{
	return fct_testmod_count(name) + 1;
}

/*
 * A kernel address in an integer (as __get_free_pages() returns one) and in a structure
 * passed by value: args shows neither to a reader who may not see kernel addresses
 * (security/kptr_restrict.tc). Not static, so that GCC keeps its signature (no
 * .isra/.constprop copy).
 */
struct fct_testmod_ref {
	unsigned long addr;
};

unsigned long fct_testmod_addr(unsigned long addr, struct fct_testmod_ref ref);

noinline unsigned long fct_testmod_addr(unsigned long addr, struct fct_testmod_ref ref)
{
	return ref.addr == addr ? addr : 0;
}

static noinline ssize_t fct_testmod_write(struct file *file, const char __user *ubuf,
					  size_t count, loff_t *ppos)
{
	struct fct_testmod_ref ref = { (unsigned long)file };

	char name[64];
	size_t len = min(count, sizeof(name) - 1);
	enum fct_testmod_match how;
	int err;

	if (!fct_testmod_addr((unsigned long)file, ref))
		return -EINVAL;
	if (copy_from_user(name, ubuf, len))
		return -EFAULT;
	name[len] = '\0';
	if (len && name[len - 1] == '\n')
		name[--len] = '\0';
	/* "name*": any name that begins with it. */
	how = len && name[len - 1] == '*' ? FCT_TESTMOD_PREFIX : FCT_TESTMOD_EXACT;
	if (how == FCT_TESTMOD_PREFIX)
		name[--len] = '\0';
	/* (Never: it returns the name's length plus one.) */
	if (fct_testmod_first(name) != len + 1)
		return -EINVAL;
	err = fct_testmod_lookup(name, len, how);
	return err ? err : count;
}

static const struct proc_ops fct_testmod_ops = {
	.proc_write = fct_testmod_write,
};

static DEFINE_SPINLOCK(fct_testmod_edge_lock);
static unsigned int fct_testmod_edge_count[3];

/*
 * The chain below fct_testmod_edge_write(), called with the lock held. Each adds to
 * what its callee returns (no tail call) and uses its argument, which comes from
 * user space. No branch makes it a constant: GCC specialised fct_testmod_edge_d1()
 * for "v == 1" into fct_testmod_edge_d1.constprop.0().
 */
static noinline unsigned int fct_testmod_edge_d1(unsigned int v)
{
	return ++fct_testmod_edge_count[1] + v;
}

static noinline unsigned int fct_testmod_edge_d2(unsigned int v)
{
	return ++fct_testmod_edge_count[2] + v;
}

static noinline unsigned int fct_testmod_edge_c(unsigned int v)
{
	unsigned int r = v & 1 ? fct_testmod_edge_d1(v) : fct_testmod_edge_d2(v);

	return r + 1;
}

static noinline unsigned int fct_testmod_edge_b2(unsigned int v)
{
	return fct_testmod_edge_c(v) + 1;
}

static noinline unsigned int fct_testmod_edge_b(unsigned int v)
{
	return fct_testmod_edge_b2(v) + 1;
}

static noinline unsigned int fct_testmod_edge_a(unsigned int v)
{
	return fct_testmod_edge_b(v) + 1;
}

static noinline ssize_t fct_testmod_edge_write(struct file *file, const char __user *ubuf,
					       size_t count, loff_t *ppos)
{
	unsigned int v;
	int err;

	err = kstrtouint_from_user(ubuf, count, 0, &v);
	if (err)
		return err;
	if (v != 1 && v != 2)
		return -EINVAL;
	spin_lock(&fct_testmod_edge_lock);
	fct_testmod_edge_count[0] += fct_testmod_edge_a(v);
	spin_unlock(&fct_testmod_edge_lock);
	return count;
}

static const struct proc_ops fct_testmod_edge_ops = {
	.proc_write = fct_testmod_edge_write,
};

/*
 * The callee-pop call and the single step below are x86-64's (trace/callee_pop.tc,
 * trace/foreign_step.tc): on other architectures their files are not made.
 */
#ifdef CONFIG_X86
/*
 * A callee-pop call, as 32-bit stdcall code makes them (trace/callee_pop.tc):
 * fct_testmod_cp_outer(v) pushes v and calls fct_testmod_cp_inner(), which loads it and
 * returns with `ret $8`, taking it off the stack. Its return leaves the stack pointer 8
 * bytes above where a plain `ret` would, past its return address. Neither function has
 * an ftrace site: fctrace follows their calls with call-site probes. Outside fctrace
 * they are correct code; objtool, which takes every call to return with the stack as
 * it was, is told to leave them alone.
 */
unsigned long fct_testmod_cp_outer(unsigned long v);
unsigned long fct_testmod_cp_inner(void);

/*
 * (Each is preceded by 16 bytes of nops named __pfx_<function>, as C functions are on a
 * kernel built with function padding: call-depth tracking puts its accounting there and
 * points calls at it.)
 */
asm(".pushsection .text, \"ax\"\n"
    ".p2align 4, 0x90\n"
    "__pfx_fct_testmod_cp_outer:\n"
    ".skip 16, 0x90\n"
    ".globl fct_testmod_cp_outer\n"
    ".type fct_testmod_cp_outer, @function\n"
    "fct_testmod_cp_outer:\n"
    "	pushq %rdi\n"
    "	call fct_testmod_cp_inner\n"
    "	" ASM_RET
    ".size fct_testmod_cp_outer, . - fct_testmod_cp_outer\n"
    ".p2align 4, 0x90\n"
    "__pfx_fct_testmod_cp_inner:\n"
    ".skip 16, 0x90\n"
    ".globl fct_testmod_cp_inner\n"
    ".type fct_testmod_cp_inner, @function\n"
    "fct_testmod_cp_inner:\n"
    "	movq 8(%rsp), %rax\n"
    "	" ANNOTATE_RETPOLINE_SAFE "\n"
    "	ret $8\n"
    "	int3\n"
    ".size fct_testmod_cp_inner, . - fct_testmod_cp_inner\n"
    ".popsection\n");
STACK_FRAME_NON_STANDARD(fct_testmod_cp_outer);
STACK_FRAME_NON_STANDARD(fct_testmod_cp_inner);

static noinline ssize_t fct_testmod_cp_write(struct file *file, const char __user *ubuf,
					     size_t count, loff_t *ppos)
{
	unsigned long v;
	int err;

	err = kstrtoul_from_user(ubuf, count, 0, &v);
	if (err)
		return err;
	/* The value comes back, and the stack is as it was. */
	return fct_testmod_cp_outer(v) == v ? count : -EIO;
}

static const struct proc_ops fct_testmod_cp_ops = {
	.proc_write = fct_testmod_cp_write,
};

/* Where the stepped instruction (a nop) ends: the single-step trap's address. */
static unsigned long fct_testmod_step_end;
static atomic_t fct_testmod_steps = ATOMIC_INIT(0);

static noinline void fct_testmod_step_once(void)
{
	unsigned long flags = native_save_fl(), end;

	/*
	 * The trap flag on, one nop, and the trap comes after it, where the notifier
	 * clears it. The address is taken here: objtool wants no reference from another
	 * function to a place without an endbr.
	 */
	asm volatile("lea 1f(%%rip), %0\n\t"
		     "mov %0, %1\n\t"
		     "push %2\n\tpopf\n\tnop\n1:\n"
		     : "=&r"(end), "=m"(fct_testmod_step_end)
		     : "r"(flags | X86_EFLAGS_TF)
		     : "memory", "cc");
}

static int fct_testmod_die(struct notifier_block *nb, unsigned long val, void *data)
{
	struct die_args *args = data;
	unsigned long *dr6 = (unsigned long *)args->err;

	if (val != DIE_DEBUG || !(args->regs->flags & X86_EFLAGS_TF) ||
	    args->regs->ip != READ_ONCE(fct_testmod_step_end))
		return NOTIFY_DONE;
	args->regs->flags &= ~X86_EFLAGS_TF;
	if (dr6)
		*dr6 &= ~DR_STEP;
	atomic_inc(&fct_testmod_steps);
	return NOTIFY_STOP;
}

/* After fctrace's (priority -1): it sees only what fctrace left. */
static struct notifier_block fct_testmod_nb = {
	.notifier_call = fct_testmod_die,
	.priority = -2,
};

static ssize_t fct_testmod_step_write(struct file *file, const char __user *ubuf,
				      size_t count, loff_t *ppos)
{
	fct_testmod_step_once();
	return count;
}

static ssize_t fct_testmod_step_read(struct file *file, char __user *ubuf, size_t count,
				     loff_t *ppos)
{
	char buf[16];
	int n = scnprintf(buf, sizeof(buf), "%d\n", atomic_read(&fct_testmod_steps));

	return simple_read_from_buffer(ubuf, count, ppos, buf, n);
}

static const struct proc_ops fct_testmod_step_ops = {
	.proc_write = fct_testmod_step_write,
	.proc_read = fct_testmod_step_read,
};

static struct proc_dir_entry *fct_testmod_cp_entry;
static struct proc_dir_entry *fct_testmod_step_entry;

static int fct_testmod_arch_init(void)
{
	int err = register_die_notifier(&fct_testmod_nb);

	if (err)
		return err;
	fct_testmod_cp_entry = proc_create("fct_testmod_calleepop", 0200, NULL,
					   &fct_testmod_cp_ops);
	fct_testmod_step_entry = proc_create("fct_testmod_step", 0600, NULL,
					     &fct_testmod_step_ops);
	if (!fct_testmod_cp_entry || !fct_testmod_step_entry) {
		proc_remove(fct_testmod_cp_entry);
		proc_remove(fct_testmod_step_entry);
		unregister_die_notifier(&fct_testmod_nb);
		return -ENOMEM;
	}
	return 0;
}

static void fct_testmod_arch_exit(void)
{
	proc_remove(fct_testmod_cp_entry);
	proc_remove(fct_testmod_step_entry);
	unregister_die_notifier(&fct_testmod_nb);
}
#else
static int fct_testmod_arch_init(void)
{
	return 0;
}

static void fct_testmod_arch_exit(void)
{
}
#endif

static DECLARE_WAIT_QUEUE_HEAD(fct_testmod_kt_wq);
static DECLARE_COMPLETION(fct_testmod_kt_done);
static DEFINE_MUTEX(fct_testmod_kt_lock);
static unsigned int fct_testmod_kt_req;
static unsigned int fct_testmod_result;
static struct task_struct *fct_testmod_kt;

/* What the kernel thread calls, once per request. */
static noinline unsigned int fct_testmod_kthread_run(unsigned int n)
{
	return fct_testmod_count("fctrace-kthread") + n;
}

static int fct_testmod_kthread_fn(void *unused)
{
	while (!kthread_should_stop()) {
		unsigned int n;

		wait_event_interruptible(fct_testmod_kt_wq,
					 READ_ONCE(fct_testmod_kt_req) || kthread_should_stop());
		n = xchg(&fct_testmod_kt_req, 0);
		if (n) {
			WRITE_ONCE(fct_testmod_result, fct_testmod_kthread_run(n));
			complete(&fct_testmod_kt_done);
		}
	}
	return 0;
}

/* Parses a positive decimal number written to one of the module's files. */
static int fct_testmod_number(const char __user *ubuf, size_t count, unsigned int *n)
{
	int err = kstrtouint_from_user(ubuf, count, 10, n);

	return err ?: (*n ? 0 : -EINVAL);
}

static ssize_t fct_testmod_kt_write(struct file *file, const char __user *ubuf, size_t count,
				    loff_t *ppos)
{
	unsigned int n;
	int err = fct_testmod_number(ubuf, count, &n);

	if (err)
		return err;
	mutex_lock(&fct_testmod_kt_lock);
	reinit_completion(&fct_testmod_kt_done);
	WRITE_ONCE(fct_testmod_kt_req, n);
	wake_up(&fct_testmod_kt_wq);
	/* Interruptible: a traced thread that waits for arming is no hung task. */
	err = wait_for_completion_interruptible(&fct_testmod_kt_done);
	mutex_unlock(&fct_testmod_kt_lock);
	return err ?: count;
}

static ssize_t fct_testmod_kt_read(struct file *file, char __user *ubuf, size_t count,
				   loff_t *ppos)
{
	char buf[16];
	int n = scnprintf(buf, sizeof(buf), "%d\n", task_pid_nr(fct_testmod_kt));

	return simple_read_from_buffer(ubuf, count, ppos, buf, n);
}

static const struct proc_ops fct_testmod_kt_ops = {
	.proc_write = fct_testmod_kt_write,
	.proc_read = fct_testmod_kt_read,
};

static unsigned int fct_testmod_work_n;

/* What the work function calls. */
static noinline unsigned int fct_testmod_work_step(unsigned int n)
{
	return fct_testmod_count("fctrace-work") + n;
}

static void fct_testmod_work_fn(struct work_struct *work)
{
	WRITE_ONCE(fct_testmod_result, fct_testmod_work_step(READ_ONCE(fct_testmod_work_n)));
}

static DECLARE_WORK(fct_testmod_work, fct_testmod_work_fn);
static DEFINE_MUTEX(fct_testmod_work_lock);

static ssize_t fct_testmod_work_write(struct file *file, const char __user *ubuf,
				      size_t count, loff_t *ppos)
{
	unsigned int n;
	int err = fct_testmod_number(ubuf, count, &n);

	if (err)
		return err;
	mutex_lock(&fct_testmod_work_lock);
	WRITE_ONCE(fct_testmod_work_n, n);
	queue_work(system_wq, &fct_testmod_work);
	flush_work(&fct_testmod_work);
	mutex_unlock(&fct_testmod_work_lock);
	return count;
}

static const struct proc_ops fct_testmod_work_ops = {
	.proc_write = fct_testmod_work_write,
};

static struct proc_dir_entry *fct_testmod_entry;
static struct proc_dir_entry *fct_testmod_edge_entry;
static struct proc_dir_entry *fct_testmod_kt_entry;
static struct proc_dir_entry *fct_testmod_work_entry;

static void fct_testmod_remove(void)
{
	proc_remove(fct_testmod_work_entry);
	proc_remove(fct_testmod_kt_entry);
	proc_remove(fct_testmod_edge_entry);
	proc_remove(fct_testmod_entry);
}

static int __init fct_testmod_init(void)
{
	int err;

	/* What the files use first, the files last: a write or read may come at once. */
	fct_testmod_kt = kthread_run(fct_testmod_kthread_fn, NULL, "fct_testmod_kt");
	if (IS_ERR(fct_testmod_kt))
		return PTR_ERR(fct_testmod_kt);
	err = fct_testmod_arch_init();
	if (err) {
		kthread_stop(fct_testmod_kt);
		return err;
	}
	fct_testmod_entry = proc_create("fct_testmod", 0200, NULL, &fct_testmod_ops);
	fct_testmod_edge_entry = proc_create("fct_testmod_edge", 0200, NULL,
					     &fct_testmod_edge_ops);
	fct_testmod_kt_entry = proc_create("fct_testmod_kthread", 0600, NULL,
					   &fct_testmod_kt_ops);
	fct_testmod_work_entry = proc_create("fct_testmod_work", 0200, NULL,
					     &fct_testmod_work_ops);
	if (!fct_testmod_entry || !fct_testmod_edge_entry || !fct_testmod_kt_entry ||
	    !fct_testmod_work_entry) {
		fct_testmod_remove();
		fct_testmod_arch_exit();
		kthread_stop(fct_testmod_kt);
		return -ENOMEM;
	}
	return 0;
}

static void __exit fct_testmod_exit(void)
{
	/* The files first: proc_remove() waits for the reads and writes under way. */
	fct_testmod_remove();
	fct_testmod_arch_exit();
	kthread_stop(fct_testmod_kt);
	cancel_work_sync(&fct_testmod_work);
}

module_init(fct_testmod_init);
module_exit(fct_testmod_exit);
MODULE_DESCRIPTION("fctrace selftests: module code to trace into");
MODULE_LICENSE("GPL");
