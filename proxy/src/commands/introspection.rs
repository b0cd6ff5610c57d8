//! COMMAND: Redis's own metadata (arity, flags, key specs, docs) for every
//! command corekv serves, recorded from Redis 7.0 by
//! `scripts/gen-command-meta.sh` and filtered to what is implemented.

mod getkeys;

use super::reply::{help, reply};
use crate::resp::Value;
use crate::session::Connection;
use getkeys::{Found, KeyRef};
use shard::commands::all as commands;
use shard::glob::glob_match;
use shard::{Args, CommandSpec};
use std::cell::OnceCell;
use std::collections::HashMap;
use std::rc::Rc;

const RECORDED: &[u8] = include_bytes!("redis-7.0-commands.resp3");

/// Per command: its COMMAND INFO entry and its COMMAND DOCS entry.
pub struct Metadata {
    info: HashMap<&'static str, Value>,
    docs: HashMap<&'static str, Value>,
}

thread_local! {
    // Built once per core, on first use, from immutable recorded data.
    static METADATA: OnceCell<Rc<Metadata>> = const { OnceCell::new() };
}

fn metadata() -> Rc<Metadata> {
    METADATA.with(|m| m.get_or_init(|| Rc::new(Metadata::load())).clone())
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

fn name_of(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => items.first()?.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// An INFO entry built from our own table, for what Redis 7.0 lacks.
fn synthesized_info(spec: &CommandSpec) -> Value {
    use shard::commands::flags::*;
    let names = [
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (NOSCRIPT, "noscript"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
    ];
    let flags = names.iter().filter(|(f, _)| spec.has_flag(*f)).map(|(_, n)| Value::Simple(n.as_bytes().to_vec()));
    Value::Array(vec![
        bulk(spec.name),
        Value::Int(spec.arity as i64),
        Value::Set(flags.collect()),
        Value::Int(spec.keys.0 as i64),
        Value::Int(spec.keys.1 as i64),
        Value::Int(spec.keys.2 as i64),
        Value::Set(vec![Value::Simple(b"@slow".to_vec()), Value::Simple(b"@connection".to_vec())]),
        Value::Set(vec![]),
        Value::Array(vec![]),
        Value::Array(vec![]),
    ])
}

impl Metadata {
    fn load() -> Metadata {
        let (info, used) = Value::decode(RECORDED).ok().flatten().unwrap_or((Value::Array(vec![]), 0));
        let docs = Value::decode(&RECORDED[used..]).ok().flatten().map(|d| d.0).unwrap_or(Value::Map(vec![]));
        let recorded_info: HashMap<String, Value> = match info {
            Value::Array(items) => items.into_iter().filter_map(|v| Some((name_of(&v)?, v))).collect(),
            _ => HashMap::new(),
        };
        let recorded_docs: HashMap<String, Value> = match docs {
            Value::Map(pairs) => pairs
                .into_iter()
                .filter_map(|(k, v)| Some((String::from_utf8_lossy(k.as_bytes()?).into_owned(), v)))
                .collect(),
            _ => HashMap::new(),
        };
        let mut meta = Metadata { info: HashMap::new(), docs: HashMap::new() };
        for spec in commands() {
            let mut info = recorded_info.get(spec.name).cloned().unwrap_or_else(|| synthesized_info(spec));
            if let Value::Array(fields) = &mut info {
                if let Some(Value::Array(subs)) = fields.get_mut(9) {
                    // Redis's order, only what is implemented, then ours.
                    subs.retain(|v| spec.subcommands.iter().any(|s| name_of(v).as_deref() == Some(s.name)));
                    for s in spec.subcommands {
                        if !subs.iter().any(|v| name_of(v).as_deref() == Some(s.name)) {
                            subs.push(synthesized_info(s));
                        }
                    }
                }
            }
            meta.info.insert(spec.name, info);
            let mut docs = recorded_docs.get(spec.name).cloned().unwrap_or(Value::Map(vec![]));
            if let Value::Map(fields) = &mut docs {
                for (k, v) in fields.iter_mut() {
                    if k.as_bytes() == Some(b"subcommands") {
                        if let Value::Map(subs) = v {
                            subs.retain(|(name, _)| {
                                let name = String::from_utf8_lossy(name.as_bytes().unwrap_or_default()).into_owned();
                                spec.subcommands.iter().any(|s| s.name == name)
                            });
                        }
                    }
                }
            }
            meta.docs.insert(spec.name, docs);
        }
        meta
    }
}

const COMMAND_HELP: &[&str] = &[
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Prints this help.",
];

pub fn command(conn: &mut Connection, spec: &CommandSpec, args: Args) {
    let resp3 = conn.state.resp3;
    let meta = metadata();
    let write = |conn: &mut Connection, v: Value| conn.pipeline.local(|out| v.encode(out, resp3));
    match spec.name {
        "command" => write(conn, Value::Array(commands().map(|c| meta.info[c.name].clone()).collect())),
        "command|count" => reply(conn, |r| r.int(commands().count() as i64)),
        "command|info" => {
            let items = if args.len() == 2 {
                commands().map(|c| meta.info[c.name].clone()).collect()
            } else {
                args.iter().skip(2).map(|n| find(&meta.info, n).unwrap_or(Value::Nil)).collect()
            };
            write(conn, Value::Array(items))
        }
        "command|docs" => {
            let names: Vec<&'static str> = if args.len() == 2 {
                commands().map(|c| c.name).collect()
            } else {
                args.iter()
                    .skip(2)
                    .filter_map(|n| commands().find(|c| c.name.as_bytes().eq_ignore_ascii_case(n)).map(|c| c.name))
                    .collect()
            };
            let pairs = names.into_iter().map(|n| (bulk(n), meta.docs[n].clone())).collect();
            write(conn, Value::Map(pairs))
        }
        "command|list" => command_list(conn, args),
        "command|getkeys" => getkeys(conn, args, false),
        "command|getkeysandflags" => getkeys(conn, args, true),
        _ => help(conn, COMMAND_HELP),
    }
}

fn find(map: &HashMap<&'static str, Value>, name: &[u8]) -> Option<Value> {
    map.iter().find(|(k, _)| k.as_bytes().eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
}

fn all_names() -> impl Iterator<Item = &'static CommandSpec> {
    commands().flat_map(|c| std::iter::once(c).chain(c.subcommands.iter()))
}

fn command_list(conn: &mut Connection, args: Args) {
    let names: Vec<&'static str> = match args.len() {
        2 => all_names().map(|c| c.name).collect(),
        5 if args.is(2, "filterby") => {
            let value = args.get(4);
            if args.is(3, "pattern") {
                all_names().map(|c| c.name).filter(|n| glob_match(value, n.as_bytes(), true)).collect()
            } else if args.is(3, "module") {
                Vec::new()
            } else if args.is(3, "aclcat") {
                let meta = metadata();
                let cat = format!("@{}", String::from_utf8_lossy(value).to_ascii_lowercase());
                all_names()
                    .filter(|c| {
                        let top = c.name.split('|').next().unwrap_or(c.name);
                        let info = meta.info.get(top);
                        let fields = match info {
                            Some(Value::Array(f)) => f,
                            _ => return false,
                        };
                        let entry = if c.name.contains('|') {
                            match fields.get(9) {
                                Some(Value::Array(subs)) => subs.iter().find(|s| name_of(s).as_deref() == Some(c.name)),
                                _ => None,
                            }
                        } else {
                            info
                        };
                        matches!(entry, Some(Value::Array(f)) if matches!(f.get(6), Some(Value::Set(cats)) if cats.iter().any(|v| v.as_bytes() == Some(cat.as_bytes()))))
                    })
                    .map(|c| c.name)
                    .collect()
            } else {
                return conn.error(shard::reply::errors::SYNTAX);
            }
        }
        _ => return conn.error(shard::reply::errors::SYNTAX),
    };
    reply(conn, |r| {
        r.array(names.len());
        for n in names {
            r.bulk(n.as_bytes());
        }
    });
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS (Redis's getKeysSubcommandImpl): the
/// keys as Redis's key specs and getkeys procedures find them
/// (`getkeys.rs`), checked in Redis's order.
fn getkeys(conn: &mut Connection, args: Args, with_flags: bool) {
    let Some(top) = conn.core.commands.lookup(args.get(2)) else {
        return conn.error("ERR Invalid command specified");
    };
    let mut spec = top;
    let argc = args.len() - 2;
    if !spec.subcommands.is_empty() && argc >= 2 {
        match spec.subcommand(args.get(3)) {
            Some(s) => spec = s,
            None => return conn.error("ERR Invalid command specified"),
        }
    }
    let meta = metadata();
    let recorded = meta.info.get(top.name).and_then(|i| match i {
        Value::Array(f) if spec.name != top.name => match f.get(9) {
            Some(Value::Array(subs)) => subs.iter().find(|v| name_of(v).as_deref() == Some(spec.name)),
            _ => None,
        },
        other => Some(other),
    });
    let fields = match recorded {
        Some(Value::Array(fields)) => fields.as_slice(),
        _ => &[],
    };
    let key_specs = match fields.get(8) {
        Some(Value::Array(specs) | Value::Set(specs)) => specs.as_slice(),
        _ => &[],
    };
    let line = Args::new(args.buf(), &args.ranges()[2..]);
    let found = if key_specs.is_empty() && spec.keys.0 > 0 {
        // A command of corekv's own: its table's key positions.
        Found::Keys(spec.key_indexes(&line).map(|pos| KeyRef { pos, flags: Value::Set(vec![]) }).collect())
    } else {
        getkeys::find(spec.name, key_specs, &line)
    };
    let keys = match found {
        Found::NoKeyArguments => return conn.error("ERR The command has no key arguments"),
        Found::Keys(_) if !spec.arity_ok(argc) => {
            return conn.error("ERR Invalid number of arguments specified for command")
        }
        Found::Keys(keys) => keys,
    };
    let optional = matches!(fields.get(2), Some(Value::Set(f) | Value::Array(f))
        if f.iter().any(|v| v.as_bytes() == Some(b"no_mandatory_keys")));
    if keys.is_empty() && !optional {
        return conn.error("ERR Invalid arguments specified for command");
    }
    let items = keys
        .into_iter()
        .map(|k| {
            let key = Value::Bulk(line.get(k.pos).to_vec());
            if with_flags {
                Value::Array(vec![key, k.flags])
            } else {
                key
            }
        })
        .collect();
    let resp3 = conn.state.resp3;
    conn.pipeline.local(|out| Value::Array(items).encode(out, resp3));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written table must agree with Redis's recorded metadata on
    /// everything clients use to route: arity and key positions.
    #[test]
    fn table_matches_redis_metadata() {
        let meta = Metadata::load();
        let check = |spec: &CommandSpec, info: &Value| {
            let Value::Array(f) = info else { panic!("{} has no info", spec.name) };
            assert_eq!(f[1], Value::Int(spec.arity as i64), "arity of {}", spec.name);
            assert_eq!(f[3], Value::Int(spec.keys.0 as i64), "first key of {}", spec.name);
            assert_eq!(f[4], Value::Int(spec.keys.1 as i64), "last key of {}", spec.name);
            assert_eq!(f[5], Value::Int(spec.keys.2 as i64), "key step of {}", spec.name);
        };
        for spec in commands() {
            let info = &meta.info[spec.name];
            check(spec, info);
            let Value::Array(f) = info else { unreachable!() };
            if let Value::Array(subs) = &f[9] {
                assert_eq!(subs.len(), spec.subcommands.len());
                for sub in spec.subcommands {
                    let sinfo = subs.iter().find(|v| name_of(v).as_deref() == Some(sub.name)).expect("listed");
                    check(sub, sinfo);
                }
            }
        }
    }
}
