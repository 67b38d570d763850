// SPDX-License-Identifier: GPL-2.0
/*
 * hookcost: what an entry hook costs the tasks that are not traced, per kind of hook
 * (scripts/hookcost/run.sh; Documentation/fctrace/design.rst, "Why an ftrace_ops").
 * A measurement for the design of the engine, not part of fctrace.
 */
#include <linux/module.h>
#include <linux/ftrace.h>
#include <linux/fprobe.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/linkage.h>

static int mode;		/* 1 ops, 2 ops+SAVE_REGS, 3 fprobe, 4 direct */
static int pid = -1;		/* the traced process */
static char funcs[16384];	/* comma-separated names */
module_param(mode, int, 0444);
module_param(pid, int, 0444);
module_param_string(funcs, funcs, sizeof(funcs), 0444);

static atomic64_t traced_hits, exits;
static int traced_pid;

static void notrace ops_func(unsigned long ip, unsigned long pip,
			     struct ftrace_ops *op, struct ftrace_regs *fregs)
{
	if (unlikely(current->tgid == traced_pid))
		atomic64_inc(&traced_hits);
}

static struct ftrace_ops ops = { .func = ops_func };

static int fp_entry(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct pt_regs *regs, void *data)
{
	if (likely(current->tgid != traced_pid))
		return 1;
	atomic64_inc(&traced_hits);
	return 0;
}

static void fp_exit(struct fprobe *fp, unsigned long ip, unsigned long ret_ip,
		    struct pt_regs *regs, void *data)
{
	atomic64_inc(&exits);
}

static struct fprobe fp = {
	.entry_handler = fp_entry,
	.exit_handler = fp_exit,
	.nr_maxactive = 1024,
};

/* The direct trampoline: fentry calls it; it returns to the function. */
void hookcost_direct(void);
asm(".pushsection .text\n"
    ".globl hookcost_direct\n"
    "hookcost_direct:\n"
    "  cmpl $0, traced_pid(%rip)\n"
    "  " ASM_RET
    ".popsection\n");
static struct ftrace_ops dops;

static char **names;
static int n_names;

static int split(void)
{
	char *s = kstrdup(funcs, GFP_KERNEL), *t;
	int n = 1;
	for (t = s; *t; t++)
		n += *t == ',';
	names = kcalloc(n, sizeof(*names), GFP_KERNEL);
	while ((t = strsep(&s, ",")))
		if (*t)
			names[n_names++] = t;
	return n_names;
}

static int set_filters(struct ftrace_ops *o)
{
	int i, ok = 0;
	for (i = 0; i < n_names; i++)
		if (!ftrace_set_filter(o, names[i], strlen(names[i]), 0))
			ok++;
	return ok;
}

static int __init hp_init(void)
{
	int ret = 0, ok = 0;
	traced_pid = pid;
	if (!split())
		return -EINVAL;
	switch (mode) {
	case 2:
		ops.flags = FTRACE_OPS_FL_SAVE_REGS;
		fallthrough;
	case 1:
		ok = set_filters(&ops);
		ret = register_ftrace_function(&ops);
		break;
	case 3:
		ret = register_fprobe(&fp, names[0], NULL);
		if (!ret)
			ok = set_filters(&fp.ops);
		break;
	case 4:
		ok = set_filters(&dops);
		ret = register_ftrace_direct(&dops, (unsigned long)hookcost_direct);
		break;
	default:
		return -EINVAL;
	}
	pr_info("hookcost: mode %d: %d of %d names, register %d\n", mode, ok, n_names, ret);
	return ret;
}

static void __exit hp_exit(void)
{
	switch (mode) {
	case 1: case 2: unregister_ftrace_function(&ops); break;
	case 3: unregister_fprobe(&fp); break;
	case 4: unregister_ftrace_direct(&dops, (unsigned long)hookcost_direct, true); break;
	}
	pr_info("hookcost: traced_hits %lld exits %lld\n",
		(long long)atomic64_read(&traced_hits), (long long)atomic64_read(&exits));
}

module_init(hp_init);
module_exit(hp_exit);
MODULE_LICENSE("GPL");
