//! COMMAND GETKEYS / GETKEYSANDFLAGS as Redis 7.0 finds keys
//! (getKeysFromCommandWithSpecs): the command's recorded key specs walked
//! over the line (getKeysUsingKeySpecs), and where a spec cannot say
//! (unknown, incomplete, a bad key count) or the flags vary, the command's
//! own getkeys procedure (db.c's sortGetKeys, migrateGetKeys...).

use crate::resp::Value;
use shard::args::{atoi, parse_i64};
use shard::Args;

/// A key the line names: its position (0: the command name) and its flags
/// as COMMAND shows them.
pub struct KeyRef {
    pub pos: usize,
    pub flags: Value,
}

/// The entries of a map reply (COMMAND INFO's key specs are maps).
fn entry<'a>(map: &'a Value, name: &str) -> Option<&'a Value> {
    match map {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| k.as_bytes() == Some(name.as_bytes())).map(|(_, v)| v),
        _ => None,
    }
}

fn int(map: &Value, name: &str) -> Option<i64> {
    match entry(map, name)? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn flags_of(spec: &Value) -> Value {
    entry(spec, "flags").cloned().unwrap_or(Value::Set(vec![]))
}

fn has_flag(flags: &Value, name: &str) -> bool {
    matches!(flags, Value::Set(f) | Value::Array(f) if f.iter().any(|v| v.as_bytes() == Some(name.as_bytes())))
}

/// Key flags as addReplyFlagsForKeyArgs writes them (names in Redis's order).
fn flags(names: &[&str]) -> Value {
    Value::Set(names.iter().map(|n| Value::Simple(n.as_bytes().to_vec())).collect())
}

const RO_ACCESS: &[&str] = &["RO", "access"];
const RW_ACCESS_DELETE: &[&str] = &["RW", "access", "delete"];
const RW_ACCESS_UPDATE: &[&str] = &["RW", "access", "update"];
const OW_UPDATE: &[&str] = &["OW", "update"];

/// What Redis's lookup of a command's keys answers.
pub enum Found {
    /// The command has neither key specs nor a getkeys procedure.
    NoKeyArguments,
    Keys(Vec<KeyRef>),
}

/// Redis's getKeysFromCommandWithSpecs over `line` (from the command name
/// on), with the command's recorded key specs.
pub fn find(name: &str, specs: &[Value], line: &Args) -> Found {
    let has_keyspec = specs.iter().any(|s| !has_flag(&flags_of(s), "not_key"));
    let has_varflags = specs.iter().any(|s| has_flag(&flags_of(s), "variable_flags"));
    let procedure = has_procedure(name);
    if !has_keyspec && !procedure {
        return Found::NoKeyArguments;
    }
    if has_keyspec && !has_varflags {
        if let Some(keys) = by_specs(specs, line) {
            return Found::Keys(keys);
        }
    }
    Found::Keys(if procedure { by_procedure(name, line) } else { Vec::new() })
}

/// getKeysUsingKeySpecs: `None` where a spec is unknown or incomplete or
/// does not fit the line (Redis then asks the command's procedure).
fn by_specs(specs: &[Value], line: &Args) -> Option<Vec<KeyRef>> {
    let argc = line.len() as i64;
    let mut keys = Vec::new();
    for spec in specs {
        let flags = flags_of(spec);
        if has_flag(&flags, "not_key") {
            continue;
        }
        let begin = entry(spec, "begin_search")?;
        let begin_spec = entry(begin, "spec")?;
        let mut first: i64 = 0;
        match entry(begin, "type")?.as_bytes()? {
            b"index" => first = int(begin_spec, "index")?,
            b"keyword" => {
                let keyword = entry(begin_spec, "keyword")?.as_bytes()?;
                let startfrom = int(begin_spec, "startfrom")?;
                let start = if startfrom > 0 { startfrom } else { argc + startfrom };
                let end = if startfrom > 0 { argc - 1 } else { 1 };
                // As Redis's loop: `end` itself is never looked at.
                let mut i = start;
                while i != end {
                    if i >= argc || i < 1 {
                        break;
                    }
                    if line.get(i as usize).eq_ignore_ascii_case(keyword) {
                        first = i + 1;
                        break;
                    }
                    i = if start <= end { i + 1 } else { i - 1 };
                }
                if first == 0 {
                    continue;
                }
            }
            _ => return None,
        }
        let find = entry(spec, "find_keys")?;
        let find_spec = entry(find, "spec")?;
        let (step, last) = match entry(find, "type")?.as_bytes()? {
            b"range" => {
                let lastkey = int(find_spec, "lastkey")?;
                let limit = int(find_spec, "limit")?;
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (int(find_spec, "keystep")?, last)
            }
            b"keynum" => {
                let keynumidx = int(find_spec, "keynumidx")?;
                if keynumidx >= argc || first + keynumidx >= argc {
                    return None;
                }
                let numkeys = parse_i64(line.get((first + keynumidx) as usize)).filter(|n| *n >= 0)?;
                first += int(find_spec, "firstkey")?;
                (int(find_spec, "keystep")?, first + numkeys - 1)
            }
            _ => return None,
        };
        if last >= argc || last < first || first >= argc {
            return None;
        }
        let mut i = first;
        while i <= last {
            keys.push(KeyRef { pos: i as usize, flags: flags.clone() });
            i += step.max(1);
        }
        if has_flag(&flags, "incomplete") {
            return None;
        }
    }
    Some(keys)
}

/// Commands with a getkeys procedure in Redis 7.0 (commands.c).
fn has_procedure(name: &str) -> bool {
    matches!(
        name,
        "sintercard"
            | "zunion"
            | "zinter"
            | "zdiff"
            | "zintercard"
            | "lmpop"
            | "zmpop"
            | "zunionstore"
            | "zinterstore"
            | "zdiffstore"
            | "eval"
            | "evalsha"
            | "eval_ro"
            | "evalsha_ro"
            | "fcall"
            | "fcall_ro"
            | "blmpop"
            | "bzmpop"
            | "sort"
            | "sort_ro"
            | "migrate"
            | "georadius"
            | "georadiusbymember"
            | "xread"
            | "xreadgroup"
            | "set"
            | "bitfield"
    )
}

/// The command's getkeys procedure (db.c).
fn by_procedure(name: &str, line: &Args) -> Vec<KeyRef> {
    match name {
        "sintercard" | "zunion" | "zinter" | "zdiff" | "zintercard" | "lmpop" | "zmpop" => counted(line, 0, 1, 2),
        "zunionstore" | "zinterstore" | "zdiffstore" => counted(line, 1, 2, 3),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" | "blmpop" | "bzmpop" => {
            counted(line, 0, 2, 3)
        }
        "sort_ro" => vec![KeyRef { pos: 1, flags: flags(RO_ACCESS) }],
        "sort" => sort_keys(line),
        "migrate" => migrate_keys(line),
        "georadius" | "georadiusbymember" => georadius_keys(line),
        "xread" | "xreadgroup" => xread_keys(line),
        "set" => {
            let get = (3..line.len()).any(|i| line.get(i).eq_ignore_ascii_case(b"get"));
            vec![KeyRef { pos: 1, flags: flags(if get { RW_ACCESS_UPDATE } else { OW_UPDATE }) }]
        }
        "bitfield" => bitfield_keys(line),
        _ => Vec::new(),
    }
}

/// genericGetKeys: `count_at` holds the number of keys from `first`, and
/// `store_at` (when not 0) a destination listed after them, all with no
/// flags.
fn counted(line: &Args, store_at: usize, count_at: usize, first: usize) -> Vec<KeyRef> {
    if count_at >= line.len() {
        return Vec::new();
    }
    let num = atoi(line.get(count_at));
    if num < 1 || num > line.len() as i64 - first as i64 {
        return Vec::new();
    }
    let mut keys: Vec<KeyRef> = (0..num as usize).map(|i| KeyRef { pos: first + i, flags: flags(&[]) }).collect();
    if store_at != 0 {
        keys.push(KeyRef { pos: store_at, flags: flags(&[]) });
    }
    keys
}

/// sortGetKeys: the sorted key, and the last STORE's destination (options
/// skipped as Redis skips them).
fn sort_keys(line: &Args) -> Vec<KeyRef> {
    let mut keys = vec![KeyRef { pos: 1, flags: flags(RO_ACCESS) }];
    let mut store = None;
    let mut i = 2;
    while i < line.len() {
        for (name, skip) in [(&b"limit"[..], 2), (b"get", 1), (b"by", 1)] {
            if line.get(i).eq_ignore_ascii_case(name) {
                i += skip;
                break;
            } else if line.get(i).eq_ignore_ascii_case(b"store") && i + 1 < line.len() {
                store = Some(i + 1);
                break;
            }
        }
        i += 1;
    }
    if let Some(pos) = store {
        keys.push(KeyRef { pos, flags: flags(OW_UPDATE) });
    }
    keys
}

/// migrateGetKeys: the key argument, or the keys after KEYS when it is
/// empty (none when it is not: MIGRATE answers a syntax error).
fn migrate_keys(line: &Args) -> Vec<KeyRef> {
    let argc = line.len();
    let (mut first, mut num) = (3, 1);
    if argc > 6 {
        let mut i = 6;
        while i < argc {
            let arg = line.get(i);
            if arg.eq_ignore_ascii_case(b"keys") {
                if line.get(3).is_empty() {
                    first = i + 1;
                    num = argc - first;
                } else {
                    num = 0;
                }
                break;
            }
            for (name, skip) in [(&b"copy"[..], 0), (b"replace", 0), (b"auth", 1), (b"auth2", 2)] {
                if arg.eq_ignore_ascii_case(name) {
                    i += skip;
                    break;
                }
            }
            i += 1;
        }
    }
    (0..num).map(|i| KeyRef { pos: first + i, flags: flags(RW_ACCESS_DELETE) }).collect()
}

/// georadiusGetKeys: the key, and the last STORE/STOREDIST destination.
fn georadius_keys(line: &Args) -> Vec<KeyRef> {
    let mut stored = None;
    let mut i = 5;
    while i < line.len() {
        let arg = line.get(i);
        if (arg.eq_ignore_ascii_case(b"store") || arg.eq_ignore_ascii_case(b"storedist")) && i + 1 < line.len() {
            stored = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    std::iter::once(1).chain(stored).map(|pos| KeyRef { pos, flags: flags(&[]) }).collect()
}

/// xreadGetKeys: the first half of what follows STREAMS.
fn xread_keys(line: &Args) -> Vec<KeyRef> {
    let argc = line.len();
    let mut streams = None;
    let mut i = 1;
    while i < argc {
        let arg = line.get(i);
        if arg.eq_ignore_ascii_case(b"block") || arg.eq_ignore_ascii_case(b"count") {
            i += 1;
        } else if arg.eq_ignore_ascii_case(b"group") {
            i += 2;
        } else if arg.eq_ignore_ascii_case(b"noack") {
        } else if arg.eq_ignore_ascii_case(b"streams") {
            streams = Some(i);
            break;
        } else {
            break;
        }
        i += 1;
    }
    let Some(at) = streams else { return Vec::new() };
    let num = argc - at - 1;
    if num == 0 || !num.is_multiple_of(2) {
        return Vec::new();
    }
    (at + 1..at + 1 + num / 2).map(|pos| KeyRef { pos, flags: flags(&[]) }).collect()
}

/// bitfieldGetKeys: read-only when only GETs (and OVERFLOWs) come first.
fn bitfield_keys(line: &Args) -> Vec<KeyRef> {
    let argc = line.len();
    let mut readonly = true;
    let mut i = 2;
    while i < argc {
        let left = argc - i - 1;
        let arg = line.get(i);
        if arg.eq_ignore_ascii_case(b"get") && left >= 2 {
            i += 2;
        } else if (arg.eq_ignore_ascii_case(b"set") || arg.eq_ignore_ascii_case(b"incrby")) && left >= 3 {
            readonly = false;
            break;
        } else if arg.eq_ignore_ascii_case(b"overflow") && left >= 1 {
            i += 1;
        } else {
            readonly = false;
            break;
        }
        i += 1;
    }
    vec![KeyRef { pos: 1, flags: flags(if readonly { RO_ACCESS } else { RW_ACCESS_UPDATE }) }]
}
