#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# scripts/hookcost/run.sh: builds hookcost.ko against the default test kernel, boots
# the guest with guest.sh, and prints each kind of entry hook's cost to a task that is
# not traced, as a ratio to no hook (the mean over 4 repetitions), and a traced task's
# under fprobe and function_graph. See Documentation/fctrace/design.rst, "Why an
# ftrace_ops".
set -eu
cd "$(dirname "$0")/../.."
KDIR=$(cargo xtask kernel 2>&1 | sed -n 's/.*up to date: //p;s/.*built: //p' | tail -n 1)
[ -d "$KDIR" ] || { echo "hookcost: no kernel build directory" >&2; exit 1; }
OUT=target/fctrace/hookcost
mkdir -p $OUT
cp scripts/hookcost/hookcost.c scripts/hookcost/Kbuild $OUT/
make -s -C "$KDIR" LLVM=1 M="$PWD/$OUT" modules
{ cat scripts/hookcost/guest.sh; base64 -w0 $OUT/hookcost.ko; echo; } > $OUT/guest.sh
cargo xtask vm --script $OUT/guest.sh --timeout 1500 > $OUT/console.log 2>&1 || true
grep -o 'PROTO .*' $OUT/console.log | tr -d '\r' | awk '
    { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
    v["other"] != "" { o[v["mode"]] += v["other"]; no[v["mode"]]++ }
    v["traced"] != "" { t[v["mode"]] += v["traced"]; nt[v["mode"]]++ }
    $2 ~ /^funcs=/ { print "functions hooked: " substr($2, 7) }
    { delete v }
    END {
        base = o["none"] / no["none"]
        split("1 2 3 4 fgraph", ms, " ")
        split("ftrace_ops|ftrace_ops, SAVE_REGS|fprobe (entry handler says: not this task)|direct call (register_ftrace_direct)|function_graph, set_ftrace_pid another pid", names, "|")
        for (i = 1; i <= 5; i++) printf "other task, %-62s %.2f\n", names[i] ":", o[ms[i]] / no[ms[i]] / base
        printf "traced task, %-61s %.2f\n", "fprobe (entry and exit handlers that count):", t["fprobe"] / nt["fprobe"] / base
        printf "traced task, %-61s %.2f\n", "function_graph (set_ftrace_pid, from vfs_read):", t["fgraph"] / nt["fgraph"] / base
    }'
