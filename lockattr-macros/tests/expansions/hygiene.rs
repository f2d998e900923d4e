//! The generated code names only absolute paths and its own hygienic
//! locals: local modules and variables with the same names change nothing.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]
#![allow(non_upper_case_globals)]

mod core {}
mod std {}
mod lockattr_private {}

mod __private {}

#[allow(dead_code)]
struct Result;
#[allow(dead_code)]
struct Ok;
#[allow(dead_code)]
struct Err;
#[allow(dead_code)]
struct Option;
#[allow(dead_code)]
struct String;
#[allow(dead_code)]
struct Duration;
#[allow(dead_code)]
const guard: u8 = 0;
#[allow(dead_code)]
const locker: u8 = 0;
#[allow(dead_code)]
const error: u8 = 0;

macro_rules! format {
    () => {};
}

type LockResult<T> = ::core::result::Result<T, ::lockattr::LockError>;

#[::lockattr::redis_lock(name = "h:{id}", expire = "1s", acquire_time = 0.5)]
fn shadowing(id: u32) -> LockResult<u32> {
    let __lockattr_guard = id;
    let __lockattr_locker = 1;
    let __lockattr_name = 2;
    let __lockattr_error = 3;
    let __lockattr_result = 4;
    let __lockattr_duration = 5;
    ::core::result::Result::Ok(
        __lockattr_guard
            + __lockattr_locker
            + __lockattr_name
            + __lockattr_error
            + __lockattr_result
            + __lockattr_duration,
    )
}

#[::lockattr::redis_lock(name = "h:{id}", expire = ::core::time::Duration::from_secs(1))]
async fn shadowing_async(id: u32) -> LockResult<u32> {
    let __lockattr_guard = id;
    let __lockattr_result = 4;
    ::core::result::Result::Ok(__lockattr_guard + __lockattr_result)
}

#[::lockattr::redis_lock(name = "h", guard = g)]
fn guard_is_the_only_visible_name() -> LockResult<u64> {
    let __lockattr_guard = 0_u64;
    ::core::result::Result::Ok(g.fencing_token() + __lockattr_guard)
}

#[::lockattr::redis_lock]
fn default_name(id: u64) -> LockResult<u64> {
    ::core::result::Result::Ok(id)
}

#[::lockattr::redis_lock]
fn path_name() -> LockResult<()> {
    ::core::result::Result::Ok(())
}

#[derive(::lockattr::LockKey)]
struct Key {
    #[lock_key]
    out: u32,
}

#[::lockattr::redis_lock]
async fn derived(key: Key) -> LockResult<u32> {
    ::core::result::Result::Ok(key.out)
}

pub fn main() {
    let _ = shadowing;
    let _ = shadowing_async;
    let _ = guard_is_the_only_visible_name;
    let _ = default_name;
    let _ = path_name;
    let _ = derived;
    format!();
}
