//! Redlock: one lock on several independent Redis masters, held while a
//! majority of them hold it.
//!
//! # What differs from the published algorithm, and why
//!
//! - **Concurrent fan-out.** Every request goes to all nodes at once, so an
//!   acquisition costs about one round trip, not one per node. Each node's
//!   answer is awaited for at most the node timeout: a frozen node delays
//!   an operation by that much, never by the acquire time.
//! - **Connections are opened apart from requests.** A node without a
//!   connection gets one from a task of its own, bounded by the connect
//!   timeout (and the response timeout for what is read on it), not by the
//!   node timeout; the task finishes even when the operation that started it
//!   gives up, so the next operation finds the connection. An operation
//!   waits for the nodes that are connecting until they are done, or, once
//!   a majority is ready, for at most one node timeout more. The node
//!   timeout then bounds only the lock request. A request cut off by it
//!   leaves its connection in place (the response timeout decides whether a
//!   connection is broken); an acquisition cut off is given back on the
//!   same connection, queued before any later request, and the next attempt
//!   uses a new owner token, so a late give-back never frees a newer
//!   acquisition.
//! - **Validity** is counted from when the request was sent: `expire`, less
//!   the clock drift allowance ([`drift`]), from the send time.
//!   Time spent waiting for slow nodes comes off it.
//! - **Restarted nodes do not vote at once** (unless turned off): a node
//!   that has kept its data for less than the Locker's `max_lease` does not
//!   count toward any majority. A node restarted without persistence has
//!   forgotten its locks, and could otherwise give a second owner the
//!   majority while the first still holds a lease, which may be as long as
//!   `max_lease` (the requesting lock's own lease says nothing about the
//!   holder's). This is the "delayed restart" of the Redlock description,
//!   enforced by the clients instead of by the operators. When a node last
//!   started (or lost its data) is read on every new connection, from INFO
//!   and from a marker key (see `node_facts`), and a restart breaks the
//!   connections, so it is seen. A node whose start cannot be read at all
//!   does not vote.
//! - **Each server counts once.** Nodes are told apart by the server
//!   itself (INFO's `run_id`, or the id in the marker), not by their URLs:
//!   two URLs that reach one server count once, and an acquisition fails
//!   with [`LockError::InvalidInput`] naming their positions in the list.
//! - **Fencing tokens** come from the nodes' fence counters: the largest of
//!   the counters of the nodes that granted the lock. When they differ, that
//!   value is written back to those nodes (if the lock is still theirs)
//!   before the guard is returned, and the acquisition succeeds only if a
//!   majority took it. The next owner's majority shares a node with that
//!   majority, whose counter it increments past the token. When the nodes
//!   already agree (every acquisition that reached every node keeps them
//!   equal), there is no extra round trip.
//! - **Waiting** is not queued: each node would hand the lock to a different
//!   waiter. A release publishes a notice on every node; waiters subscribed
//!   on each node try again when the first notice arrives. After a split
//!   vote (some nodes granted, too few), the losers give their nodes back
//!   and try again after a random pause that grows with each split. A
//!   waiter that cannot reach a majority tries again, with a growing pause,
//!   until its acquire time ends, and then returns the last error.
//!
//! [`LockError::InvalidInput`]: crate::LockError::InvalidInput

mod acquire;
mod fanout;
mod held;
pub(crate) mod set;
mod votes;

pub(crate) use acquire::{LockRequest, acquire};
pub(crate) use fanout::Redlock;
pub(crate) use votes::drift;

// The path that the docs of `crate::wait` link to.
#[cfg(doc)]
pub(crate) use acquire::Retry;
