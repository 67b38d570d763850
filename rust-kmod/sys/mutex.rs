// SPDX-License-Identifier: GPL-2.0

//! The tracer's mutex: the kernel's `struct mutex` (`c/helpers.c`), with the waits that
//! 6.12's `kernel::sync::Mutex` has no way to: one a signal ends (control-file writes:
//! a write queued behind others' re-arming can be interrupted) and a try (the work
//! items: they do not park a worker behind control-file writes, see
//! `Tracer::lock_or_defer`).
//!
//! The mutex is one static in C, so there is one `TracerMutex` at a time: `new` refuses
//! a second while the first lives.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;

use super::NotSend;
use crate::bindings;

/// Whether a `TracerMutex` exists (it owns the static mutex).
static EXISTS: AtomicBool = AtomicBool::new(false);

/// `T` behind the tracer's mutex.
///
/// Invariant: while this lives, it is the only `TracerMutex`, so holding
/// `fctrace_tracer_mutex` gives exclusive access to `data`.
pub(crate) struct TracerMutex<T> {
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through a guard, with the mutex held (type invariant):
// one thread at a time, so sending `T` between threads is all that is needed.
unsafe impl<T: Send> Sync for TracerMutex<T> {}
// SAFETY: as above; the mutex itself is a static.
unsafe impl<T: Send> Send for TracerMutex<T> {}

impl<T> TracerMutex<T> {
    /// `EBUSY` if another `TracerMutex` lives.
    pub(crate) fn new(data: T) -> Result<Self> {
        if EXISTS.swap(true, Ordering::AcqRel) {
            return Err(EBUSY);
        }
        Ok(Self {
            data: UnsafeCell::new(data),
        })
    }

    /// Waits for the mutex (`TASK_UNINTERRUPTIBLE`). Process context; sleeps.
    pub(crate) fn lock(&self) -> TracerMutexGuard<'_, T> {
        // SAFETY: process context (callers'); released by the guard's drop.
        unsafe { bindings::fctrace_tracer_lock() };
        TracerMutexGuard {
            m: self,
            _not_send: PhantomData,
        }
    }

    /// Waits for the mutex unless a signal comes first: then `ERESTARTSYS` (a system
    /// call restarts after a handler that asked for it). Process context; sleeps.
    pub(crate) fn lock_interruptible(&self) -> Result<TracerMutexGuard<'_, T>> {
        // SAFETY: process context (callers'); released by the guard's drop when taken.
        if unsafe { bindings::fctrace_tracer_lock_interruptible() } != 0 {
            return Err(ERESTARTSYS);
        }
        Ok(TracerMutexGuard {
            m: self,
            _not_send: PhantomData,
        })
    }

    /// Takes the mutex if it is free. Process context.
    pub(crate) fn try_lock(&self) -> Option<TracerMutexGuard<'_, T>> {
        // SAFETY: process context (callers'); released by the guard's drop when taken.
        if !unsafe { bindings::fctrace_tracer_trylock() } {
            return None;
        }
        Some(TracerMutexGuard {
            m: self,
            _not_send: PhantomData,
        })
    }
}

impl<T> Drop for TracerMutex<T> {
    fn drop(&mut self) {
        EXISTS.store(false, Ordering::Release);
    }
}

/// The tracer's mutex, held; released on drop, in the task that took it.
pub(crate) struct TracerMutexGuard<'a, T> {
    m: &'a TracerMutex<T>,
    _not_send: NotSend,
}

impl<T> Deref for TracerMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mutex is held, and `m` is the only `TracerMutex` (its invariant).
        unsafe { &*self.m.data.get() }
    }
}

impl<T> DerefMut for TracerMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the
        // guard.
        unsafe { &mut *self.m.data.get() }
    }
}

impl<T> Drop for TracerMutexGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: taken by this guard, in this task (the guard is not `Send`).
        unsafe { bindings::fctrace_tracer_unlock() };
    }
}
