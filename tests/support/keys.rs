//! Key names under the default prefix, computed by the runtime's own key
//! layout (`lockattr::__layout`), so that the tests cannot drift from what
//! lockattr writes.

use lockattr::__layout as layout;
pub use lockattr::__layout::KeyNames;

/// The default prefix, `lockattr:`.
pub const PREFIX: &str = lockattr::DEFAULT_PREFIX;

/// The keys of the lock `name`.
pub fn lock(name: &str) -> KeyNames {
    layout::lock(PREFIX, name)
}

/// The keys of the read-write lock `name` (`lock`: the writer's key).
pub fn rw(name: &str) -> KeyNames {
    layout::read_write(PREFIX, name)
}

/// The keys of the semaphore `name` (`lock`: its first permit's key).
pub fn sem(name: &str) -> KeyNames {
    layout::semaphore(PREFIX, name)
}

/// The key holding the lock `name` (`lockattr:{name}`).
pub fn lock_key(name: &str) -> String {
    lock(name).lock
}

/// The index of readers of the read-write lock `name`.
pub fn readers_key(name: &str) -> String {
    layout::readers(PREFIX, name)
}

/// A glob of the keys the readers of the read-write lock `name` hold.
pub fn reader_keys(name: &str) -> String {
    layout::reader(PREFIX, name, "*")
}

/// The key of permit `index` of the semaphore `name`.
pub fn permit_key(name: &str, index: u32) -> String {
    layout::permit(PREFIX, name, index)
}

/// A glob of the permit keys of the semaphore `name`.
pub fn permit_keys(name: &str) -> String {
    let first = permit_key(name, 0);
    format!("{}*", first.strip_suffix('0').expect("permit 0"))
}

/// The record of the number of permits of the semaphore `name`.
pub fn permits_record(name: &str) -> String {
    layout::permits_record(PREFIX, name)
}
