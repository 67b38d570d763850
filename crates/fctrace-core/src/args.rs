// SPDX-License-Identifier: GPL-2.0

//! Function arguments and typed return values (the `args` option), from BTF.
//!
//! At arming, each function BTF describes gets a [`spec`]: how many argument registers
//! its parameters take and which of them hold a `const char *`. A handler that opens a
//! frame (or draws a leaf) for it writes an argument record right away, stamped one
//! nanosecond before the call: a [`Record`] of kind `Args` followed by the slots of an
//! [`ArgArea`] (the registers at the call, and up to [`ARG_STRS`] strings copied with
//! the no-fault routines, at most [`ARG_STR_MAX`] bytes each). The call's own record,
//! written later (when something inside it is, or at its return), carries `F_ARGS`;
//! the reader pairs the two ([`Pending`]) and writes the arguments by name and type
//! ([`write_args`]), and return values by type ([`write_ret`]).
//!
//! Values are written as function_graph's `funcgraph-args` writes them (6.15): integers
//! in decimal, pointers in hex, a structure passed in registers as
//! `(struct name)[0x..:0x..]`, and `...` for parameters past the sixth register. Beyond
//! it: enums and booleans by name, `const char *` as a quoted string, unsigned integers
//! of flag types (`gfp_t`, `fmode_t`, ... or a parameter named `*flags`/`mask`) in hex,
//! negative errnos with their name, and kernel addresses hashed for a reader who may not
//! see them.

use crate::btf::{sized, Btf, Class, Kind, Type};
use crate::errno::errno_name;
use crate::format::is_kernel_addr;
use crate::record::{Record, RECORD_SIZE};
use core::fmt::{self, Write};

/// Argument registers on x86-64 (`rdi`, `rsi`, `rdx`, `rcx`, `r8`, `r9`).
pub const ARG_REGS: usize = 6;
/// Strings copied per call.
pub const ARG_STRS: usize = 2;
/// Bytes copied per string (a longer string is cut and marked).
pub const ARG_STR_MAX: usize = 80;

/// [`ArgArea::str_state`]: the string was read whole (up to its NUL).
pub const STR_WHOLE: u8 = 0;
/// It is longer than [`ARG_STR_MAX`] bytes: cut.
pub const STR_CUT: u8 = 1;
/// It could not be read (a bad pointer, a page not present).
pub const STR_UNREADABLE: u8 = 2;
/// ORed into a state: the string was read when the call returned, not at the call,
/// where it could not be read (a user page not resident yet, which the callee faulted
/// in as it read the string itself).
pub const STR_AT_RETURN: u8 = 4;
/// No string in this place.
pub const NO_STR: u8 = 0xff;

/// The arguments of one call, stored after its `Args` record in whole record slots.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgArea {
    /// The argument registers at the call.
    pub regs: [u64; ARG_REGS],
    /// How many of `regs` were stored.
    pub nregs: u8,
    /// The register each string was read from ([`NO_STR`]: none).
    pub str_reg: [u8; ARG_STRS],
    /// The bytes of each string stored.
    pub str_len: [u8; ARG_STRS],
    /// `STR_*` of each string.
    pub str_state: [u8; ARG_STRS],
    /// 1: no BTF, the registers are shown raw.
    pub raw: u8,
    pub strs: [[u8; ARG_STR_MAX]; ARG_STRS],
}

/// Size of an [`ArgArea`], a whole number of record slots.
pub const AREA_SIZE: usize = core::mem::size_of::<ArgArea>();
/// Record slots a whole [`ArgArea`] takes.
pub const AREA_SLOTS: usize = AREA_SIZE / RECORD_SIZE;
const _: () = assert!(AREA_SIZE % RECORD_SIZE == 0 && AREA_SIZE == 48 + 8 + 160);
/// Bytes of the area before the strings.
const HEAD: usize = 56;

impl ArgArea {
    pub const EMPTY: ArgArea = ArgArea {
        regs: [0; ARG_REGS],
        nregs: 0,
        str_reg: [NO_STR; ARG_STRS],
        str_len: [0; ARG_STRS],
        str_state: [STR_WHOLE; ARG_STRS],
        raw: 0,
        strs: [[0; ARG_STR_MAX]; ARG_STRS],
    };

    /// The record slots needed to store it with `nstr` strings: the head (registers)
    /// and each string's bytes.
    pub fn slots_for(nstr: usize) -> usize {
        (HEAD + nstr.min(ARG_STRS) * ARG_STR_MAX).div_ceil(RECORD_SIZE)
    }

    /// The area's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ArgArea` is `repr(C)` plain data without padding (6 x u64, then 8 + 160
        // bytes: asserted above), so every byte is initialised.
        unsafe { core::slice::from_raw_parts((self as *const ArgArea).cast::<u8>(), AREA_SIZE) }
    }

    /// Slot `i` of the area as a record (to be stored as one).
    pub fn slot(&self, i: usize) -> Record {
        let b = self.as_bytes();
        b.get(i * RECORD_SIZE..(i + 1) * RECORD_SIZE)
            .and_then(Record::from_bytes)
            .unwrap_or(Record::ZERO)
    }

    /// Rebuilds an area from its stored slots (missing ones read as zero: no strings).
    pub fn from_slots(slots: &[Record]) -> ArgArea {
        let mut bytes = [0u8; AREA_SIZE];
        for (i, s) in slots.iter().take(AREA_SLOTS).enumerate() {
            let dst = bytes.iter_mut().skip(i * RECORD_SIZE);
            for (d, b) in dst.zip(s.as_bytes().iter()) {
                *d = *b;
            }
        }
        // SAFETY: `bytes` holds `AREA_SIZE` bytes and every bit pattern is a valid
        // `ArgArea` (integers and byte arrays only).
        let mut a = unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<ArgArea>()) };
        let stored = slots.len().min(AREA_SLOTS) * RECORD_SIZE;
        for i in 0..ARG_STRS {
            // A string whose bytes were not all stored (or a bad length) is not shown.
            let len = usize::from(a.str_len[i]);
            if len > ARG_STR_MAX || HEAD + i * ARG_STR_MAX + len > stored {
                a.str_reg[i] = NO_STR;
            }
        }
        a.nregs = a.nregs.min(ARG_REGS as u8);
        a
    }

    /// The string read from register `reg`, with its state.
    pub fn string(&self, reg: usize) -> Option<(&[u8], u8)> {
        let i = self.str_reg.iter().position(|&r| usize::from(r) == reg)?;
        let len = usize::from(self.str_len[i]).min(ARG_STR_MAX);
        Some((self.strs[i].get(..len)?, self.str_state[i]))
    }

    /// This call's arguments with the strings that could not be read at the call taken
    /// from `late` (read at its return), marked [`STR_AT_RETURN`].
    pub fn with_late(&self, late: &ArgArea) -> ArgArea {
        let mut a = *self;
        for i in 0..ARG_STRS {
            if a.str_state[i] != STR_UNREADABLE {
                continue;
            }
            let Some(j) = late
                .str_reg
                .iter()
                .position(|&r| r != NO_STR && r == a.str_reg[i])
            else {
                continue;
            };
            if late.str_state[j] & 3 == STR_UNREADABLE {
                continue;
            }
            a.strs[i] = late.strs[j];
            a.str_len[i] = late.str_len[j];
            a.str_state[i] = late.str_state[j] | STR_AT_RETURN;
        }
        a
    }
}

/// A function's spec for the handlers: bit 31 set (known), bits 0-2 the argument
/// registers to store (0-6), bits 8-13 the registers holding a `const char *`.
pub const SPEC_KNOWN: u32 = 1 << 31;

/// The registers of `spec` to store.
pub fn spec_regs(spec: u32) -> usize {
    ((spec & 7) as usize).min(ARG_REGS)
}

/// The registers of `spec` that hold strings, as a bit mask.
pub fn spec_strings(spec: u32) -> u8 {
    ((spec >> 8) & 0x3f) as u8
}

/// How one parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamPlace {
    /// Its first register.
    pub reg: usize,
    /// Registers it takes (0: in memory, not shown).
    pub regs: usize,
    pub class: Class,
}

/// Where each parameter of function `f` (a BTF `Func`) is passed, in order, through `g`;
/// stops at the first that is not in registers (the rest are shown as `...`). Returns
/// whether every parameter was passed to `g`.
pub fn places(btf: &Btf<'_>, f: &Type<'_>, mut g: impl FnMut(usize, &str, ParamPlace)) -> bool {
    let Ok(proto) = btf.get(f.type_id()) else {
        return true;
    };
    let mut reg = 0;
    for (i, p) in proto.params().enumerate() {
        if p.type_id == 0 {
            // A variadic function's `...`.
            return false;
        }
        let class = btf.class(p.type_id).unwrap_or(Class::Other);
        let n = match class {
            Class::Int { size, .. } => usize::from(size).div_ceil(8).max(1),
            Class::Aggregate { size, .. } if (1..=16).contains(&size) => {
                (size as usize).div_ceil(8)
            }
            // Larger structures go on the stack; floating point in SSE registers.
            Class::Aggregate { .. } | Class::Float { .. } => 0,
            _ => 1,
        };
        if n == 0 || reg + n > ARG_REGS {
            return false;
        }
        g(
            i,
            btf.name(p.name_off),
            ParamPlace {
                reg,
                regs: n,
                class,
            },
        );
        reg += n;
    }
    true
}

/// Whether a parameter of type class `Ptr { string: true }` (a `const char *`) named
/// `name` is a string that may be copied into the trace: one the kernel's conventions
/// name so (a file, path, device, file system or symbol name, a format, a label, the
/// source of a string copy), never a buffer (`buf`, `data`: a write()'s user data) nor
/// anything named for a secret (`key`, `password`, a token). Its pointer is shown
/// instead, as for any other.
pub fn is_string_param(name: &str) -> bool {
    let n = name.as_bytes();
    let has = |w: &[u8]| n.windows(w.len()).any(|x| x.eq_ignore_ascii_case(w));
    if [
        &b"key"[..],
        b"pass",
        b"pwd",
        b"secret",
        b"token",
        b"cred",
        b"auth",
        b"cookie",
        b"nonce",
        b"salt",
        b"seed",
    ]
    .iter()
    .any(|w| has(w))
    {
        return false;
    }
    let ends = |w: &[u8]| {
        n.len()
            .checked_sub(w.len())
            .and_then(|i| n.get(i..))
            .is_some_and(|t| t.eq_ignore_ascii_case(w))
    };
    ends(b"name")
        || ends(b"path")
        || matches!(
            name,
            "s" | "src"
                | "str"
                | "string"
                | "fmt"
                | "format"
                | "label"
                | "comm"
                | "fstype"
                | "type"
                | "target"
                | "prefix"
                | "suffix"
                | "oldpath"
                | "newpath"
        )
}

/// The handlers' spec of function `f` (see [`SPEC_KNOWN`]).
pub fn spec(btf: &Btf<'_>, f: &Type<'_>) -> u32 {
    let (mut regs, mut strings, mut nstr) = (0usize, 0u32, 0);
    places(btf, f, |_, name, p| {
        regs = p.reg + p.regs;
        if matches!(p.class, Class::Ptr { string: true })
            && is_string_param(name)
            && nstr < ARG_STRS
        {
            strings |= 1 << p.reg;
            nstr += 1;
        }
    });
    SPEC_KNOWN | regs as u32 | strings << 8
}

/// A symbol name as `sprint_symbol_no_offset()` writes it, split into the function and
/// its module: `vfs_read` is vmlinux's (`None`), `ext4_sync_file [ext4]` is module
/// `ext4`'s. A module name that could not be a file name under `/sys/kernel/btf` (empty,
/// `vmlinux`, 56 bytes or more, other than letters, digits, `_` and `-`) gives `None` for
/// the module and the whole name for the function, which no BTF then knows.
pub fn split_module(sym: &str) -> (&str, Option<&str>) {
    // Bytes and `get`, not `str::find` and indexing: no panicking path in the module.
    let b = sym.as_bytes();
    let Some(open) = b.iter().rposition(|&c| c == b'[') else {
        return (sym, None);
    };
    let (Some(func), Some(m)) = (
        open.checked_sub(1).and_then(|sp| sym.get(..sp)),
        sym.get(open + 1..b.len().saturating_sub(1)),
    ) else {
        return (sym, None);
    };
    let ok = b.last() == Some(&b']')
        && b.get(open.wrapping_sub(1)) == Some(&b' ')
        && !m.is_empty()
        && m.len() < 56
        && m != "vmlinux"
        && m.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
    if ok {
        (func, Some(m))
    } else {
        (sym, None)
    }
}

/// How values are written.
#[derive(Clone, Copy)]
pub struct ValueOpts {
    /// Kernel addresses hashed (see `format::Options::ptr_hash`).
    pub ptr_hash: Option<fn(u64) -> u32>,
}

/// Typedefs whose values are bit flags, written in hex.
const FLAG_TYPES: &[&str] = &[
    "gfp_t",
    "fmode_t",
    "umode_t",
    "vm_flags_t",
    "slab_flags_t",
    "blk_opf_t",
    "__poll_t",
    "vm_fault_t",
    "pgprot_t",
    "fop_flags_t",
];

/// Whether a value of type `id` named `name` holds flags.
fn is_flags(btf: &Btf<'_>, mut id: u32, name: &str) -> bool {
    if name.ends_with("flags") || name == "mask" || name == "mode" {
        return true;
    }
    for _ in 0..crate::btf::MAX_DEPTH {
        let Ok(t) = btf.get(id) else { return false };
        match t.kind {
            Kind::Typedef => {
                if FLAG_TYPES.contains(&btf.type_name(&t)) {
                    return true;
                }
                id = t.type_id();
            }
            Kind::Const | Kind::Volatile | Kind::Restrict | Kind::TypeTag => id = t.type_id(),
            _ => return false,
        }
    }
    false
}

/// A pointer value: hex, or hashed for a reader who may not see kernel addresses.
fn write_ptr(w: &mut impl Write, v: u64, opts: ValueOpts) -> fmt::Result {
    match opts.ptr_hash.filter(|_| is_kernel_addr(v)) {
        Some(h) => write!(w, "ptr:{:08x}", h(v)),
        None => write!(w, "{:#x}", v),
    }
}

/// Whether a 64-bit value that is not typed as a pointer (an `unsigned long` that holds
/// an address, as `__get_free_pages()` returns one; a structure passed by value) is
/// hidden from a reader who may not see kernel addresses: any value in the kernel's
/// half of the address space, but the top 16 MiB (small negative numbers: fixmap and
/// vsyscall addresses are no secret). The kernel's half starts at the lowest start of
/// any paging mode: 0xff00_0000_0000_0000 under x86-64's 5-level paging, where the
/// direct map and vmalloc lie below 0xffff_8000_0000_0000 (arm64's 52-bit VAs start at
/// 0xfff0_0000_0000_0000).
fn hides_word(v: u64, opts: ValueOpts) -> bool {
    const KERNEL_HALF: u64 = 0xff00_0000_0000_0000;
    opts.ptr_hash.is_some() && (KERNEL_HALF..0xffff_ffff_ff00_0000).contains(&v)
}

/// A 64-bit word of a value that is not a pointer: as `f` writes it, or hashed (see
/// [`hides_word`]).
fn write_word(
    w: &mut impl Write,
    v: u64,
    opts: ValueOpts,
    f: impl FnOnce(&mut dyn Write) -> fmt::Result,
) -> fmt::Result {
    match opts.ptr_hash {
        Some(h) if hides_word(v, opts) => write!(w, "ptr:{:08x}", h(v)),
        _ => f(w),
    }
}

/// A string's bytes, quoted and escaped like C; `|`, the trace's column separator, as
/// `\x7c`, so that a line has the same columns whatever a string holds.
fn write_string(w: &mut impl Write, s: &[u8], state: u8) -> fmt::Result {
    w.write_char('"')?;
    for &c in s {
        match c {
            b'"' => w.write_str("\\\"")?,
            b'\\' => w.write_str("\\\\")?,
            b'\n' => w.write_str("\\n")?,
            b'\t' => w.write_str("\\t")?,
            0x20..=0x7e if c != b'|' => w.write_char(c as char)?,
            _ => write!(w, "\\x{:02x}", c)?,
        }
    }
    w.write_char('"')?;
    if state & 3 == STR_CUT {
        w.write_str("...")?;
    }
    if state & STR_AT_RETURN != 0 {
        w.write_str(" (read at return)")?;
    }
    Ok(())
}

/// A negative errno: `-2 (ENOENT)`.
fn write_errno(w: &mut impl Write, v: i64) -> fmt::Result {
    write!(w, "{}", v)?;
    match errno_name(v.unsigned_abs()) {
        Some(n) => write!(w, " ({})", n),
        None => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
/// Writes value `v` of a parameter (`regs`: its registers, `name`: its name) of type
/// `id` and class `class`; `string`: what was read of it, if it is a string.
fn write_value(
    w: &mut impl Write,
    btf: &Btf<'_>,
    id: u32,
    name: &str,
    class: Class,
    regs: &[u64],
    string: Option<(&[u8], u8)>,
    opts: ValueOpts,
) -> fmt::Result {
    let v = regs.first().copied().unwrap_or(0);
    match class {
        Class::Int { size, signed } if size <= 8 => {
            let x = sized(v, u32::from(size), signed);
            if size == 8 && hides_word(x, opts) {
                write_word(w, x, opts, |_| Ok(()))
            } else if signed {
                write!(w, "{}", x as i64)
            } else if is_flags(btf, id, name) {
                write!(w, "{:#x}", x)
            } else {
                write!(w, "{}", x)
            }
        }
        Class::Int { .. } => {
            let hi = regs.get(1).copied().unwrap_or(0);
            write_word(w, hi, opts, |w| write!(w, "{:#x}", hi))?;
            w.write_char(':')?;
            write_word(w, v, opts, |w| write!(w, "{:#x}", v))
        }
        Class::Bool => w.write_str(if v & 0xff != 0 { "true" } else { "false" }),
        Class::Char { signed } => write!(w, "{}", sized(v, 1, signed) as i64),
        Class::Ptr { string: true } if v != 0 => match string {
            Some((_, state)) if state & 3 == STR_UNREADABLE => {
                write_ptr(w, v, opts)?;
                w.write_str(" (unreadable)")
            }
            Some((s, state)) => write_string(w, s, state),
            None => write_ptr(w, v, opts),
        },
        Class::Ptr { .. } | Class::FuncPtr => write_ptr(w, v, opts),
        Class::Enum { id, size, signed } => match btf.enum_name(id, v) {
            Some(n) => w.write_str(n),
            None => {
                let x = sized(v, u32::from(size), signed);
                write_word(w, x, opts, |w| write!(w, "{}", x as i64))
            }
        },
        Class::Aggregate { id: agg, .. } => {
            let t = btf.get(agg).ok();
            let what = match t.map(|t| t.kind) {
                Some(Kind::Union) => "union",
                _ => "struct",
            };
            let tname = t.map_or("", |t| btf.type_name(&t));
            if tname.is_empty() {
                // An anonymous one is known by its typedef (`kuid_t`), if it has one.
                match typedef_name(btf, id) {
                    Some(td) => write!(w, "({})[", td)?,
                    None => write!(w, "({} (anon))[", what)?,
                }
            } else {
                write!(w, "({} {})[", what, tname)?;
            }
            for (i, &r) in regs.iter().enumerate() {
                if i > 0 {
                    w.write_char(':')?;
                }
                write_word(w, r, opts, |w| write!(w, "{:#x}", r))?;
            }
            w.write_char(']')
        }
        Class::Void | Class::Float { .. } | Class::Other => {
            w.write_char('?')?;
            write_word(w, v, opts, |w| write!(w, "{:#x}", v))
        }
    }
}

/// The name of the first typedef on the way from type `id` to what it is (through
/// modifiers), if any.
fn typedef_name<'a>(btf: &Btf<'a>, mut id: u32) -> Option<&'a str> {
    for _ in 0..8 {
        let t = btf.get(id).ok()?;
        match t.kind {
            Kind::Typedef => return Some(btf.type_name(&t)).filter(|n| !n.is_empty()),
            Kind::Const | Kind::Volatile | Kind::Restrict | Kind::TypeTag => id = t.type_id(),
            _ => return None,
        }
    }
    None
}

/// Writes `name=` for the `n`th parameter written (`, ` before all but the first; `?`
/// for a parameter without a name) and counts it.
fn write_param_name(w: &mut impl Write, n: &mut usize, name: &str) -> fmt::Result {
    if *n > 0 {
        w.write_str(", ")?;
    }
    *n += 1;
    write!(w, "{}=", if name.is_empty() { "?" } else { name })
}

/// Writes `(name=value, ...)` for a call of `f` (a BTF `Func`) with arguments `a`.
pub fn write_args(
    w: &mut impl Write,
    btf: &Btf<'_>,
    f: &Type<'_>,
    a: &ArgArea,
    opts: ValueOpts,
) -> fmt::Result {
    let proto = btf.get(f.type_id()).ok();
    w.write_char('(')?;
    let mut n = 0;
    let mut res = Ok(());
    let all = places(btf, f, |i, name, p| {
        if res.is_err() {
            return;
        }
        res = (|| {
            write_param_name(w, &mut n, name)?;
            let id = proto
                .and_then(|pr| pr.params().nth(i))
                .map_or(0, |p| p.type_id);
            let end = (p.reg + p.regs).min(usize::from(a.nregs));
            let regs = a.regs.get(p.reg..end).unwrap_or(&[]);
            if regs.len() < p.regs {
                return w.write_char('?');
            }
            let string = a.string(p.reg);
            write_value(w, btf, id, name, p.class, regs, string, opts)
        })();
    });
    res?;
    if !all {
        if n > 0 {
            w.write_str(", ")?;
        }
        w.write_str("...")?;
    }
    w.write_char(')')
}

/// The type id of what function `f` (a BTF `Func`) returns (0: `void`).
fn ret_type(btf: &Btf<'_>, f: &Type<'_>) -> u32 {
    btf.get(f.type_id()).map_or(0, |proto| proto.type_id())
}

/// Whether function `f` (a BTF `Func`) returns a value.
pub fn returns_value(btf: &Btf<'_>, f: &Type<'_>) -> bool {
    btf.class(ret_type(btf, f)).is_ok_and(|c| c != Class::Void)
}

/// Writes the strings of `late` (a call's strings read again at its return) as
/// `name="..." (read at return)`, by the names of `f`'s parameters, for its closing
/// line.
pub fn write_late(w: &mut impl Write, btf: &Btf<'_>, f: &Type<'_>, late: &ArgArea) -> fmt::Result {
    let mut n = 0;
    let mut res = Ok(());
    places(btf, f, |_, name, p| {
        let Some((s, state)) = late.string(p.reg) else {
            return;
        };
        if res.is_err() || state & 3 == STR_UNREADABLE {
            return;
        }
        res = write_param_name(w, &mut n, name)
            .and_then(|()| write_string(w, s, state | STR_AT_RETURN));
    });
    res
}

/// Writes `ret=value` for a return of `f` (a BTF `Func`) with `rax` = `v` (see
/// [`returns_value`]: a `void` function has none to write).
pub fn write_ret(
    w: &mut impl Write,
    btf: &Btf<'_>,
    f: &Type<'_>,
    v: u64,
    opts: ValueOpts,
) -> fmt::Result {
    let id = ret_type(btf, f);
    let class = btf.class(id).unwrap_or(Class::Other);
    w.write_str("ret=")?;
    if let Some(e) = ret_errno(btf, f, v) {
        return write_errno(w, e);
    }
    match class {
        Class::Int { size, signed: true } if size <= 8 => {
            let x = sized(v, u32::from(size), true) as i64;
            if size == 8 {
                write_word(w, x as u64, opts, |w| write!(w, "{}", x))?;
            } else {
                write!(w, "{}", x)?;
            }
        }
        c => write_value(w, btf, id, "", c, &[v], None, opts)?,
    }
    Ok(())
}

/// The negative errno that `v`, returned by `f`, stands for, if its type allows one: a
/// signed integer (of its own size) or an error pointer (`ERR_PTR(-ENOENT)`) in the
/// errno range.
pub fn ret_errno(btf: &Btf<'_>, f: &Type<'_>, v: u64) -> Option<i64> {
    let x = match btf.class(ret_type(btf, f)).unwrap_or(Class::Other) {
        Class::Int { size, signed: true } if size <= 8 => sized(v, u32::from(size), true) as i64,
        Class::Ptr { .. } => v as i64,
        _ => return None,
    };
    (-4095..0).contains(&x).then_some(x)
}

/// An argument record waiting in a reader for its call's record (a chain of calls with
/// nothing recorded inside them yet writes its call records only when something is):
/// [`pending_put`] and [`pending_take`] over a few hundred of these.
#[derive(Clone, Copy)]
pub struct PendingArgs {
    /// Thread, depth, function, the time stamp of the record it belongs to (0: free),
    /// and whether it is a late one (strings read at the return, for the closing record).
    key: (u32, u8, u64, u64, bool),
    area: ArgArea,
}

impl PendingArgs {
    pub const EMPTY: PendingArgs = PendingArgs {
        key: (0, 0, 0, 0, false),
        area: ArgArea::EMPTY,
    };
}

/// Keeps the area of argument record `r` (its call's record will have `r.ts + 1`; a
/// [`Kind::LateArgs`](crate::record::Kind::LateArgs) record's closing record has
/// `r.ts`), in place of one of the same thread, depth and lateness (whose record was
/// lost) or else of the oldest (`next`, round robin).
pub fn pending_put(slots: &mut [PendingArgs], next: &mut usize, r: &Record, a: &ArgArea) {
    let late = r.kind == crate::record::Kind::LateArgs as u8;
    let ts = if late { r.ts } else { r.ts.wrapping_add(1) };
    let key = (r.pid, r.depth, r.func, ts, late);
    let i = match slots
        .iter()
        .position(|s| s.key.3 != 0 && s.key.0 == key.0 && s.key.1 == key.1 && s.key.4 == late)
    {
        Some(i) => i,
        None => {
            let i = *next;
            *next = (i + 1) % slots.len().max(1);
            i
        }
    };
    if let Some(s) = slots.get_mut(i) {
        s.key = key;
        s.area = *a;
    }
}

/// The area for call record `r` (flagged `F_ARGS`) or, `late`, the strings read again
/// for closing record `r`, taken out.
pub fn pending_take(slots: &mut [PendingArgs], r: &Record, late: bool) -> Option<ArgArea> {
    let key = (r.pid, r.depth, r.func, r.ts, late);
    let s = slots.iter_mut().find(|s| s.key == key && key.3 != 0)?;
    s.key = PendingArgs::EMPTY.key;
    Some(s.area)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_of_a_symbol() {
        assert_eq!(split_module("vfs_read"), ("vfs_read", None));
        assert_eq!(
            split_module("ext4_sync_file [ext4]"),
            ("ext4_sync_file", Some("ext4"))
        );
        assert_eq!(
            split_module("fct_testmod_lookup [fct_testmod]"),
            ("fct_testmod_lookup", Some("fct_testmod"))
        );
        // Not a module any file under /sys/kernel/btf could be.
        for s in [
            "f [../x]",
            "f []",
            "f [vmlinux]",
            "f [a/b]",
            "f[m]",
            "[m]",
            "f [m",
            "f m]",
        ] {
            assert_eq!(split_module(s), (s, None), "{s}");
        }
        let mut buf = [b'm'; 60];
        buf[..3].copy_from_slice(b"f [");
        buf[59] = b']';
        let long = core::str::from_utf8(&buf).unwrap();
        assert_eq!(split_module(long), (long, None));
    }

    #[test]
    fn area_slots_round_trip() {
        assert_eq!(AREA_SLOTS, 3);
        assert_eq!(ArgArea::slots_for(0), 1);
        assert_eq!(ArgArea::slots_for(1), 2);
        assert_eq!(ArgArea::slots_for(2), 3);
        let mut a = ArgArea::EMPTY;
        a.regs = [1, 2, 3, 4, 5, 6];
        a.nregs = 3;
        a.str_reg[0] = 1;
        a.str_len[0] = 20;
        a.strs[0][..20].copy_from_slice(b"/tmp/a-longer-name-x");
        let slots = [a.slot(0), a.slot(1)];
        let b = ArgArea::from_slots(&slots);
        assert_eq!(b.regs, a.regs);
        assert_eq!(b.string(1), Some((&b"/tmp/a-longer-name-x"[..], STR_WHOLE)));
        assert_eq!(b.string(0), None);
        // One slot only: the string was not stored.
        let c = ArgArea::from_slots(&slots[..1]);
        assert_eq!(c.string(1), None);
        assert_eq!(c.nregs, 3);
    }

    #[test]
    fn strings_escaped_and_cut() {
        let mut s = heapless_string();
        write_string(&mut s, b"a\"b\\c\n\x01", STR_CUT).unwrap();
        assert_eq!(s.as_str(), "\"a\\\"b\\\\c\\n\\x01\"...");
        // A real argument: blake2s_update(in=...) of random bytes, in oracle/fork_wait.tc.
        let mut s = heapless_string();
        write_string(&mut s, b"|\x0c\x1b", STR_WHOLE).unwrap();
        assert_eq!(s.as_str(), "\"\\x7c\\x0c\\x1b\"");
    }

    #[test]
    fn pending_pairs_by_thread_depth_function_time() {
        let mut p = [PendingArgs::EMPTY; 4];
        let mut next = 0;
        let mut r = Record::ZERO;
        r.pid = 7;
        r.depth = 2;
        r.func = 0x1000;
        r.ts = 99;
        let mut a = ArgArea::EMPTY;
        a.regs[0] = 42;
        pending_put(&mut p, &mut next, &r, &a);
        let mut call = r;
        call.ts = 100;
        call.depth = 3;
        assert!(pending_take(&mut p, &call, false).is_none());
        call.depth = 2;
        assert_eq!(
            pending_take(&mut p, &call, false).map(|a| a.regs[0]),
            Some(42)
        );
        assert!(pending_take(&mut p, &call, false).is_none());
    }

    #[test]
    fn late_strings_pair_with_the_closing_record_apart_from_the_call_args() {
        let mut p = [PendingArgs::EMPTY; 4];
        let mut next = 0;
        // A whole record at 100: its call's args (stamped 99) and its late strings
        // (stamped 100) both wait for it.
        let mut args = Record::ZERO;
        (args.pid, args.depth, args.func, args.ts) = (7, 1, 0x1000, 99);
        args.kind = crate::record::Kind::Args as u8;
        let mut early = ArgArea::EMPTY;
        early.nregs = 2;
        early.regs[1] = 0x5b_050f;
        early.str_reg[0] = 1;
        early.str_state[0] = STR_UNREADABLE;
        pending_put(&mut p, &mut next, &args, &early);
        let mut late_rec = args;
        late_rec.kind = crate::record::Kind::LateArgs as u8;
        late_rec.ts = 100;
        let mut late = ArgArea::EMPTY;
        late.str_reg[0] = 1;
        late.str_len[0] = 6;
        late.strs[0][..6].copy_from_slice(b"/tmp/x");
        pending_put(&mut p, &mut next, &late_rec, &late);
        let mut whole = args;
        whole.kind = crate::record::Kind::Whole as u8;
        whole.ts = 100;
        let e = pending_take(&mut p, &whole, false).unwrap();
        let l = pending_take(&mut p, &whole, true).unwrap();
        let merged = e.with_late(&l);
        assert_eq!(
            merged.string(1),
            Some((&b"/tmp/x"[..], STR_WHOLE | STR_AT_RETURN))
        );
        assert_eq!(merged.regs[1], 0x5b_050f);
        let mut s = heapless_string();
        let (text, state) = merged.string(1).unwrap();
        write_string(&mut s, text, state).unwrap();
        assert_eq!(s.as_str(), "\"/tmp/x\" (read at return)");
        // A string read at the call is kept; one unreadable at the return too stays so.
        let mut read = early;
        read.str_state[0] = STR_WHOLE;
        assert_eq!(read.with_late(&l).string(1), Some((&b""[..], STR_WHOLE)));
        let mut still = l;
        still.str_state[0] = STR_UNREADABLE;
        assert_eq!(
            e.with_late(&still).string(1),
            Some((&b""[..], STR_UNREADABLE))
        );
    }

    struct S(([u8; 128], usize));
    impl S {
        fn as_str(&self) -> &str {
            core::str::from_utf8(&self.0 .0[..self.0 .1]).unwrap()
        }
    }
    impl Write for S {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let (buf, n) = &mut self.0;
            buf.get_mut(*n..*n + s.len())
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            *n += s.len();
            Ok(())
        }
    }
    fn heapless_string() -> S {
        S(([0; 128], 0))
    }
}
