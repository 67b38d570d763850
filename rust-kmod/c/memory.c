// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: Reading memory without faulting: strings for the args option, and BTF files.
 */
#include <linux/fs.h>
#include <linux/fs_struct.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/string.h>
#include <linux/uaccess.h>
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
#ifdef scoped_with_init_fs
	/*
	 * Kernel threads (the arming work item) resolve paths in nullfs since 7.0:
	 * look the file up in the first user-space process's file system instead.
	 */
	if (current->flags & PF_KTHREAD) {
		struct file *f;

		scoped_with_init_fs()
			f = filp_open(path, O_RDONLY, 0);
		return f;
	}
#endif
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
