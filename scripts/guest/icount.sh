#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Instruction counts (run in the guest by `cargo xtask icount`, under its QEMU plugin).
#
# Each window is $N preads of /proc/version by fct_bench with FCT_SYNC set: it calls
# sync() right before and after its loop, and the plugin counts the instructions every
# CPU executes in between. One console line per window, in order:
#   ICOUNT window=K label=L ops=N
# Windows: none (no tracer); fctrace-traced (the reader traced from vfs_read, once
# arming has settled after a warm-up run); fctrace-other (an untraced reader while
# fctrace traces a parked process from vfs_read, with what the warm-up armed still
# armed); the same two with function_graph (set_ftrace_pid, set_graph_function
# vfs_read). The *-stat windows: another task's stat() calls, with no tracer and beside
# each tracer (the ratio's base is none-stat). Then the calls each tracer shows per read (ICOUNTC), and fctrace's symbols
# (ICOUNTSYM) for the host to name the addresses.
F=/sys/kernel/fctrace
T=/sys/kernel/tracing
N=${N:-1000}
export FCT_GATE=/tmp/fct_go
FCTRACE=$F
TRACEFS=$T
. /selftests/test.d/functions
mount -t tracefs nodev $T 2>/dev/null
W=0

# window LABEL [traced-by: fctrace|ftrace|-] [stat]: one counted run of $N reads (or,
# with stat, $N stat() calls on a tmpfs file: system calls that share none of the
# traced reader's code, the benchmark's stat() column).
window() {
    rm -f $FCT_GATE
    if [ "${3:-}" = stat ]; then
        FCT_SYNC=1 FCT_BENCH_OP=stat fct_bench $N /tmp/stat.file > /tmp/w.out &
    else
        FCT_SYNC=1 fct_bench $N > /tmp/w.out &
    fi
    _b=$!
    case $2 in
    fctrace) echo $_b >> $F/set_pid ;;
    ftrace) echo $_b > $T/set_ftrace_pid ;;
    esac
    touch $FCT_GATE
    wait $_b
    echo "ICOUNT window=$W label=$1 ops=$(sed -n 's/^ops //p' /tmp/w.out)"
    W=$((W + 1))
}

# calls LABEL FILE: function entries shown per read in a trace of $N reads.
calls() {
    awk -v n=$N -v l=$1 '/[A-Za-z0-9_.]+\(\)( \{|;)/ { c++ } END { print "ICOUNTC label=" l " calls=" c / n }' $2
}

echo data > /tmp/stat.file
window none
window none-stat - stat

# fctrace: a parked traced process keeps tracing on; a warm-up run arms the reads' code.
echo 16384 > $F/buffer_size_kb
echo vfs_read > $F/start_function
fct_park 1 > /tmp/park.out &
PARK=$!
while ! grep -q ready /tmp/park.out; do sleep 0.1; done
echo $PARK > $F/set_pid
rm -f $FCT_GATE
fct_bench $N > /dev/null &
B=$!
echo $B >> $F/set_pid
touch $FCT_GATE
wait $B
settle_arming 60 || true
sleep 2
echo > $F/trace
window fctrace-traced fctrace
cat $F/trace > /tmp/fct.trace
calls fctrace /tmp/fct.trace
echo > $F/trace
window fctrace-other
window fctrace-other-stat - stat
grep -E '\[fctrace\]' /proc/kallsyms | sed 's/^/ICOUNTSYM /'
# The functions fctrace's entry hooks sit on (for the host: which of them the other
# tasks' windows entered).
sed -n 's/^\([^ ]*\) .*fctrace_entry_func.*/ICOUNTHOOK \1/p' $T/enabled_functions
# The kprobes registered (for the host: which of them, breakpoints or optimized, the
# windows ran into).
mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
sed 's/^/ICOUNTKP /' /sys/kernel/debug/kprobes/list 2>/dev/null
kill $PARK
wait $PARK 2>/dev/null
echo > $F/set_pid

# function_graph, the same way (its hooks are on every function from the start).
echo 16384 > $T/buffer_size_kb
echo 0 > $T/options/funcgraph-irqs
echo vfs_read > $T/set_graph_function
echo function_graph > $T/current_tracer
fct_park 1 > /tmp/park.out &
PARK=$!
while ! grep -q ready /tmp/park.out; do sleep 0.1; done
echo $PARK > $T/set_ftrace_pid
echo > $T/trace
window ftrace-traced ftrace
cat $T/trace > /tmp/ftrace.trace
calls ftrace /tmp/ftrace.trace
echo $PARK > $T/set_ftrace_pid
window ftrace-other
window ftrace-other-stat - stat
echo 0 > $T/tracing_on
echo nop > $T/current_tracer
kill $PARK
wait $PARK 2>/dev/null
echo "ICOUNT done"
