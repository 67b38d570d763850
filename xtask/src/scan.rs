// SPDX-License-Identifier: GPL-2.0

//! Console scanning: find kernel problem reports (oops, BUG, WARNING, panic,
//! lockdep, KASAN/UBSAN, kmemleak, RCU stalls, ...) in a guest console log.
//!
//! Pure functions, unit-tested on the host.
//!
//! Kernel messages are recognised by their printk timestamp (`[    1.234567] `;
//! the guest always boots with `printk.time=1`), anywhere in a line, so
//! kernel output interleaved with user output is still found while user
//! output (test names, descriptions, diagnostics) is never mistaken for a
//! kernel report. Only when a log has no timestamped line at all (a kernel
//! without printk time) is every line treated as a kernel message.

/// One problem found in the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The message that triggered the report, e.g. `BUG: kernel NULL pointer ...`.
    pub title: String,
    /// The report block, as raw console text (timestamps kept, so it can be fed
    /// to `scripts/decode_stacktrace.sh`).
    pub lines: Vec<String>,
    /// A backtrace someone asked for with SysRq (`fctracetest` does before a
    /// test times out): shown, decoded, but not a kernel problem in itself.
    pub requested: bool,
}

/// A kernel message: the raw text (from its timestamp on) and the message text.
struct Msg<'a> {
    raw: &'a str,
    text: &'a str,
}

/// Messages that start a report when a message begins with them (possibly
/// after a `subsystem: ` prefix such as `watchdog: ` or `rcu: `).
const START: &[&str] = &[
    "BUG: ",
    "BUG:",
    "Oops: ",
    "Oops#",
    "WARNING: ",
    "Kernel panic",
    "kernel BUG at ",
    "general protection fault",
    "Unable to handle kernel",
    "UBSAN: ",
    "Call Trace:",
    "Unrecoverable kprobe",
    "INFO: task ",
    "INFO: rcu_",
    "INFO: possible",
];

/// Phrases that start a report wherever they appear in a kernel message.
const CONTAINS: &[&str] = &[
    "possible circular locking",
    "inconsistent lock state",
    "possible recursive locking",
    "sleeping function called from invalid context",
    "scheduling while atomic",
    "KASAN:",
    "UBSAN:",
    "new suspected memory leak",
    // kmemleak.verbose=1: each suspect with its allocation backtrace
    "unreferenced object 0x",
    "Unrecoverable kprobe",
    "RCU stall",
    "detected stall",
    "self-detected stall",
    "soft lockup",
    "hard LOCKUP",
    "blocked for more than",
    "Kernel panic - not syncing",
    "kernel NULL pointer dereference",
    "general protection fault",
];

const CUT_HERE: &str = "------------[ cut here ]------------";
const MAX_BLOCK: usize = 150;

/// Position and length of the first printk timestamp `[ <secs>.<usecs>] ` in `s`.
fn find_timestamp(s: &str) -> Option<(usize, usize)> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(off) = s[from..].find('[') {
        let start = from + off;
        let mut i = start + 1;
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let d0 = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i > d0 && i < b.len() && b[i] == b'.' {
            i += 1;
            let f0 = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i - f0 == 6 && i < b.len() && b[i] == b']' {
                let mut end = i + 1;
                if end < b.len() && b[end] == b' ' {
                    end += 1;
                }
                return Some((start, end - start));
            }
        }
        from = start + 1;
    }
    None
}

/// Split the console into kernel messages.
fn messages(console: &str) -> Vec<Msg<'_>> {
    let timestamped = console.lines().any(|l| find_timestamp(l).is_some());
    let mut out = Vec::new();
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if !timestamped {
            out.push(Msg {
                raw: line,
                text: line,
            });
            continue;
        }
        let mut rest = line;
        let Some((mut start, mut len)) = find_timestamp(rest) else {
            continue;
        };
        loop {
            let after = &rest[start + len..];
            match find_timestamp(after) {
                Some((s2, l2)) => {
                    out.push(Msg {
                        raw: &rest[start..start + len + s2],
                        text: &after[..s2],
                    });
                    rest = after;
                    start = s2;
                    len = l2;
                }
                None => {
                    out.push(Msg {
                        raw: &rest[start..],
                        text: after,
                    });
                    break;
                }
            }
        }
    }
    out
}

/// Does this kernel message start a problem report?
fn is_trigger(text: &str) -> bool {
    let t = text.trim_start();
    let starts = |s: &str| START.iter().any(|p| s.starts_with(p));
    if starts(t) {
        return true;
    }
    // `subsys: BUG: ...` (e.g. "watchdog: BUG: soft lockup", "rcu: INFO: ...")
    if let Some((prefix, rest)) = t.split_once(": ") {
        if !prefix.is_empty()
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && starts(rest.trim_start())
            && !is_mitigation_notice(rest.trim_start())
        {
            return true;
        }
    }
    CONTAINS.iter().any(|p| t.contains(p))
}

/// `RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable ...`: a subsystem's
/// `pr_warn()` that happens to start with `WARNING: `, printed at boot by the mitigation
/// selection on some CPU models; not a `WARN()` splat, which reads `WARNING: CPU: ...` or
/// `WARNING: at ...`.
fn is_mitigation_notice(rest: &str) -> bool {
    rest.strip_prefix("WARNING: ")
        .is_some_and(|w| !w.starts_with("CPU: ") && !w.starts_with("at "))
}

fn is_end(text: &str) -> bool {
    text.trim_start().starts_with("---[ end")
}

/// Find all problem reports in a console log.
pub fn scan(console: &str) -> Vec<Report> {
    let msgs = messages(console);
    let mut reports = Vec::new();
    let mut i = 0;
    // Since a `sysrq: Show ...` message and no other kind of report: a bare
    // `Call Trace:` is part of that dump (blocked tasks, all CPUs).
    let mut in_sysrq = false;
    while i < msgs.len() {
        if msgs[i].text.trim_start().starts_with("sysrq: ") {
            in_sysrq = true;
        }
        if !is_trigger(msgs[i].text) {
            i += 1;
            continue;
        }
        let title = msgs[i].text.trim().to_string();
        let bare_trace = title == "Call Trace:";
        in_sysrq &= bare_trace;
        let requested = in_sysrq;
        let first = if i > 0 && msgs[i - 1].text.trim() == CUT_HERE {
            i - 1
        } else {
            i
        };
        let mut j = i;
        let mut after_task_end = false;
        while j + 1 < msgs.len() && j + 1 - first < MAX_BLOCK {
            let t = msgs[j].text.trim();
            if is_end(t) {
                break;
            }
            if t == "</TASK>" {
                after_task_end = true;
            }
            let next = msgs[j + 1].text.trim();
            if after_task_end
                && !(next.starts_with("Modules linked in")
                    || next.starts_with("CR2:")
                    || next.starts_with("---[ end")
                    || next.starts_with("Dumping ftrace"))
            {
                break;
            }
            // A new, separate report starts (e.g. a second WARNING).
            if next == CUT_HERE {
                break;
            }
            j += 1;
        }
        reports.push(Report {
            title,
            lines: msgs[first..=j].iter().map(|m| m.raw.to_string()).collect(),
            requested,
        });
        i = j + 1;
    }
    reports
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN_BOOT: &str = "\
SeaBIOS (version 1.16.2-debian-1.16.2-1)
Booting from ROM..
[    0.000000] Linux version 6.12.117 (root@host) (Debian clang version 14.0.6) #1 SMP PREEMPT
[    0.000000] Command line: console=ttyS0 panic=-1 printk.time=1 fctrace.script=/run-script
[    0.000000] x86/fpu: Supporting XSAVE feature 0x001: 'x87 floating point registers'
[    0.012000] Spectre V2 : WARNING: Unprivileged eBPF is enabled with eIBRS on, data leaks possible via Spectre v2 BHB attacks!
[    0.012100] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, data leaks possible!
[    0.100000] smpboot: CPU0: AMD QEMU TCG CPU version 2.5+ (family: 0xf, model: 0x6b, stepping: 0x1)
[    0.350000] Run /init as init process
insmod: can't insert '/lib/modules/fctrace.ko': No such file or directory
KTAP version 1
1..2
ok 1 control/warn.tc: WARNING: CPU: 0 PID: 1 text inside a test name is not a kernel report
# BUG: this diagnostic line is test output, not the kernel
# Call Trace: also not the kernel
ok 2 control/oops.tc: Oops: neither
# Totals: pass:2 fail:0 skip:0
FCTRACE-EXIT: 0
[    2.000000] reboot: Power down
";

    const OOPS: &str = "\
[   12.100000] fctrace: tracing pid 42
[   12.345678] BUG: kernel NULL pointer dereference, address: 0000000000000008
[   12.345690] #PF: supervisor read access in kernel mode
[   12.345700] #PF: error_code(0x0000) - not-present page
[   12.345710] PGD 0 P4D 0
[   12.345720] Oops: Oops: 0000 [#1] PREEMPT SMP
[   12.345730] CPU: 1 UID: 0 PID: 88 Comm: sh Not tainted 6.12.117 #1
[   12.345740] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2-debian-1.16.2-1 04/01/2014
[   12.345750] RIP: 0010:fctrace_entry+0x1a/0x40 [fctrace]
[   12.345760] Code: 48 8b 47 08 c3 cc cc cc
[   12.345770] RSP: 0018:ffffc900001d3e08 EFLAGS: 00010246
[   12.345780] Call Trace:
[   12.345790]  <TASK>
[   12.345800]  ? __die+0x1f/0x60
[   12.345810]  fctrace_entry+0x1a/0x40 [fctrace]
[   12.345820]  function_trace_call+0x10a/0x150
[   12.345830]  </TASK>
[   12.345840] Modules linked in: fctrace(O)
[   12.345850] CR2: 0000000000000008
[   12.345860] ---[ end trace 0000000000000000 ]---
[   12.345870] RIP: 0010:fctrace_entry+0x1a/0x40 [fctrace]
Killed
";

    const WARN: &str = "\
ok 3 filter/basic.tc: filter accepts globs
[   20.000000] ------------[ cut here ]------------
[   20.000001] WARNING: CPU: 0 PID: 91 at rust-kmod/src/buffer.rs:120 fctrace_write+0x55/0x90 [fctrace]
[   20.000002] Modules linked in: fctrace(O)
[   20.000003] CPU: 0 UID: 0 PID: 91 Comm: sh Tainted: G           O       6.12.117 #1
[   20.000004] RIP: 0010:fctrace_write+0x55/0x90 [fctrace]
[   20.000005] Call Trace:
[   20.000006]  <TASK>
[   20.000007]  vfs_write+0xd8/0x3f0
[   20.000008]  </TASK>
[   20.000009] ---[ end trace 0000000000000000 ]---
ok 4 filter/more.tc: more
";

    #[test]
    fn sysrq_dump_is_requested_until_another_report() {
        let log = "\
[  100.000001] sysrq: Show backtrace of all active CPUs
[  100.000002] NMI backtrace for cpu 0
[  100.000003] Call Trace:
[  100.000004]  <TASK>
[  100.000005]  __handle_sysrq+0x1fe/0x280
[  100.000006]  </TASK>
[  100.000007] Call Trace:
[  100.000008]  <TASK>
[  100.000009]  worker_thread+0x3b2/0x520
[  100.000010]  </TASK>
[  100.000011] BUG: sleeping function called from invalid context at mm/slub.c:4119
[  100.000012] Call Trace:
[  100.000013]  <TASK>
[  100.000014]  __might_resched+0x1/0x2
[  100.000015]  </TASK>
[  101.000000] Call Trace:
[  101.000001]  <TASK>
[  101.000002]  foo+0x1/0x2
[  101.000003]  </TASK>
";
        let r = scan(log);
        let kinds: Vec<_> = r.iter().map(|r| (r.title.as_str(), r.requested)).collect();
        assert_eq!(
            kinds,
            vec![
                ("Call Trace:", true),
                ("Call Trace:", true),
                (
                    "BUG: sleeping function called from invalid context at mm/slub.c:4119",
                    false
                ),
                ("Call Trace:", false),
            ],
            "{r:#?}"
        );
    }

    #[test]
    fn clean_boot_has_no_reports() {
        assert_eq!(scan(CLEAN_BOOT), vec![]);
    }

    #[test]
    fn finds_oops_block() {
        let r = scan(OOPS);
        assert_eq!(r.len(), 1, "{r:#?}");
        assert!(r[0]
            .title
            .starts_with("BUG: kernel NULL pointer dereference"));
        assert!(r[0].lines[0].contains("BUG: kernel NULL"));
        assert!(r[0]
            .lines
            .iter()
            .any(|l| l.contains("fctrace_entry+0x1a/0x40 [fctrace]")));
        assert!(r[0].lines.last().unwrap().contains("---[ end trace"));
        assert!(
            r[0].lines[0].starts_with("[   12.345678] "),
            "timestamps kept for decoding"
        );
    }

    #[test]
    fn finds_warning_with_cut_here() {
        let r = scan(WARN);
        assert_eq!(r.len(), 1, "{r:#?}");
        assert!(r[0].title.starts_with("WARNING: CPU: 0 PID: 91 at"));
        assert_eq!(
            r[0].lines[0],
            "[   20.000000] ------------[ cut here ]------------"
        );
        assert!(r[0].lines.last().unwrap().contains("end trace"));
        assert_eq!(r[0].lines.len(), 10);
    }

    #[test]
    fn two_reports_are_separate() {
        let log = format!("{WARN}{OOPS}");
        let r = scan(&log);
        assert_eq!(r.len(), 2, "{r:#?}");
        assert!(r[0].title.starts_with("WARNING:"));
        assert!(r[1].title.starts_with("BUG:"));
    }

    #[test]
    fn kernel_message_interleaved_mid_line() {
        let log = "[    1.000000] booted\nok 5 trace/x.tc: some t[    5.500000] BUG: sleeping function called from invalid context at mm/slab.c:1\n[    5.500001] in_atomic(): 1, irqs_disabled(): 0\nest name\n";
        let r = scan(log);
        assert_eq!(r.len(), 1, "{r:#?}");
        assert!(r[0].title.starts_with("BUG: sleeping function"));
        assert!(r[0].lines[0].starts_with("[    5.500000] BUG:"));
    }

    #[test]
    fn lockdep_rcu_kasan_ubsan_kmemleak_panic() {
        for (msg, _) in [
            ("WARNING: possible circular locking dependency detected", ()),
            ("WARNING: inconsistent lock state", ()),
            ("WARNING: possible recursive locking detected", ()),
            ("rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:", ()),
            (
                "BUG: KASAN: slab-out-of-bounds in fctrace_read+0x10/0x20 [fctrace]",
                (),
            ),
            (
                "UBSAN: array-index-out-of-bounds in rust-kmod/src/lib.rs:10:5",
                (),
            ),
            (
                "kmemleak: 2 new suspected memory leaks (see /sys/kernel/debug/kmemleak)",
                (),
            ),
            (
                "kmemleak: unreferenced object 0xffff888003a1c000 (size 64):",
                (),
            ),
            ("Kernel panic - not syncing: Fatal exception", ()),
            (
                "general protection fault, probably for non-canonical address 0xdead: 0000 [#1]",
                (),
            ),
            (
                "watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [sh:80]",
                (),
            ),
            ("kprobes: Unrecoverable kprobe detected.", ()),
            (
                "fctrace: WARNING: CPU: 1 PID: 2 at engine.rs:1 f+0x1/0x2",
                (),
            ),
        ] {
            let log = format!("[    1.000000] hello\n[    3.000000] {msg}\n[    3.000001] more\n");
            let r = scan(&log);
            assert_eq!(r.len(), 1, "{msg}: {r:#?}");
            assert_eq!(r[0].title, msg);
        }
    }

    #[test]
    fn without_timestamps_every_line_counts() {
        let log = "BUG: unable to handle page fault for address: ffff\nOops: 0000 [#1] SMP\n---[ end trace 0 ]---\nafter\n";
        let r = scan(log);
        assert_eq!(r.len(), 1, "{r:#?}");
        assert_eq!(r[0].lines.len(), 3);
    }

    #[test]
    fn timestamp_parser() {
        assert_eq!(find_timestamp("[    0.000000] x"), Some((0, 15)));
        assert_eq!(find_timestamp("ab[12345.123456] x"), Some((2, 15)));
        assert_eq!(find_timestamp("[1.23] x"), None);
        assert_eq!(find_timestamp("[#1] x"), None);
    }
}
