//! The one poison policy: a mutex whose holder panicked still guards the last consistent state
//! (every critical section in mcpmux leaves its data valid between statements), so it is
//! recovered, never skipped and never a reason to panic again.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, recovering it if a holder panicked.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
