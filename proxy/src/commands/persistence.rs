//! SAVE, BGSAVE, LASTSAVE, BGREWRITEAOF (the snapshot machinery is in crate::persistence).

use super::reply::reply;
use crate::persistence::{self, aof, SaveError};
use crate::session::Connection;
use shard::reply::errors::SYNTAX;
use shard::Args;
use std::sync::atomic::Ordering::Relaxed;

const IN_PROGRESS: &str = "ERR Background save already in progress";
const REWRITING: &str = "ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.";

/// SAVE: a point-in-time snapshot; replies once it is on disk. Unlike
/// Redis, other clients keep being served meanwhile. Redis saves beside a
/// running AOF rewrite; here the walk is the rewrite's until it ends.
pub async fn save(conn: &mut Connection) {
    loop {
        match persistence::save(&conn.core, false).await {
            Ok(()) => return reply(conn, |r| r.ok()),
            Err(SaveError::InProgress) => return conn.error(IN_PROGRESS),
            Err(SaveError::Rewriting) => glommio::timer::sleep(std::time::Duration::from_millis(10)).await,
            Err(SaveError::Failed(_)) => return conn.error("ERR"),
        }
    }
}

/// BGSAVE [SCHEDULE]: replies once the cut is taken. While an AOF rewrite
/// runs, an error, or with SCHEDULE a save that core 0's cron starts once
/// the rewrite has ended (Redis's `rdb_bgsave_scheduled`).
pub async fn bgsave(conn: &mut Connection, args: Args<'_>) {
    let schedule = args.len() == 2 && args.is(1, "schedule");
    if args.len() > 2 || (args.len() == 2 && !schedule) {
        return conn.error(SYNTAX);
    }
    let started = if conn.pipeline.unit.is_some() {
        persistence::bgsave_after_unit(&conn.core)
    } else {
        persistence::bgsave(&conn.core).await
    };
    match started {
        Ok(()) => reply(conn, |r| r.simple("Background saving started")),
        Err(SaveError::InProgress) => conn.error(IN_PROGRESS),
        Err(SaveError::Rewriting) if schedule => {
            conn.core.process.save_status.bgsave_scheduled.store(true, Relaxed);
            reply(conn, |r| r.simple("Background saving scheduled"))
        }
        Err(SaveError::Rewriting) => conn.error(REWRITING),
        Err(SaveError::Failed(_)) => conn.error("ERR"),
    }
}

pub fn lastsave(conn: &mut Connection) {
    let t = conn.core.process.save_status.last_save.load(Relaxed);
    reply(conn, |r| r.int(t as i64))
}

/// `BGREWRITEAOF`: started in the background, answered at once as Redis;
/// during a save it is scheduled, and core 0's cron starts it after.
pub fn bgrewriteaof(conn: &mut Connection) {
    if !conn.core.aof.enabled.get() {
        // Redis rewrites a file even with the AOF off; here there is no
        // file to rewrite until the AOF is on.
        return conn.error("ERR AOF is off (appendonly no): nothing to rewrite");
    }
    let answer = match aof::start_rewrite(&conn.core) {
        Ok(()) => "Background append only file rewriting started",
        Err(SaveError::Rewriting) => {
            return conn.error("ERR Background append only file rewriting already in progress")
        }
        Err(_) => {
            conn.core.process.save_status.rewrite_scheduled.store(true, Relaxed);
            "Background append only file rewriting scheduled"
        }
    };
    conn.pipeline.local(|out| shard::Reply::new(out, false).simple(answer));
}
