//! Reply helpers every command family shares.

use crate::session::Connection;

/// A reply written with the connection's protocol.
pub fn reply(conn: &mut Connection, write: impl FnOnce(&mut shard::Reply)) {
    let resp3 = conn.state.resp3;
    conn.pipeline.local(|out| write(&mut shard::Reply::new(out, resp3)));
}

/// A HELP reply: status lines.
pub fn help(conn: &mut Connection, lines: &[&str]) {
    reply(conn, |r| {
        r.array(lines.len());
        for l in lines {
            r.simple(l);
        }
    });
}
