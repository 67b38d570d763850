#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# hookcost, in the guest (run.sh appends the module as base64 after the last line).
# Hooks the functions a pread() of /proc/version runs (learned from function_graph)
# with each kind of hook, for a process that is never the traced one, and times
# $N reads of an untraced process; then a traced process's reads under fprobe (entry
# and exit handlers that only count) and under function_graph (set_ftrace_pid).
# One line per measurement: PROTO rep=R mode=M other=NS or traced=NS.
T=/sys/kernel/tracing
mount -t tracefs nodev $T 2>/dev/null
echo 1 > $T/tracing_on
export FCT_GATE=/tmp/fct_go
sed '1,/^__MODULE__$/d' "$0" | base64 -d > /tmp/hookcost.ko
echo 0 > $T/options/funcgraph-irqs
echo vfs_read > $T/set_graph_function
echo function_graph > $T/current_tracer
FCT_NOGATE=1 fct_bench 50 > /dev/null
echo 0 > $T/tracing_on
FUNCS=$(grep -oE '[a-z_0-9.]+\(\)' $T/trace | tr -d '()' | sort -u | tr '\n' ',')
echo nop > $T/current_tracer
echo 1 > $T/tracing_on
echo > $T/set_graph_function
echo "PROTO funcs=$(echo "$FUNCS" | tr ',' '\n' | grep -c .)"
N=${N:-150000}
t() { FCT_NOGATE=1 fct_bench $N | sed -n 's/^ns //p'; }
traced() { # insmod args
    rm -f $FCT_GATE
    fct_bench $N > /tmp/tb.out &
    B=$!
    sleep 0.5
    insmod /tmp/hookcost.ko "$@" pid=$B funcs="$FUNCS" || echo "insmod failed"
    touch $FCT_GATE
    wait $B
    rmmod hookcost
    sed -n 's/^ns //p' /tmp/tb.out
}
for rep in 1 2 3 4; do
    echo "PROTO rep=$rep mode=none other=$(t)"
    for m in 1 2 3 4; do
        insmod /tmp/hookcost.ko mode=$m pid=99999 funcs="$FUNCS" || echo "insmod failed"
        o=$(t)
        rmmod hookcost
        echo "PROTO rep=$rep mode=$m other=$o"
    done
    echo 99999 > $T/set_ftrace_pid
    echo function_graph > $T/current_tracer
    o=$(t)
    echo nop > $T/current_tracer
    echo > $T/set_ftrace_pid
    echo "PROTO rep=$rep mode=fgraph other=$o"
    echo "PROTO rep=$rep mode=fprobe traced=$(traced mode=3)"
    rm -f $FCT_GATE
    fct_bench $N > /tmp/tb.out &
    B=$!
    sleep 0.5
    echo $B > $T/set_ftrace_pid
    echo vfs_read > $T/set_graph_function
    echo function_graph > $T/current_tracer
    touch $FCT_GATE
    wait $B
    echo nop > $T/current_tracer
    echo > $T/set_ftrace_pid
    echo > $T/set_graph_function
    echo "PROTO rep=$rep mode=fgraph traced=$(sed -n 's/^ns //p' /tmp/tb.out)"
done
exit 0
__MODULE__
