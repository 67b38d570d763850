/* SPDX-License-Identifier: GPL-2.0 */
/* The C declarations fctrace's Rust code is bound to (see bindgen_parameters). */
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/kallsyms.h>
#include <linux/kdebug.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/ring_buffer.h>
#include <linux/uaccess.h>
#include <linux/delay.h>
#include <linux/rcupdate_wait.h>
#include <linux/timekeeping.h>
#include "c/helpers.h"
