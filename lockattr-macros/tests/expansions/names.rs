//! Every way to name a lock.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use lockattr::{LockError, LockKey, redis_lock};

#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    #[lock_key]
    id: u64,
    balance: i64,
}

/// Two key fields, default prefix (the type's name).
#[derive(LockKey)]
struct Seat {
    #[lock_key]
    row: u32,
    #[lock_key]
    number: u32,
    holder: String,
}

#[derive(LockKey)]
#[lock_key(prefix = "tenant")]
struct TenantId(#[lock_key] String, u8);

#[derive(LockKey)]
#[lock_key(prefix = "shard")]
struct Shard<K, V>
where
    V: Clone,
{
    #[lock_key]
    key: K,
    value: V,
}

fn key_for(user: &str, n: usize) -> String {
    format!("{user}:{n}")
}

#[redis_lock(name = "plain")]
fn literal(n: u32) -> Result<u32, LockError> {
    Ok(n)
}

#[redis_lock(name = "braces:{{not a capture}}")]
fn escaped_braces() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "order:{order_id}:{amount:08}")]
fn format_string(order_id: u64, amount: u64) -> Result<u64, LockError> {
    Ok(order_id + amount)
}

#[redis_lock(name = key_for(user, n + 1))]
fn expression(user: &str, n: usize) -> Result<usize, LockError> {
    Ok(n + user.len())
}

#[redis_lock(name = key_for(user, n + 1))]
async fn expression_async(user: &str, n: usize) -> Result<usize, LockError> {
    Ok(n + user.len())
}

#[redis_lock(name = format!("seat:{}", seat.row))]
fn format_macro(seat: &Seat) -> Result<u32, LockError> {
    Ok(seat.number)
}

#[redis_lock(name = seat)]
fn key_expression(seat: &Seat, other: u32) -> Result<u32, LockError> {
    Ok(seat.number + other)
}

#[redis_lock]
fn first_argument(account: &Account, amount: i64) -> Result<i64, LockError> {
    Ok(account.balance - amount)
}

#[redis_lock]
async fn first_argument_async(account: Account) -> Result<i64, LockError> {
    Ok(account.balance)
}

#[redis_lock]
fn two_fields(seat: Seat) -> Result<String, LockError> {
    Ok(seat.holder)
}

#[redis_lock]
fn tuple_struct(tenant: &TenantId) -> Result<u8, LockError> {
    Ok(tenant.1)
}

#[redis_lock]
fn generic_struct(shard: Shard<u64, Vec<u8>>) -> Result<Vec<u8>, LockError> {
    Ok(shard.value)
}

#[redis_lock]
fn integer(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[redis_lock]
fn string_slice(id: &str) -> Result<usize, LockError> {
    Ok(id.len())
}

#[redis_lock]
fn no_arguments() -> Result<(), LockError> {
    Ok(())
}

pub fn main() {
    let _ = literal;
    let _ = escaped_braces;
    let _ = format_string;
    let _ = expression;
    let _ = expression_async;
    let _ = format_macro;
    let _ = key_expression;
    let _ = first_argument;
    let _ = first_argument_async;
    let _ = two_fields;
    let _ = tuple_struct;
    let _ = generic_struct;
    let _ = integer;
    let _ = string_slice;
    let _ = no_arguments;
    assert_eq!(Account { id: 42, balance: 0 }.lock_key(), "account:42");
    assert_eq!(TenantId("acme".into(), 0).lock_key(), "tenant:acme");
}
