//! The integration tests, one module a file, in one test binary: the
//! suite links once, and its tests (which mostly wait on the redis-server
//! processes they start) run side by side. The files that change what is
//! global to a process (the default Locker, the tracing subscriber, the
//! metrics recorder) or need a feature of their own are binaries of their
//! own (see `[[test]]` in `Cargo.toml`).
//!
//! Run one file's tests with `cargo test --test integration <file>::`.

mod support;

mod acl_users;
mod attr_busy;
mod attr_cancel;
mod attr_durations;
mod attr_frozen;
mod attr_guard;
mod attr_held;
mod attr_hold;
mod attr_locker_expr;
mod attr_panic;
mod attr_reentrant;
mod attr_release;
mod attr_renew;
mod attr_renew_for;
mod attr_restart;
mod cluster_locks;
mod cluster_notices;
mod dead_waiters;
mod error_messages;
mod exclusion_processes;
mod exclusion_tasks;
mod exclusion_threads;
mod fence_expiry;
mod fencing;
mod functions;
mod inspect;
mod inspect_kinds;
mod lease_lost;
mod lease_renew;
mod listing;
mod local_queue;
mod lockset_attr;
mod lockset_cluster;
mod lockset_limits;
mod lockset_processes;
mod lockset_redlock;
mod lockset_runtime;
mod proxy;
mod redlock_faults;
mod redlock_majority;
mod redlock_nodes;
mod replica_batch;
mod replica_failover;
mod replica_loss;
mod replica_truth;
mod replica_wait;
mod runtime_acquire;
mod runtime_addresses;
mod runtime_bounds;
mod runtime_connections;
mod runtime_drop;
mod runtime_fairness;
mod runtime_hold;
mod runtime_inline;
mod runtime_locker;
mod runtime_names;
mod runtime_outage;
mod runtime_release;
mod runtime_renew_for;
mod runtime_resend;
mod runtime_runtimes;
mod runtime_timeout;
mod runtime_wakeup;
mod rwlock_attr;
mod rwlock_basic;
mod rwlock_cluster;
mod rwlock_processes;
mod rwlock_sentinel;
mod semaphore_attr;
mod semaphore_basic;
mod semaphore_cluster;
mod semaphore_inspect;
mod semaphore_processes;
mod semaphore_promises;
mod sentinel;
mod smoke;
mod support_audit;
mod wait_rules;
mod wakeup_runtimes;
