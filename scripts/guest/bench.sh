#!/bin/sh
# fctrace overhead benchmark (run in the guest by `cargo xtask bench`).
#
# For each mode (none, fctrace, ftrace function_graph) and repetition: a busy process B
# does $N_TRACED small reads of /proc/version, traced from vfs_read by the mode's tracer
# (fctrace: set_pid; ftrace: set_ftrace_pid + set_graph_function), while an untraced
# process O does $N_OTHER of the same reads at the same time. Prints one line per run:
#   BENCH mode=M rep=R other_ns=.. traced_ns=.. events=.. lost=..
# events: calls the tracer recorded for B (fctrace: events written; ftrace: trace lines),
# lost: events the tracer dropped.
F=/sys/kernel/fctrace
T=/sys/kernel/tracing
REPS=${REPS:-3}
N_TRACED=${N_TRACED:-3000}
N_OTHER=${N_OTHER:-20000}
export FCT_GATE=/tmp/fct_go

ns_of() { sed -n 's/^ns //p' "$1"; }

setup() { # mode pid
    case $1 in
    fctrace)
        echo 16384 > $F/buffer_size_kb
        echo vfs_read > $F/start_function
        echo > $F/trace
        EV0=$(sed -n 's/^events_written: //p' $F/stats)
        LO0=$(sed -n 's/^events_lost: //p' $F/stats)
        echo "$2" > $F/set_pid ;;
    ftrace)
        echo 0 > $T/tracing_on
        echo 16384 > $T/buffer_size_kb
        echo nop > $T/current_tracer
        echo > $T/trace
        echo 0 > $T/options/funcgraph-irqs
        echo vfs_read > $T/set_graph_function
        echo "$2" > $T/set_ftrace_pid
        echo function_graph > $T/current_tracer
        echo 1 > $T/tracing_on ;;
    esac
}

collect() { # mode -> "events lost"
    case $1 in
    none) echo "0 0" ;;
    fctrace)
        ev=$(($(sed -n 's/^events_written: //p' $F/stats) - EV0))
        lo=$(($(sed -n 's/^events_lost: //p' $F/stats) - LO0))
        echo > $F/set_pid
        echo "$ev $lo" ;;
    ftrace)
        echo 0 > $T/tracing_on
        ev=$(grep -c '|' $T/trace)
        lo=0
        for s in $T/per_cpu/cpu*/stats; do
            o=$(sed -n 's/^overrun: //p' $s); lo=$((lo + o))
        done
        echo nop > $T/current_tracer
        echo > $T/set_ftrace_pid
        echo > $T/set_graph_function
        echo "$ev $lo" ;;
    esac
}

run() { # mode rep [quiet]
    rm -f $FCT_GATE
    fct_bench $N_TRACED > /tmp/b.out &
    B=$!
    setup "$1" $B
    touch $FCT_GATE
    FCT_NOGATE=1 fct_bench $N_OTHER > /tmp/o.out
    wait $B
    collect "$1" > /tmp/res
    res=$(cat /tmp/res)
    [ "$3" = quiet ] && return 0
    echo "BENCH mode=$1 rep=$2 other_ns=$(ns_of /tmp/o.out) traced_ns=$(ns_of /tmp/b.out) events=${res% *} lost=${res#* }"
}

for mode in none fctrace ftrace; do
    run $mode 0 quiet   # warm-up: arming, caches
    r=1
    while [ $r -le $REPS ]; do
        run $mode $r
        r=$((r + 1))
    done
done
echo "BENCH done"
