//! The data-owning side of corekv. A [`Shard`] is the part of the keyspace
//! one core owns: its databases, values, expiry state and statistics, and the
//! command handlers that run against them. This crate knows nothing of
//! sockets, RESP parsing or other cores: it is handed parsed arguments and an
//! output buffer, and writes the RESP reply where the data lives.

pub mod args;
pub mod bytes;
pub mod commands;
pub mod config;
pub mod db;
pub mod evict;
pub mod glob;
pub mod memory;
pub mod notify;
pub mod numbers;
pub mod observe;
pub mod prefetch;
pub mod propagate;
pub mod rdb;
pub mod reply;
pub mod shard;
pub mod snapshot;
pub mod table;
pub mod tracking;
pub mod types;
pub mod value;
pub mod watch;

pub use args::Args;
pub use commands::{CommandSpec, Ctx, Merge, Route};
pub use config::Config;
pub use reply::Reply;
pub use shard::{unix_ms, Shard};

#[cfg(test)]
mod layout {
    /// Per-key memory is a product goal: keep the entry at one cache line.
    #[test]
    fn entry_is_64_bytes() {
        assert_eq!(std::mem::size_of::<crate::value::Value>(), 24);
        assert_eq!(std::mem::size_of::<crate::db::Entry>(), 64);
    }
}
