#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Makes the expected output of fctrace-core's BTF reader test from bpftool.

usage: bpftool btf dump file vmlinux.btf format raw | scripts/btf-fixture.py > funcs.txt

A module's split BTF: its dump after the base's, and the id of its first type:

    (bpftool btf dump file vmlinux.btf format raw;
     bpftool btf dump file mod.btf -B vmlinux.btf format raw) |
        scripts/btf-fixture.py --split FIRST_ID > mod-funcs.txt

(then the counts and the functions are the module's own, all of them).

bpftool decodes BTF on its own (libbpf); this turns its raw dump into one line per
function, the way crates/fctrace-core/src/btf.rs's `signature()` writes it:

    ID NAME(TYPE PARAM, ...) -> TYPE

(the type id: a name may have several functions, static ones of different files)

with types named by these rules (both sides follow them): void; INT/FLOAT/TYPEDEF by
name; PTR "T *"; CONST "const T"; VOLATILE "volatile T"; RESTRICT and TYPE_TAG as T;
STRUCT/UNION/ENUM(64) "struct N" / "union N" / "enum N" ("(anon)" without a name); FWD
"struct N" or "union N"; ARRAY "T[N]"; FUNC_PROTO "fn"; a variadic tail "...".
The first line counts every type and function; then every 80th function by name, and a
few named ones.
"""
import re
import sys

NAMED = ["vfs_read", "vfs_write", "do_sys_openat2", "ksys_read", "filp_close",
         "kmalloc_trace_noprof", "__x64_sys_openat", "getname_flags", "path_openat"]

types = {}
head = re.compile(r"^\[(\d+)\] (\w+) '([^']*)'(.*)$")
member = re.compile(r"^\t'([^']*)' type_id=(\d+)")
cur = None
for line in sys.stdin:
    line = line.rstrip("\n")
    m = head.match(line)
    if m:
        tid, kind, name, rest = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        attrs = dict(re.findall(r"(\w+)=(\S+)", rest))
        cur = {"kind": kind, "name": name, "attrs": attrs, "params": []}
        types[tid] = cur
        continue
    mm = member.match(line)
    if mm and cur is not None and cur["kind"] == "FUNC_PROTO":
        cur["params"].append((mm.group(1), int(mm.group(2))))


def tname(tid, depth=0):
    if tid == 0:
        return "void"
    if depth > 64:
        return "?"
    t = types[tid]
    k, n, a = t["kind"], t["name"], t["attrs"]
    if k in ("INT", "FLOAT", "TYPEDEF"):
        return n
    if k == "PTR":
        return tname(int(a["type_id"]), depth + 1) + " *"
    if k == "CONST":
        return "const " + tname(int(a["type_id"]), depth + 1)
    if k == "VOLATILE":
        return "volatile " + tname(int(a["type_id"]), depth + 1)
    if k in ("RESTRICT", "TYPE_TAG"):
        return tname(int(a["type_id"]), depth + 1)
    if k == "STRUCT":
        return "struct " + n
    if k == "UNION":
        return "union " + n
    if k in ("ENUM", "ENUM64"):
        return "enum " + n
    if k == "FWD":
        return ("union " if a.get("fwd_kind") == "union" else "struct ") + n
    if k == "ARRAY":
        return "%s[%s]" % (tname(int(a["type_id"]), depth + 1), a["nr_elems"])
    if k == "FUNC_PROTO":
        return "fn"
    return "?" + k


def signature(tid):
    f = types[tid]
    proto = types[int(f["attrs"]["type_id"])]
    ps = []
    for name, pt in proto["params"]:
        if pt == 0 and name == "":
            ps.append("...")
        else:
            ps.append("%s %s" % (tname(pt), name))
    return "%s(%s) -> %s" % (f["name"], ", ".join(ps), tname(int(proto["attrs"]["ret_type_id"])))


first = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--split" else 0
own = {tid: t for tid, t in types.items() if tid >= first}
funcs = sorted((t["name"], tid) for tid, t in own.items() if t["kind"] == "FUNC")
print("# types %d functions %d" % (len(own), len(funcs)))
if first:
    chosen = set(funcs)
else:
    chosen = set(funcs[::80])
    chosen |= {(n, tid) for n, tid in funcs if n in NAMED}
for n, tid in sorted(chosen):
    print("%d %s" % (tid, signature(tid)))
