//! The ACL leaf on its own: rules, descriptions, checks, the file format.

use super::commands::{registry, KEY_READ, KEY_WRITE};
use super::selector::{Denied, RuleError};
use super::user::{merge_selectors, User};
use super::users::Users;
use shard::Args;

fn args_of(words: &[&str]) -> (Vec<u8>, Vec<(u32, u32)>) {
    let (mut buf, mut ranges) = (Vec::new(), Vec::new());
    for w in words {
        ranges.push((buf.len() as u32, (buf.len() + w.len()) as u32));
        buf.extend_from_slice(w.as_bytes());
    }
    (buf, ranges)
}

fn check(user: &User, words: &[&str]) -> Result<(), Denied> {
    let (buf, ranges) = args_of(words);
    let args = Args::new(&buf, &ranges);
    let mut spec = shard::commands::all().find(|c| c.name.eq_ignore_ascii_case(words[0])).unwrap();
    if !spec.subcommands.is_empty() && words.len() > 1 {
        spec = spec.subcommand(words[1].as_bytes()).unwrap();
    }
    user.check(registry().id_of(spec).unwrap(), &args)
}

fn user(rules: &str) -> User {
    let mut u = User::new(b"u", false);
    let words: Vec<&[u8]> = rules.split(' ').map(str::as_bytes).collect();
    u.apply_all(&words).unwrap_or_else(|e| panic!("{e}"));
    u
}

#[test]
fn describes_as_redis() {
    assert_eq!(User::default_user().describe(), "on nopass ~* &* +@all");
    assert_eq!(user("on ~k* +get").describe(), "on ~k* resetchannels -@all +get");
    assert_eq!(user("+@all -@dangerous").describe(), "off resetchannels +@all -@dangerous");
    assert_eq!(user("+@hash -hset").describe(), "off resetchannels -@all +@hash -hset");
    assert_eq!(user("+config|get").describe(), "off resetchannels -@all +config|get");
    assert_eq!(user("%R~r %W~w %RW~b ~b").selectors[0].describe_keys(), "%R~r %W~w ~b");
}

#[test]
fn rule_errors() {
    let mut u = User::new(b"u", false);
    assert_eq!(u.apply(b"+nosuch"), Err(RuleError::UnknownCommand));
    assert_eq!(u.apply(b"+get|x|y"), Err(RuleError::UnknownCommand));
    assert_eq!(u.apply(b"+config|get|x"), Err(RuleError::SubcommandFirstArg));
    assert_eq!(u.apply(b"#abc"), Err(RuleError::BadHash));
    assert_eq!(u.apply(b"<nope"), Err(RuleError::NoSuchPassword));
    assert_eq!(u.apply(b"%X~k"), Err(RuleError::Syntax));
    u.apply(b"allkeys").unwrap();
    assert_eq!(u.apply(b"~k"), Err(RuleError::KeysAfterAll));
    let before = u.clone();
    assert!(u.apply_all(&[b"on", b"+nosuch"]).is_err());
    assert_eq!(u, before, "all rules or none");
    assert_eq!(merge_selectors(&[b"(~a", b"+get)", b"on"]).unwrap(), vec![b"(~a +get)".to_vec(), b"on".to_vec()]);
    assert_eq!(merge_selectors(&[b"(~a", b"+get"]).unwrap_err(), b"(~a");
}

#[test]
fn checks_commands_keys_and_selectors() {
    let u = user("on ~k* %R~r* %W~w* +get +set +copy (~s* +del)");
    assert_eq!(check(&u, &["get", "k1"]), Ok(()));
    assert_eq!(check(&u, &["get", "x"]), Err(Denied::Key(1)));
    assert_eq!(check(&u, &["get", "r1"]), Ok(()));
    assert_eq!(check(&u, &["set", "r1", "v"]), Err(Denied::Key(1)));
    assert_eq!(check(&u, &["set", "w1", "v"]), Ok(()));
    assert_eq!(check(&u, &["set", "w1", "v", "GET"]), Err(Denied::Key(1)));
    assert_eq!(check(&u, &["copy", "r1", "w1"]), Ok(()));
    assert_eq!(check(&u, &["copy", "w1", "r1"]), Err(Denied::Key(1)), "w1 is read");
    assert_eq!(check(&u, &["del", "s1"]), Ok(()));
    assert_eq!(check(&u, &["del", "k1"]), Err(Denied::Key(1)));
    assert_eq!(check(&u, &["hget", "k1", "f"]), Err(Denied::Command));
    assert_eq!(check(&u, &["auth", "x"]), Ok(()), "no-auth commands are always allowed");
    let first = user("+select|0");
    assert_eq!(check(&first, &["select", "0"]), Ok(()));
    assert_eq!(check(&first, &["select", "1"]), Err(Denied::Command));
    assert_eq!(registry().key_access(registry().lookup("get").unwrap(), 0, &Args::new(b"", &[])), KEY_READ);
    assert_eq!(registry().key_access(registry().lookup("del").unwrap(), 0, &Args::new(b"", &[])), KEY_WRITE);
}

#[test]
fn passwords() {
    let mut u = user("on >secret");
    assert!(u.check_password(b"secret") && !u.check_password(b"other"));
    u.apply(b"off").unwrap();
    assert!(!u.check_password(b"secret"), "a disabled user cannot log in");
    let mut users = Users::default();
    users.set_default_password("pw");
    assert!(!users.default_user().nopass && users.default_user().check_password(b"pw"));
    users.set_default_password("");
    assert!(users.default_user().nopass);
}

#[test]
fn file_round_trip() {
    let dir = std::env::temp_dir().join(format!("corekv-acl-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("users.acl").to_string_lossy().into_owned();
    let mut users = Users::default();
    users.set_user(b"alice", &[b"on", b">p", b"~a*", b"+@read", b"(~b* +set)"]).unwrap();
    users.save_file(&path).unwrap();
    let loaded = users.load_file(&path).unwrap();
    assert_eq!(loaded.file_text(), users.file_text());
    std::fs::write(&path, "user a +nosuch\nuser a on\nbogus\n").unwrap();
    let err = users.load_file(&path).err().unwrap();
    assert!(err.contains(":1: Error in applying operation '+nosuch'"), "{err}");
    assert!(err.contains("WARNING: Duplicate user 'a' found on line 2."), "{err}");
    assert!(err.contains(":3 should start with user keyword"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
