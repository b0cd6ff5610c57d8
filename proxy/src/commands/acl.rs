//! ACL (SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT GENPASS LOG DRYRUN
//! SAVE LOAD), authentication and the check the router runs on every
//! command. Core 0 numbers every change to the users table and sends the
//! new table to every core, so each core reads its own copy, lock-free.

use super::reply::{help, reply};
use crate::acl::commands::{registry, CATEGORIES};
use crate::acl::log::Entry;
use crate::acl::selector::Denied;
use crate::acl::users::Users;
use crate::coordinator::dispatch::{call_all, call_task};
use crate::core::Core;
use crate::session::Connection;
use shard::args::parse_i64;
use shard::reply::errors::{NOAUTH, NOT_INTEGER};
use shard::{Args, CommandSpec};
use std::rc::Rc;
use std::time::Instant;

pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Redis's `authRequired`: not authenticated, and the default user asks
/// for a password (or is off).
pub fn auth_required(conn: &Connection) -> bool {
    let default = conn.core.acl.users().default_user();
    !(default.nopass && default.enabled)
}

/// Brings the connection's user up to the core's table. False when the
/// user was deleted: the connection closes, as Redis frees it.
fn refresh_user(conn: &mut Connection) -> bool {
    let generation = conn.core.acl.generation.get();
    if conn.state.acl_generation == generation {
        return true;
    }
    conn.state.acl_generation = generation;
    let users = conn.core.acl.users();
    match users.get(&conn.state.user.name) {
        Some(user) => {
            conn.state.unrestricted = user.unrestricted();
            conn.state.user = user.clone();
            true
        }
        None => {
            conn.state.user = users.default_user();
            conn.state.unrestricted = conn.state.user.unrestricted();
            conn.state.authenticated = false;
            conn.state.close = true;
            false
        }
    }
}

/// The router's check (`ACLCheckAllPerm`): true when the command was
/// refused with NOPERM (and logged).
pub fn refused(conn: &mut Connection, spec: &'static CommandSpec, args: &Args) -> bool {
    if conn.state.master {
        return false;
    }
    if !refresh_user(conn) {
        conn.reject(NOAUTH);
        return true;
    }
    if conn.state.unrestricted {
        return false;
    }
    let Some(id) = registry().id_of(spec) else { return false };
    let Err(denied) = conn.state.user.check(id, args) else { return false };
    if conn.state.in_exec {
        // Redis's execCommand checks again: the rules changed since queuing.
        let (reason, object, why) = match denied {
            Denied::Command => {
                ("command", spec.name.as_bytes().to_vec(), "no permission to execute the command or subcommand")
            }
            Denied::Key(i) => ("key", args.get(i).to_vec(), "no permission to touch the specified keys"),
            Denied::Channel(i) => {
                ("channel", args.get(i).to_vec(), "no permission to access one of the channels used as arguments")
            }
        };
        let username = conn.state.user.name.clone();
        log(conn, reason, object, username);
        conn.error(&format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {why}"));
        return true;
    }
    let (reason, object, msg) = match denied {
        Denied::Command => (
            "command",
            spec.name.as_bytes().to_vec(),
            format!("NOPERM this user has no permissions to run the '{}' command", spec.name),
        ),
        Denied::Key(i) => (
            "key",
            args.get(i).to_vec(),
            "NOPERM this user has no permissions to access one of the keys used as arguments".to_string(),
        ),
        Denied::Channel(i) => (
            "channel",
            args.get(i).to_vec(),
            "NOPERM this user has no permissions to access one of the channels used as arguments".to_string(),
        ),
    };
    let username = conn.state.user.name.clone();
    log(conn, reason, object, username);
    if spec.name == "exec" {
        // A refused EXEC discards the transaction (execCommandAbort).
        conn.state.multi = None;
        conn.error(&format!("EXECABORT Transaction discarded because of: {msg}"));
    } else {
        conn.reject(&msg);
    }
    true
}

/// One ACL LOG entry for this connection.
fn log(conn: &Connection, reason: &'static str, object: Vec<u8>, username: Vec<u8>) {
    let client_info = conn
        .core
        .clients
        .borrow()
        .list
        .get(conn.state.registry_key)
        .map(|c| c.line(Instant::now()))
        .unwrap_or_default();
    let context = if conn.state.multi.is_some() || conn.state.in_exec { "multi" } else { "toplevel" };
    let entry = Entry::now(reason, context, object, username, client_info);
    let max = conn.core.config().acllog_max_len as usize;
    conn.core.acl.log.borrow_mut().add(entry, max);
}

/// AUTH and HELLO AUTH (`ACLAuthenticateUser`): on success the connection
/// is that user; a failure is logged with `command` (as the client wrote
/// it) as the object.
pub fn authenticate(conn: &mut Connection, username: &[u8], password: &[u8], command: &[u8]) -> bool {
    let users = conn.core.acl.users();
    match users.get(username) {
        Some(user) if user.check_password(password) => {
            set_user(conn, user.clone());
            conn.state.authenticated = true;
            true
        }
        _ => {
            log(conn, "auth", command.to_vec(), username.to_vec());
            false
        }
    }
}

fn set_user(conn: &mut Connection, user: Rc<crate::acl::user::User>) {
    conn.state.acl_generation = conn.core.acl.generation.get();
    conn.state.unrestricted = user.unrestricted();
    if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(conn.state.registry_key) {
        c.user = user.name.clone();
    }
    conn.state.user = user;
}

/// RESET: back to the default user (`clientSetDefaultAuth`).
pub fn reset_user(conn: &mut Connection) {
    let default = conn.core.acl.users().default_user();
    conn.state.authenticated = default.nopass && default.enabled;
    set_user(conn, default);
}

fn syntax_error(conn: &mut Connection, args: &Args) {
    conn.error(&format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&args.get(1)[..args.get(1).len().min(128)]),
        String::from_utf8_lossy(args.get(0)).to_uppercase()
    ));
}

const ACL_HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

const NO_ACLFILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// The subcommands that read this core's copy; false for the ones that
/// change the table or gather every core (`run_deferred`).
pub fn run_now(conn: &mut Connection, spec: &CommandSpec, args: Args) -> bool {
    match spec.name {
        "acl|whoami" => {
            let name = conn.state.user.name.clone();
            reply(conn, |r| r.bulk(&name));
        }
        "acl|users" | "acl|list" => {
            let users = conn.core.acl.users();
            let lines: Vec<Vec<u8>> = users
                .map
                .values()
                .map(|u| match spec.name {
                    "acl|users" => u.name.clone(),
                    _ => [&b"user "[..], &u.name, b" ", u.describe().as_bytes()].concat(),
                })
                .collect();
            reply(conn, |r| {
                r.array(lines.len());
                lines.iter().for_each(|l| r.bulk(l));
            });
        }
        "acl|cat" if args.len() > 3 => syntax_error(conn, &args),
        "acl|cat" => cat(conn, &args),
        "acl|genpass" if args.len() > 3 => syntax_error(conn, &args),
        "acl|genpass" => genpass(conn, &args),
        "acl|getuser" => getuser(conn, args.get(2)),
        "acl|dryrun" => dryrun(conn, &args),
        "acl|save" | "acl|load" if conn.core.config().aclfile.is_empty() => conn.error(NO_ACLFILE),
        "acl|save" => save(conn),
        "acl|log" if args.len() > 3 => syntax_error(conn, &args),
        "acl|help" => help(conn, ACL_HELP),
        _ => return false,
    }
    true
}

/// ACL SAVE: this core's copy, which every core shares.
fn save(conn: &mut Connection) {
    let path = conn.core.config().aclfile.clone();
    match conn.core.acl.users().save_file(&path) {
        Ok(()) => reply(conn, |r| r.ok()),
        Err(e) => {
            crate::log::warning(&format!("Writing ACL file for ACL SAVE: {}", shard::config::os_reason(&e)));
            conn.error(
                "ERR There was an error trying to save the ACLs. Please check the server logs for more information",
            )
        }
    }
}

fn cat(conn: &mut Connection, args: &Args) {
    if args.len() == 2 {
        return reply(conn, |r| {
            r.array(CATEGORIES.len());
            CATEGORIES.iter().for_each(|c| r.bulk(c.as_bytes()));
        });
    }
    let name = String::from_utf8_lossy(args.get(2)).into_owned();
    let Some(cat) = crate::acl::commands::category(&name) else {
        let shown: String = name.chars().take(128).collect();
        return conn.error(&format!("ERR Unknown category '{shown}'"));
    };
    let names: Vec<&str> = registry().in_category(cat).map(|c| c.name).collect();
    reply(conn, |r| {
        r.array(names.len());
        names.iter().for_each(|n| r.bulk(n.as_bytes()));
    });
}

fn genpass(conn: &mut Connection, args: &Args) {
    let bits = if args.len() == 3 {
        match parse_i64(args.get(2)) {
            Some(b) => b,
            None => return conn.error(NOT_INTEGER),
        }
    } else {
        256
    };
    if bits <= 0 || bits > 4096 {
        return conn.error(
            "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
        );
    }
    let chars = ((bits + 3) / 4) as usize;
    let mut hex = String::new();
    while hex.len() < chars {
        hex.push_str(&crate::core::random_id());
    }
    hex.truncate(chars);
    reply(conn, |r| r.bulk(hex.as_bytes()));
}

fn getuser(conn: &mut Connection, name: &[u8]) {
    let users = conn.core.acl.users();
    let Some(user) = users.get(name).cloned() else {
        return reply(conn, |r| r.null());
    };
    reply(conn, |r| {
        r.map(6);
        r.bulk(b"flags");
        let flags = user.flags();
        r.set(flags.len());
        flags.iter().for_each(|f| r.bulk(f.as_bytes()));
        r.bulk(b"passwords");
        r.array(user.passwords.len());
        user.passwords.iter().for_each(|p| r.bulk(p.as_bytes()));
        let selector = |r: &mut shard::Reply, s: &crate::acl::selector::Selector| {
            r.bulk(b"commands");
            r.bulk(s.describe_commands().as_bytes());
            r.bulk(b"keys");
            r.bulk(s.describe_keys().as_bytes());
            r.bulk(b"channels");
            r.bulk(s.describe_channels().as_bytes());
        };
        selector(r, &user.selectors[0]);
        r.bulk(b"selectors");
        r.array(user.selectors.len() - 1);
        for s in &user.selectors[1..] {
            r.map(3);
            selector(r, s);
        }
    });
}

fn dryrun(conn: &mut Connection, args: &Args) {
    let users = conn.core.acl.users();
    let Some(user) = users.get(args.get(2)).cloned() else {
        let name = String::from_utf8_lossy(args.get(2)).into_owned();
        return conn.error(&format!("ERR User '{name}' not found"));
    };
    let line = Args::new(args.buf(), &args.ranges()[3..]);
    let mut spec = conn.core.commands.lookup(line.get(0));
    if let Some(s) = spec.filter(|s| !s.subcommands.is_empty() && line.len() >= 2) {
        spec = s.subcommand(line.get(1));
    }
    let Some(spec) = spec else {
        let name = String::from_utf8_lossy(line.get(0)).into_owned();
        return conn.error(&format!("ERR Command '{name}' not found"));
    };
    if !spec.arity_ok(line.len()) {
        return conn.error(&format!("ERR wrong number of arguments for '{}' command", spec.name));
    }
    let Some(id) = registry().id_of(spec) else { return reply(conn, |r| r.ok()) };
    let text = match user.check(id, &line) {
        Ok(()) => return reply(conn, |r| r.ok()),
        Err(Denied::Command) => format!("This user has no permissions to run the '{}' command", spec.name),
        Err(Denied::Key(i)) => {
            format!("This user has no permissions to access the '{}' key", String::from_utf8_lossy(line.get(i)))
        }
        Err(Denied::Channel(i)) => {
            format!("This user has no permissions to access the '{}' channel", String::from_utf8_lossy(line.get(i)))
        }
    };
    reply(conn, |r| r.bulk(text.as_bytes()));
}

/// A change of the users table. It runs on core 0 against its copy, which
/// numbers it; the new table then goes to every core, where connections of
/// the users `f` names (deleted, or replaced by ACL LOAD) are closed,
/// this connection after its reply.
async fn change<R, F>(conn: &mut Connection, f: F) -> Option<Result<R, String>>
where
    R: Send + 'static,
    F: FnOnce(&mut Users) -> Result<(R, Vec<Vec<u8>>), String> + Send + 'static,
{
    let me = conn.state.id;
    let outcome = call_task(&conn.core, 0, move |core0: Rc<Core>| async move {
        let mut users = (*core0.acl.users()).clone();
        let (result, closed) = f(&mut users)?;
        let generation = core0.acl.generation.get() + 1;
        let plain = users.to_plain();
        core0.acl.install(users, generation);
        let closed_here = closed.clone();
        call_all(&core0, move |core| {
            core.acl.install(Users::from_plain(plain.clone()), generation);
            let clients = core.clients.borrow();
            for (key, c) in clients.list.iter() {
                if c.id != me && closed.contains(&c.user) {
                    clients.kill(key);
                }
            }
            drop(clients);
            crate::pubsub::fanout::kill_unpermitted(core, me);
        })
        .await;
        Ok((result, closed_here))
    })
    .await?;
    Some(outcome.map(|(result, closed)| {
        if closed.contains(&conn.state.user.name) {
            conn.state.close = true;
        }
        result
    }))
}

/// CONFIG SET requirepass (the default user's password) or
/// acl-pubsub-default, applied through core 0 as any ACL change.
pub async fn config_changed(conn: &mut Connection, password: bool) {
    let (requirepass, all_channels) = {
        let config = conn.core.config();
        (config.requirepass.clone(), config.acl_pubsub_default_all)
    };
    change(conn, move |users| {
        if password {
            users.set_default_password(&requirepass);
        }
        users.all_channels_default = all_channels;
        Ok(((), Vec::new()))
    })
    .await;
}

/// The subcommands that change the table or read every core's log.
pub async fn run_deferred(conn: &mut Connection, spec: &CommandSpec, args: Args<'_>) {
    match spec.name {
        "acl|setuser" => {
            let name = args.get(2).to_vec();
            let rules: Vec<Vec<u8>> = args.iter().skip(3).map(<[u8]>::to_vec).collect();
            let done = change(conn, move |users| {
                let rules: Vec<&[u8]> = rules.iter().map(Vec::as_slice).collect();
                users.set_user(&name, &rules).map(|()| ((), Vec::new()))
            })
            .await;
            answer(conn, done, |r, ()| r.ok());
        }
        "acl|deluser" => {
            if args.iter().skip(2).any(|n| n == b"default") {
                return conn.error("ERR The 'default' user cannot be removed");
            }
            let names: Vec<Vec<u8>> = args.iter().skip(2).map(<[u8]>::to_vec).collect();
            let done = change(conn, move |users| {
                let deleted: Vec<Vec<u8>> = names.into_iter().filter(|n| users.map.remove(n).is_some()).collect();
                Ok((deleted.len() as i64, deleted))
            })
            .await;
            answer(conn, done, |r, n| r.int(n));
        }
        "acl|load" => {
            let path = conn.core.config().aclfile.clone();
            let done = change(conn, move |users| {
                let loaded = users.load_file(&path)?;
                let closed = users.map.keys().filter(|n| n.as_slice() != b"default").cloned().collect();
                *users = loaded;
                Ok(((), closed))
            })
            .await;
            answer(conn, done, |r, ()| r.ok());
        }
        "acl|log" => acl_log(conn, args).await,
        _ => syntax_error(conn, &args),
    }
}

fn answer<R>(conn: &mut Connection, done: Option<Result<R, String>>, ok: impl FnOnce(&mut shard::Reply, R)) {
    match done {
        Some(Ok(r)) => reply(conn, |w| ok(w, r)),
        Some(Err(e)) => conn.error(&format!("ERR {}", e.replace(['\r', '\n'], " "))),
        None => conn.error("ERR ACL change could not reach every shard"),
    }
}

async fn acl_log(conn: &mut Connection, args: Args<'_>) {
    let mut count = 10;
    if args.len() == 3 {
        if args.is(2, "reset") {
            call_all(&conn.core, |core| core.acl.log.borrow_mut().entries.clear()).await;
            return reply(conn, |r| r.ok());
        }
        match parse_i64(args.get(2)) {
            Some(n) => count = n.max(0) as usize,
            None => return conn.error(NOT_INTEGER),
        }
    }
    let parts = call_all(&conn.core, |core| core.acl.log.borrow().entries.iter().cloned().collect::<Vec<_>>()).await;
    let mut entries: Vec<Entry> = parts.into_iter().flatten().flatten().collect();
    entries.sort_by_key(|e| std::cmp::Reverse(e.at_us));
    entries.truncate(count);
    let now = shard::unix_ms();
    reply(conn, |r| {
        r.array(entries.len());
        for e in &entries {
            r.map(7);
            r.bulk(b"count");
            r.int(e.count as i64);
            r.bulk(b"reason");
            r.bulk(e.reason.as_bytes());
            r.bulk(b"context");
            r.bulk(e.context.as_bytes());
            r.bulk(b"object");
            r.bulk(&e.object);
            r.bulk(b"username");
            r.bulk(&e.username);
            r.bulk(b"age-seconds");
            let age = format!("{}", now.saturating_sub(e.ctime) as f64 / 1000.0);
            if r.resp3 {
                r.raw(format!(",{age}\r\n").as_bytes());
            } else {
                r.bulk(age.as_bytes());
            }
            r.bulk(b"client-info");
            r.bulk(e.client_info.as_bytes());
        }
    });
}
