//! This process as a replica of a Redis (or corekv) primary.

pub mod state;

use crate::core::Core;

/// The replication id and offset this process followed as a replica, for
/// a primary it turns into (REPLICAOF NO ONE): Redis keeps them as its
/// second id. `None` when it never was one.
pub fn promoted_ids(_core: &Core) -> Option<(String, u64)> {
    None
}

/// Whether this process follows a primary.
pub fn is_replica(_core: &Core) -> bool {
    false
}

/// INFO replication's replica-side fields.
pub fn info_lines(_core: &Core, _out: &mut String) {}

/// REPLICAOF host port / NO ONE: the reply's status text.
pub async fn replicaof(_core: &std::rc::Rc<Core>, target: Option<(String, u16)>) -> Result<&'static str, String> {
    match target {
        None => Ok("OK"),
        Some(_) => Err("ERR replication as a replica is not available yet".into()),
    }
}

/// ROLE on a replica: (primary host, port, link state, offset).
pub fn role_reply(_core: &Core) -> Option<(String, u16, &'static str, i64)> {
    None
}
