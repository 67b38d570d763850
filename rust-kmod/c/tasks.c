// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: Tasks and permissions: PID lookups, thread groups' liveness and scheduling class, and
 * who may open fctracefs' files or see kernel addresses.
 */
#include <linux/capability.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/security.h>
#include <linux/string.h>
#include "helpers.h"

/*
 * A thread group that is gone or going: its last thread has passed the point of
 * do_exit() where the group's live count drops to zero (it is a zombie, or exiting).
 */
static bool fctrace_group_dead(struct task_struct *t)
{
	return t->exit_state || atomic_read(&t->signal->live) == 0;
}

int fctrace_pid_to_tgid(int nr, bool *kthread)
{
	struct task_struct *t;
	int tgid = -ESRCH;

	rcu_read_lock();
	t = pid_task(find_vpid(nr), PIDTYPE_PID);
	if (t && !fctrace_group_dead(t)) {
		tgid = t->tgid;
		*kthread = t->flags & PF_KTHREAD;
	}
	rcu_read_unlock();
	return tgid;
}

bool fctrace_tgid_alive(u32 tgid)
{
	struct task_struct *t;
	bool alive;

	rcu_read_lock();
	t = pid_task(find_pid_ns(tgid, &init_pid_ns), PIDTYPE_TGID);
	alive = t && !fctrace_group_dead(t);
	rcu_read_unlock();
	return alive;
}

bool fctrace_tgid_is_kthread(u32 tgid)
{
	struct task_struct *t;
	bool k;

	rcu_read_lock();
	t = pid_task(find_pid_ns(tgid, &init_pid_ns), PIDTYPE_TGID);
	k = t && (t->flags & PF_KTHREAD);
	rcu_read_unlock();
	return k;
}

/* Whether the current task is a workqueue worker (a kworker). Any context. */
bool fctrace_current_is_kworker(void)
{
	return current->flags & PF_WQ_WORKER;
}

u64 fctrace_tgid_sched_class(u32 tgid)
{
	struct task_struct *t;
	u64 class = 0;

	rcu_read_lock();
	t = pid_task(find_pid_ns(tgid, &init_pid_ns), PIDTYPE_TGID);
	if (t)
		class = (u64)(unsigned long)READ_ONCE(t->sched_class);
	rcu_read_unlock();
	return class;
}

u64 fctrace_idle_sched_class(void)
{
	return (u64)(unsigned long)READ_ONCE(init_task.sched_class);
}

u32 fctrace_tgid_vnr(u32 tgid)
{
	struct pid *pid;
	u32 nr = 0;

	rcu_read_lock();
	pid = find_pid_ns(tgid, &init_pid_ns);
	if (pid)
		nr = pid_vnr(pid);
	rcu_read_unlock();
	return nr;
}

int fctrace_may_open(bool read, bool write, bool trace)
{
	if (write && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (read && !perfmon_capable())
		return -EPERM;
	if (read && trace)
		return security_locked_down(LOCKDOWN_TRACEFS);
	return 0;
}

bool fctrace_may_see_addrs(void)
{
	/* Any kernel address: as %pK shows it to the current task under kptr_restrict. */
	void *p = (void *)fctrace_may_see_addrs;
	char k[24], x[24];

	snprintf(k, sizeof(k), "%pK", p);
	snprintf(x, sizeof(x), "%px", p);
	if (!strcmp(k, x))
		return true;	/* kptr_restrict 1 and CAP_SYSLOG (or no_hash_pointers) */
	if (k[strspn(k, "0")] == '\0')
		return false;	/* kptr_restrict 2, or 1 without CAP_SYSLOG */
	/*
	 * Hashed: kptr_restrict 0; /proc/kallsyms shows addresses to CAP_SYSLOG then (its
	 * check, kallsyms_show_value(), on the current credentials without an audit record).
	 */
	return ns_capable_noaudit(&init_user_ns, CAP_SYSLOG);
}
