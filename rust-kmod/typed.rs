// SPDX-License-Identifier: GPL-2.0

//! The `args` option in the module: the kernel's BTF (read once from
//! `/sys/kernel/btf/vmlinux` when the option is first set), the functions' specs (at
//! arming), the argument records the handlers write, and what readers write with them.
//! The rules and the formatting are `crates/fctrace-core/src/args.rs`.

use crate::args::{
    self, ArgArea, PendingArgs, ValueOpts, ARG_REGS, ARG_STRS, ARG_STR_MAX, SPEC_KNOWN, STR_CUT,
    STR_UNREADABLE, STR_WHOLE,
};
use crate::bindings;
use crate::btf::{Btf, Raw, Type};
use crate::engine::Tracer;
use crate::format::Typed;
use crate::ksym::SymBuf;
use crate::parse::OptionName;
use crate::record::{Kind, Record, F_ARGS};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::alloc::KVVec;
use kernel::prelude::*;

/// The largest BTF read (the distro kernel's is 6 MiB).
const MAX_BTF: i64 = 64 << 20;

/// A spec bit: no BTF, the six registers are shown raw.
const SPEC_RAW: u32 = 1 << 30;

/// Argument records a reader keeps for calls whose records are not read yet.
pub(crate) const PENDING: usize = 256;

/// The kernel's BTF, indexed.
pub(crate) struct KernelBtf {
    data: KVVec<u8>,
    offs: KVVec<u32>,
    /// Function ids sorted by name.
    funcs: KVVec<u32>,
}

impl KernelBtf {
    /// Reads and indexes `/sys/kernel/btf/vmlinux`. Process context; sleeps.
    fn load() -> Result<KBox<KernelBtf>> {
        // SAFETY: a C helper; process context.
        let size = unsafe { bindings::fctrace_btf_size() } as i64;
        if size <= 0 {
            return Err(ENOENT);
        }
        if size > MAX_BTF {
            return Err(EFBIG);
        }
        let mut data = KVVec::from_elem(0u8, size as usize, GFP_KERNEL)?;
        // SAFETY: `data` has `size` writable bytes; process context.
        let got = unsafe { bindings::fctrace_btf_read(data.as_mut_ptr().cast(), size as _) };
        if got as i64 != size {
            return Err(EIO);
        }
        let raw = Raw::parse(&data).map_err(|_| EINVAL)?;
        let n = raw.count().map_err(|_| EINVAL)?;
        let mut offs = KVVec::from_elem(0u32, n, GFP_KERNEL)?;
        raw.index(&mut offs).map_err(|_| EINVAL)?;
        let btf = Btf::new(raw, &offs, None);
        let mut funcs = KVVec::from_elem(0u32, btf.func_count(), GFP_KERNEL)?;
        // (`func_count` and `func_index` count the same records.)
        if btf.func_index(&mut funcs) != funcs.len() {
            return Err(EINVAL);
        }
        Ok(KBox::new(KernelBtf { data, offs, funcs }, GFP_KERNEL)?)
    }

    fn btf(&self) -> Option<Btf<'_>> {
        Some(Btf::new(Raw::parse(&self.data).ok()?, &self.offs, None))
    }

    /// The function named `name` (a kernel symbol; a module's `name [mod]` is not in
    /// vmlinux's BTF, nor a compiler's clone `name.isra.0`, whose arguments differ).
    fn func<'a>(&'a self, btf: &Btf<'a>, name: &str) -> Option<Type<'a>> {
        btf.find_func_in(&self.funcs, name)
    }
}

/// Where the tracer keeps the BTF: set once, freed with the tracer.
pub(crate) struct BtfSlot(AtomicPtr<KernelBtf>);

impl BtfSlot {
    pub(crate) const fn new() -> Self {
        BtfSlot(AtomicPtr::new(core::ptr::null_mut()))
    }

    pub(crate) fn get(&self) -> Option<&KernelBtf> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from `KBox::into_raw` in `set` and is freed only
        // in `drop`, which no reference borrowed from `self` outlives.
        unsafe { p.as_ref() }
    }

    fn set(&self, b: KBox<KernelBtf>) {
        let p = KBox::into_raw(b);
        if self
            .0
            .compare_exchange(
                core::ptr::null_mut(),
                p,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // SAFETY: `p` came from `KBox::into_raw` above and was not published.
            drop(unsafe { KBox::from_raw(p) });
        }
    }
}

impl Drop for BtfSlot {
    fn drop(&mut self) {
        let p = self.0.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: from `KBox::into_raw` in `set`; nothing borrows it any more.
            drop(unsafe { KBox::from_raw(p) });
        }
    }
}

impl Tracer {
    /// The `args` option was set: reads the BTF if not done yet (a kernel without BTF:
    /// one `error_log` line, and raw registers), and gives the functions known so far
    /// their spec. With the mutex not held; sleeps.
    pub(crate) fn args_on(&self) {
        if self.btf.get().is_none() {
            match KernelBtf::load() {
                Ok(b) => self.btf.set(b),
                Err(e) => self.log(format_args!(
                    "options: args: no BTF (/sys/kernel/btf/vmlinux: {:?}): \
                     arguments are shown as raw registers",
                    e
                )),
            }
        }
        let _inner = self.lock();
        let Ok(mut sym) = SymBuf::new() else { return };
        self.table.for_each(|id, func| {
            let spec = self.arg_spec(func, &mut sym);
            self.table.set_args(id, spec);
        });
    }

    /// The `args` spec of `func` (0: no arguments shown). Process context.
    pub(crate) fn arg_spec(&self, func: u64, sym: &mut SymBuf) -> u32 {
        if !self.settings.option(OptionName::Args) {
            return 0;
        }
        let Some(kb) = self.btf.get() else {
            return SPEC_KNOWN | SPEC_RAW | ARG_REGS as u32;
        };
        let Some(btf) = kb.btf() else { return 0 };
        let name = sym.name(func);
        kb.func(&btf, name).map_or(0, |f| args::spec(&btf, &f))
    }

    /// A call of `func` at `depth` at time `ts` is drawn with the registers `regs` at the
    /// call: writes its argument record (registers, strings) and says whether it did.
    /// In a handler: bounded, no allocation, no sleeping.
    pub(crate) fn write_args(
        &self,
        rec: &mut Record,
        regs: &bindings::pt_regs,
        func: u64,
        depth: usize,
        ts: u64,
    ) -> bool {
        if !self.settings.option(OptionName::Args) {
            return false;
        }
        let spec = self.table.args_of(func);
        if spec & SPEC_KNOWN == 0 {
            return false;
        }
        let vals = [regs.di, regs.si, regs.dx, regs.cx, regs.r8, regs.r9].map(|v| v as u64);
        let mut a = ArgArea::EMPTY;
        let n = args::spec_regs(spec);
        for (d, v) in a.regs.iter_mut().zip(vals.iter()).take(n) {
            *d = *v;
        }
        a.nregs = n as u8;
        a.raw = u8::from(spec & SPEC_RAW != 0);
        let strings = args::spec_strings(spec);
        // The copies run kernel code (copy_from_*_nofault, memchr) from this handler. A
        // probe of fctrace's inside it cannot re-enter a handler: kprobes counts a
        // breakpoint hit inside a kprobe handler as missed, and fctrace's ftrace entry
        // hook sees NMI context (int3's) and ignores it (`fctrace_task_context()`).
        let mut k = 0;
        for (reg, &v) in vals.iter().enumerate().take(n) {
            if strings & (1 << reg) == 0 || k == ARG_STRS {
                continue;
            }
            a.str_reg[k] = reg as u8;
            let buf = &mut a.strs[k];
            // SAFETY: `buf` has `ARG_STR_MAX` writable bytes; the helper reads `v` with
            // the no-fault routines (any context).
            let got = unsafe {
                bindings::fctrace_copy_str(buf.as_mut_ptr().cast(), v as _, ARG_STR_MAX as _)
            };
            let (len, state) = if got <= 0 {
                (0, STR_UNREADABLE)
            } else {
                let got = (got as usize).min(ARG_STR_MAX);
                match buf[..got].iter().position(|&c| c == 0) {
                    Some(p) => (p, STR_WHOLE),
                    // Longer than the limit, or its next page could not be read.
                    None => (got, STR_CUT),
                }
            };
            a.str_len[k] = len as u8;
            a.str_state[k] = state;
            k += 1;
        }
        let slots = ArgArea::slots_for(k);
        let mut more = [Record::ZERO; args::AREA_SLOTS];
        for (i, s) in more.iter_mut().enumerate().take(slots) {
            *s = a.slot(i);
        }
        rec.kind = Kind::Args as u8;
        rec.depth = depth.min(255) as u8;
        rec.reason = slots as u8;
        rec.func = func;
        rec.ts = ts.saturating_sub(1);
        self.buf.write_with(rec, &more[..slots]);
        true
    }
}

/// A reader's argument records waiting for their calls' records.
pub(crate) struct Pending {
    slots: KVVec<PendingArgs>,
    next: usize,
}

impl Pending {
    pub(crate) fn new() -> Result<Self> {
        Ok(Pending {
            slots: KVVec::from_elem(PendingArgs::EMPTY, PENDING, GFP_KERNEL)?,
            next: 0,
        })
    }

    /// An empty table, allocating nothing (a placeholder while the real one is lent).
    pub(crate) fn none() -> Self {
        Pending {
            slots: KVVec::new(),
            next: 0,
        }
    }

    /// Keeps argument record `r`'s area.
    pub(crate) fn put(&mut self, r: &Record, a: &ArgArea) {
        args::pending_put(&mut self.slots, &mut self.next, r, a);
    }

    /// The area for record `r`, if it has one.
    fn take(&mut self, r: &Record) -> Option<ArgArea> {
        if r.flags & F_ARGS == 0 || r.kind == Kind::Ret as u8 {
            return None;
        }
        args::pending_take(&mut self.slots, r)
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = PendingArgs::EMPTY);
    }
}

/// What a reader knows of one record's function with `args` on.
pub(crate) struct TypedRecord<'a> {
    btf: Option<Btf<'a>>,
    func: Option<Type<'a>>,
    area: Option<ArgArea>,
    opts: ValueOpts,
}

impl<'a> TypedRecord<'a> {
    /// For record `r` of function `name`, taking its argument area from `pending`.
    pub(crate) fn new(
        tr: &'a Tracer,
        r: &Record,
        name: &str,
        pending: &mut Pending,
        ptr_hash: Option<fn(u64) -> u32>,
    ) -> Self {
        let kb = tr.btf.get();
        let btf = kb.and_then(|k| k.btf());
        let func = match (kb, btf.as_ref()) {
            (Some(k), Some(b)) => k.func(b, name),
            _ => None,
        };
        TypedRecord {
            btf,
            func,
            area: pending.take(r),
            opts: ValueOpts { ptr_hash },
        }
    }
}

impl Typed for TypedRecord<'_> {
    fn write_args(&self, w: &mut dyn Write) -> fmt::Result {
        let mut w = w;
        match (&self.btf, &self.func, &self.area) {
            (_, _, Some(a)) if a.raw != 0 => {
                // No BTF: the argument registers, marked.
                w.write_str("(raw: ")?;
                for (i, v) in a.regs.iter().take(usize::from(a.nregs)).enumerate() {
                    if i > 0 {
                        w.write_str(", ")?;
                    }
                    match self
                        .opts
                        .ptr_hash
                        .filter(|_| crate::format::is_kernel_addr(*v))
                    {
                        Some(h) => write!(w, "ptr:{:08x}", h(*v))?,
                        None => write!(w, "{:#x}", v)?,
                    }
                }
                w.write_char(')')
            }
            (Some(b), Some(f), Some(a)) => args::write_args(&mut w, b, f, a, self.opts),
            // Known to take nothing.
            (Some(b), Some(f), None) if b.get(f.type_id()).is_ok_and(|p| p.vlen() == 0) => {
                w.write_str("()")
            }
            // Not known (not in BTF, or its argument record was lost or not written).
            _ => w.write_str("(?)"),
        }
    }

    fn has_ret(&self) -> bool {
        match (&self.btf, &self.func) {
            (Some(b), Some(f)) => args::returns_value(b, f),
            _ => true,
        }
    }

    fn write_ret(&self, w: &mut dyn Write, v: u64) -> fmt::Result {
        let mut w = w;
        match (&self.btf, &self.func) {
            (Some(b), Some(f)) => args::write_ret(&mut w, b, f, v, self.opts),
            _ => crate::format::write_raw_ret(&mut w, v, self.opts.ptr_hash),
        }
    }
}
