//! Storage that refuses stale writers, for the fencing example and its test.
//!
//! A lock lease can run out while its owner is paused (a GC pause, a swapped
//! out process, a VM migration, a long network stall) without the owner
//! noticing. When it resumes it still believes it holds the lock, and writes.
//! The fix is on the storage side: every write carries the writer's fencing
//! token ([`LockGuard::fencing_token`](lockattr::LockGuard::fencing_token)),
//! and the storage applies a write only if its token is at least the highest
//! it has seen for that record. The check and the write are one Lua script,
//! so nothing can slip in between.

use redis::aio::MultiplexedConnection;

/// The record is a hash: `value`, and `token`, the highest fencing token
/// that wrote it. A token lower than that is refused; an equal one is the
/// same holder writing again.
const WRITE: &str = r"
local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < seen then
  return {0, seen}
end
redis.call('hset', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, token}
";

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Stored.
    Applied,
    /// Refused: a writer with fencing token `seen` wrote after this one's lock.
    Stale { seen: u64 },
}

/// Records in Redis that only accept writes from the latest lock holder.
pub struct FencedStore {
    connection: MultiplexedConnection,
    script: redis::Script,
}

impl FencedStore {
    /// A store on the Redis at `url` (any Redis; it need not be the lock's).
    pub async fn open(url: &str) -> redis::RedisResult<FencedStore> {
        let connection = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(FencedStore {
            connection,
            script: redis::Script::new(WRITE),
        })
    }

    /// Writes `value` to `record` if `fencing_token` is not older than the
    /// last writer's.
    pub async fn write(
        &mut self,
        record: &str,
        fencing_token: u64,
        value: &str,
    ) -> redis::RedisResult<Write> {
        let (applied, seen): (i64, u64) = self
            .script
            .key(record)
            .arg(fencing_token)
            .arg(value)
            .invoke_async(&mut self.connection)
            .await?;
        Ok(if applied == 1 {
            Write::Applied
        } else {
            Write::Stale { seen }
        })
    }

    /// The record's value, if any.
    pub async fn read(&mut self, record: &str) -> redis::RedisResult<Option<String>> {
        redis::cmd("HGET")
            .arg(record)
            .arg("value")
            .query_async(&mut self.connection)
            .await
    }
}
