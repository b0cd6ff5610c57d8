//! What ACL rules are written against: every command and subcommand with
//! an id (its bit in a selector), Redis 7.0's ACL categories and the
//! read/write access of each key spec, all from Redis's own recorded
//! metadata (`commands/redis-7.0-commands.resp3`). Built once, immutable.

use crate::resp::Value;
use shard::commands::flags;
use shard::CommandSpec;
use std::collections::HashMap;
use std::sync::OnceLock;

const RECORDED: &[u8] = include_bytes!("../commands/redis-7.0-commands.resp3");

/// Redis's categories, in its order (ACL CAT, describing rules).
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// A key spec reads the key (Redis's `access` flag).
pub const KEY_READ: u8 = 1;
/// A key spec inserts, deletes or updates (Redis's write permission).
pub const KEY_WRITE: u8 = 2;

pub struct Command {
    /// `get`, `config|set`.
    pub name: &'static str,
    pub spec: &'static CommandSpec,
    pub parent: Option<usize>,
    pub subcommands: Vec<usize>,
    /// Bit `i` set: in `CATEGORIES[i]`.
    pub categories: u32,
    /// Per key spec: KEY_READ | KEY_WRITE.
    pub key_access: Vec<u8>,
}

pub struct Registry {
    pub commands: Vec<Command>,
    by_name: HashMap<&'static str, usize>,
}

pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::build)
}

pub fn category(name: &str) -> Option<usize> {
    CATEGORIES.iter().position(|c| c.eq_ignore_ascii_case(name))
}

fn entry_name(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => items.first()?.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

fn categories_of(entry: Option<&Value>, spec: &CommandSpec) -> u32 {
    let Some(Value::Array(fields)) = entry else {
        // corekv's own commands: as Redis files its admin commands.
        let mut bits = 1 << 15 | 1 << 18; // slow, connection
        if spec.has_flag(flags::ADMIN) {
            bits = 1 << 13 | 1 << 15 | 1 << 17;
        }
        return bits;
    };
    let mut bits = 0;
    if let Some(Value::Set(cats) | Value::Array(cats)) = fields.get(6) {
        for c in cats {
            let name = String::from_utf8_lossy(c.as_bytes().unwrap_or_default()).into_owned();
            if let Some(i) = category(name.trim_start_matches('@')) {
                bits |= 1 << i;
            }
        }
    }
    bits
}

fn key_access_of(entry: Option<&Value>) -> Vec<u8> {
    let Some(Value::Array(fields)) = entry else { return Vec::new() };
    let Some(Value::Array(specs) | Value::Set(specs)) = fields.get(8) else { return Vec::new() };
    specs
        .iter()
        .map(|spec| {
            let Value::Map(pairs) = spec else { return KEY_READ | KEY_WRITE };
            let Some((_, Value::Set(words) | Value::Array(words))) =
                pairs.iter().find(|(k, _)| k.as_bytes() == Some(b"flags"))
            else {
                return KEY_READ | KEY_WRITE;
            };
            let mut access = 0;
            for w in words {
                match w.as_bytes().unwrap_or_default() {
                    b"access" => access |= KEY_READ,
                    b"insert" | b"delete" | b"update" => access |= KEY_WRITE,
                    _ => {}
                }
            }
            access
        })
        .collect()
}

impl Registry {
    fn build() -> Registry {
        let recorded: HashMap<String, Value> = match Value::decode(RECORDED) {
            Ok(Some((Value::Array(items), _))) => {
                items.into_iter().filter_map(|v| Some((entry_name(&v)?, v))).collect()
            }
            _ => HashMap::new(),
        };
        let mut reg = Registry { commands: Vec::new(), by_name: HashMap::new() };
        for spec in shard::commands::all() {
            let entry = recorded.get(spec.name);
            let id = reg.push(spec, None, entry);
            let subs: Vec<Value> = match entry {
                Some(Value::Array(f)) => match f.get(9) {
                    Some(Value::Array(s)) => s.clone(),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            };
            for sub in spec.subcommands {
                let sub_entry = subs.iter().find(|v| entry_name(v).as_deref() == Some(sub.name));
                let sid = reg.push(sub, Some(id), sub_entry);
                reg.commands[id].subcommands.push(sid);
            }
        }
        reg
    }

    fn push(&mut self, spec: &'static CommandSpec, parent: Option<usize>, entry: Option<&Value>) -> usize {
        let id = self.commands.len();
        self.commands.push(Command {
            name: spec.name,
            spec,
            parent,
            subcommands: Vec::new(),
            categories: categories_of(entry, spec),
            key_access: key_access_of(entry),
        });
        self.by_name.insert(spec.name, id);
        id
    }

    /// A command or `container|subcommand`, any case.
    pub fn lookup(&self, name: &str) -> Option<usize> {
        self.by_name.get(name.to_ascii_lowercase().as_str()).copied()
    }

    /// The id of a (resolved) spec from the command table.
    #[inline]
    pub fn id_of(&self, spec: &CommandSpec) -> Option<usize> {
        self.by_name.get(spec.name).copied()
    }

    pub fn len(&self) -> usize {
        self.commands.len()
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The access key `n` of a command line needs: its key spec's, or for
    /// Redis's `variable_flags` commands what the arguments ask
    /// (`setGetKeys`, `bitfieldGetKeys`).
    pub fn key_access(&self, id: usize, n: usize, args: &shard::Args) -> u8 {
        let command = &self.commands[id];
        match command.name {
            "set" => match (3..args.len()).any(|i| args.is(i, "get")) {
                true => KEY_READ | KEY_WRITE,
                false => KEY_WRITE,
            },
            "bitfield" => {
                let mut i = 2;
                while i < args.len() {
                    let rest = args.len() - i - 1;
                    if args.is(i, "get") && rest >= 2 {
                        i += 3;
                    } else if args.is(i, "overflow") && rest >= 1 {
                        i += 2;
                    } else {
                        return KEY_READ | KEY_WRITE;
                    }
                }
                KEY_READ
            }
            _ => match command.key_access.len() {
                0 => KEY_READ | KEY_WRITE,
                len => command.key_access[n.min(len - 1)],
            },
        }
    }

    /// Commands (and subcommands) in a category, as ACL CAT lists them.
    pub fn in_category(&self, cat: usize) -> impl Iterator<Item = &Command> {
        self.commands.iter().filter(move |c| c.categories & (1 << cat) != 0)
    }
}
