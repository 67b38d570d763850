// SPDX-License-Identifier: GPL-2.0

//! The tracer's settings, as the control files set them.

use super::*;

/// The settings a user changes with the control files that take effect at once.
pub(crate) struct Settings {
    pub(crate) max_depth: AtomicU32,
    /// Bound on `stats.probes_armed`: a function whose probes would exceed it is refused
    /// (shown as `not followed: arming failed`).
    pub(crate) max_probes: AtomicU64,
    /// Seconds after which an idle armed function is disarmed (0 = never).
    pub(crate) disarm_after_s: AtomicU32,
    /// Longest wait in the trampoline for a callee to be armed, ms (0 = never wait).
    pub(crate) arm_wait_ms: AtomicU32,
    /// The `options` file, indexed by [`OptionName`].
    options: [AtomicBool; OptionName::COUNT],
}

impl Settings {
    pub(super) fn new() -> Self {
        Settings {
            max_depth: AtomicU32::new(0),
            max_probes: AtomicU64::new(DEFAULT_MAX_PROBES),
            disarm_after_s: AtomicU32::new(DEFAULT_DISARM_AFTER_S),
            arm_wait_ms: AtomicU32::new(DEFAULT_ARM_WAIT_MS),
            options: OPTIONS.map(|(_, _, default)| AtomicBool::new(default)),
        }
    }

    /// The value of option `o`.
    pub(crate) fn option(&self, o: OptionName) -> bool {
        self.options[o as usize].load(Ordering::Relaxed)
    }

    pub(crate) fn set_option(&self, o: OptionName, on: bool) {
        self.options[o as usize].store(on, Ordering::Relaxed);
    }
}
