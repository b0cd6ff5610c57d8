//! MODULE: corekv is not redis-server and cannot load its C modules (they
//! call into redis-server's own memory, objects and event loop). LIST
//! answers that none is loaded; LOAD and LOADEX answer Redis's own failure
//! and log why; UNLOAD finds no such module (Redis's moduleCommand).

use super::debug::{help_reply, subcommand_error};
use super::reply::reply;
use crate::log;
use crate::session::Connection;
use shard::{Args, CommandSpec};

pub fn module(conn: &mut Connection, spec: &CommandSpec, args: Args) {
    match spec.name {
        "module|help" => help_reply(
            conn,
            args.get(0),
            &[
                "LIST",
                "    Return a list of loaded modules.",
                "LOAD <path> [<arg> ...]",
                "    Load a module library from <path>, passing to it any optional arguments.",
                "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
                "    Load a module library from <path>, while passing it module configurations and optional arguments.",
                "UNLOAD <name>",
                "    Unload a module.",
            ],
        ),
        "module|list" => reply(conn, |r| r.array(0)),
        "module|load" | "module|loadex" => {
            log::warning(&format!(
                "Module {} failed to load: corekv cannot load Redis modules (they are built against redis-server's own API)",
                String::from_utf8_lossy(args.get(2))
            ));
            conn.error("ERR Error loading the extension. Please check the server logs.");
        }
        "module|unload" => conn.error("ERR Error unloading module: no such module with that name"),
        _ => subcommand_error(conn, &args),
    }
}
