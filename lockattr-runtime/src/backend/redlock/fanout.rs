//! Reaching every node of a Redlock: the nodes and their connections, one
//! request sent to each at once, and the answers as they come (see the
//! module docs of `redlock`: concurrent fan-out, connections opened apart
//! from requests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;

use crate::LockError;
use crate::address::{Address, TlsFiles};
use crate::backend::node_facts;
use crate::backend::shared::Timeouts;
use crate::backend::single::SingleNode;
use crate::io;

/// The shortest default node timeout.
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(10);

/// Several independent Redis masters.
#[derive(Debug)]
pub(crate) struct Redlock {
    /// Shared with the tasks that open their connections.
    pub(super) nodes: Vec<Arc<SingleNode>>,
    /// A majority: `nodes / 2 + 1`.
    pub(super) quorum: usize,
    /// How long each node may take to answer; `None`: from the lease.
    pub(super) node_timeout: Option<Duration>,
    /// The connect and response timeouts.
    pub(super) timeouts: Timeouts,
    /// Nodes that have kept their data for less than `max_lease` do not vote.
    pub(super) delay_restarted: bool,
    /// The longest lease of any lock on these nodes.
    pub(super) max_lease: Duration,
    /// The restart marker's key, for messages.
    pub(super) marker_key: String,
    pub(super) server: String,
}

/// A request to one node that owns what it needs, so that it can finish
/// in the background.
pub(super) trait NodeOp<T>: Future<Output = Result<T, LockError>> + Send + 'static {}

impl<T, F: Future<Output = Result<T, LockError>> + Send + 'static> NodeOp<T> for F {}

impl Redlock {
    /// Parses the URLs; does not connect. `prefix` is the Locker's key
    /// prefix (the restart marker is `<prefix>node` on each node).
    pub(crate) fn new(
        urls: &[Address],
        tls: &TlsFiles,
        timeouts: Timeouts,
        node_timeout: Option<Duration>,
        delay_restarted: bool,
        max_lease: Duration,
        prefix: &str,
    ) -> Result<Redlock, LockError> {
        if urls.len() < 3 || urls.len().is_multiple_of(2) {
            let hint = if urls.len() == 1 {
                "use `Locker::new(url)` for a single server"
            } else {
                "a majority of an even number tolerates no more failed nodes than the odd \
                 number below it: use 3, 5 or 7 independent masters"
            };
            return Err(LockError::invalid(
                "Redlock nodes",
                format!("{} URLs given; {hint}", urls.len()),
            ));
        }
        let nodes = urls
            .iter()
            .map(|url| {
                SingleNode::new(url, tls, timeouts).map(|n| Arc::new(n.track_restarts(prefix)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The same spelling twice is refused at once; other spellings of one
        // server are found by connecting (see `refuse_duplicates`).
        let mut servers: Vec<&str> = nodes.iter().map(|n| n.server()).collect();
        servers.sort_unstable();
        if servers.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(LockError::invalid(
                "Redlock nodes",
                "the same server is given twice; each node must be an independent master",
            ));
        }
        let server = format!("redlock[{}]", servers.join(","));
        Ok(Redlock {
            quorum: nodes.len() / 2 + 1,
            nodes,
            node_timeout,
            timeouts,
            delay_restarted,
            max_lease,
            marker_key: node_facts::marker_key(prefix),
            server,
        })
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// The nodes, in the order given.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &SingleNode> {
        self.nodes.iter().map(|node| &**node)
    }

    /// Runs `op` on every node at once (each for at most the response
    /// timeout); the answers in node order.
    pub(crate) async fn on_every_node<'a, T, F>(
        &'a self,
        op: impl Fn(&'a SingleNode) -> F,
    ) -> Vec<Result<T, LockError>>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        self.each(0..self.nodes.len(), self.timeouts.response, op)
            .await
            .into_iter()
            .map(|(_, answer)| answer)
            .collect()
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    /// How long each node may take for a lock with this lease: the setting,
    /// or a hundredth of the lease, at least 10 ms and at most the response
    /// timeout.
    pub(super) fn timeout(&self, expire: Duration) -> Duration {
        self.node_timeout.unwrap_or_else(|| {
            (expire / 100)
                .max(MIN_NODE_TIMEOUT)
                .min(self.timeouts.response)
        })
    }

    /// Makes sure every node in `which` has a connection on this runtime
    /// (with its facts read), and says which do.
    ///
    /// A missing connection is opened by a task of its own, bounded by the
    /// connect timeout (plus the response timeout, for the facts and the
    /// script load on it): the task goes on when this future is dropped or
    /// stops waiting, so a slow link is connected once, not cut off again
    /// and again. This waits until every such task is done, or, once a
    /// majority of `which` is ready, for at most `grace` more: a node that
    /// is down costs little when the others answer.
    pub(super) async fn ready(
        &self,
        which: &[usize],
        grace: Duration,
    ) -> Vec<Result<(), LockError>> {
        let mut ready: Vec<Option<Result<(), LockError>>> = which
            .iter()
            .map(|&i| self.nodes[i].is_connected().then_some(Ok(())))
            .collect();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Not reached (lock operations run in a runtime): connect inline.
            return ready.into_iter().map(|r| r.unwrap_or(Ok(()))).collect();
        };
        let mut opening: FuturesUnordered<_> = ready
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_none())
            .map(|(pos, _)| {
                let node = self.nodes[which[pos]].clone();
                let task = runtime.spawn(async move { node.connect().await });
                async move { (pos, task.await) }
            })
            .collect();
        let give_up = Instant::now() + self.timeouts.connect + self.timeouts.response;
        let mut until = give_up;
        let majority = self.quorum.min(which.len());
        while !opening.is_empty() {
            if ready.iter().filter(|r| matches!(r, Some(Ok(())))).count() >= majority {
                until = until.min(Instant::now() + grace);
            }
            tokio::select! {
                Some((pos, joined)) = opening.next() => {
                    ready[pos] = Some(joined.unwrap_or_else(|e| Err(LockError::Runtime {
                        reason: format!("the task connecting to a Redlock node failed: {e}"),
                    })));
                }
                () = tokio::time::sleep_until(until.into()) => break,
            }
        }
        which
            .iter()
            .zip(ready)
            .map(|(&i, r)| {
                r.unwrap_or_else(|| {
                    Err(LockError::Connection {
                        server: self.nodes[i].server().to_owned(),
                        source: "still connecting (it goes on in the background)".into(),
                    })
                })
            })
            .collect()
    }

    /// Runs `op` at once on the nodes in `which` that are ready (see
    /// [`ready`](Self::ready)), each for at most `limit`.
    pub(super) async fn each<'a, T, F>(
        &'a self,
        which: impl Iterator<Item = usize>,
        limit: Duration,
        op: impl Fn(&'a SingleNode) -> F,
    ) -> Vec<(usize, Result<T, LockError>)>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        let which: Vec<usize> = which.collect();
        let ready = self.ready(&which, limit).await;
        self.each_ready(which.into_iter().zip(ready), limit, op)
            .await
    }

    /// Runs `op` on the nodes that are ready, each for at most `limit`; the
    /// others fail with their error.
    pub(super) async fn each_ready<'a, T, F>(
        &'a self,
        which: impl Iterator<Item = (usize, Result<(), LockError>)>,
        limit: Duration,
        op: impl Fn(&'a SingleNode) -> F,
    ) -> Vec<(usize, Result<T, LockError>)>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        join_all(which.map(|(i, ready)| {
            let node: &'a SingleNode = &self.nodes[i];
            bounded(i, node.server(), ready.map(|()| op(node)), limit)
        }))
        .await
    }

    /// [`each_ready`](Self::each_ready) as requests that own what they
    /// need, answering in the order they come: an operation that a
    /// majority has decided can leave the others to finish in the
    /// background (see [`Late`]).
    pub(super) fn start_each<T: Send + 'static, F: NodeOp<T>>(
        &self,
        which: impl Iterator<Item = (usize, Result<(), LockError>)>,
        limit: Duration,
        op: impl Fn(Arc<SingleNode>) -> F,
    ) -> Requests<T> {
        which
            .map(|(i, ready)| {
                let node = &self.nodes[i];
                let server = node.server().to_owned();
                let op = ready.map(|()| op(node.clone()));
                Box::pin(async move { bounded(i, &server, op, limit).await })
                    as BoxFuture<'static, (usize, Result<T, LockError>)>
            })
            .collect()
    }

    /// Sends `op` to the nodes in `which` once they are ready (see
    /// [`ready`](Self::ready)), as requests that are not cut off by the
    /// node timeout `limit` (only by the response timeout, when longer): a
    /// release dropped on its way to its connection would never be sent,
    /// and leave the lock on that node until its lease ends. See
    /// [`gather`](Self::gather) for waiting on them.
    pub(super) async fn start_uncut<T: Send + 'static, F: NodeOp<T>>(
        &self,
        which: &[usize],
        limit: Duration,
        op: impl Fn(Arc<SingleNode>) -> F,
    ) -> Requests<T> {
        let ready = self.ready(which, limit).await;
        self.start_each(
            which.iter().copied().zip(ready),
            limit.max(self.timeouts.response),
            op,
        )
    }

    /// The answers of `requests` (to the nodes in `which`) that come within
    /// `limit`, or until `decided` says the answers so far settle the
    /// operation; a node that has not answered by then counts as a node
    /// that did not answer within the node timeout. The requests still on
    /// their way finish in the background.
    pub(super) async fn gather<T: Send + 'static>(
        &self,
        mut requests: Requests<T>,
        which: &[usize],
        limit: Duration,
        mut decided: impl FnMut(usize, &Result<T, LockError>) -> bool,
    ) -> Vec<(usize, Result<T, LockError>)> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut answers: Vec<(usize, Result<T, LockError>)> = Vec::with_capacity(which.len());
        let mut settled = false;
        while let Ok(Some((i, answer))) = tokio::time::timeout_at(deadline, requests.next()).await {
            settled = decided(i, &answer);
            answers.push((i, answer));
            if settled {
                break;
            }
        }
        if !settled {
            for &i in which {
                if !answers.iter().any(|&(j, _)| j == i) {
                    answers.push((
                        i,
                        Err(LockError::Connection {
                            server: self.nodes[i].server().to_owned(),
                            source: format!("no answer within the node timeout ({limit:?})").into(),
                        }),
                    ));
                }
            }
        }
        Late(requests).detach();
        answers
    }
}

/// `op` on the node at index `i` (named `server`), cut off after `limit`;
/// `Err` when the node was not ready.
async fn bounded<T>(
    i: usize,
    server: &str,
    op: Result<impl Future<Output = Result<T, LockError>>, LockError>,
    limit: Duration,
) -> (usize, Result<T, LockError>) {
    let op = match op {
        Ok(op) => op,
        Err(e) => return (i, Err(e)),
    };
    // Cut off, the request leaves its connection in place.
    let result = match tokio::time::timeout(limit, op).await {
        Ok(result) => result,
        Err(_) => Err(LockError::Connection {
            server: server.to_owned(),
            source: format!("no answer within the node timeout ({limit:?})").into(),
        }),
    };
    (i, result)
}

/// The requests of one operation on the nodes, each answering with its
/// node's index, in the order the answers come.
pub(super) type Requests<T> = FuturesUnordered<BoxFuture<'static, (usize, Result<T, LockError>)>>;

/// The requests of an operation still on their way when a majority had
/// decided it: the slowest nodes do not hold the caller up. Their requests
/// must still run (a node left out would keep an acquisition's lock, or
/// miss it, only by chance), so they are never dropped unanswered: they
/// are waited for, or left to finish on the I/O thread
/// ([`detach`](Late::detach)). Dropped, they are detached.
pub(crate) struct Late<T: Send + 'static>(pub(super) Requests<T>);

impl<T: Send + 'static> Late<T> {
    /// Lets the requests finish in the background; their answers are not
    /// needed.
    pub(crate) fn detach(self) {
        drop(self);
    }
}

impl<T: Send + 'static> Drop for Late<T> {
    fn drop(&mut self) {
        let requests = std::mem::take(&mut self.0);
        if requests.is_empty() {
            return;
        }
        let finishing = io::spawn_here(async move {
            requests.for_each(|_| async {}).await;
        });
        if let Err(e) = finishing {
            // Dropped here: a request not yet sent is not sent, and an
            // acquisition cut off gives its lock back on that node.
            tracing::debug!(target: "lockattr", error = %e, "cannot finish the last requests of a Redlock operation in the background");
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Five nodes that are never reached.
    pub(in crate::backend::redlock) fn five() -> Redlock {
        let urls: Vec<Address> = (1..=5)
            .map(|i| Address::of(format!("redis://10.0.0.{i}/")))
            .collect();
        let timeouts = Timeouts {
            connect: Duration::from_secs(1),
            response: Duration::from_secs(1),
        };
        Redlock::new(
            &urls,
            &TlsFiles::default(),
            timeouts,
            None,
            true,
            Duration::from_secs(60),
            "lockattr:",
        )
        .unwrap()
    }

    #[test]
    fn a_majority_is_needed() {
        assert_eq!(five().quorum, 3);
    }

    #[test]
    fn node_timeout_follows_the_lease_within_bounds() {
        let r = five();
        assert_eq!(
            r.timeout(Duration::from_secs(10)),
            Duration::from_millis(100)
        );
        assert_eq!(r.timeout(Duration::from_millis(100)), MIN_NODE_TIMEOUT);
        assert_eq!(r.timeout(Duration::from_secs(3600)), Duration::from_secs(1));
    }

    #[test]
    fn node_lists_are_checked() {
        let t = Timeouts {
            connect: Duration::from_secs(1),
            response: Duration::from_secs(1),
        };
        let urls = |n: usize| {
            (0..n)
                .map(|i| Address::of(format!("redis://10.0.0.{i}/")))
                .collect::<Vec<_>>()
        };
        for n in [0, 1, 2, 4, 6] {
            let err = Redlock::new(
                &urls(n),
                &TlsFiles::default(),
                t,
                None,
                true,
                Duration::from_secs(60),
                "lockattr:",
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(&format!("{n} URLs")), "{err}");
        }
        let twice = ["redis://a/", "redis://b/", "redis://a/"].map(Address::of);
        assert!(
            Redlock::new(
                &twice,
                &TlsFiles::default(),
                t,
                None,
                true,
                Duration::from_secs(60),
                "lockattr:"
            )
            .unwrap_err()
            .to_string()
            .contains("twice")
        );
    }
}
