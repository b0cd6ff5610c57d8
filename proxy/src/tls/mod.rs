//! TLS (`tls-port`, `tls-replication`, `tls-cluster`) with rustls on the
//! ring crypto provider: settings.rs builds the rustls configurations from
//! Redis's `tls-*` settings, stream.rs is the record layer over any socket
//! (a ring or reactor `ClientStream`, the replica link), accept.rs the
//! server side's handshake before a connection is served.

pub mod accept;
pub mod settings;
pub mod stream;
