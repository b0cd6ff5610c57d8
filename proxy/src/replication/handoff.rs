//! What a connection learns before it turns into a replica's link (a leaf):
//! REPLCONF's announcements and the SYNC/PSYNC that hands the socket over.

#[derive(Default, Clone)]
pub struct ReplicaHello {
    pub listening_port: u16,
    pub ip: Option<String>,
    /// The replica reads the diskless EOF-marker format.
    pub capa_eof: bool,
    /// It understands +CONTINUE <new replid>.
    pub capa_psync2: bool,
}

pub enum SyncRequest {
    /// PSYNC replid offset (offset: the next byte the replica needs, 1-based).
    Psync { replid: String, offset: i64 },
    /// The old SYNC: a full resync without the +FULLRESYNC line.
    Sync,
}
