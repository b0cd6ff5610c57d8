//! The push path: bytes a connection receives while it waits on its socket
//! (Pub/Sub messages, keyspace notifications, tracking invalidations,
//! MONITOR lines), raised on its own core or on any other.
//!
//! - `queue.rs` (a leaf, plain data): a connection's [`PushQueue`] and the
//!   core's registry of them by client id.
//! - `deliver.rs`: [`deliver`](deliver::deliver) from any core (batched per
//!   destination core over the mesh), [`deliver_here`](deliver::deliver_here)
//!   on the client's own core, and [`attach`](deliver::attach) /
//!   [`detach`](deliver::detach) for a connection.
//!
//! The connection's socket loop (`conn.rs`) waits on its queue beside its
//! socket, splices queued bytes into its output and counts them in its
//! output buffer limit (the `pubsub` class while it is subscribed).

pub mod deliver;
pub mod queue;

pub use deliver::{attach, deliver, deliver_here, detach};
pub use queue::PushQueue;
