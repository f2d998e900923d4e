//! Other attributes, inner attributes, `unsafe fn` and `impl Trait` arguments
//! are kept as written.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use lockattr::{LockError, LockKey, redis_lock};

/// Documented, inlined, `must_use`: all kept.
#[must_use = "the result says whether the lock was had"]
#[inline]
#[redis_lock(name = "attrs")]
fn outer_attributes() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "attrs")]
fn inner_attributes() -> Result<(), LockError> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(())
}

#[redis_lock(name = "attrs")]
async fn inner_attributes_async() -> Result<(), LockError> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(())
}

#[cfg_attr(all(), allow(clippy::unnecessary_wraps))]
#[redis_lock(name = "attrs")]
fn cfg_attr() -> Result<(), LockError> {
    Ok(())
}

/// # Safety
/// None needed; the attribute keeps `unsafe`.
#[redis_lock]
unsafe fn unsafe_function(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[redis_lock]
async fn impl_trait_argument(key: impl LockKey + Send) -> Result<String, LockError> {
    Ok(key.lock_key())
}

pub fn main() {
    let _ = outer_attributes;
    let _ = inner_attributes;
    let _ = inner_attributes_async;
    let _ = cfg_attr;
    let _ = unsafe_function;
    if false {
        let _future = impl_trait_argument(1_u8);
    }
}
