//! The runtime's one way to take a `std` mutex: a panic while it was held
//! (poison) does not stop the others, since every critical section here
//! leaves its data consistent at each step.

use std::sync::{Mutex, MutexGuard};

/// Takes `mutex`, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
