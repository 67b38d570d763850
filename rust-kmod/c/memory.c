// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: Reading memory without faulting: strings for the args option, and BTF files.
 */
#include <linux/ftrace.h>
#include <linux/fs.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/hardirq.h>
#include <linux/kallsyms.h>
#include <linux/kobject.h>
#include <linux/irq_work.h>
#include <linux/kprobes.h>
#include <asm/text-patching.h>
#include <linux/mm_types.h>
#include <linux/poll.h>
#include <linux/wait.h>
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/preempt.h>
#include <linux/ptrace.h>
#include <linux/rcupdate.h>
#include <linux/binfmts.h>
#include <linux/capability.h>
#include <linux/security.h>
#include <linux/siphash.h>
#include <linux/once.h>
#include <linux/random.h>
#include <linux/pid_namespace.h>
#include <linux/ring_buffer.h>
#include <linux/rethook.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/sched/mm.h>
#include <linux/sched/rt.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/sched/task_stack.h>
#include <linux/smp.h>
#include <linux/cpuhotplug.h>
#include <linux/sysfs.h>
#include <linux/tracepoint.h>
#include <linux/trace_clock.h>
#include <linux/trace_recursion.h>
#include <linux/delay.h>
#include <asm/irq_stack.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include "helpers.h"

static long fctrace_copy_nofault(void *dst, unsigned long src, unsigned long len, bool user)
{
	if (user)
		return copy_from_user_nofault(dst, (const void __user *)src, len);
	return copy_from_kernel_nofault(dst, (const void *)src, len);
}

long fctrace_copy_str(void *dst, unsigned long src, unsigned long len)
{
	bool user = src < TASK_SIZE_MAX;
	unsigned long first = min(len, PAGE_SIZE - offset_in_page(src));

	if (!src || !len)
		return -EFAULT;
	if (fctrace_copy_nofault(dst, src, first, user))
		return -EFAULT;
	if (first == len || memchr(dst, 0, first))
		return first;
	if (fctrace_copy_nofault(dst + first, src + first, len - first, user))
		return first;
	return len;
}

static struct file *fctrace_btf_open(const char *name)
{
	char path[sizeof("/sys/kernel/btf/") + MODULE_NAME_LEN];

	if (strchr(name, '/') ||
	    snprintf(path, sizeof(path), "/sys/kernel/btf/%s", name) >= sizeof(path))
		return ERR_PTR(-EINVAL);
	return filp_open(path, O_RDONLY, 0);
}

long fctrace_btf_size(const char *name)
{
	struct file *f = fctrace_btf_open(name);
	long size;

	if (IS_ERR(f))
		return 0;
	size = i_size_read(file_inode(f));
	filp_close(f, NULL);
	return size;
}

long fctrace_btf_read(const char *name, void *buf, unsigned long len)
{
	struct file *f = fctrace_btf_open(name);
	loff_t pos = 0;
	long got = 0;

	if (IS_ERR(f))
		return PTR_ERR(f);
	while (got < len) {
		ssize_t n = kernel_read(f, buf + got, len - got, &pos);

		if (n < 0) {
			got = n;
			break;
		}
		if (n == 0)
			break;
		got += n;
	}
	filp_close(f, NULL);
	return got;
}
