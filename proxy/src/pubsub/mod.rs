//! Pub/Sub across cores (Redis 7.0's channels, patterns and shard
//! channels). Each core keeps its own subscribers (`state.rs`); a publish
//! reaches only the cores whose summary says they have a matching
//! subscriber (`publish.rs`), where the message is encoded once and
//! copied to each subscriber's push queue (`fanout.rs`, `crate::push`).
//!
//! The entry points for the rest of the server:
//! - [`publish`](publish::publish): PUBLISH / SPUBLISH from any core,
//!   returning the receiver count over all cores;
//! - [`publish_fire`](publish::publish_fire): the same without waiting
//!   (messages the server raises, e.g. keyspace notifications);
//! - [`Kind`](state::Kind): channel, pattern or shard channel.

pub mod fanout;
pub mod publish;
pub mod state;

pub use publish::{publish, publish_fire};
pub use state::Kind;
