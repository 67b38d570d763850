#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# fctrace overhead benchmark (run in the guest by `cargo xtask bench`).
#
# For each mode (none; fctrace; fctrace-nosched: fctrace with the scheduler hidden by the
# filter '!__schedule', so it is never armed; fctrace-lean: that, and disarm_after 1, so
# functions the traced task stopped entering are disarmed within about two seconds;
# ftrace function_graph):
#
# Throughput, after a warm-up run, $REPS times: a busy process B reads /proc/version in
# a loop, traced from vfs_read by the mode's tracer (fctrace: set_pid; ftrace:
# set_ftrace_pid + set_graph_function). While it runs, untraced processes do, one after
# the other:
#   same:     $N_OTHER of the same reads (the code B runs: the worst case for fctrace,
#             whose breakpoints sit in exactly that code);
#   pingpong: $N_PP round trips of a pipe ping-pong between two processes (other code,
#             apart from the read/write system call layer and the scheduler);
#   stat:     $N_STAT stat() calls on a tmpfs file (other system calls, none of B's code).
# Then B is stopped. One line per run:
#   BENCH mode=M rep=R other_ns=.. pingpong_ns=.. stat_ns=.. traced_ns=.. ops=..
# (other_ns, pingpong_ns, stat_ns: the other tasks' times; traced_ns: B's time per read;
# ops: B's reads.)
#
# Completeness, once: B does $N_COMPLETE reads alone, traced; in the tracer's trace
# (16 MiB per CPU: room for all), count function entries ("f() {" and "f();" lines) and
# B's reads ("vfs_read() {" at depth 0). One line:
#   BENCHC mode=M calls=.. roots=.. lost=..
# (lost: events the tracer dropped in that run.)
F=/sys/kernel/fctrace
T=/sys/kernel/tracing
REPS=${REPS:-3}
N_OTHER=${N_OTHER:-20000}
N_PP=${N_PP:-5000}
N_STAT=${N_STAT:-20000}
N_COMPLETE=${N_COMPLETE:-300}
export FCT_GATE=/tmp/fct_go

# Events the mode's tracer dropped so far.
lost_now() {
    case $1 in
    fctrace*) sed -n 's/^events_lost: //p' $F/stats ;;
    ftrace)
        l=0
        for s in $T/per_cpu/cpu*/stats; do
            o=$(sed -n 's/^overrun: //p' $s); d=$(sed -n 's/^dropped events: //p' $s)
            l=$((l + o + ${d:-0}))
        done
        echo $l ;;
    *) echo 0 ;;
    esac
}

start_tracer() { # mode
    case $1 in
    fctrace*)
        if [ $1 = fctrace ]; then echo > $F/filter; else echo '!__schedule' > $F/filter; fi
        if [ $1 = fctrace-lean ]; then echo 1 > $F/disarm_after; else echo 30 > $F/disarm_after; fi
        # Tracing stays on across the runs (a parked traced process), so what the
        # warm-up run arms stays armed: the steady state of a long trace.
        echo 16384 > $F/buffer_size_kb
        echo vfs_read > $F/start_function
        fct_park 1 > /tmp/park.out &
        PARK=$!
        while ! grep -q ready /tmp/park.out; do sleep 0.1; done
        echo $PARK > $F/set_pid ;;
    ftrace)
        echo 0 > $T/tracing_on
        echo 16384 > $T/buffer_size_kb
        echo nop > $T/current_tracer
        echo 0 > $T/options/funcgraph-irqs
        echo vfs_read > $T/set_graph_function
        echo function_graph > $T/current_tracer ;;
    esac
}

stop_tracer() { # mode
    case $1 in
    fctrace*)
        kill $PARK; wait $PARK 2>/dev/null
        echo > $F/set_pid
        echo > $F/filter
        echo 30 > $F/disarm_after ;;
    ftrace)
        echo 0 > $T/tracing_on
        echo nop > $T/current_tracer
        echo > $T/set_ftrace_pid
        echo > $T/set_graph_function ;;
    esac
}

trace_pid() { # mode pid
    case $1 in
    fctrace*)
        echo > $F/trace
        echo "$2" >> $F/set_pid ;;
    ftrace)
        echo 0 > $T/tracing_on
        echo > $T/trace
        echo "$2" > $T/set_ftrace_pid
        echo 1 > $T/tracing_on ;;
    esac
}

kv() { sed -n "s/^$1 //p" "$2"; }

run() { # mode rep [quiet]
    rm -f $FCT_GATE
    fct_bench 0 > /tmp/b.out &
    B=$!
    trace_pid "$1" $B
    touch $FCT_GATE
    FCT_NOGATE=1 fct_bench $N_OTHER > /tmp/o.out
    fct_pingpong $N_PP > /tmp/p.out
    FCT_NOGATE=1 FCT_BENCH_OP=stat fct_bench $N_STAT /tmp/stat.file > /tmp/s.out
    kill -USR1 $B
    wait $B
    [ "$1" = ftrace ] && echo 0 > $T/tracing_on
    [ "$3" = quiet ] && return 0
    ops=$(kv ops /tmp/b.out)
    echo "BENCH mode=$1 rep=$2 other_ns=$(kv ns /tmp/o.out) pingpong_ns=$(kv ns /tmp/p.out)" \
        "stat_ns=$(kv ns /tmp/s.out) traced_ns=$(($(kv ns /tmp/b.out) / ops)) ops=$ops"
}

complete() { # mode
    case $1 in
    fctrace*) file=$F/trace ;;
    ftrace) file=$T/trace ;;
    *) return 0 ;;
    esac
    rm -f $FCT_GATE
    fct_bench $N_COMPLETE > /tmp/b.out &
    B=$!
    trace_pid "$1" $B
    l0=$(lost_now "$1")
    touch $FCT_GATE
    wait $B
    [ "$1" = ftrace ] && echo 0 > $T/tracing_on
    awk '/[A-Za-z0-9_.]+\(\)( \{|;)/ { c++ } /\|  vfs_read\(\) \{/ { r++ } END { print c + 0, r + 0 }' \
        $file > /tmp/count
    read calls roots < /tmp/count
    echo "BENCHC mode=$1 calls=$calls roots=$roots lost=$(($(lost_now "$1") - l0))"
}

echo data > /tmp/stat.file
for mode in none fctrace fctrace-nosched fctrace-lean ftrace; do
    start_tracer $mode
    run $mode 0 quiet   # warm-up: arming, caches
    r=1
    while [ $r -le $REPS ]; do
        run $mode $r
        r=$((r + 1))
    done
    complete $mode
    stop_tracer $mode
done
echo "BENCH done"
