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
 */
#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/string.h>
#include <linux/uaccess.h>

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

static noinline ssize_t fct_testmod_write(struct file *file, const char __user *ubuf,
					  size_t count, loff_t *ppos)
{
	char name[64];
	size_t len = min(count, sizeof(name) - 1);
	enum fct_testmod_match how;
	int err;

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

static struct proc_dir_entry *fct_testmod_entry;

static int __init fct_testmod_init(void)
{
	fct_testmod_entry = proc_create("fct_testmod", 0200, NULL, &fct_testmod_ops);
	return fct_testmod_entry ? 0 : -ENOMEM;
}

static void __exit fct_testmod_exit(void)
{
	proc_remove(fct_testmod_entry);
}

module_init(fct_testmod_init);
module_exit(fct_testmod_exit);
MODULE_DESCRIPTION("fctrace selftests: module code to trace into");
MODULE_LICENSE("GPL");
