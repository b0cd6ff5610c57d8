//! The client-facing side of corekv: RESP parsing, connections, command
//! look-up, routing by slot to the owning shard, cross-core dispatch and the
//! merging of split commands. It knows how to reach a shard, not how a value
//! is stored.

pub mod acl;
pub mod blocking;
pub mod client_evict;
pub mod clients;
pub mod cluster;
pub mod commands;
pub mod conn;
pub mod coordinator;
pub mod core;
pub mod execute;
pub mod fd_limit;
pub mod fd_shed;
pub mod latency;
pub mod listen;
pub mod log;
pub mod mesh;
pub mod metrics;
pub mod monitor;
pub mod notify;
pub mod observe;
pub mod pause;
pub mod persistence;
pub mod pipeline;
pub mod prefetch;
pub mod pubsub;
pub mod push;
pub mod replication;
pub mod resp;
pub mod ring;
pub mod router;
pub mod scripting;
pub mod server;
pub mod session;
pub mod slot;
pub mod stream;
pub mod tls;
pub mod tracking;
