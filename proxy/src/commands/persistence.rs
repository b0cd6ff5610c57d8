//! SAVE, BGSAVE, LASTSAVE (the snapshot machinery is in crate::persistence).

use super::reply;
use crate::conn::Connection;
use crate::persistence::{self, SaveError};
use shard::reply::errors::SYNTAX;
use shard::Args;
use std::sync::atomic::Ordering::Relaxed;

const IN_PROGRESS: &str = "ERR Background save already in progress";

/// SAVE: a point-in-time snapshot; replies once it is on disk. Unlike
/// Redis, other clients keep being served meanwhile.
pub async fn save(conn: &mut Connection) {
    match persistence::save(&conn.core, false).await {
        Ok(()) => reply(conn, |r| r.ok()),
        Err(SaveError::InProgress) => conn.error(IN_PROGRESS),
        Err(SaveError::Failed(_)) => conn.error("ERR"),
    }
}

/// BGSAVE [SCHEDULE]: replies once the cut is taken. SCHEDULE only
/// differs while an AOF rewrite runs, which never overlaps a save here.
pub async fn bgsave(conn: &mut Connection, args: Args<'_>) {
    if args.len() > 2 || (args.len() == 2 && !args.is(1, "schedule")) {
        return conn.error(SYNTAX);
    }
    match persistence::bgsave(&conn.core).await {
        Ok(()) => reply(conn, |r| r.simple("Background saving started")),
        Err(SaveError::InProgress) => conn.error(IN_PROGRESS),
        Err(SaveError::Failed(_)) => conn.error("ERR"),
    }
}

pub fn lastsave(conn: &mut Connection) {
    let t = conn.core.process.save_status.last_save.load(Relaxed);
    reply(conn, |r| r.int(t as i64))
}
