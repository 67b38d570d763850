// SPDX-License-Identifier: GPL-2.0

//! The binary record that the probe handlers write into the ring buffer.
//!
//! One record is one event of one task: a call that opens a frame, the return that closes
//! it, a call that is shown but not followed, or a note. The layout is `repr(C)` and
//! fixed-size so a handler can write it with one `ring_buffer_write()`.

/// What a record says.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A followed call: `func() {`.
    Call = 1,
    /// The return that closes the frame opened by a [`Kind::Call`]: `}`.
    Ret = 2,
    /// A call shown as a leaf that fctrace did not follow; `reason` says why.
    Leaf = 3,
    /// A followed call that returned before anything was recorded inside it: its call and
    /// its return in one record (`func();`, with the return's duration and value).
    Whole = 4,
    /// The arguments of a call (`args` option), written when the call is made: `reason`
    /// holds how many record slots of an `ArgArea` follow it (`args.rs`), and `ts` is the
    /// call's time stamp less one, so it sorts before the call's own record (flagged
    /// [`F_ARGS`]), which is written later. Not a line of its own.
    Args = 5,
    /// The strings of a call that could not be read when it was made (a user page not
    /// resident yet), read again when it returned: laid out as [`Kind::Args`], with `ts`
    /// the time stamp of the closing record it belongs to ([`Kind::Ret`] or
    /// [`Kind::Whole`]), written just before it. Not a line of its own.
    LateArgs = 6,
}

impl Kind {
    /// Decodes a stored kind byte.
    pub fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Call),
            2 => Some(Kind::Ret),
            3 => Some(Kind::Leaf),
            4 => Some(Kind::Whole),
            5 => Some(Kind::Args),
            6 => Some(Kind::LateArgs),
            _ => None,
        }
    }
}

/// Why a call was not followed (shown as a leaf with a marker), or why a frame was closed
/// without its own return.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Nothing special.
    None = 0,
    /// The task could not sleep at the call (preemption or interrupts off, RCU read side),
    /// so the callee could not be armed before it ran.
    Atomic = 1,
    /// The callee cannot be probed: kprobes refuses it (blacklisted, noinstr, ftrace-owned),
    /// its code could not be decoded, or it lies in fctrace's own probe path.
    Unprobeable = 2,
    /// A call through memory whose target could not be read.
    IndirectUnknown = 3,
    /// The callee was not followed because of the `filter` file (a non-matching function
    /// while positive patterns are set).
    Filtered = 4,
    /// The call is deeper than `max_depth`.
    Depth = 5,
    /// Arming the callee failed (out of memory, too many probes).
    ArmFailed = 6,
    /// A frame closed because the task exited inside it.
    Exit = 7,
    /// A frame closed because the task's stack showed it had already returned (its own
    /// return was not seen).
    Unwound = 8,
    /// The callee is not the start of a function (a call into the middle of code).
    NotFunction = 9,
    /// The task waited too long for the callee to be armed (the work item that arms it was
    /// held up, e.g. by a lock the task itself holds); it went on without following it.
    ArmTimeout = 10,
    /// The call was made from a call site kprobes refuses (a static call, patched by
    /// `static_call_update()`): seen only at the callee's entry, where the task cannot
    /// wait for the callee to be armed. It is armed for its next call.
    StaticCall = 11,
    /// The callee's ftrace site is shared with another ftrace user (function_graph, a
    /// kprobe, BPF, livepatch), whose callbacks may change the registers the function
    /// runs with: the task is not sent to wait there for the callee to be armed. It is
    /// armed for its next call.
    SharedSite = 12,
    /// The callee has no ftrace site and is seen at its entry through an optimized kprobe
    /// (a jump to a detour, which cannot send the task elsewhere): the task is not sent
    /// to wait there for the callee to be armed. It is armed for its next call.
    EntryProbe = 13,
    /// The callee was not armed yet, and the hook that saw the call cannot send the task
    /// to wait for it on this kernel (arm64: a breakpoint without the resume probe, an
    /// entry hook without ftrace's direct calls): the call is drawn as a leaf, and the
    /// callee is armed for its next call.
    NotArmedYet = 14,
}

impl Reason {
    /// Decodes a stored reason byte.
    pub fn from_u8(v: u8) -> Reason {
        match v {
            1 => Reason::Atomic,
            2 => Reason::Unprobeable,
            3 => Reason::IndirectUnknown,
            4 => Reason::Filtered,
            5 => Reason::Depth,
            6 => Reason::ArmFailed,
            7 => Reason::Exit,
            8 => Reason::Unwound,
            9 => Reason::NotFunction,
            10 => Reason::ArmTimeout,
            11 => Reason::StaticCall,
            12 => Reason::SharedSite,
            13 => Reason::EntryProbe,
            14 => Reason::NotArmedYet,
            _ => Reason::None,
        }
    }

    /// The text shown in the trace, e.g. `not followed: atomic`.
    pub fn text(self) -> &'static str {
        match self {
            Reason::None => "",
            Reason::Atomic => "not followed: atomic",
            Reason::Unprobeable => "not followed: unprobeable",
            Reason::IndirectUnknown => "not followed: indirect target unknown",
            Reason::Filtered => "not followed: filter",
            Reason::Depth => "not followed: max_depth",
            Reason::ArmFailed => "not followed: arming failed",
            Reason::Exit => "task exited",
            Reason::Unwound => "return not seen",
            Reason::NotFunction => "not followed: not a function start",
            Reason::ArmTimeout => "not followed: arming timed out",
            Reason::StaticCall => "not followed: static call",
            Reason::SharedSite => "not followed: shared ftrace site",
            Reason::EntryProbe => "not followed: entry probe",
            Reason::NotArmedYet => "not followed: not armed yet",
        }
    }

    /// Number of reasons, for per-reason counters.
    pub const COUNT: usize = 15;

    /// Name of the per-reason counter in the `stats` file.
    pub fn stat_name(self) -> &'static str {
        match self {
            Reason::None => "none",
            Reason::Atomic => "not_followed_atomic",
            Reason::Unprobeable => "not_followed_unprobeable",
            Reason::IndirectUnknown => "not_followed_indirect_unknown",
            Reason::Filtered => "not_followed_filter",
            Reason::Depth => "not_followed_max_depth",
            Reason::ArmFailed => "not_followed_arm_failed",
            Reason::Exit => "frames_closed_by_exit",
            Reason::Unwound => "frames_closed_unwound",
            Reason::NotFunction => "not_followed_not_function",
            Reason::ArmTimeout => "not_followed_arm_timeout",
            Reason::StaticCall => "not_followed_static_call",
            Reason::SharedSite => "not_followed_shared_site",
            Reason::EntryProbe => "not_followed_entry_probe",
            Reason::NotArmedYet => "not_followed_not_armed_yet",
        }
    }
}

/// `flags` bit: the call was a tail call (a `jmp` out of the caller).
pub const F_TAIL: u8 = 1;
/// `flags` bit: the call was made through a function pointer (register or memory).
pub const F_INDIRECT: u8 = 2;
/// `flags` bit: `retval` holds the function's return value.
pub const F_RETVAL: u8 = 4;
/// `flags` bit: `dur` holds the frame's duration.
pub const F_DURATION: u8 = 8;
/// `flags` bit: the event belongs to a hardware interrupt that ran while the task was
/// current (`irqs` option); `depth` counts from the interrupt's entry function.
pub const F_IRQ: u8 = 16;
/// `flags` bit: the event belongs to a softirq that ran while the task was current.
pub const F_SOFTIRQ: u8 = 32;
/// `flags` bit: the call is a page fault's (`handle_mm_fault()` entered from the page
/// fault handler, for a fault the task took in kernel mode inside the traced call, such
/// as a user copy to a page not mapped yet), drawn under the frame it interrupted.
pub const F_FAULT: u8 = 64;
/// `flags` bit: an argument record ([`Kind::Args`]) for this call was written before it.
pub const F_ARGS: u8 = 128;

/// One trace event, as stored in the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// A [`Kind`] as `u8`.
    pub kind: u8,
    /// Nesting depth of the function (0 = the start function).
    pub depth: u8,
    /// A [`Reason`] as `u8`.
    pub reason: u8,
    /// `F_*` bits.
    pub flags: u8,
    /// Thread id.
    pub pid: u32,
    /// Process id (thread group).
    pub tgid: u32,
    /// CPU the event was recorded on.
    pub cpu: u32,
    /// The function called (Call, Leaf) or returning (Ret).
    pub func: u64,
    /// Address of the call or return instruction.
    pub site: u64,
    /// Monotonic time in nanoseconds.
    pub ts: u64,
    /// Ret: nanoseconds since the matching Call.
    pub dur: u64,
    /// Ret: the return value (rax).
    pub retval: u64,
    /// Task name, NUL-padded.
    pub comm: [u8; 16],
}

/// Size of a [`Record`] in bytes.
pub const RECORD_SIZE: usize = core::mem::size_of::<Record>();

/// Size of a [`Record`] in 64-bit words.
pub const RECORD_WORDS: usize = RECORD_SIZE / 8;

const _: () = assert!(RECORD_SIZE % 8 == 0 && core::mem::align_of::<Record>() == 8);

impl Record {
    /// An all-zero record.
    pub const ZERO: Record = Record {
        kind: 0,
        depth: 0,
        reason: 0,
        flags: 0,
        pid: 0,
        tgid: 0,
        cpu: 0,
        func: 0,
        site: 0,
        ts: 0,
        dur: 0,
        retval: 0,
        comm: [0; 16],
    };

    /// Reads a record from the bytes of a ring-buffer event; `None` if too short.
    pub fn from_bytes(b: &[u8]) -> Option<Record> {
        if b.len() < RECORD_SIZE {
            return None;
        }
        // SAFETY: `b` holds at least `RECORD_SIZE` bytes, `Record` is `repr(C)` plain
        // data for which every bit pattern is valid, and `read_unaligned` has no
        // alignment requirement.
        Some(unsafe { core::ptr::read_unaligned(b.as_ptr().cast::<Record>()) })
    }

    /// The record's bytes, for writing into the ring buffer.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Record` is `repr(C)` with no padding (fields are laid out on their
        // natural alignment: 4 x u8, 3 x u32, 5 x u64, 16 x u8), so all
        // `RECORD_SIZE` bytes are initialised.
        unsafe { core::slice::from_raw_parts((self as *const Record).cast::<u8>(), RECORD_SIZE) }
    }

    /// The record as 64-bit words (in memory order), for a writer that stores it word by
    /// word instead of with a `memcpy()` call.
    pub fn words(&self) -> [u64; RECORD_WORDS] {
        // SAFETY: `Record` is `repr(C)` plain data without padding (see `as_bytes`), as
        // large as `[u64; RECORD_WORDS]` and aligned to 8 (both asserted above): every
        // byte is initialised and every bit pattern is a valid `u64`.
        unsafe { core::mem::transmute::<Record, [u64; RECORD_WORDS]>(*self) }
    }

    /// The task name as text (up to the first NUL).
    pub fn comm_str(&self) -> &str {
        let n = self
            .comm
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(self.comm.len());
        core::str::from_utf8(self.comm.get(..n).unwrap_or(&[])).unwrap_or("?")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_has_no_padding_and_round_trips() {
        assert_eq!(RECORD_SIZE, 4 + 3 * 4 + 5 * 8 + 16);
        assert_eq!(RECORD_WORDS * 8, RECORD_SIZE);
        let mut r = Record::ZERO;
        r.kind = Kind::Call as u8;
        r.pid = 42;
        r.func = 0xffff_ffff_8100_0000;
        r.comm[..3].copy_from_slice(b"cat");
        let back = Record::from_bytes(r.as_bytes()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.comm_str(), "cat");
        assert!(Record::from_bytes(&r.as_bytes()[..10]).is_none());
    }

    #[test]
    fn kinds_and_reasons_decode() {
        assert_eq!(Kind::from_u8(2), Some(Kind::Ret));
        assert_eq!(Kind::from_u8(5), Some(Kind::Args));
        assert_eq!(Kind::from_u8(6), Some(Kind::LateArgs));
        assert_eq!(Kind::from_u8(9), None);
        for v in 0..Reason::COUNT as u8 {
            assert_eq!(Reason::from_u8(v) as u8, v);
        }
        assert_eq!(Reason::Atomic.text(), "not followed: atomic");
    }
}
