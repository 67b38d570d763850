// SPDX-License-Identifier: GPL-2.0

//! Placing the probes of one function: decoding its live code, and a probe on each of
//! its call, jump and return sites: at the site, or at a pre-site and a post-site where
//! kprobes can optimize them into jumps.

use super::*;

/// Kernel memory, as a program computing a call's target without registers reads it
/// ([`emulate::Program::static_target`]).
struct KernelMemory;

impl emulate::Machine for KernelMemory {
    fn reg(&self, _: emulate::Reg) -> u64 {
        0
    }

    fn load(&self, addr: u64, size: u8) -> Option<u64> {
        load_kernel(addr, size)
    }

    fn gs_base(&self) -> Option<u64> {
        None
    }
}

/// The program of the instructions before the indirect call or jump at offset `off` of
/// the function at `start` (`code` its bytes, `steps` its instructions), going through
/// `fin`: of the longest tail of the straight run before the site (`run`: its first
/// offset, `presite::straight_run`) that compiles, the site alone at the least (`call
/// *smp_ops+0x28(%rip)`). Evaluated without registers it gives a target that does not
/// depend on the task (`static_target`); it tells where the target is read from
/// (`site_slot`).
fn straight_program(
    code: &[u8],
    start: u64,
    steps: &[presite::Insn],
    run: Option<u32>,
    off: u32,
    fin: emulate::Final,
) -> Option<emulate::Program> {
    let first = run.unwrap_or(off);
    let starts = steps
        .iter()
        .map(|s| s.off)
        .filter(|&o| o >= first && o < off);
    Iterator::chain(starts, [off]).find_map(|p| {
        emulate::compile(
            code.get(p as usize..off as usize)?,
            start + u64::from(p),
            fin,
        )
    })
}

/// What the second pass over a function's code knows of it, for [`Tracer::site_probes`].
struct FuncScan<'a> {
    /// The function whose sites these are, its end and its cold part's range (empty when
    /// it has none).
    func: u64,
    func_end: u64,
    cold: (u64, u64),
    /// The code scanned, at `start`: the function's own, or its cold part's.
    code: &'a [u8],
    start: u64,
    /// Where the body starts (after the ftrace site).
    body: u32,
    /// Pre-sites may be used (memory for them, no exception table entry).
    presites_ok: bool,
    /// Every instruction, for pre-sites.
    steps: &'a [presite::Insn],
    /// The targets of the function's jumps inside it, sorted.
    jump_targets: &'a [u32],
    /// Direct callees never followed: leaves, drawn at a pre-site.
    leaf_callees: &'a [u64],
    static_calls: &'a crate::engine::extable::Extable,
}

impl Tracer {
    /// Decodes the live code of the function at `start` and registers its probes. Where
    /// its cold part cannot be read or decoded (or someone else probes it), the function
    /// is armed without it: its jumps there are tail calls not followed, as before.
    pub(super) fn build_func(
        &self,
        inner: &mut TracerInner,
        start: u64,
        size: u64,
        sym: &mut SymBuf,
        hook_self: bool,
    ) -> core::result::Result<Func, Reason> {
        #[cfg(target_arch = "aarch64")]
        return self.build_func_a64(inner, start, size, sym, hook_self);
        let mut cold_failed = false;
        match self.build_func_with(inner, start, size, sym, hook_self, &mut cold_failed) {
            Err(_) if cold_failed => {
                let mut again = true;
                self.build_func_with(inner, start, size, sym, hook_self, &mut again)
            }
            r => r,
        }
    }

    /// [`Tracer::build_func`], with the function's cold part unless `no_cold` is set on
    /// entry; sets it when the cold part fails (before anything was hooked: the cold
    /// part is read and decoded in the first pass, before the callees are hooked).
    fn build_func_with(
        &self,
        inner: &mut TracerInner,
        start: u64,
        size: u64,
        sym: &mut SymBuf,
        hook_self: bool,
        no_cold: &mut bool,
    ) -> core::result::Result<Func, Reason> {
        let skip_cold = *no_cold;
        let code = self.func_code(inner, start, size)?;
        let end = start + size;
        // GCC moves a function's unlikely paths into a part of its own, `f.cold` (also
        // `f.cold.N`, `f.isra.0.cold`), which its jumps enter and leave: the same frame,
        // the function's own code, with calls of its own (`flush_tlb_mm_range()`'s remote
        // flush: `native_flush_tlb_multi()`). Known by its name, from the first jump into
        // it; its sites are the function's.
        let mut name: KVec<u8> = KVec::new();
        if let Some(i) = sym.lookup(start) {
            if name
                .extend_from_slice(i.name.as_bytes(), GFP_KERNEL)
                .is_err()
            {
                name = KVec::new();
            }
        }
        let mut cold: Option<(u64, u64)> = None;
        let mut cold_code: Option<KVVec<u8>> = None;
        // The ftrace site, if any: where the body starts after it. A function without one
        // (`notrace`) may start with an ordinary call, which is a call site.
        let site = site_offset(&code, start, sym);
        let fentry = fentry_offset(&code) as u32;
        let thunks = inner.thunks;
        // First pass: count sites and collect the direct callees; second: fill, leaving out
        // the sites whose callee has an entry hook (see `entry.rs`).
        let mut sites: KVec<Probe<SiteData>> = KVec::new();
        let mut callees: KVec<(u64, bool)> = KVec::new();
        // For pre-sites (`step.rs`): every instruction, the targets of the function's jumps
        // inside it, and where its body starts (after the ftrace site). Without memory for
        // them, every site is probed where it is.
        let mut steps: KVVec<presite::Insn> = KVVec::new();
        let mut jump_targets: KVVec<u32> = KVVec::new();
        let mut leaf_callees: KVec<u64> = KVec::new();
        // Targets of calls through global function pointers (pass 1).
        let mut fixed: KVec<u64> = KVec::new();
        let mut body = fentry;
        // kprobes optimizes no probe in a function with an exception table entry: there a
        // pre-site would stay a breakpoint, and cost the traced task single steps too.
        let mut presites_ok = !inner.extable.any_in(start, end);
        for pass in 0..2 {
            let mut n = 0usize;
            let mut idx = 0usize;
            let mut padding = Padding::default();
            let mut bad = false;
            let res = decode::scan(&code, start, |off, insn| {
                let addr = start + u64::from(off);
                let this = idx;
                idx += 1;
                if pass == 0 && presites_ok {
                    let step = presite::Insn {
                        off,
                        len: insn.len,
                        steppable: presite::steppable(code.get(off as usize..).unwrap_or(&[])),
                        site: presite::may_be_site(insn.flow, start, end),
                    };
                    presites_ok = steps.push(step, GFP_KERNEL).is_ok()
                        && match insn.flow {
                            Flow::Jmp(t) | Flow::Jcc(t, _) if t >= start && t < end => {
                                jump_targets.push((t - start) as u32, GFP_KERNEL).is_ok()
                            }
                            _ => true,
                        };
                }
                let foreign = padding.foreign_int3(insn.flow, &code, off);
                // The ftrace site: the 5-byte nop (or call, while ftrace uses it) that
                // opens the function, after `endbr64` if any.
                if Some(off) == site {
                    body = off + 5;
                    return;
                }
                if foreign {
                    // Someone else probes this function: its bytes cannot be trusted.
                    bad = true;
                    return;
                }
                // A constant address loaded into a register: where it is a function's
                // start, a function pointer this function passes on (`folio_add_lru()`
                // gives `lru_add()` to `folio_batch_move_lru()`, which calls it with a
                // lock held). Armed ahead with its direct callees (`Func::fixed_callees`,
                // which keeps only function starts in the kernel's text).
                if pass == 0 {
                    let at = code.get(off as usize..).unwrap_or(&[]);
                    if let Some(t) = decode::loaded_address(at, addr) {
                        let _ = fixed.push(t, GFP_KERNEL);
                    }
                }
                if pass == 0 && !skip_cold && cold.is_none() && !name.is_empty() {
                    if let Flow::Jmp(t) | Flow::Jcc(t, _) = insn.flow {
                        if !(start..end).contains(&t) {
                            cold = sym
                                .lookup(t)
                                .filter(|i| {
                                    parse::is_cold_part(i.name.as_bytes(), &name)
                                        && i.size > 0
                                        && i.size <= MAX_FUNC_SIZE
                                })
                                .map(|i| (t - i.offset, t - i.offset + i.size));
                        }
                    }
                }
                let (cs, ce) = cold.unwrap_or((end, end));
                let inside = |t: u64| (start..end).contains(&t) || (cs..ce).contains(&t);
                let kind = branch_site(insn.flow, inside, sym, &thunks);
                let Some(kind) = kind else { return };
                if !self.site_counts(pass, kind, &mut callees) {
                    return;
                }
                n += 1;
                if pass == 1 {
                    let scan = FuncScan {
                        func: start,
                        func_end: end,
                        cold: (cs, ce),
                        code: &code,
                        start,
                        body,
                        presites_ok,
                        steps: &steps,
                        jump_targets: &jump_targets,
                        leaf_callees: &leaf_callees,
                        static_calls: &inner.static_calls,
                    };
                    self.site_probes(&scan, this, off, insn, kind, &mut fixed, &mut sites);
                }
            });
            if res.is_err() || bad {
                return Err(Reason::Unprobeable);
            }
            // The cold part: its sites (never from pre-sites: its code is not in `steps`),
            // its callees, and where it jumps back into the function (no pre-site's run
            // may span such a target).
            if let Some((cs, ce)) = cold {
                if cold_code.is_none() {
                    match self.func_code(inner, cs, ce - cs) {
                        Ok(c) => cold_code = Some(c),
                        Err(e) => {
                            *no_cold = true;
                            return Err(e);
                        }
                    }
                }
                let ccode = cold_code.as_deref().unwrap_or(&[]);
                let inside = |t: u64| (start..end).contains(&t) || (cs..ce).contains(&t);
                let mut padding = Padding::default();
                let res = decode::scan(ccode, cs, |off, insn| {
                    let addr = cs + u64::from(off);
                    if padding.foreign_int3(insn.flow, ccode, off) {
                        bad = true;
                        return;
                    }
                    if pass == 0 {
                        let at = ccode.get(off as usize..).unwrap_or(&[]);
                        if let Some(t) = decode::loaded_address(at, addr) {
                            let _ = fixed.push(t, GFP_KERNEL);
                        }
                        if let Flow::Jmp(t) | Flow::Jcc(t, _) = insn.flow {
                            if (start..end).contains(&t) {
                                presites_ok &=
                                    jump_targets.push((t - start) as u32, GFP_KERNEL).is_ok();
                            }
                        }
                    }
                    let Some(kind) = branch_site(insn.flow, inside, sym, &thunks) else {
                        return;
                    };
                    if !self.site_counts(pass, kind, &mut callees) {
                        return;
                    }
                    n += 1;
                    if pass == 1 {
                        let scan = FuncScan {
                            func: start,
                            func_end: end,
                            cold: (cs, ce),
                            code: ccode,
                            start: cs,
                            body: 0,
                            presites_ok: false,
                            steps: &[],
                            jump_targets: &[],
                            leaf_callees: &leaf_callees,
                            static_calls: &inner.static_calls,
                        };
                        self.site_probes(&scan, 0, off, insn, kind, &mut fixed, &mut sites);
                    }
                });
                if res.is_err() || bad {
                    *no_cold = pass == 0;
                    return Err(Reason::Unprobeable);
                }
            }
            if pass == 0 {
                crate::sort::sort(&mut jump_targets);
                let n = self.hook_direct_callees(
                    inner,
                    start,
                    hook_self,
                    &callees,
                    &mut leaf_callees,
                    n,
                    sym,
                )?;
                // Room for a post-site per site.
                sites = KVec::with_capacity(n.saturating_mul(2), GFP_KERNEL)
                    .map_err(|_| Reason::ArmFailed)?;
            }
        }
        // Room for the probes themselves: a site watched from a pre-site and a post-site
        // takes two (pass 0 made room for one per site, and `probes_armed` went past
        // `max_probes` by the post-sites: `control/disarm_after.tc` on the distro kernel).
        let cold = cold.unwrap_or((0, 0));
        self.finish_func(inner, sites, end, cold, &callees, &fixed, sym)
    }

    /// The end of building a function (either architecture): room for its `sites`, its
    /// known callees, and its probes registered. A call site that cannot be probed is
    /// counted; the function is armed all the same (its frames close through their
    /// hooked returns).
    #[allow(clippy::too_many_arguments)]
    fn finish_func(
        &self,
        inner: &mut TracerInner,
        sites: KVec<Probe<SiteData>>,
        end: u64,
        cold: (u64, u64),
        callees: &[(u64, bool)],
        fixed: &[u64],
        sym: &mut SymBuf,
    ) -> core::result::Result<Func, Reason> {
        self.make_room(inner, sites.len() as u64)?;
        let (hooked_callees, fixed_callees) = self.known_callees(callees, fixed, sym);
        let mut func = Func {
            sites: ProbeSet::new(sites),
            entry: 0,
            pinned: false,
            end,
            cold,
            hooked_callees,
            fixed_callees,
        };
        self.register_sites(inner, &mut func, sym);
        Ok(func)
    }

    /// Whether a site of kind `kind` counts in pass `pass` over a function's code: in
    /// the first, always, and its direct callee (with whether it is tail-called) goes
    /// into `callees` (without room, the site keeps its probe); in the second, not where
    /// that callee has an entry hook now (the hook draws the call).
    pub(super) fn site_counts(
        &self,
        pass: u32,
        kind: SiteKind,
        callees: &mut KVec<(u64, bool)>,
    ) -> bool {
        let callee = kind.direct_callee();
        if pass == 0 {
            if let Some(c) = callee {
                let tail = !matches!(kind, SiteKind::Call(_));
                let _ = callees.push((c, tail), GFP_KERNEL);
            }
            return true;
        }
        !callee.is_some_and(|c| self.hooks.bits(c) & HOOK_ENTRY != 0)
    }

    /// The live code of the function at `start`, `size` bytes, with the bytes of
    /// fctrace's own breakpoints (preemption hooks, entry probes) put back.
    fn func_code(
        &self,
        inner: &TracerInner,
        start: u64,
        size: u64,
    ) -> core::result::Result<KVVec<u8>, Reason> {
        let mut code =
            KVVec::from_elem(0u8, size as usize, GFP_KERNEL).map_err(|_| Reason::ArmFailed)?;
        if !read_kernel(start, &mut code) {
            return Err(Reason::Unprobeable);
        }
        // Our own int3 hooks on the preemption path, and our entry probes, are not
        // someone else's breakpoints.
        self.preempt.restore_hook_bytes(start, &mut code);
        inner.restore_entry_probe_bytes(start, &mut code);
        Ok(code)
    }

    /// After the first pass over a function's code: gives its direct `callees` their entry
    /// hooks (the function's own too where it has none yet and `hook_self`), marks the
    /// callees never followed as leaves (into `leaf_callees`), and makes room for the
    /// function's `n` sites less those whose callee is now hooked. Returns that number.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn hook_direct_callees(
        &self,
        inner: &mut TracerInner,
        start: u64,
        hook_self: bool,
        callees: &[(u64, bool)],
        leaf_callees: &mut KVec<u64>,
        n: usize,
        sym: &mut SymBuf,
    ) -> core::result::Result<usize, Reason> {
        // A function reached through a pointer has no entry hook yet: where its
        // callees need an ftrace update, it gets its hook in the same one (12%
        // fewer updates in the bench's arming run); else it waits (see `arm_as`).
        let mut with_self: KVec<(u64, bool)> = KVec::new();
        let both = hook_self
            && self.any_unhooked(callees)
            && self.hooks.bits(start) & (HOOK_ENTRY | HOOK_NONE) == 0
            && with_self.extend_from_slice(callees, GFP_KERNEL).is_ok()
            && with_self.push((start, false), GFP_KERNEL).is_ok();
        self.hook_callees(inner, if both { &with_self } else { callees }, sym);
        // Direct callees never followed: leaves for good (their calls are
        // drawn at a pre-site where they have one).
        for &(c, _) in callees.iter() {
            if self.hooks.bits(c) & HOOK_ENTRY != 0
                || leaf_callees.contains(&c)
                || self.preempt.is_thunk(c)
            {
                continue;
            }
            let never = match sym.lookup(c) {
                Some(info) if info.offset == 0 => never_probed(inner, c, info.name.as_bytes()),
                _ => false,
            };
            if never
                && self.table.lookup(c) == FuncState::Unknown
                && self
                    .table
                    .insert(c, FuncState::Leaf(Reason::Unprobeable))
                    .is_some()
            {
                // Without room, the site keeps its breakpoint.
                let _ = leaf_callees.push(c, GFP_KERNEL);
            } else if never && self.table.lookup(c) == FuncState::Leaf(Reason::Unprobeable) {
                let _ = leaf_callees.push(c, GFP_KERNEL);
            }
        }
        // Sites whose callee now has an entry hook get no probe (one entry of
        // `callees` per direct call site).
        let hooked = callees
            .iter()
            .filter(|&&(c, _)| self.hooks.bits(c) & HOOK_ENTRY != 0)
            .count();
        let n = n.saturating_sub(hooked);
        self.make_room(inner, n as u64)?;
        Ok(n)
    }

    /// The site of instruction `insn` (number `this`, at `off`) of the function `s`
    /// describes, a branch of kind `kind`: its probes (at a pre-site and a post-site where
    /// it has them, else on the site) go into `sites`, the target of a call through a
    /// global function pointer into `fixed`.
    #[allow(clippy::too_many_arguments)]
    fn site_probes(
        &self,
        s: &FuncScan<'_>,
        this: usize,
        off: u32,
        insn: &decode::Insn,
        kind: SiteKind,
        fixed: &mut KVec<u64>,
        sites: &mut KVec<Probe<SiteData>>,
    ) {
        let start = s.start;
        let addr = start + u64::from(off);
        // A site is watched from its pre-site where it has one: an indirect
        // call or jump (whose target the pre-site computes), a direct call of
        // a function never followed (a leaf, drawn there), and a call of
        // `__schedule()`, which has no entry hook (the traced task
        // single-steps to it; every other task's context switch takes a jump
        // instead of a trap). Other direct calls of functions without an
        // entry hook (`_copy_to_iter()` on every read) need a post-site as
        // well, where the call returns, or keep a breakpoint: single steps
        // would cost the traced task more than the trap. Not a static call
        // (the kernel rewrites its target).
        //
        // The post-site's run must not overlap the next site's pre-site run
        // (kprobes optimizes neither of two overlapping probes); both may
        // start at the same address (one probe for kprobes, which runs the
        // newer handler first: the pre-site's closes the returned frame
        // itself, see `step.rs`).
        let static_site = kind.direct_callee().is_some() && s.static_calls.any_in(addr, addr + 1);
        let leaf = !static_site
            && match kind {
                SiteKind::Call(Target::Direct(c)) | SiteKind::Tail(Target::Direct(c)) => {
                    s.leaf_callees.contains(&c)
                }
                _ => false,
            };
        let direct_ok = !static_site
            && kind
                .direct_callee()
                .is_some_and(|c| self.preempt.is_schedule(c));
        let is_target = |o: u32| s.jump_targets.binary_search(&o).is_ok();
        // An indirect site: the instructions before it, as far as they run
        // straight. A call through a global function pointer (`smp_ops`):
        // its target, read now, is a callee for arming ahead
        // (`Func::fixed_callees`). And where the target is read from.
        let mut slot = None;
        if let Some(fin) = kind.indirect_final(addr + u64::from(insn.len)) {
            let run = s
                .presites_ok
                .then(|| presite::straight_run(s.steps, this, s.body, is_target))
                .flatten()
                .filter(|_| s.steps.get(this).is_some_and(|st| st.off == off));
            if let Some(p) = straight_program(s.code, start, s.steps, run, off, fin) {
                if let Some(t) = p.static_target(&KernelMemory).filter(|&t| t != 0) {
                    let _ = fixed.push(t, GFP_KERNEL);
                }
                slot = p.site_slot();
            }
        }
        // Any other direct call of a function without an entry hook: from its
        // pre-site and post-site where it has both (two jumps to detours for
        // every task instead of a trap), else a breakpoint. Not where the
        // post-site's run would overlap the next site's pre-site run (kprobes
        // optimizes neither of two overlapping probes).
        let post = match kind {
            SiteKind::Call(Target::Direct(c))
                if s.presites_ok
                    && insn.len == 5
                    && !static_site
                    && !leaf
                    && !direct_ok
                    && !self.preempt.is_thunk(c) =>
            {
                presite::post_site(s.steps, this, is_target).filter(|&(p, e)| {
                    presite::next_pre_site(s.steps, this, s.body, is_target)
                        .map_or(true, |q| q == p || q >= e)
                })
            }
            _ => None,
        };
        let pre = if s.presites_ok
            && (kind.direct_callee().is_none() || leaf || direct_ok || post.is_some())
        {
            presite::pre_site(s.steps, this, s.body, is_target).map_or(0, |p| start + u64::from(p))
        } else {
            0
        };
        // The target, computed at the pre-site (see `step.rs`); for a leaf,
        // the stack pointer at the site. A leaf without one keeps its
        // breakpoint on the site.
        let prog = (pre != 0)
            .then(|| {
                let fin = if leaf || post.is_some() {
                    emulate::Final::Reg(RSP)
                } else {
                    kind.indirect_final(addr + u64::from(insn.len))?
                };
                let run = s.code.get((pre - start) as usize..off as usize)?;
                emulate::compile(run, pre, fin)
            })
            .flatten();
        let pre = if (leaf || post.is_some()) && prog.is_none() {
            0
        } else {
            pre
        };
        let post = match post {
            Some((p, _)) if pre != 0 => start + u64::from(p),
            _ => 0,
        };
        let data = SiteData {
            func: s.func,
            func_end: s.func_end,
            cold: s.cold.0,
            cold_end: s.cold.1,
            addr,
            len: insn.len,
            kind,
            pre,
            prog,
            leaf: leaf && pre != 0,
            post,
            at_post: false,
            slot,
        };
        // (Should the post-site's registration fail, where kprobes accepted
        // the pre-site's in the same function, the frames the pre-site opens
        // close when the caller goes on, marked as returns not seen.)
        if post != 0 {
            let at_post = SiteData {
                at_post: true,
                ..data
            };
            let _ = sites.push(Probe::at(post, at_post).optimizable(), GFP_KERNEL);
        }
        let probe = if pre != 0 {
            Probe::at(pre, data).optimizable()
        } else {
            Probe::at(addr, data)
        };
        // Capacity was reserved in pass 0, so this does not reallocate.
        let _ = sites.push(probe, GFP_KERNEL);
    }

    /// The callees of a function kept for arming ahead: the direct callees with an entry
    /// hook, and the targets of its calls through global function pointers (`fixed`)
    /// that are function starts in the kernel's text.
    pub(super) fn known_callees(
        &self,
        callees: &[(u64, bool)],
        fixed: &[u64],
        sym: &mut SymBuf,
    ) -> (KVec<u64>, KVec<u64>) {
        let mut hooked_callees = KVec::new();
        for &(c, _) in callees.iter() {
            if self.hooks.bits(c) & HOOK_ENTRY != 0 && !hooked_callees.contains(&c) {
                // Without room, arming ahead does not walk through it.
                let _ = hooked_callees.push(c, GFP_KERNEL);
            }
        }
        // Only function starts in the kernel's text (a pointer not set yet reads 0).
        let (text, etext) = kernel_text();
        let mut fixed_callees = KVec::new();
        for &t in fixed.iter() {
            if (text..etext).contains(&t)
                && !fixed_callees.contains(&t)
                && sym.lookup(t).is_some_and(|s| s.offset == 0)
                && fixed_callees.push(t, GFP_KERNEL).is_err()
            {
                break;
            }
        }
        (hooked_callees, fixed_callees)
    }

    /// Registers `func`'s probes. Sites kprobes refused (static calls) are counted, and
    /// their direct callees get an entry probe instead (see `entry_probe.rs`).
    pub(super) fn register_sites(
        &self,
        inner: &mut TracerInner,
        func: &mut Func,
        sym: &mut SymBuf,
    ) {
        // Direct calls and tail calls from sites kprobes refused (static calls): their
        // callees get a kprobe at their entry (see `entry_probe.rs`).
        let mut refused: [Option<(u64, bool)>; 8] = [None; 8];
        let mut n_refused = 0usize;
        timed(&self.stats.register_ns, || {
            let stats = &self.stats;
            func.sites.register_all(|site, ok| {
                stats.registrations.fetch_add(1, Ordering::Relaxed);
                if ok {
                    return true;
                }
                stats.sites_unprobeable.fetch_add(1, Ordering::Relaxed);
                if site.at_post {
                    return true;
                }
                if let Some(callee) = site.kind.direct_callee() {
                    let tail = !matches!(site.kind, SiteKind::Call(_));
                    if let Some(slot) = refused.get_mut(n_refused) {
                        *slot = Some((callee, tail));
                        n_refused += 1;
                    } else {
                        stats.static_hooks_missing.fetch_add(1, Ordering::Relaxed);
                    }
                }
                true
            })
        });
        for (callee, tail) in refused.into_iter().flatten() {
            self.add_static_hook(inner, callee, tail, sym);
        }
        if func.sites.iter().any(|p| p.is_blocked()) {
            self.schedule_optimize();
        }
    }
}

// arm64's builder (its reading of code is `arm64.rs`).
impl Tracer {
    /// arm64's [`Tracer::build_func`]: decodes the live code of the function at `start`
    /// and registers a probe on each call site whose callee has no entry hook.
    #[cfg(target_arch = "aarch64")]
    pub(super) fn build_func_a64(
        &self,
        inner: &mut TracerInner,
        start: u64,
        size: u64,
        sym: &mut SymBuf,
        hook_self: bool,
    ) -> core::result::Result<Func, Reason> {
        let code = self.func_code(inner, start, size)?;
        // First pass: the sites and their direct callees; then the callees' entry hooks;
        // second pass: a probe on each site whose callee has none.
        let mut kinds: KVec<(u32, SiteKind)> = KVec::new();
        let mut callees: KVec<(u64, bool)> = KVec::new();
        let mut full = false;
        let (end, _) = super::arm64::scan_sites(&code, start, size, sym, |off, kind| {
            full |= kinds.push((off, kind), GFP_KERNEL).is_err();
            self.site_counts(0, kind, &mut callees);
        })?;
        if full {
            return Err(Reason::ArmFailed);
        }
        // The function starts it loads the address of (function pointers it passes on)
        // or reads from a global pointer: armed with it (`Func::fixed_callees`, as on
        // x86-64).
        let words = super::arm64::words(&code, start, end);
        let fixed = super::arm64::loaded_addresses(&words, start);
        let mut leaf_callees: KVec<u64> = KVec::new();
        let n = self.hook_direct_callees(
            inner,
            start,
            hook_self,
            &callees,
            &mut leaf_callees,
            kinds.len(),
            sym,
        )?;
        let mut sites: KVec<Probe<SiteData>> =
            KVec::with_capacity(n, GFP_KERNEL).map_err(|_| Reason::ArmFailed)?;
        for &(off, kind) in kinds.iter() {
            if !self.site_counts(1, kind, &mut callees) {
                continue;
            }
            // A call of a trivial leaf without an ftrace site is not probed: a trap for
            // every task that makes it, for a line with nothing below (`arm64.rs`).
            if let SiteKind::Call(Target::Direct(c)) = kind {
                if super::arm64::trivial_callee(c, sym) {
                    self.stats.trivial_calls.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            let data = SiteData {
                func: start,
                func_end: end,
                cold: 0,
                cold_end: 0,
                addr: start + u64::from(off),
                len: super::arm64::INSN_LEN,
                kind,
                pre: 0,
                prog: None,
                leaf: false,
                post: 0,
                at_post: false,
                slot: match kind {
                    SiteKind::Call(Target::Reg(r)) | SiteKind::Tail(Target::Reg(r)) => {
                        super::arm64::call_slot(&words, off, r)
                    }
                    _ => None,
                },
            };
            sites
                .push(Probe::at(data.addr, data), GFP_KERNEL)
                .map_err(|_| Reason::ArmFailed)?;
        }
        self.finish_func(inner, sites, end, (0, 0), &callees, &fixed, sym)
    }
}
