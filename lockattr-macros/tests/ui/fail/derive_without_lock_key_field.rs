use lockattr::LockKey;

#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    id: u64,
    balance: i64,
}

fn main() {}
