// SPDX-License-Identifier: GPL-2.0

//! The `args` option in the module: the kernel's BTF (read once from
//! `/sys/kernel/btf/vmlinux` when the option is first set), the functions' specs (at
//! arming), the argument records the handlers write, and what readers write with them.
//! The rules and the formatting are `crates/fctrace-core/src/args.rs`.

use super::{Tracer, TracerInner};
use crate::args::{
    self, ArgArea, PendingArgs, ValueOpts, ARG_REGS, ARG_STRS, SPEC_KNOWN, STR_CUT, STR_UNREADABLE,
    STR_WHOLE,
};
use crate::btf::{Btf, Raw, Type};
use crate::format::Typed;
use crate::ksym::SymBuf;
use crate::parse::OptionName;
use crate::record::{Kind, Record, F_ARGS};
use crate::shadow::ArgsDone;
use crate::sys::{self, Regs};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use kernel::alloc::KVVec;
use kernel::c_str;
use kernel::prelude::*;
use kernel::str::CStr;

/// The largest BTF read (the distro kernel's is 6 MiB).
const MAX_BTF: i64 = 64 << 20;

/// A spec bit: no BTF, the six registers are shown raw.
const SPEC_RAW: u32 = 1 << 30;

/// Argument records a reader keeps for calls whose records are not read yet.
pub(crate) const PENDING: usize = 256;

/// Modules whose BTF is kept. A module unloaded and loaded again with other types takes
/// a new slot; with all taken, further modules' functions are shown without types.
const MOD_SLOTS: usize = 32;

/// One BTF file, read and indexed.
struct Indexed {
    data: KVVec<u8>,
    offs: KVVec<u32>,
    /// Function ids sorted by name.
    funcs: KVVec<u32>,
}

impl Indexed {
    /// Reads and indexes `/sys/kernel/btf/<name>` (`vmlinux`, or a module's BTF, split
    /// on top of `base`). Process context; sleeps.
    fn load(name: &CStr, base: Option<&Btf<'_>>) -> Result<Indexed> {
        let data = read_btf(name)?;
        let raw = Raw::parse(&data).map_err(|_| EINVAL)?;
        let n = raw.count().map_err(|_| EINVAL)?;
        let mut offs = KVVec::from_elem(0u32, n, GFP_KERNEL)?;
        raw.index(&mut offs).map_err(|_| EINVAL)?;
        let btf = Btf::new(raw, &offs, base);
        let mut funcs = KVVec::from_elem(0u32, btf.func_count(), GFP_KERNEL)?;
        // (`func_count` and `func_index` count the same records.)
        if btf.func_index(&mut funcs) != funcs.len() {
            return Err(EINVAL);
        }
        Ok(Indexed { data, offs, funcs })
    }

    fn btf<'a>(&'a self, base: Option<&'a Btf<'a>>) -> Option<Btf<'a>> {
        Some(Btf::new(Raw::parse(&self.data).ok()?, &self.offs, base))
    }
}

/// The bytes of `/sys/kernel/btf/<name>`. Process context; sleeps.
fn read_btf(name: &CStr) -> Result<KVVec<u8>> {
    let size = sys::btf_size(name).ok_or(ENOENT)? as i64;
    if size > MAX_BTF {
        return Err(EFBIG);
    }
    let mut data = KVVec::from_elem(0u8, size as usize, GFP_KERNEL)?;
    let got = sys::btf_read(name, &mut data).map_err(|_| EIO)?;
    if got as i64 != size {
        return Err(EIO);
    }
    Ok(data)
}

/// A module's BTF (split on top of vmlinux's), or the knowledge that it has none.
struct ModBtf {
    /// The module's name, NUL-terminated.
    name: [u8; MODULE_NAME_LEN + 1],
    /// [`sys::modules_gone`] when this was last found to be the loaded module's BTF.
    checked: AtomicU64,
    /// A module of this name went and came back with other types.
    stale: AtomicBool,
    /// `None`: the module has no BTF (not built with `CONFIG_DEBUG_INFO_BTF_MODULES`).
    idx: Option<Indexed>,
}

/// A module name's length limit (the kernel's `MODULE_NAME_LEN`, NUL included).
const MODULE_NAME_LEN: usize = 56;

impl ModBtf {
    fn name(&self) -> &[u8] {
        let n = self.name.iter().position(|&c| c == 0).unwrap_or(0);
        self.name.get(..n).unwrap_or(&[])
    }

    fn cname(&self) -> &CStr {
        // SAFETY: `name` is NUL-terminated (set in `load` from a shorter name).
        unsafe { CStr::from_char_ptr(self.name.as_ptr().cast()) }
    }

    /// Reads module `m`'s BTF. Process context; sleeps.
    fn load(m: &str, base: &Btf<'_>) -> Result<KBox<ModBtf>> {
        let mut name = [0u8; MODULE_NAME_LEN + 1];
        name.get_mut(..m.len())
            .ok_or(EINVAL)?
            .copy_from_slice(m.as_bytes());
        let checked = AtomicU64::new(sys::modules_gone());
        let mut mb = ModBtf {
            name,
            checked,
            stale: AtomicBool::new(false),
            idx: None,
        };
        mb.idx = match Indexed::load(mb.cname(), Some(base)) {
            Ok(i) => Some(i),
            Err(e) if e == ENOENT => None,
            Err(e) => return Err(e),
        };
        Ok(KBox::new(mb, GFP_KERNEL)?)
    }

    /// Whether this is still the BTF of the module of its name that is loaded now:
    /// after a module unload, reads the file again and compares. Process context.
    fn current(&self) -> bool {
        let gone = sys::modules_gone();
        if self.stale.load(Ordering::Acquire) {
            return false;
        }
        if self.checked.load(Ordering::Acquire) == gone {
            return true;
        }
        let same = match (read_btf(self.cname()), &self.idx) {
            (Ok(now), Some(i)) => now[..] == i.data[..],
            (Err(e), None) => e == ENOENT,
            _ => false,
        };
        if same {
            self.checked.store(gone, Ordering::Release);
        } else {
            self.stale.store(true, Ordering::Release);
        }
        same
    }
}

/// The kernel's BTF, indexed, and the modules' read so far.
pub(crate) struct KernelBtf {
    vmlinux: Indexed,
    /// Filled in order (process context, under the tracer's mutex), freed with this.
    mods: [AtomicPtr<ModBtf>; MOD_SLOTS],
}

impl KernelBtf {
    /// Reads and indexes `/sys/kernel/btf/vmlinux`. Process context; sleeps.
    fn load() -> Result<KBox<KernelBtf>> {
        let vmlinux = Indexed::load(c_str!("vmlinux"), None)?;
        Ok(KBox::new(
            KernelBtf {
                vmlinux,
                mods: [const { AtomicPtr::new(core::ptr::null_mut()) }; MOD_SLOTS],
            },
            GFP_KERNEL,
        )?)
    }

    /// The newest BTF kept for module `m` (stale ones are skipped).
    fn module(&self, m: &str) -> Option<&ModBtf> {
        self.mods
            .iter()
            .rev()
            .map(|p| p.load(Ordering::Acquire))
            // SAFETY: a non-null slot holds a `KBox::into_raw` pointer freed only when
            // `self` drops.
            .filter_map(|p| unsafe { p.as_ref() })
            .find(|mb| mb.name() == m.as_bytes() && !mb.stale.load(Ordering::Acquire))
    }

    /// Module `m`'s BTF, read now if not kept yet or no longer current. Process context,
    /// under the tracer's mutex (which orders the slots' filling); sleeps.
    fn module_load(&self, m: &str) -> Option<&ModBtf> {
        if let Some(mb) = self.module(m).filter(|mb| mb.current()) {
            return Some(mb);
        }
        let slot = self
            .mods
            .iter()
            .find(|p| p.load(Ordering::Acquire).is_null())?;
        let base = self.vmlinux.btf(None)?;
        let mb = ModBtf::load(m, &base).ok()?;
        let p = KBox::into_raw(mb);
        slot.store(p, Ordering::Release);
        // SAFETY: just published; freed only when `self` drops.
        unsafe { p.as_ref() }
    }

    /// Function `sym` (`name`, or `name [module]`): the BTF that has it (vmlinux's, or
    /// the module's split on top of it) and its type, given to `f`; reads a module's BTF
    /// not kept yet. Process context, under the tracer's mutex; sleeps. A compiler's clone
    /// (`name.isra.0`, other arguments) is in no BTF.
    fn with_func<R>(&self, sym: &str, f: impl FnOnce(&Btf<'_>, &Type<'_>) -> R) -> Option<R> {
        let (name, module) = args::split_module(sym);
        let m = match module {
            Some(m) => Some(self.module_load(m)?),
            None => None,
        };
        let id = self.func_id(m, name)?;
        self.with_id(m, id, f)
    }

    /// The id of function `name` in module `m`'s BTF (or vmlinux's).
    fn func_id(&self, m: Option<&ModBtf>, name: &str) -> Option<u32> {
        self.with_btf(m, |b| {
            let funcs = match m {
                Some(mb) => &mb.idx.as_ref()?.funcs,
                None => &self.vmlinux.funcs,
            };
            Some(b.find_func_in(funcs, name)?.id)
        })?
    }

    /// Type `id` of module `m`'s BTF (or vmlinux's), given to `f` with that BTF.
    fn with_id<R>(
        &self,
        m: Option<&ModBtf>,
        id: u32,
        f: impl FnOnce(&Btf<'_>, &Type<'_>) -> R,
    ) -> Option<R> {
        self.with_btf(m, |b| Some(f(b, &b.get(id).ok()?)))?
    }

    /// Module `m`'s BTF (or vmlinux's), given to `f`.
    fn with_btf<R>(&self, m: Option<&ModBtf>, f: impl FnOnce(&Btf<'_>) -> R) -> Option<R> {
        let base = self.vmlinux.btf(None)?;
        match m {
            None => Some(f(&base)),
            Some(mb) => {
                let split = mb.idx.as_ref()?.btf(Some(&base))?;
                Some(f(&split))
            }
        }
    }
}

impl Drop for KernelBtf {
    fn drop(&mut self) {
        for p in &self.mods {
            let p = p.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: from `KBox::into_raw` in `module_load`; nothing borrows it any
                // more (`&mut self`).
                drop(unsafe { KBox::from_raw(p) });
            }
        }
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
    /// The `args` option is being set: reads the BTF if not done yet (a kernel without
    /// BTF: one `error_log` line, and raw registers). With the mutex not held; sleeps.
    pub(crate) fn load_btf(&self) {
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
    }

    /// The `args` option was set: gives the functions known so far their spec. With the
    /// mutex held (`_inner`).
    pub(crate) fn args_on(&self, _inner: &TracerInner) {
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
        let name = sym.name(func);
        kb.with_func(name, args::spec).unwrap_or(0)
    }

    /// A call of `func` at `depth` at time `ts` is drawn with the registers `regs` at the
    /// call: writes its argument record (registers, strings) and says whether it did, and
    /// which user string it could not read (to read again at the return).
    /// In a handler: bounded, no allocation, no sleeping.
    pub(crate) fn write_args(
        &self,
        rec: &mut Record,
        regs: &sys::PtRegs,
        func: u64,
        depth: usize,
        ts: u64,
    ) -> ArgsDone {
        let mut done = ArgsDone::default();
        if !self.settings.option(OptionName::Args) {
            return done;
        }
        let spec = self.table.args_of(func);
        if spec & SPEC_KNOWN == 0 {
            return done;
        }
        let vals: [u64; crate::args::ARG_REGS] = core::array::from_fn(|i| regs.arg(i));
        let mut a = ArgArea::EMPTY;
        let n = args::spec_regs(spec);
        for (d, v) in a.regs.iter_mut().zip(vals.iter()).take(n) {
            *d = *v;
        }
        a.nregs = n as u8;
        a.raw = u8::from(spec & SPEC_RAW != 0);
        let strings = args::spec_strings(spec);
        // The copies run kernel code (copy_from_*_nofault, memchr) from this handler. A
        // probe of fctrace's inside it may run its handler (an ftrace-based or optimized
        // probe, an entry hook of an ftrace callback): that handler finds the task's tree
        // held by this one and leaves it alone (`tree::TreeRef`, `handlers_nested`).
        let mut k = 0;
        for (reg, &v) in vals.iter().enumerate().take(n) {
            if strings & (1 << reg) == 0 || k == ARG_STRS {
                continue;
            }
            a.str_reg[k] = reg as u8;
            let state = read_str(&mut a, k, v);
            // A user page not resident yet: the callee will most likely fault it in as it
            // reads the string itself. A kernel address that cannot be read will not be
            // readable later either.
            if state == STR_UNREADABLE
                && done.unread.is_none()
                && v != 0
                && !crate::format::is_kernel_addr(v)
            {
                done.unread = Some((reg as u8, v));
            }
            k += 1;
        }
        let slots = ArgArea::slots_for(k);
        rec.kind = Kind::Args as u8;
        rec.depth = depth.min(255) as u8;
        rec.func = func;
        rec.ts = ts.saturating_sub(1);
        self.write_area(rec, &a, slots);
        done.written = true;
        done
    }

    /// The frame of `func` at `depth`, whose user string in register `reg` (value `ptr`)
    /// could not be read at the call, closes with a record stamped `ts`: reads the string
    /// again, and if it can be read now writes it as a late argument record for that
    /// closing record. In a handler, in the task that made the call: bounded, no
    /// allocation, no sleeping.
    pub(crate) fn write_late_args(
        &self,
        rec: &mut Record,
        func: u64,
        depth: usize,
        ts: u64,
        reg: u8,
        ptr: u64,
    ) {
        let mut a = ArgArea::EMPTY;
        a.str_reg[0] = reg;
        let got = read_str(&mut a, 0, ptr) != STR_UNREADABLE;
        let c = if got {
            &self.stats.strings_at_return
        } else {
            &self.stats.strings_unread
        };
        c.fetch_add(1, Ordering::Relaxed);
        if !got {
            return;
        }
        rec.kind = Kind::LateArgs as u8;
        rec.depth = depth.min(255) as u8;
        rec.func = func;
        rec.ts = ts;
        self.write_area(rec, &a, ArgArea::slots_for(1));
    }

    /// Writes argument record `rec` and the first `slots` slots of area `a` after it.
    fn write_area(&self, rec: &mut Record, a: &ArgArea, slots: usize) {
        let mut more = [Record::ZERO; args::AREA_SLOTS];
        for (i, s) in more.iter_mut().enumerate().take(slots) {
            *s = a.slot(i);
        }
        rec.reason = slots as u8;
        self.buf.write_with(rec, more.get(..slots).unwrap_or(&[]));
    }
}

/// Reads the string at `v` into string place `k` of `a` with the no-fault routines:
/// its state.
fn read_str(a: &mut ArgArea, k: usize, v: u64) -> u8 {
    let Some(buf) = a.strs.get_mut(k) else {
        return STR_UNREADABLE;
    };
    let (len, state) = match sys::copy_str(buf, v) {
        None => (0, STR_UNREADABLE),
        Some(got) => match buf.get(..got).and_then(|b| b.iter().position(|&c| c == 0)) {
            Some(p) => (p, STR_WHOLE),
            // Longer than the limit, or its next page could not be read.
            None => (got, STR_CUT),
        },
    };
    a.str_len[k] = len as u8;
    a.str_state[k] = state;
    state
}

/// A reader's argument records waiting for their calls' records.
pub(crate) struct Pending {
    slots: KVVec<PendingArgs>,
    next: usize,
}

impl crate::buffer::ReaderExtra for Pending {
    fn clear(&mut self) {
        Pending::clear(self);
    }
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
        args::pending_take(&mut self.slots, r, false)
    }

    /// The strings read again at the return that closing record `r` makes, if any.
    fn take_late(&mut self, r: &Record) -> Option<ArgArea> {
        if r.kind != Kind::Ret as u8 && r.kind != Kind::Whole as u8 {
            return None;
        }
        args::pending_take(&mut self.slots, r, true)
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = PendingArgs::EMPTY);
    }
}

/// What a reader knows of one record's function with `args` on.
pub(crate) struct TypedRecord<'a> {
    /// The BTF and, in it, the function's type: the module's BTF (or `None`: vmlinux's)
    /// and the id.
    func: Option<(&'a KernelBtf, Option<&'a ModBtf>, u32)>,
    area: Option<ArgArea>,
    /// A closing line's strings read at the return (a one-line call has them merged
    /// into `area`).
    late: Option<ArgArea>,
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
        let func = tr.btf.get().and_then(|kb| {
            let (name, module) = args::split_module(name);
            let m = match module {
                Some(m) => Some(kb.module(m)?),
                None => None,
            };
            Some((kb, m, kb.func_id(m, name)?))
        });
        let mut area = pending.take(r);
        let mut late = pending.take_late(r);
        if let (Some(a), Some(l)) = (area.as_mut(), late.as_ref()) {
            *a = a.with_late(l);
            late = None;
        }
        TypedRecord {
            func,
            area,
            late,
            opts: ValueOpts { ptr_hash },
        }
    }

    /// `f` with the function's BTF and type, if known.
    fn with<R>(&self, f: impl FnOnce(&Btf<'_>, &Type<'_>) -> R) -> Option<R> {
        let (kb, m, id) = self.func?;
        kb.with_id(m, id, f)
    }
}

impl Typed for TypedRecord<'_> {
    fn write_args(&self, w: &mut dyn Write) -> fmt::Result {
        let mut w = w;
        if let Some(a) = self.area.as_ref().filter(|a| a.raw != 0) {
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
            return w.write_char(')');
        }
        let written = self.with(|b, f| match &self.area {
            Some(a) => Some(args::write_args(&mut w, b, f, a, self.opts)),
            // Known to take nothing.
            None if b.get(f.type_id()).is_ok_and(|p| p.vlen() == 0) => Some(w.write_str("()")),
            None => None,
        });
        match written.flatten() {
            Some(r) => r,
            // Not known (not in BTF, or its argument record was lost or not written).
            None => w.write_str("(?)"),
        }
    }

    fn has_ret(&self) -> bool {
        self.with(args::returns_value).unwrap_or(true)
    }

    fn write_ret(&self, w: &mut dyn Write, v: u64) -> fmt::Result {
        let mut w = w;
        match self.with(|b, f| args::write_ret(&mut w, b, f, v, self.opts)) {
            Some(r) => r,
            None => crate::format::write_raw_ret(&mut w, v, self.opts.ptr_hash),
        }
    }

    fn is_error(&self, v: u64) -> bool {
        match self.with(|b, f| args::ret_errno(b, f, v)) {
            Some(e) => e.is_some(),
            None => crate::format::raw_is_error(v),
        }
    }

    fn has_late(&self) -> bool {
        self.late.is_some() && self.func.is_some()
    }

    fn write_late(&self, w: &mut dyn Write) -> fmt::Result {
        let mut w = w;
        match self.late.as_ref() {
            Some(l) => self
                .with(|b, f| args::write_late(&mut w, b, f, l))
                .unwrap_or(Ok(())),
            None => Ok(()),
        }
    }
}
