//! What talks to Redis.
//!
//! The guard, the builder and the macro only see [`Backend`]; each
//! deployment shape (one server, independent masters by majority, a
//! cluster) is one variant. One server and a cluster queue waiters in Redis
//! and hand locks over (`queue`, with each kind's attempt in its own file);
//! a Redlock counts a majority of votes (`redlock`).
//!
//! The files of this folder import one another directly, lowest first:
//! `shared`, `scripts`, `group_commit`, `wake`, `source`, `node_facts`, `single`,
//! `cluster`, `redlock`, `deployment`, `inspect`, `queue`, then the kinds'
//! attempts (`lockset`, `semaphore`, `rwlock`). This file only names them
//! for the rest of the crate.

mod cluster;
mod deployment;
mod group_commit;
pub(crate) mod inspect;
pub(crate) mod lockset;
mod node_facts;
pub(crate) mod queue;
pub(crate) mod redlock;
#[macro_use]
pub(crate) mod scripts;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod shared;
mod single;
pub(crate) mod source;
#[cfg(test)]
pub(crate) mod test_server;
mod wake;

pub(crate) use cluster::ClusterNodes;
pub(crate) use deployment::Backend;
pub(crate) use shared::{Extend, Grant, Released, Renewal, Renewed, Timeouts};
pub(crate) use single::SingleNode;
pub(crate) use wake::{Waiter, Wake};
