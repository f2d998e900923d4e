//! Generics, where-clauses, lifetimes, `impl Trait` and pattern arguments.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::fmt::{Debug, Display};

use lockattr::{LockError, LockKey, redis_lock};

#[redis_lock]
fn generic<K: LockKey>(key: K) -> Result<K, LockError> {
    Ok(key)
}

#[redis_lock]
async fn generic_async<K>(key: K) -> Result<K, LockError>
where
    K: LockKey + Send,
{
    Ok(key)
}

#[redis_lock(name = "item:{id}")]
fn where_clause<T, const N: usize>(id: u32, items: [T; N]) -> Result<Vec<T>, LockError>
where
    T: Clone + Debug,
{
    let _ = id;
    Ok(items.to_vec())
}

#[redis_lock]
fn lifetime<'a>(x: &'a str) -> Result<&'a str, LockError> {
    Ok(x)
}

#[redis_lock]
async fn lifetime_async<'a>(x: &'a str) -> Result<&'a str, LockError> {
    Ok(x)
}

#[redis_lock]
async fn elided(x: &str) -> Result<&str, LockError> {
    Ok(x)
}

#[redis_lock(name = "display")]
fn impl_trait(n: u32) -> Result<impl Display, LockError> {
    Ok(n)
}

#[redis_lock(name = "display")]
async fn impl_trait_async(n: u32) -> Result<impl Display, LockError> {
    let parsed: u32 = "7".parse().map_err(|_| LockError::NotConfigured)?;
    Ok(n + parsed)
}

#[redis_lock(name = "iter")]
fn impl_iterator(v: &[u32]) -> Result<impl Iterator<Item = &u32> + '_, LockError> {
    Ok(v.iter())
}

#[redis_lock(name = "p:{a}:{b}")]
fn pattern((a, b): (u32, u32)) -> Result<u32, LockError> {
    Ok(a + b)
}

#[redis_lock(name = "p:{a}:{b}")]
async fn pattern_async((a, b): (u32, u32)) -> Result<u32, LockError> {
    Ok(a + b)
}

struct Point {
    x: i32,
    y: i32,
}

#[redis_lock(name = "point:{x}:{y:>4}")]
fn struct_pattern(Point { x, y }: Point, _unused: u8) -> Result<i32, LockError> {
    Ok(x + y)
}

#[redis_lock(name = "m:{n}")]
fn mutable(mut n: u32) -> Result<u32, LockError> {
    n += 1;
    Ok(n)
}

pub fn main() {
    let _ = generic::<u32>;
    let _ = generic_async::<String>;
    let _ = where_clause::<u8, 3>;
    let _ = lifetime;
    let _ = lifetime_async;
    let _ = elided;
    let _ = impl_trait;
    let _ = impl_trait_async;
    let _ = impl_iterator;
    let _ = pattern;
    let _ = pattern_async;
    let _ = struct_pattern;
    let _ = mutable;
}
