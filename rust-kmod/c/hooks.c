// SPDX-License-Identifier: GPL-2.0
/*
 * fctrace: Hooks that live as long as the tracer: the sched_process_exit and sched_process_exec
 * tracepoints, the CPU hotplug callback that flushes a CPU going down, and the module
 * notifier that tells fctrace of module text going away.
 */
#include <linux/binfmts.h>
#include <linux/cpuhotplug.h>
#include <linux/irqflags.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/string.h>
#include <linux/tracepoint.h>
#include "helpers.h"

static struct tracepoint *fctrace_exit_tp, *fctrace_exec_tp;

static void fctrace_exit_probe(void *data, struct task_struct *p)
{
	/* After do_exit() counted the thread out of its group's live threads. */
	fctrace_task_exit((unsigned long)p, p->tgid,
			  atomic_read(&p->signal->live) == 0);
}

static void fctrace_exec_probe(void *data, struct task_struct *p, pid_t old_pid,
			       struct linux_binprm *bprm)
{
	fctrace_task_exec(p->pid, old_pid, p->tgid, bprm->secureexec);
}

static void fctrace_find_tps(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "sched_process_exit"))
		fctrace_exit_tp = tp;
	else if (!strcmp(tp->name, "sched_process_exec"))
		fctrace_exec_tp = tp;
}

int fctrace_exit_hook_register(void)
{
	int ret;

	for_each_kernel_tracepoint(fctrace_find_tps, NULL);
	if (!fctrace_exit_tp || !fctrace_exec_tp)
		return -ENOENT;
	ret = tracepoint_probe_register(fctrace_exit_tp, fctrace_exit_probe, NULL);
	if (ret)
		goto none;
	ret = tracepoint_probe_register(fctrace_exec_tp, fctrace_exec_probe, NULL);
	if (ret) {
		tracepoint_probe_unregister(fctrace_exit_tp, fctrace_exit_probe, NULL);
		tracepoint_synchronize_unregister();
		goto none;
	}
	return 0;
none:
	fctrace_exit_tp = fctrace_exec_tp = NULL;
	return ret;
}

void fctrace_exit_hook_unregister(void)
{
	if (!fctrace_exit_tp)
		return;
	tracepoint_probe_unregister(fctrace_exit_tp, fctrace_exit_probe, NULL);
	tracepoint_probe_unregister(fctrace_exec_tp, fctrace_exec_probe, NULL);
	tracepoint_synchronize_unregister();
	fctrace_exit_tp = fctrace_exec_tp = NULL;
}

/*
 * A CPU going offline flushes its staging area first (buffer.rs), on that CPU: after the
 * scheduler stopped running tasks there (CPUHP_AP_ACTIVE comes down before
 * CPUHP_AP_ONLINE_DYN), so what it staged is not stranded until it comes back.
 */
static enum cpuhp_state fctrace_cpuhp_state;

static int fctrace_cpu_down(unsigned int cpu)
{
	unsigned long flags;

	local_irq_save(flags);
	fctrace_flush_this_cpu();
	local_irq_restore(flags);
	return 0;
}

int fctrace_cpu_down_register(void)
{
	int ret = cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "fctrace:staging", NULL,
					    fctrace_cpu_down);

	if (ret < 0)
		return ret;
	fctrace_cpuhp_state = ret;
	return 0;
}

void fctrace_cpu_down_unregister(void)
{
	if (fctrace_cpuhp_state > 0)
		cpuhp_remove_state_nocalls(fctrace_cpuhp_state);
	fctrace_cpuhp_state = 0;
}

/*
 * A module's text goes away: all of it when the module goes (after its exit function,
 * before ftrace forgets its sites and its memory is freed), its init text once it is
 * live (freed after an RCU grace period). fctrace_module_text_gone() (Rust) sleeps.
 * A module that comes is reported too: text that went away may be loaded over.
 */
static int fctrace_module_notify(struct notifier_block *nb, unsigned long state, void *data)
{
	struct module *mod = data;
	struct module_memory *m;

	if (state == MODULE_STATE_COMING) {
		/* Loaded over text that went away: live code again. */
		m = &mod->mem[MOD_TEXT];
		fctrace_module_text_coming((unsigned long)m->base,
					   (unsigned long)m->base + m->size);
		m = &mod->mem[MOD_INIT_TEXT];
		fctrace_module_text_coming((unsigned long)m->base,
					   (unsigned long)m->base + m->size);
		return NOTIFY_DONE;
	}
	/* A module whose init failed goes with its init text too. */
	if (state != MODULE_STATE_GOING && state != MODULE_STATE_LIVE)
		return NOTIFY_DONE;
	m = &mod->mem[MOD_INIT_TEXT];
	if (m->size)
		fctrace_module_text_gone((unsigned long)m->base,
					 (unsigned long)m->base + m->size);
	m = &mod->mem[MOD_TEXT];
	if (state == MODULE_STATE_GOING && m->size)
		fctrace_module_text_gone((unsigned long)m->base,
					 (unsigned long)m->base + m->size);
	return NOTIFY_DONE;
}

static struct notifier_block fctrace_module_nb = {
	.notifier_call = fctrace_module_notify,
};

int fctrace_module_hook_register(void)
{
	return register_module_notifier(&fctrace_module_nb);
}

void fctrace_module_hook_unregister(void)
{
	unregister_module_notifier(&fctrace_module_nb);
}
