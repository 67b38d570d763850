#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# fctrace demo, run inside the test guest by `cargo xtask demo` (busybox sh).
# The guest init has already loaded fctrace.ko and mounted it on
# /sys/kernel/fctrace. Everything is done with echo and cat; each command is
# printed before it runs, after a "[fctrace]# " prompt (the working directory
# is /sys/kernel/fctrace).
#
# Workload: fct_cat (selftests/workloads/fct_cat.c, in the guest's /bin) waits
# until /tmp/fct_go exists, then reads its files with read() and writes them
# to stdout, like cat. (busybox cat would use sendfile(), not read().)

FCTRACE=/sys/kernel/fctrace
FILE=/proc/version

say() {
    echo
    echo "$@"
}

# run CMD: print CMD, run it in this shell, stop the demo if it fails.
run() {
    echo "[fctrace]# $1"
    if ! eval "$1"; then
        echo "demo: FAILED: '$1' (status $?)" >&2
        [ -r "$FCTRACE/error_log" ] && sed 's/^/demo: error_log: /' "$FCTRACE/error_log" >&2
        exit 1
    fi
}

die() {
    echo "demo: FAILED: $*" >&2
    exit 1
}

# trace_workload: start fct_cat behind the gate, trace it, wait for it.
trace_workload() {
    run "rm -f /tmp/fct_go"
    run "fct_cat $FILE >/dev/null &"
    run 'P=$!'
    run 'echo $P > set_pid'
    run "touch /tmp/fct_go"
    run 'wait $P'
}

grep -q " $FCTRACE fctrace " /proc/mounts || die "fctrace is not mounted on $FCTRACE"
command -v fct_cat >/dev/null || die "fct_cat is not in the guest's PATH"
cd "$FCTRACE" || die "cannot cd to $FCTRACE"

say "=== fctrace: the control files"
run "ls $FCTRACE"

say "=== Part 1: every call under vfs_read(), for one cat-like process"
echo "fctrace starts a trace when the task enters start_function, and adds"
echo "probes to each function the task enters, as it enters it."
run "echo vfs_read > start_function"
run "echo retval > options"
trace_workload
run "cat trace"
cat trace > /tmp/trace1 || die "cannot read $FCTRACE/trace"
grep -q 'vfs_read() {' /tmp/trace1 || die "the trace has no 'vfs_read() {' line"
grep -q '} /\* vfs_read ret=' /tmp/trace1 || die "the trace has no closing line for vfs_read"

say "=== Part 2: every system call of the same workload"
echo "An empty start_function traces from each system call's entry. The"
echo "process exited, so tracing stopped by itself; clear the buffer first."
run "echo > trace"
run "echo > start_function"
run "cat start_function"
trace_workload
run "cat trace > /tmp/trace2"
grep -q '|  __x64_sys_' /tmp/trace2 || die "the system call trace shows no system call"
echo
echo "The trace has $(wc -l < /tmp/trace2) lines. Its top level, one opening and one"
echo "closing line per system call (x64_sys_call itself is not shown):"
run "grep '|  [^ ]' /tmp/trace2"
echo
echo "The first 80 lines:"
run "head -n 80 /tmp/trace2"

# The whole trace for the host: `cargo xtask demo` cuts it out of the console,
# between these markers, into target/fctrace/demo.trace, and makes a flamegraph
# and a Chrome trace-event file of it with fctrace-report.
echo "FCTRACE-TRACE-BEGIN"
cat /tmp/trace2
echo "FCTRACE-TRACE-END"

say "=== Counters"
echo "The process has exited, so every probe was removed (probes_armed: 0)."
run "cat stats"

say "=== done"
exit 0
