#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR MIT
"""Writes the HANDMADE fixtures of this directory (see README):
handmade-multi.trace, and openat-enoent.handmade.trace derived from the real
openat-args.trace. Run from this directory: python3 handmade.py"""
import re
import sys


# Writes lines in fctrace's format (crates/fctrace-core/src/format.rs: write_prefix).
def mark(ns):
    for lim, m in ((1_000_000_000,'$'),(100_000_000,'@'),(10_000_000,'*'),(1_000_000,'#'),(100_000,'!'),(10_000,'+')):
        if ns > lim: return m
    return ' '
def line(cpu, comm, tid, dur_ns, depth, body):
    task = f"{comm}-{tid}"
    s = f"{cpu:>2}) {task:>18} |"
    if dur_ns is None:
        s += "                 |"
    else:
        s += f" {mark(dur_ns)} {dur_ns//1000:>6}.{dur_ns%1000:03} us  |"
    s += "  " * (depth + 1) + body
    return s


def multi():
    A = (0, "fct-a b", 100)
    K = (1, "kworker/0:1-x", 31)
    E = (2, "fct-a b", 101)
    def L(t, dur, depth, body, cpu=None):
        c, comm, tid = t
        return line(c if cpu is None else cpu, comm, tid, None if dur is None else int(round(dur*1000)), depth, body)
    out = [
    "# HANDMADE trace (not captured from a kernel): see tests/data/README.",
    L(E, None, 0, "<========== irq"),
    L(A, None, 0, "__x64_sys_read(regs=0xffffc90000123f58) {"),
    L(K, None, 0, "process_one_work(worker=0xffff888000a1b000, work=0xffff888000a2c000) {"),
    L(A, None, 1, "ksys_read(fd=3, buf=0x7ffc1234, count=4096) { /* tail call */"),
    L(K, 1.0, 1, "_raw_spin_lock_irq(lock=0xffff888000a1b008);"),
    L(A, None, 2, "vfs_read(file=0xffff888003000000, buf=0x7ffc1234, count=4096, pos=0xffffc90000123ef0) {"),
    L(A, 2.0, 3, "rw_verify_area(?); /* ret=0 */"),
    L(K, None, 1, "fct_work_fn(work=0xffff888000a2c000) [fct_testmod] { /* indirect */"),
    L(A, None, 0, "==========> irq"),
    L(A, None, 0, "__sysvec_apic_timer_interrupt(regs=0xffffc90000123e48) {"),
    L(A, 3.0, 1, "hrtimer_interrupt(dev=0xffff88803e81c2c0); /* indirect */"),
    L(A, None, 1, "irq_exit_rcu(); /* not followed: atomic */"),
    L(A, 10.0, 0, "}"),
    L(A, None, 0, "<========== irq"),
    L(K, None, 2, "msleep(msecs=1) {"),
    L(A, None, 3, "fct_testmod_read(file=0xffff888003000000, ubuf=\"a|b\\\"c\", count=4096, ppos=0xffffc90000123ef0) [fct_testmod] { /* indirect */"),
    "CPU:1 [LOST 7 EVENTS]",
    L(A, 5.0, 4, "shmem_get_folio_gfp.isra.0(inode=0xffff888000640868, index=0); /* ret=0 */"),
    L(K, 4.0, 3, "} /* schedule_timeout ret=0 */"),
    L(A, 6.0, 4, "shmem_get_folio_gfp.constprop.0(inode=0xffff888000640868, index=1); /* ret=-2 (ENOENT) */"),
    L(K, 1500.0, 2, "}"),
    L(A, None, 4, "memset(?); /* not followed: unprobeable */"),
    L(K, 2.0, 2, "complete(x=0xffff888000a2c040);"),
    L(A, 40.0, 3, "} /* fct_testmod_read return not seen */"),
    L(K, 1600.0, 1, "}"),
    L(A, 60.0, 2, "} /* vfs_read ret=6 */"),
    L(K, None, 1, "pwq_dec_nr_in_flight(pwq=0xffff888000a1b400, work_data=0x0) {"),
    L(A, 70.0, 1, "} /* ksys_read ret=6 */"),
    "CPU:1 [LOST 3 EVENTS]",
    L(A, 80.0, 0, "} /* __x64_sys_read ret=6 */"),
    L(K, 1700.0, 0, "}"),
    L(E, None, 0, "__x64_sys_exit_group(error_code=0) {"),
    L(A, None, 0, "==========> softirq"),
    L(A, 12.0, 0, "handle_softirqs(ksirqd=false);"),
    L(A, None, 0, "<========== softirq"),
    L(E, None, 1, "do_group_exit(exit_code=0) {"),
    L(E, None, 2, "do_exit(code=0) {"),
    L(E, 3.0, 3, "exit_mm();"),
    L(E, 20.0, 2, "} /* do_exit task exited */"),
    L(E, 25.0, 1, "} /* do_group_exit task exited */"),
    L(E, 30.0, 0, "} /* __x64_sys_exit_group task exited */"),
    L(A, None, 0, "__x64_sys_close(regs=0xffffc90000123f58) {"),
    L(A, None, 1, "close_fd(fd=3) {"),
    L(A, 1.5, 2, "pick_file(files=0xffff888000298840, fd=3); /* ret=0xffff88800059f540 */"),
    ]
    return "\n".join(out) + "\n"


# Derives a handmade "failing run" (open of a missing file, ENOENT) from the real
# openat-args.trace: subtrees removed and added, ancestors' durations recomputed
# (a frame keeps its self time; its duration is self + its children's).
def enoent(real):
    src = open(real).read().split('\n')
    PAT = re.compile(r'^\s*(\d+)\) (.*?)-(\d+) \|(.*?)\|(.*)$')
    class N:
        def __init__(s, body, dur, kind):
            s.body, s.dur, s.kind, s.kids, s.close = body, dur, kind, [], ''
    root = N('', 0, 'root'); stack = [root]
    for l in src:
        m = PAT.match(l)
        if not m: continue
        d = m.group(4).strip()
        dur = None
        if d:
            num = d.lstrip('+!#*@$ ').split()[0]
            a, b = num.split('.'); dur = int(a)*1000 + int(b)
        body = m.group(5).strip()
        if body.startswith('}'):
            n = stack.pop(); n.dur = dur; n.close = body[1:].strip()
        else:
            n = N(body, dur, 'leaf')
            if re.search(r'\)( \[[^]]*\])? \{', body): n.kind = 'open'
            else: n.kind = 'leaf'
            stack[-1].kids.append(n)
            if n.kind == 'open': stack.append(n)
    def selfs(n):
        for k in n.kids: selfs(k)
        if n.kind == 'open':
            n.self = n.dur - sum(k.dur or 0 for k in n.kids)
    selfs(root.kids[0])
    top = root.kids[0]
    def find(n, prefix):
        return [k for k in n.kids if k.body.startswith(prefix)]
    def leaf(body, us): n = N(body, int(us*1000), 'leaf'); return n
    def frame(body, self_us, kids, close=''):
        n = N(body, None, 'open'); n.self = int(self_us*1000); n.kids = kids; n.close = close; return n
    do_filp_open = find(top, 'do_filp_open(')[0]
    path_openat = find(do_filp_open, 'path_openat(')[0]
    names = [k.body.split('(')[0] for k in path_openat.kids]
    i = names.index('link_path_walk')
    lf = path_openat.kids[i+1]; assert lf.body.startswith('lookup_fast(')
    lf.kids[0].body = lf.kids[0].body.replace('ret=0xffff888000676600', 'ret=0x0')
    lf.close = '/* lookup_fast ret=0x0 */'
    cw = path_openat.kids[i+3]; assert cw.body.startswith('complete_walk(')
    unlazy = cw.kids[0]
    term = [k for k in path_openat.kids if k.body.startswith('terminate_walk(')][0]
    nd = 'nd=0xffff888002777dd0'
    slow = frame('lookup_slow(name=0xffff888002777de0, dir=0xffff8880006bf840, flags=0) {', 14.2, [
        frame('d_alloc_parallel(parent=0xffff8880006bf840, name=0xffff888002777de0, wq=0xffff888002777d50) {', 21.7, [
            frame('d_alloc(parent=0xffff8880006bf840, name=0xffff888002777de0) {', 9.4, [
                leaf('kmem_cache_alloc_lru_noprof(s=0xffff888000142a80, lru=0x0, gfpflags=0xcc0); /* ret=0xffff8880006c1200 */', 38.1),
            ], '/* d_alloc ret=0xffff8880006c1200 */'),
            leaf('_raw_spin_lock(lock=0xffff8880006c1258);', 1.6),
            leaf('_raw_spin_unlock(lock=0xffff8880006c1258);', 1.5),
        ], '/* d_alloc_parallel ret=0xffff8880006c1200 */'),
        frame('simple_lookup(dir=0xffff8880006405c0, dentry=0xffff8880006c1200, flags=0) { /* indirect */', 6.3, [
            leaf('d_add(entry=0xffff8880006c1200, inode=0x0);', 4.8),
        ], '/* simple_lookup ret=0x0 */'),
        leaf('d_lookup_done(dentry=0xffff8880006c1200);', 2.2),
    ], '/* lookup_slow ret=0xffff8880006c1200 */')
    fput = frame('fput(file=0xffff88800059f540) {', 11.9, [
        leaf('task_work_add(task=0xffff888002790000, work=0xffff88800059f5a0, notify=1); /* ret=0 */', 3.1),
    ])
    path_openat.kids = path_openat.kids[:i+2] + [unlazy, slow,
        leaf('step_into(nd=0xffff888002777dd0, flags=1, dentry=0xffff8880006c1200); /* ret=-2 (ENOENT) */', 2.4),
        term, fput]
    path_openat.close = '/* path_openat ret=-2 (ENOENT) */'
    do_filp_open.close = '/* do_filp_open ret=-2 (ENOENT) */'
    kids = []
    for k in top.kids:
        if k.body.startswith('fd_install('):
            kids.append(frame('put_unused_fd(fd=3) {', 8.0, [
                leaf('_raw_spin_lock(lock=0xffff8880002988c0);', 1.7),
                leaf('_raw_spin_unlock(lock=0xffff8880002988c0);', 1.4)]))
        else:
            kids.append(k)
    top.kids = kids
    top.close = '/* do_sys_openat2 ret=-2 (ENOENT) */'
    def durs(n):
        for k in n.kids: durs(k)
        if n.kind == 'open': n.dur = n.self + sum(k.dur or 0 for k in n.kids)
    durs(top)
    out = ['# tracer: fctrace', '#', '# CPU  TASK-PID            DURATION                  FUNCTION CALLS', '# |     |   |               |   |                     |   |   |   |']
    def emit(n, depth):
        fix = lambda s: s.replace('/tmp/fct/notes.txt', '/tmp/fct/missing.txt').replace('ret=18 */', 'ret=20 */')
        if n.kind == 'leaf':
            out.append(line(1, 'fct_cat', 71, n.dur, depth, fix(n.body))); return
        out.append(line(1, 'fct_cat', 71, None, depth, fix(n.body)))
        for k in n.kids: emit(k, depth+1)
        out.append(line(1, 'fct_cat', 71, n.dur, depth, '}' + (' ' + n.close if n.close else '')))
    emit(top, 0)
    return '\n'.join(out) + '\n'


if __name__ == "__main__":
    with open("handmade-multi.trace", "w") as f:
        f.write(multi())
    with open("openat-enoent.handmade.trace", "w") as f:
        f.write(enoent("openat-args.trace"))
